package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// countIn counts app's tasks in state, reading the engine's list.
func countIn(t *testing.T, s *server, app string, state task.State) int {
	t.Helper()
	n := 0
	var after task.ID
	for {
		ts, next, err := s.eng.List(context.Background(), app, state, after, engine.MaxList)
		if err != nil {
			t.Fatal(err)
		}
		n += len(ts)
		if next.IsZero() {
			return n
		}
		after = next
	}
}

// makeDead creates tasks of app with keys, one failing attempt each, and
// waits until all are dead.
func makeDead(t *testing.T, s *server, rcv *testkit.Receiver, app string, keys []string, due time.Time) []*task.Task {
	t.Helper()
	ctx := context.Background()
	var out []*task.Task
	for len(keys) > 0 {
		k := min(len(keys), engine.MaxBatch)
		reqs := make([]client.ScheduleRequest, k)
		for i, key := range keys[:k] {
			reqs[i] = client.ScheduleRequest{App: app, Key: key, DueAt: &due, Target: rcv.Target(), Retry: &task.RetryPolicy{MaxAttempts: 1}}
		}
		rs, err := s.client.ScheduleBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			out = append(out, r.Task)
		}
		keys = keys[k:]
	}
	want := len(out)
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d dead tasks of %s", want, app), func() bool { return countIn(t, s, app, task.Dead) >= want })
	return out
}

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return keys
}

// TestBulkRetry: an endpoint was down; its dead tasks are retried with a
// filter, more than a page of them with a limit that takes two requests,
// and are delivered; repeats count 0, and another app is not touched.
func TestBulkRetry(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	rcv.SetStatus(http.StatusServiceUnavailable)
	ctx := context.Background()
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	hooks := makeDead(t, s, rcv, "shop", keysOf("hook/", 1200), past)
	mails := makeDead(t, s, rcv, "shop", keysOf("mail/", 3), past.Add(time.Minute))
	others := makeDead(t, s, rcv, "other", keysOf("hook/", 2), past)
	rcv.SetStatus(0)

	// The mails alone: a window on the due time.
	code, m := do(t, "POST", s.url+"/v1/apps/shop/tasks:retry", fmt.Sprintf(`{"state":"dead","due_after":%q}`, mails[0].DueAt.Format(time.RFC3339Nano)))
	if code != 200 || m["count"] != float64(3) || m["more"] != nil {
		t.Fatalf("retry the mails: %d %v, want 200 {count: 3}", code, m)
	}
	for _, tk := range mails {
		waitState(t, s, tk.ID, task.Delivered, 10*time.Second)
	}

	// The hooks, by key prefix, at most 700 a request.
	f := client.BulkFilter{State: task.Dead, KeyPrefix: "hook/", DueBefore: ptr(past.Add(time.Second)), Limit: 700}
	for i, want := range []client.BulkResult{{Count: 700, More: true}, {Count: 500}, {}} {
		got, err := s.client.RetryAll(ctx, "shop", f)
		if err != nil || got != want {
			t.Fatalf("request %d: %+v, %v; want %+v", i+1, got, err, want)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the hooks delivered", func() bool { return countIn(t, s, "shop", task.Delivered) == len(hooks)+len(mails) })
	got, err := s.client.Get(ctx, hooks[0].ID)
	if err != nil || got.Attempts != 1 || got.History[len(got.History)-3].What != "retried" {
		t.Errorf("a retried hook: %+v, %v", got, err)
	}
	if n := countIn(t, s, "other", task.Dead); n != len(others) {
		t.Errorf("%d of the other app's %d dead tasks still dead", n, len(others))
	}
	if got, err := s.client.RetryAll(ctx, "shop", client.BulkFilter{State: task.Dead}); err != nil || got != (client.BulkResult{}) {
		t.Errorf("repeat: %+v, %v; want 0", got, err)
	}
}

// TestBulkCancel: the scheduled tasks a filter matches are cancelled, the
// others stay; a repeat counts 0; a finished task is not touched.
func TestBulkCancel(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	ctx := context.Background()
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var promos, keep []*task.Task
	for i := range 5 {
		tk, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: fmt.Sprint("promo/", i), DueAt: ptr(due.Add(time.Duration(i) * time.Minute)), Target: task.Target{Pull: &task.PullTarget{}}})
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			promos = append(promos, tk)
		} else {
			keep = append(keep, tk)
		}
	}
	order, _, err := s.client.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: "order-1", DueAt: &due, Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	keep = append(keep, order)

	body := fmt.Sprintf(`{"state":"scheduled","key_prefix":"promo/","due_after":%q,"due_before":%q}`,
		due.Format(time.RFC3339Nano), due.Add(3*time.Minute).Format(time.RFC3339Nano))
	for i, want := range []float64{3, 0} {
		code, m := do(t, "POST", s.url+"/v1/apps/shop/tasks:cancel", body)
		if code != 200 || m["count"] != want {
			t.Errorf("request %d: %d %v, want 200 {count: %v}", i+1, code, m, want)
		}
	}
	for _, tk := range promos {
		if got, _ := s.client.Get(ctx, tk.ID); got.State != task.Cancelled {
			t.Errorf("%s is %s, want cancelled", tk.Key, got.State)
		}
	}
	for _, tk := range keep {
		if got, _ := s.client.Get(ctx, tk.ID); got.State != task.Scheduled {
			t.Errorf("%s is %s, want scheduled", tk.Key, got.State)
		}
	}
}

// TestBulkFieldErrors: bad filters are 400s that name the field, and
// change nothing.
func TestBulkFieldErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	if _, _, err := s.client.Schedule(context.Background(), client.ScheduleRequest{App: "a", Key: "k", Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}}); err != nil {
		t.Fatal(err)
	}
	const retry, cancel = "/v1/apps/a/tasks:retry", "/v1/apps/a/tasks:cancel"
	cases := []struct {
		name, path, body string
		field            string
	}{
		{"no state", retry, `{}`, "state"},
		{"retry scheduled", retry, `{"state":"scheduled"}`, "state"},
		{"retry unknown state", retry, `{"state":"late"}`, "state"},
		{"cancel dead", cancel, `{"state":"dead"}`, "state"},
		{"cancel without state", cancel, `{"key_prefix":"k"}`, "state"},
		{"state not a string", cancel, `{"state":1}`, "state"},
		{"long prefix", cancel, `{"state":"scheduled","key_prefix":"` + strings.Repeat("k", 257) + `"}`, "key_prefix"},
		{"prefix not UTF-8", cancel, "{\"state\":\"scheduled\",\"key_prefix\":\"k\xff\"}", "key_prefix"},
		{"bad due_after", cancel, `{"state":"scheduled","due_after":"yesterday"}`, "due_after"},
		{"due_after out of range", retry, `{"state":"dead","due_after":"0001-01-01T00:00:00Z"}`, "due_after"},
		{"bad due_before", cancel, `{"state":"scheduled","due_before":"2026-13-01T00:00:00Z"}`, "due_before"},
		{"window backwards", cancel, `{"state":"scheduled","due_after":"2030-01-01T00:00:00Z","due_before":"2029-01-01T00:00:00Z"}`, "due_before"},
		{"limit zero", retry, `{"state":"dead","limit":0}`, "limit"},
		{"limit too large", cancel, `{"state":"scheduled","limit":100001}`, "limit"},
		{"unknown field", cancel, `{"state":"scheduled","key":"k"}`, "key"},
		{"repeated field", cancel, `{"state":"scheduled","state":"scheduled"}`, "state"},
		{"bad app", "/v1/apps/Shop!/tasks:retry", `{"state":"dead"}`, "app"},
		{"empty body", cancel, ``, ""},
		{"not an object", cancel, `[]`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := do(t, "POST", s.url+c.path, c.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400 (%v)", code, m)
			}
			e, _ := m["error"].(map[string]any)
			if e == nil || e["message"] == "" {
				t.Fatalf("no error object: %v", m)
			}
			if c.field != "" && e["field"] != c.field {
				t.Errorf("field %v, want %q (message %v)", e["field"], c.field, e["message"])
			}
		})
	}
	if n := countIn(t, s, "a", task.Scheduled); n != 1 {
		t.Errorf("%d scheduled tasks left, want 1", n)
	}
}

// TestBulkIsolation: an app token cannot reach another app's tasks in bulk
// (403, nothing changed), and its own bulk action changes only its app's.
func TestBulkIsolation(t *testing.T) {
	t.Parallel()
	s, hs := startGuarded(t)
	ctx := context.Background()
	admin := client.New(client.Config{BaseURL: hs.URL, Token: "admin-token"})
	for _, app := range []string{"shop", "billing"} {
		if _, _, err := admin.Schedule(ctx, client.ScheduleRequest{App: app, Key: "promo/1", Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}}); err != nil {
			t.Fatal(err)
		}
	}
	shop := client.New(client.Config{BaseURL: hs.URL, Token: "shop-token"})
	f := client.BulkFilter{State: task.Scheduled, KeyPrefix: "promo/"}
	for _, call := range []func() (client.BulkResult, error){
		func() (client.BulkResult, error) { return shop.CancelAll(ctx, "billing", f) },
		func() (client.BulkResult, error) {
			return shop.RetryAll(ctx, "billing", client.BulkFilter{State: task.Dead})
		},
	} {
		var ce *client.Error
		if _, err := call(); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
			t.Errorf("shop's token on billing: %v, want 403", err)
		}
	}
	if n := countIn(t, s, "billing", task.Scheduled); n != 1 {
		t.Errorf("billing has %d scheduled tasks, want 1", n)
	}
	if res, err := shop.CancelAll(ctx, "shop", f); err != nil || res.Count != 1 {
		t.Errorf("shop's own cancel: %+v, %v; want 1", res, err)
	}
	if n := countIn(t, s, "billing", task.Scheduled); n != 1 {
		t.Errorf("after shop's cancel, billing has %d scheduled tasks, want 1", n)
	}
	if _, err := client.New(client.Config{BaseURL: hs.URL}).CancelAll(ctx, "shop", f); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without a token: %v, want 401", err)
	}
}

// startGuarded starts a server whose API takes the tokens admin-token
// (every app), shop-token and billing-token (their app's tasks only).
func startGuarded(t *testing.T) (*server, *httptest.Server) {
	t.Helper()
	s := startServer(t, "", nil)
	acc, err := httpapi.NewAccess([]string{digest("admin-token")}, map[string][]string{
		"shop": {digest("shop-token")}, "billing": {digest("billing-token")},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, Access: acc}))
	t.Cleanup(hs.Close)
	return s, hs
}
