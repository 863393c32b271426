package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// claimN creates n (up to 1000) pull tasks of app due now and claims them
// all through c.
func claimN(t *testing.T, c *client.Client, app string, n int) []*task.Task {
	t.Helper()
	ctx := context.Background()
	reqs := make([]client.ScheduleRequest, n)
	for i := range reqs {
		reqs[i] = client.ScheduleRequest{App: app, Target: task.Target{Pull: &task.PullTarget{}}}
	}
	rs, err := c.ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var got []*task.Task
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		ts, err := c.Claim(ctx, app, client.ClaimRequest{Max: n - len(got), Lease: task.Duration(time.Minute), Wait: task.Duration(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ts...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d of %d tasks of %s", len(got), n, app)
		}
	}
	return got
}

// ackBody is the body of POST /v1/apps/{app}/tasks:ack for tasks, with
// their own leases.
func ackBody(ts ...*task.Task) string {
	var b strings.Builder
	b.WriteString(`{"acks":[`)
	for i, tk := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%q,"lease":%q}`, tk.ID, tk.Lease)
	}
	b.WriteString(`]}`)
	return b.String()
}

// post sends body to u with token (none when ""), and returns the status
// and the answer.
func post(t *testing.T, u, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

// TestAckMany: a consumer acks a whole claim in one request; every task is
// delivered, and the answer has one empty result per ack.
func TestAckMany(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	claimed := claimN(t, s.client, "drain", 300)
	code, body := post(t, s.url+"/v1/apps/drain/tasks:ack", "", ackBody(claimed...))
	if want := `{"results":[` + strings.TrimSuffix(strings.Repeat(`{},`, len(claimed)), ",") + `]}`; code != 200 || body != want {
		t.Fatalf("ack of %d tasks: %d %.200s", len(claimed), code, body)
	}
	if n := countIn(t, s, "drain", task.Delivered); n != len(claimed) {
		t.Errorf("%d tasks delivered, want %d", n, len(claimed))
	}
	// The client says the same of a repeat: each lease is spent.
	acks := make([]client.AckItem, len(claimed))
	for i, tk := range claimed {
		acks[i] = client.AckItem{ID: tk.ID, Lease: tk.Lease}
	}
	errs, err := s.client.AckMany(context.Background(), "drain", acks)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !client.IsConflict(err) {
			t.Fatalf("acks[%d] again: %v, want a conflict", i, err)
		}
	}
}

// TestAckManyMixed: each item has its own outcome, in the order sent, and
// a refused item changes nothing.
func TestAckManyMixed(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	ts := claimN(t, s.client, "mixed", 4)
	theirs := claimN(t, s.client, "elsewhere", 1)[0]
	absent := new(task.IDGenerator).New(time.Now(), 0)
	body := `{"acks":[` +
		`{"id":"not-an-id","lease":"x"},` +
		fmt.Sprintf(`{"id":%q,"lease":%q},`, ts[0].ID, ts[0].Lease) +
		fmt.Sprintf(`{"id":%q,"lease":"stale"},`, ts[1].ID) +
		fmt.Sprintf(`{"id":%q,"lease":%q},`, ts[0].ID, ts[0].Lease) +
		fmt.Sprintf(`{"id":%q,"lease":""},`, ts[2].ID) +
		fmt.Sprintf(`{"id":%q,"lease":"x"},`, absent) +
		fmt.Sprintf(`{"id":%q,"lease":%q},`, theirs.ID, theirs.Lease) +
		fmt.Sprintf(`{"id":%q,"lease":%q}`, ts[3].ID, ts[3].Lease) +
		`]}`
	code, raw := post(t, s.url+"/v1/apps/mixed/tasks:ack", "", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, raw)
	}
	var resp struct {
		Results []struct {
			Error *struct{ Code, Message, Field string }
		}
	}
	if err := json.Unmarshal([]byte(raw), &resp); err != nil {
		t.Fatal(err)
	}
	want := []struct{ code, field string }{
		{"invalid_field", "acks.0.id"},
		{"", ""},
		{"conflict", ""},
		{"invalid_field", "acks.3.id"},
		{"invalid_field", "acks.4.lease"},
		{"not_found", ""},
		{"not_found", ""},
		{"", ""},
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results for %d acks: %s", len(resp.Results), len(want), raw)
	}
	for i, w := range want {
		var code, field string
		if e := resp.Results[i].Error; e != nil {
			code, field = e.Code, e.Field
			if e.Message == "" {
				t.Errorf("results[%d]: an error without a message", i)
			}
		}
		if code != w.code || field != w.field {
			t.Errorf("results[%d]: code %q field %q, want %q %q", i, code, field, w.code, w.field)
		}
	}
	// Another app's task is answered as an absent one, word for word.
	if a, b := resp.Results[5].Error, resp.Results[6].Error; a == nil || b == nil || *a != *b {
		t.Errorf("another app's task %+v, an absent one %+v: want the same", b, a)
	}
	for _, c := range []struct {
		tk    *task.Task
		state task.State
	}{{ts[0], task.Delivered}, {ts[1], task.Delivering}, {ts[2], task.Delivering}, {ts[3], task.Delivered}, {theirs, task.Delivering}} {
		if got, err := s.client.Get(context.Background(), c.tk.ID); err != nil || got.State != c.state {
			t.Errorf("task %s: %v %v, want %s", c.tk.ID, got.State, err, c.state)
		}
	}
}

// TestAckManyBadRequests: a body that cannot be read is refused whole,
// naming the field, and acks nothing.
func TestAckManyBadRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	tk := claimN(t, s.client, "bad", 1)[0]
	one := fmt.Sprintf(`{"id":%q,"lease":%q}`, tk.ID, tk.Lease)
	const route = "/v1/apps/bad/tasks:ack"
	cases := []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"no acks", route, `{}`, 400, "acks"},
		{"null acks", route, `{"acks":null}`, 400, "acks"},
		{"empty acks", route, `{"acks":[]}`, 400, "acks"},
		{"too many", route, `{"acks":[` + strings.TrimSuffix(strings.Repeat(one+",", engine.MaxClaim+1), ",") + `]}`, 400, "acks"},
		{"acks not an array", route, `{"acks":{}}`, 400, "acks"},
		{"item not an object", route, `{"acks":[1]}`, 400, "acks.0"},
		{"id not a string", route, `{"acks":[{"id":1,"lease":"x"}]}`, 400, "acks.0.id"},
		{"unknown item field", route, `{"acks":[{"id":"x","lease":"x","colour":"red"}]}`, 400, "acks.0.colour"},
		{"unknown field", route, `{"acks":[` + one + `],"nack":true}`, 400, "nack"},
		{"repeated field", route, `{"acks":[],"acks":[` + one + `]}`, 400, "acks"},
		{"empty body", route, ``, 400, ""},
		{"not json", route, `acks=1`, 400, ""},
		{"trailing data", route, `{"acks":[` + one + `]} {}`, 400, ""},
		{"bad app", "/v1/apps/Bad!/tasks:ack", `{"acks":[` + one + `]}`, 400, "app"},
		{"body over 1 MiB", route, `{"acks":[` + one + strings.Repeat(" ", 1<<20) + `]}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := do(t, "POST", s.url+c.path, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d (%v)", code, c.status, m)
			}
			e, _ := m["error"].(map[string]any)
			if e == nil || e["code"] == "" || e["message"] == "" {
				t.Fatalf("no error object: %v", m)
			}
			if c.field != "" && e["field"] != c.field {
				t.Errorf("field %v, want %q (message %v)", e["field"], c.field, e["message"])
			}
		})
	}
	if got, err := s.client.Get(context.Background(), tk.ID); err != nil || got.State != task.Delivering {
		t.Errorf("after refused requests the task is %v (%v), want delivering", got.State, err)
	}
}

// TestAckManyIsolation: an app token cannot ack in another app's route
// (403, nothing acked), and through its own route another app's task is
// answered as absent.
func TestAckManyIsolation(t *testing.T) {
	t.Parallel()
	_, hs := startGuarded(t)
	admin := client.New(client.Config{BaseURL: hs.URL, Token: "admin-token"})
	shopT := claimN(t, admin, "shop", 1)[0]
	billT := claimN(t, admin, "billing", 1)[0]

	if code, body := post(t, hs.URL+"/v1/apps/billing/tasks:ack", "shop-token", ackBody(billT)); code != 403 || !strings.Contains(body, `"forbidden"`) {
		t.Errorf("shop's token on billing's route: %d %s, want 403", code, body)
	}
	if code, _ := post(t, hs.URL+"/v1/apps/shop/tasks:ack", "", ackBody(shopT)); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	absent := &task.Task{ID: new(task.IDGenerator).New(time.Now(), 0), Lease: billT.Lease}
	_, forAbsent := post(t, hs.URL+"/v1/apps/shop/tasks:ack", "shop-token", ackBody(absent))
	_, forBilling := post(t, hs.URL+"/v1/apps/shop/tasks:ack", "shop-token", ackBody(billT))
	if want := strings.ReplaceAll(forAbsent, absent.ID.String(), billT.ID.String()); forBilling != want || !strings.Contains(forBilling, `"not_found"`) {
		t.Errorf("billing's task through shop's route: %s\nbut an absent task: %s", forBilling, forAbsent)
	}
	if got, err := admin.Get(context.Background(), billT.ID); err != nil || got.State != task.Delivering {
		t.Errorf("billing's task after shop's acks: %v (%v), want delivering", got.State, err)
	}

	shop := client.New(client.Config{BaseURL: hs.URL, Token: "shop-token"})
	errs, err := shop.AckMany(context.Background(), "shop", []client.AckItem{{ID: shopT.ID, Lease: shopT.Lease}, {ID: billT.ID, Lease: billT.Lease}})
	if err != nil || errs[0] != nil || !client.IsNotFound(errs[1]) {
		t.Errorf("shop's own ack with billing's task: %v, %v; want nil and not found", errs, err)
	}
	if _, err := shop.AckMany(context.Background(), "billing", []client.AckItem{{ID: billT.ID, Lease: billT.Lease}}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("shop's client on billing: %v, want 403", err)
	}
	billing := client.New(client.Config{BaseURL: hs.URL, Token: "billing-token"})
	if errs, err := billing.AckMany(context.Background(), "billing", []client.AckItem{{ID: billT.ID, Lease: billT.Lease}}); err != nil || errs[0] != nil {
		t.Errorf("billing's own ack: %v, %v", errs, err)
	}
}
