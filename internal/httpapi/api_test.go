package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

func do(t *testing.T, method, u, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %q", method, u, raw)
		}
	}
	return resp.StatusCode, m
}

func TestFiresWithHeadersAndExactPayload(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	due := time.Now().Add(300 * time.Millisecond)
	body := fmt.Sprintf(`{"app":"shop","key":"order/1 ü","due_at":%q,"payload":{"b": 1,  "a":[2]},"target":{"http":{"url":%q,"headers":{"X-Team":"pay"}}}}`,
		due.Format(time.RFC3339Nano), rcv.URL+"/hook")
	code, m := do(t, "POST", s.url+"/v1/tasks", body)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	if m["payload_base64"] == nil || m["payload"] == nil {
		t.Errorf("task object lacks payload or payload_base64: %v", m)
	}
	id, _ := task.ParseID(m["id"].(string))
	tk := waitState(t, s, id, task.Delivered, 5*time.Second)
	got := rcv.Deliveries()
	if len(got) != 1 {
		t.Fatalf("%d arrivals, want 1", len(got))
	}
	a := got[0]
	if a.At.Before(due) {
		t.Errorf("arrived %s before its due time", due.Sub(a.At))
	}
	if string(a.Body) != `{"b": 1,  "a":[2]}` {
		t.Errorf("payload delivered as %q, want the exact request bytes", a.Body)
	}
	want := map[string]string{
		"Toc-Task-Id": id.String(), "Toc-App": "shop", "Toc-Key": "order/1 ü", "Toc-Attempt": "1",
		"Toc-Due-At": tk.DueAt.Format(time.RFC3339Nano), "X-Team": "pay", "Content-Type": "application/json",
	}
	for k, v := range want {
		if g := a.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	// The key travels path-escaped.
	byKey, err := s.client.GetByKey(context.Background(), "shop", "order/1 ü")
	if err != nil || byKey.ID != id {
		t.Fatalf("get by key: %v %v", byKey, err)
	}
	if tk.FinishedAt == nil || tk.Attempts != 1 {
		t.Errorf("delivered task: finished_at %v attempts %d", tk.FinishedAt, tk.Attempts)
	}
}

func TestPastDueFiresAtOnceAndBase64Payload(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	raw := []byte{0, 1, 2, 0xff}
	tk, created, err := s.client.Schedule(context.Background(), client.ScheduleRequest{
		App: "a", DueAt: ptr(time.Now().Add(-time.Hour)), PayloadBase64: raw, Target: rcv.Target()})
	if err != nil || !created {
		t.Fatal(err, created)
	}
	start := time.Now()
	waitState(t, s, tk.ID, task.Delivered, 5*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("past-due task took %s", d)
	}
	if got := rcv.Deliveries(); len(got) != 1 || !bytes.Equal(got[0].Body, raw) || got[0].Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("arrivals: %+v", got)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCancelAndReschedule(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	ctx := context.Background()
	a, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "a", Key: "k1", Delay: task.Duration(400 * time.Millisecond), Target: rcv.Target()})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "a", Key: "k2", Delay: task.Duration(400 * time.Millisecond), Target: rcv.Target()})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "a", Delay: task.Duration(time.Hour), Target: rcv.Target()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.client.CancelByKey(ctx, "a", "k2"); err != nil {
		t.Fatal(err)
	}
	if err := s.client.Cancel(ctx, a.ID); err != nil {
		t.Errorf("cancelling a cancelled task: %v, want 204", err)
	}
	newDue := time.Now().Add(500 * time.Millisecond)
	moved, err := s.client.Patch(ctx, c.ID, client.PatchRequest{DueAt: &newDue})
	if err != nil {
		t.Fatal(err)
	}
	if !moved.DueAt.Equal(task.Ms(newDue)) {
		t.Errorf("patched due_at %s, want %s", moved.DueAt, task.Ms(newDue))
	}
	waitState(t, s, c.ID, task.Delivered, 5*time.Second)
	got := rcv.Deliveries()
	if len(got) != 1 || got[0].Header.Get("Toc-Task-Id") != c.ID.String() {
		t.Fatalf("arrivals %d, want only the rescheduled task", len(got))
	}
	if got[0].At.Before(task.Ms(newDue)) {
		t.Errorf("rescheduled task fired %s early", task.Ms(newDue).Sub(got[0].At))
	}
	for _, id := range []task.ID{a.ID, b.ID} {
		if tk, _ := s.client.Get(ctx, id); tk.State != task.Cancelled || tk.FinishedAt == nil {
			t.Errorf("task %s: %s", id, tk.State)
		}
	}
	// Delivered: patch and cancel are conflicts that carry the task.
	code, m := do(t, "PATCH", s.url+"/v1/tasks/"+c.ID.String(), `{"delay":"1m"}`)
	if code != http.StatusConflict || m["task"] == nil {
		t.Errorf("patch of a delivered task: %d %v", code, m)
	}
	code, m = do(t, "DELETE", s.url+"/v1/tasks/"+c.ID.String(), ``)
	if code != http.StatusConflict || m["task"] == nil {
		t.Errorf("cancel of a delivered task: %d %v", code, m)
	}
}

func TestIdempotentCreateConcurrent(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	const n = 32
	var wg sync.WaitGroup
	type res struct {
		id      task.ID
		created bool
		err     error
	}
	out := make([]res, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, created, err := s.client.Schedule(context.Background(), client.ScheduleRequest{
				App: "a", Key: "same", Delay: task.Duration(time.Hour + time.Duration(i)*time.Second),
				Payload: json.RawMessage(fmt.Sprint(i)), Target: task.Target{Pull: &task.PullTarget{}}})
			out[i] = res{tk.ID, created, err}
		}()
	}
	wg.Wait()
	created := 0
	for _, r := range out {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.created {
			created++
		}
		if r.id != out[0].id {
			t.Errorf("ids differ: %s vs %s", r.id, out[0].id)
		}
	}
	if created != 1 {
		t.Errorf("%d creates answered 201, want exactly 1", created)
	}
	page, err := s.client.List(context.Background(), "a", task.Scheduled, nil)
	if err != nil || len(page.Tasks) != 1 {
		t.Errorf("list: %d tasks, %v", len(page.Tasks), err)
	}
}

func TestFailingEndpointBackoffDeadRetry(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	rcv.SetStatus(http.StatusServiceUnavailable)
	ctx := context.Background()
	tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "a", Delay: task.Duration(10 * time.Millisecond), Target: rcv.Target(),
		Retry: &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(50 * time.Millisecond), MaxBackoff: task.Duration(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	dead := waitState(t, s, tk.ID, task.Dead, 10*time.Second)
	if dead.Attempts != 3 || !strings.Contains(dead.LastError, "503") {
		t.Errorf("dead task: attempts %d last_error %q", dead.Attempts, dead.LastError)
	}
	got := rcv.Deliveries()
	if len(got) != 3 {
		t.Fatalf("%d attempts reached the receiver, want 3", len(got))
	}
	for i := 1; i < 3; i++ {
		// The backoff counts from the failure's time, kept to the
		// millisecond (truncated), while the receiver stamps arrivals to
		// the nanosecond: when the failure is stored in the same
		// millisecond as the arrival, the gap can be up to 1 ms short.
		if gap := got[i].At.Sub(got[i-1].At); gap < 49*time.Millisecond {
			t.Errorf("attempt %d came %s after the previous one, less than min_backoff", i+1, gap)
		}
		if h := got[i].Header.Get("Toc-Attempt"); h != fmt.Sprint(i+1) {
			t.Errorf("Toc-Attempt %q, want %d", h, i+1)
		}
	}
	page, err := s.client.List(ctx, "a", task.Dead, nil)
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("dead list: %v %v", page, err)
	}

	rcv.SetStatus(0)
	if _, err := s.client.Retry(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, s, tk.ID, task.Delivered, 5*time.Second)
	if done.Attempts != 1 {
		t.Errorf("attempts after retry: %d, want 1", done.Attempts)
	}
	if _, err := s.client.Retry(ctx, tk.ID); !client.IsConflict(err) {
		t.Errorf("retry of a delivered task: %v, want 409", err)
	}
}

func TestDeadlineExpires(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	rcv.SetStatus(http.StatusInternalServerError)
	due := time.Now().Add(50 * time.Millisecond)
	tk, _, err := s.client.Schedule(context.Background(), client.ScheduleRequest{App: "a", DueAt: &due, Deadline: ptr(due.Add(300 * time.Millisecond)),
		Target: rcv.Target(), Retry: &task.RetryPolicy{MinBackoff: task.Duration(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitState(t, s, tk.ID, task.Expired, 5*time.Second)
	if got.FinishedAt == nil || got.FinishedAt.Before(*got.Deadline) {
		t.Errorf("expired at %v, before the deadline %v", got.FinishedAt, got.Deadline)
	}
	if n := len(rcv.Deliveries()); n != 1 {
		t.Errorf("%d attempts, want 1 (the retry falls after the deadline)", n)
	}
}

func TestPullClaimAckNackLease(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	ctx := context.Background()
	tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "workers", Key: "job", Delay: task.Duration(200 * time.Millisecond),
		Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := s.client.Claim(ctx, "workers", client.ClaimRequest{Max: 5, Lease: task.Duration(time.Second), Wait: task.Duration(5 * time.Second)})
	if err != nil || len(got) != 1 {
		t.Fatalf("long poll: %v %v", got, err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("long poll answered after %s", waited)
	}
	c1 := got[0]
	if c1.Lease == "" || c1.Attempts != 1 || c1.State != task.Delivering {
		t.Fatalf("claimed: %+v", c1)
	}
	// The error is cut to 4096 bytes on a character boundary: byte 4096
	// falls inside an 'é'.
	if err := s.client.Nack(ctx, tk.ID, client.NackRequest{Lease: c1.Lease, Error: "db busy" + strings.Repeat("é", 3000), RetryIn: 0}); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.client.Get(ctx, tk.ID); cur.LastError != "db busy"+strings.Repeat("é", 2044) {
		t.Errorf("last_error %q after nack, want the error's first 4095 bytes", cur.LastError)
	}
	got, err = s.client.Claim(ctx, "workers", client.ClaimRequest{Max: 5, Lease: task.Duration(time.Second), Wait: task.Duration(10 * time.Second)})
	if err != nil || len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claim after nack: %v %v", got, err)
	}
	c2 := got[0]
	// The lease (1s) runs out: the task comes back by itself, and the old
	// token is refused.
	waitState(t, s, tk.ID, task.Scheduled, 10*time.Second)
	code, m := do(t, "POST", s.url+"/v1/tasks/"+tk.ID.String()+"/ack", fmt.Sprintf(`{"lease":%q}`, c2.Lease))
	if code != http.StatusConflict {
		t.Errorf("late ack: %d %v, want 409", code, m)
	}
	got, err = s.client.Claim(ctx, "workers", client.ClaimRequest{Max: 5, Lease: task.Duration(30 * time.Second), Wait: task.Duration(30 * time.Second)})
	if err != nil || len(got) != 1 || got[0].Attempts != 3 {
		t.Fatalf("claim after lease expiry: %v %v", got, err)
	}
	if err := s.client.Ack(ctx, tk.ID, got[0].Lease); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.client.Get(ctx, tk.ID); cur.State != task.Delivered {
		t.Errorf("after ack: %s", cur.State)
	}
	// An empty claim answers at once with an empty list.
	code, m = do(t, "POST", s.url+"/v1/apps/workers/claim", `{}`)
	if code != 200 || m["tasks"] == nil || len(m["tasks"].([]any)) != 0 {
		t.Errorf("empty claim: %d %v", code, m)
	}
}

func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", func(c *engine.Config) { c.MaxPayload = 1000 })
	okTarget := `"target":{"http":{"url":"http://127.0.0.1:9/x"}}`
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"no app", "POST", "/v1/tasks", `{"delay":"1s",` + okTarget + `}`, 400, "app"},
		{"bad app", "POST", "/v1/tasks", `{"app":"Shop!","delay":"1s",` + okTarget + `}`, 400, "app"},
		{"empty key", "POST", "/v1/tasks", `{"app":"a","key":"","delay":"1s",` + okTarget + `}`, 400, "key"},
		{"long key", "POST", "/v1/tasks", `{"app":"a","key":"` + strings.Repeat("k", 257) + `","delay":"1s",` + okTarget + `}`, 400, "key"},
		{"neither due", "POST", "/v1/tasks", `{"app":"a",` + okTarget + `}`, 400, "due_at"},
		{"both due", "POST", "/v1/tasks", `{"app":"a","delay":"1s","due_at":"2030-01-01T00:00:00Z",` + okTarget + `}`, 400, "due_at"},
		{"bad due", "POST", "/v1/tasks", `{"app":"a","due_at":"tomorrow",` + okTarget + `}`, 400, "due_at"},
		{"bad delay", "POST", "/v1/tasks", `{"app":"a","delay":"soon",` + okTarget + `}`, 400, "delay"},
		{"no target", "POST", "/v1/tasks", `{"app":"a","delay":"1s"}`, 400, "target"},
		{"two targets", "POST", "/v1/tasks", `{"app":"a","delay":"1s","target":{"pull":{},"http":{"url":"http://x/"}}}`, 400, "target"},
		{"bad url", "POST", "/v1/tasks", `{"app":"a","delay":"1s","target":{"http":{"url":"file:///etc/passwd"}}}`, 400, "target.http.url"},
		{"deadline before due", "POST", "/v1/tasks", `{"app":"a","delay":"1h","deadline":"2000-01-01T00:00:00Z",` + okTarget + `}`, 400, "deadline"},
		{"bad retry", "POST", "/v1/tasks", `{"app":"a","delay":"1s","retry":{"max_attempts":-2},` + okTarget + `}`, 400, "retry.max_attempts"},
		{"negative delay", "POST", "/v1/tasks", `{"app":"a","delay":"-1s",` + okTarget + `}`, 400, "delay"},
		{"negative backoff", "POST", "/v1/tasks", `{"app":"a","delay":"1s","retry":{"min_backoff":"-1s"},` + okTarget + `}`, 400, "retry.min_backoff"},
		{"bad duration in body", "POST", "/v1/tasks", `{"app":"a","delay":"1s","retry":{"min_backoff":"fast"},` + okTarget + `}`, 400, "retry.min_backoff"},
		{"both payloads", "POST", "/v1/tasks", `{"app":"a","delay":"1s","payload":1,"payload_base64":"AQ==",` + okTarget + `}`, 400, "payload"},
		{"bad base64", "POST", "/v1/tasks", `{"app":"a","delay":"1s","payload_base64":"!!",` + okTarget + `}`, 400, "payload_base64"},
		{"unknown field", "POST", "/v1/tasks", `{"app":"a","delay":"1s","colour":"red",` + okTarget + `}`, 400, "colour"},
		{"wrong type", "POST", "/v1/tasks", `{"app":7,"delay":"1s",` + okTarget + `}`, 400, "app"},
		{"trailing data", "POST", "/v1/tasks", `{"app":"a","delay":"1s",` + okTarget + `} {}`, 400, ""},
		{"not json", "POST", "/v1/tasks", `app=a`, 400, ""},
		{"empty body", "POST", "/v1/tasks", ``, 400, ""},
		{"payload too large", "POST", "/v1/tasks", `{"app":"a","delay":"1s","payload":"` + strings.Repeat("x", 1200) + `",` + okTarget + `}`, 413, ""},
		{"body too large", "POST", "/v1/tasks", `{"app":"a","delay":"1s","payload":"` + strings.Repeat("x", 200<<10) + `",` + okTarget + `}`, 413, ""},
		{"batch too big", "POST", "/v1/tasks:batch", `{"tasks":[` + strings.TrimSuffix(strings.Repeat(`{},`, 1001), ",") + `]}`, 400, "tasks"},
		{"unknown id", "GET", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", ``, 404, ""},
		{"malformed id", "GET", "/v1/tasks/not-an-id", ``, 404, ""},
		{"unknown key", "GET", "/v1/apps/a/keys/nope", ``, 404, ""},
		{"cancel unknown", "DELETE", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", ``, 404, ""},
		{"list without state", "GET", "/v1/apps/a/tasks", ``, 400, "state"},
		{"list bad state", "GET", "/v1/apps/a/tasks?state=late", ``, 400, "state"},
		{"list bad limit", "GET", "/v1/apps/a/tasks?state=dead&limit=5000", ``, 400, "limit"},
		{"claim bad max", "POST", "/v1/apps/a/claim", `{"max":0}`, 400, "max"},
		{"claim bad lease", "POST", "/v1/apps/a/claim", `{"lease":"2h"}`, 400, "lease"},
		{"claim bad wait", "POST", "/v1/apps/a/claim", `{"wait":"31s"}`, 400, "wait"},
		{"claim unparsable lease", "POST", "/v1/apps/a/claim", `{"lease":"soon"}`, 400, "lease"},
		{"claim max not a number", "POST", "/v1/apps/a/claim", `{"max":"10"}`, 400, "max"},
		{"nack unparsable retry_in", "POST", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV/nack", `{"lease":"x","retry_in":"later"}`, 400, "retry_in"},
		{"bad timeout", "POST", "/v1/tasks", `{"app":"a","delay":"1s","target":{"http":{"url":"http://127.0.0.1:9/x","timeout":"soon"}}}`, 400, "target.http.timeout"},
		{"key with a control character", "POST", "/v1/tasks", `{"app":"a","key":"order\n1234","delay":"1s",` + okTarget + `}`, 400, "key"},
		{"zone only this machine has", "POST", "/v1/schedules", `{"app":"a","key":"r","every":"1m","timezone":"posixrules",` + okTarget + `}`, 400, "timezone"},
		{"bad due_at", "POST", "/v1/tasks", `{"app":"a","due_at":"tomorrow",` + okTarget + `}`, 400, "due_at"},
		{"patch bad deadline", "PATCH", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", `{"deadline":7}`, 400, "deadline"},
		{"nested unknown field", "POST", "/v1/tasks", `{"app":"a","delay":"1s","target":{"http":{"url":"http://127.0.0.1:9/x","colour":"red"}}}`, 400, "target.http.colour"},
		{"ack without lease", "POST", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV/ack", `{}`, 400, "lease"},
		{"patch nothing", "PATCH", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", `{}`, 400, "due_at"},
		{"no route", "GET", "/v2/nothing", ``, 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := do(t, c.method, s.url+c.path, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d (%v)", code, c.status, m)
			}
			e, ok := m["error"].(map[string]any)
			if !ok || e["code"] == "" || e["message"] == "" {
				t.Fatalf("no error object: %v", m)
			}
			if c.field != "" && e["field"] != c.field {
				t.Errorf("field %v, want %q (message %v)", e["field"], c.field, e["message"])
			}
		})
	}
}

func TestBatchAndList(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	ctx := context.Background()
	var reqs []client.ScheduleRequest
	for i := range 25 {
		reqs = append(reqs, client.ScheduleRequest{App: "b", Key: fmt.Sprintf("k%d", i%20), Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
	}
	reqs = append(reqs, client.ScheduleRequest{App: "b", Delay: task.Duration(time.Hour)}) // no target
	rs, err := s.client.ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for i, r := range rs[:25] {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		if r.Created {
			created++
		}
		if i >= 20 && (r.Created || r.Task.ID != rs[i-20].Task.ID) {
			t.Errorf("item %d repeats key k%d: created=%v", i, i%20, r.Created)
		}
	}
	if created != 20 || rs[25].Err == nil {
		t.Errorf("created %d (want 20), last item error %v", created, rs[25].Err)
	}
	var all []task.ID
	cursor := ""
	for pages := 0; ; pages++ {
		page, err := s.client.List(ctx, "b", task.Scheduled, &client.ListOptions{Limit: 7, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page.Tasks {
			all = append(all, tk.ID)
		}
		if page.NextCursor == "" {
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		cursor = page.NextCursor
	}
	if len(all) != 20 {
		t.Fatalf("listed %d tasks, want 20", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].String() <= all[i-1].String() {
			t.Errorf("list not in id order at %d", i)
		}
	}
}

// TestReopenLosesNothing: tasks scheduled before a clean shutdown fire after
// the restart, including those that fell due while toc was down.
func TestReopenLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rcv := testkit.NewReceiver(t)
	s := startServer(t, dir, nil)
	ctx := context.Background()
	var ids []task.ID
	var dues []time.Time
	for i := range 50 {
		tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "a", Key: fmt.Sprint(i), Delay: task.Duration(300*time.Millisecond + time.Duration(i)*20*time.Millisecond), Target: rcv.Target()})
		if err != nil {
			t.Fatal(err)
		}
		ids, dues = append(ids, tk.ID), append(dues, tk.DueAt)
	}
	s.stop()
	// Some fall due while toc is down: the first ten.
	testkit.WaitFor(t, 10*time.Second, "ten tasks to fall due while toc is down", func() bool { return time.Now().After(dues[9]) })
	s2 := startServer(t, dir, nil)
	for _, id := range ids {
		waitState(t, s2, id, task.Delivered, 10*time.Second)
	}
	seen := map[string]int{}
	for _, a := range rcv.Deliveries() {
		seen[a.Header.Get("Toc-Task-Id")]++
	}
	if len(seen) != 50 {
		t.Errorf("%d distinct tasks arrived, want 50", len(seen))
	}
}

func TestKeyEscaping(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	for _, key := range []string{"a/b", "with space", "ünï", "100%", "?x=1&y", "../.."} {
		tk, _, err := s.client.Schedule(context.Background(), client.ScheduleRequest{App: "a", Key: key, Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		got, err := s.client.GetByKey(context.Background(), "a", key)
		if err != nil || got.ID != tk.ID {
			t.Errorf("get by key %q: %v", key, err)
		}
		code, _ := do(t, "GET", s.url+"/v1/apps/a/keys/"+url.PathEscape(key), "")
		if code != 200 {
			t.Errorf("raw GET by key %q: %d", key, code)
		}
	}
}
