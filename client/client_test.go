package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m) // also catches response bodies left open
}

// routes are the API's routes as the server registers them. The fake serves
// them with a real ServeMux, so a path the client escapes wrongly does not
// match, as it would not on the server.
var routes = []string{
	"POST /v1/tasks",
	"POST /v1/tasks:batch",
	"GET /v1/tasks/{id}",
	"PATCH /v1/tasks/{id}",
	"DELETE /v1/tasks/{id}",
	"POST /v1/tasks/{id}/retry",
	"POST /v1/tasks/{id}/ack",
	"POST /v1/tasks/{id}/nack",
	"GET /v1/apps/{app}/keys/{key}",
	"DELETE /v1/apps/{app}/keys/{key}",
	"GET /v1/apps/{app}/tasks",
	"POST /v1/apps/{app}/tasks:retry",
	"POST /v1/apps/{app}/tasks:cancel",
	"POST /v1/apps/{app}/claim",
	"POST /v1/apps/{app}/tasks:ack",
	"POST /v1/schedules",
	"GET /v1/schedules/{id}",
	"PATCH /v1/schedules/{id}",
	"DELETE /v1/schedules/{id}",
	"POST /v1/schedules/{id}/pause",
	"POST /v1/schedules/{id}/resume",
	"GET /v1/schedules/{id}/next",
	"GET /v1/apps/{app}/schedules",
	"GET /v1/apps/{app}/schedules/{key}",
	"DELETE /v1/apps/{app}/schedules/{key}",
	"GET /healthz",
	"GET /readyz",
}

// seen is one request as the fake server received it.
type seen struct {
	Pattern string
	Vars    map[string]string // path wildcards, unescaped
	RawPath string            // path as sent, escaped
	Query   url.Values
	Header  http.Header
	Body    string
}

type reply struct {
	status int
	body   string
}

type fake struct {
	mu    sync.Mutex
	reqs  []seen
	reply func(n int, s seen) reply // n counts requests from 0
}

func (f *fake) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

func (f *fake) last(t *testing.T) seen {
	t.Helper()
	r := f.requests()
	if len(r) != 1 {
		t.Fatalf("server got %d requests, want 1: %+v", len(r), r)
	}
	return r[0]
}

// setup starts a fake server that records each request and answers rep.
func setup(t *testing.T, rep reply) (*client.Client, *fake) {
	t.Helper()
	return setupFunc(t, func(int, seen) reply { return rep })
}

func setupFunc(t *testing.T, fn func(n int, s seen) reply) (*client.Client, *fake) {
	t.Helper()
	f := &fake{reply: fn}
	mux := http.NewServeMux()
	for _, pat := range routes {
		mux.HandleFunc(pat, func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read body: %v", err)
			}
			s := seen{Pattern: r.Pattern, Vars: map[string]string{}, RawPath: r.URL.EscapedPath(), Query: r.URL.Query(), Header: r.Header, Body: string(b)}
			for _, v := range []string{"id", "app", "key"} {
				if x := r.PathValue(v); x != "" {
					s.Vars[v] = x
				}
			}
			f.mu.Lock()
			n := len(f.reqs)
			f.reqs = append(f.reqs, s)
			f.mu.Unlock()
			rep := f.reply(n, s)
			if rep.body != "" {
				w.Header().Set("Content-Type", "application/json")
			}
			w.WriteHeader(rep.status)
			io.WriteString(w, rep.body)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client.New(client.Config{BaseURL: srv.URL, HTTPClient: srv.Client()}), f
}

var (
	id1 = mustID("01JD8X5C2M0000ABCDEFGHJKMN")
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func mustID(s string) task.ID {
	id, err := task.ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

func sampleTask() *task.Task {
	return &task.Task{
		ID:            id1,
		App:           "billing",
		Key:           "order-42",
		DueAt:         t0,
		NextAttemptAt: t0,
		Payload:       []byte(`{"order":42}`),
		Target:        task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/hook"}},
		Retry:         task.RetryPolicy{MaxAttempts: 3},
		State:         task.Scheduled,
		CreatedAt:     t0.Add(-time.Hour),
		UpdatedAt:     t0.Add(-time.Hour),
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkJSON compares two JSON texts as values.
func checkJSON(t *testing.T, what, want, got string) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want JSON %q: %v", what, want, err)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s: server got body %q, not JSON: %v", what, got, err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func checkRoute(t *testing.T, s seen, pattern string, vars map[string]string) {
	t.Helper()
	if s.Pattern != pattern {
		t.Errorf("request matched %q (path %s), want %q", s.Pattern, s.RawPath, pattern)
	}
	if vars == nil {
		vars = map[string]string{}
	}
	if d := cmp.Diff(vars, s.Vars); d != "" {
		t.Errorf("path values mismatch (-want +got):\n%s", d)
	}
}

func TestScheduleEncodesEveryField(t *testing.T) {
	t.Parallel()
	want := sampleTask()
	c, f := setup(t, reply{201, jsonOf(t, want)})

	due := t0
	deadline := t0.Add(time.Hour)
	got, created, err := c.Schedule(context.Background(), client.ScheduleRequest{
		App:      "billing",
		Key:      "order-42",
		DueAt:    &due,
		Deadline: &deadline,
		Payload:  json.RawMessage(`{"order":42}`),
		Target: task.Target{HTTP: &task.HTTPTarget{
			URL:     "https://example.com/hook",
			Headers: map[string]string{"X-Tenant": "7"},
			Timeout: task.Duration(5 * time.Second),
		}},
		Retry: &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Minute)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Error("created = false on a 201")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("task mismatch (-want +got):\n%s", d)
	}
	s := f.last(t)
	checkRoute(t, s, "POST /v1/tasks", nil)
	checkJSON(t, "body", `{
		"app": "billing",
		"key": "order-42",
		"due_at": "2026-03-01T12:00:00Z",
		"deadline": "2026-03-01T13:00:00Z",
		"payload": {"order": 42},
		"target": {"http": {"url": "https://example.com/hook", "headers": {"X-Tenant": "7"}, "timeout": "5s"}},
		"retry": {"max_attempts": 3, "min_backoff": "1s", "max_backoff": "1m0s"}
	}`, s.Body)
	if got := s.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
}

func TestScheduleOmitsZeroFields(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{200, jsonOf(t, sampleTask())})
	_, created, err := c.Schedule(context.Background(), client.ScheduleRequest{
		App:           "billing",
		Delay:         task.Duration(90 * time.Second),
		PayloadBase64: []byte{0, 1, 0xFF},
		Target:        task.Target{Pull: &task.PullTarget{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("created = true on a 200 (existing task)")
	}
	checkJSON(t, "body", `{"app":"billing","delay":"1m30s","payload_base64":"AAH/","target":{"pull":{}}}`, f.last(t).Body)
}

func TestScheduleNeitherDueAtNorDelayIsNow(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{201, jsonOf(t, sampleTask())})
	if _, _, err := c.Schedule(context.Background(), client.ScheduleRequest{App: "a", Target: task.Target{Pull: &task.PullTarget{}}}); err != nil {
		t.Fatal(err)
	}
	checkJSON(t, "body", `{"app":"a","delay":"0s","target":{"pull":{}}}`, f.last(t).Body)
}

func TestPatchDeadline(t *testing.T) {
	t.Parallel()
	deadline := t0
	for _, tt := range []struct {
		req  client.PatchRequest
		want string
	}{
		{client.PatchRequest{}, `{}`},
		{client.PatchRequest{Deadline: &deadline}, `{"deadline":"2026-03-01T12:00:00Z"}`},
		{client.PatchRequest{ClearDeadline: true, PayloadBase64: []byte("x")}, `{"deadline":null,"payload_base64":"eA=="}`},
	} {
		c, f := setup(t, reply{200, jsonOf(t, sampleTask())})
		if _, err := c.Patch(context.Background(), id1, tt.req); err != nil {
			t.Fatal(err)
		}
		checkJSON(t, "body", tt.want, f.last(t).Body)
	}

	c, f := setup(t, reply{200, jsonOf(t, sampleTask())})
	_, err := c.Patch(context.Background(), id1, client.PatchRequest{Deadline: &deadline, ClearDeadline: true})
	if err == nil || !strings.Contains(err.Error(), "give Deadline or ClearDeadline, not both") {
		t.Errorf("err = %v, want Deadline and ClearDeadline refused", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

func TestScheduleRejectsInvalidPayloadBeforeSending(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{201, "{}"})
	_, _, err := c.Schedule(context.Background(), client.ScheduleRequest{App: "a", Payload: json.RawMessage(`{not json`)})
	if err == nil {
		t.Fatal("no error for a payload that is not JSON")
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

func TestScheduleBatch(t *testing.T) {
	t.Parallel()
	tk := sampleTask()
	resp := fmt.Sprintf(`{"results":[
		{"task":%s,"created":true},
		{"error":{"code":"invalid_argument","message":"is required","field":"target.http.url"}},
		{"task":%s,"created":false}]}`, jsonOf(t, tk), jsonOf(t, tk))
	c, f := setup(t, reply{200, resp})

	reqs := []client.ScheduleRequest{
		{App: "a", Key: "k1", Delay: task.Duration(time.Minute), Target: task.Target{Pull: &task.PullTarget{}}},
		{App: "a", DueAt: &t0, Target: task.Target{HTTP: &task.HTTPTarget{}}},
		{App: "a", Key: "k1", Target: task.Target{Pull: &task.PullTarget{}}},
	}
	got, err := c.ScheduleBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.BatchResult{
		{Task: tk, Created: true},
		{Err: &client.Error{Code: "invalid_argument", Message: "is required", Field: "target.http.url"}},
		{Task: tk, Created: false},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("results mismatch (-want +got):\n%s", d)
	}
	s := f.last(t)
	checkRoute(t, s, "POST /v1/tasks:batch", nil)
	checkJSON(t, "body", `{"tasks":[
		{"app":"a","key":"k1","delay":"1m0s","target":{"pull":{}}},
		{"app":"a","due_at":"2026-03-01T12:00:00Z","target":{"http":{"url":""}}},
		{"app":"a","key":"k1","delay":"0s","target":{"pull":{}}}]}`, s.Body)
}

func TestScheduleBatchResultCountMismatch(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, reply{200, `{"results":[]}`})
	_, err := c.ScheduleBatch(context.Background(), []client.ScheduleRequest{{App: "a"}})
	if err == nil || !strings.Contains(err.Error(), "1 tasks answered with 0 results") {
		t.Errorf("err = %v, want a count mismatch", err)
	}
}

func TestScheduleBatchEmptySendsNothing(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{200, `{"results":[]}`})
	got, err := c.ScheduleBatch(context.Background(), nil)
	if err != nil || got != nil {
		t.Errorf("ScheduleBatch(nil) = %v, %v; want nil, nil", got, err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

// TestAckMany: one request for many acks, the app escaped in the path;
// each item's error tests as a single ack's would.
func TestAckMany(t *testing.T) {
	t.Parallel()
	id2, id3, id4 := mustID("01JD8X5C2M0000ABCDEFGHJKMP"), mustID("01JD8X5C2M0000ABCDEFGHJKMQ"), mustID("01JD8X5C2M0000ABCDEFGHJKMR")
	c, f := setup(t, reply{200, `{"results":[
		{},
		{"error":{"code":"conflict","message":"toc: cannot ack task 01JD8X5C2M0000ABCDEFGHJKMP: the lease is no longer current"}},
		{"error":{"code":"not_found","message":"no such task"}},
		{"error":{"code":"invalid_field","message":"acks.3.lease: is required","field":"acks.3.lease"}}]}`})
	errs, err := c.AckMany(context.Background(), "shop floor", []client.AckItem{
		{ID: id1, Lease: "l1"}, {ID: id2, Lease: "l2"}, {ID: id3, Lease: "l3"}, {ID: id4},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := f.last(t)
	checkRoute(t, s, "POST /v1/apps/{app}/tasks:ack", map[string]string{"app": "shop floor"})
	checkJSON(t, "body", `{"acks":[
		{"id":"01JD8X5C2M0000ABCDEFGHJKMN","lease":"l1"},
		{"id":"01JD8X5C2M0000ABCDEFGHJKMP","lease":"l2"},
		{"id":"01JD8X5C2M0000ABCDEFGHJKMQ","lease":"l3"},
		{"id":"01JD8X5C2M0000ABCDEFGHJKMR","lease":""}]}`, s.Body)
	want := []error{
		nil,
		&client.Error{Status: 409, Code: "conflict", Message: "toc: cannot ack task 01JD8X5C2M0000ABCDEFGHJKMP: the lease is no longer current"},
		&client.Error{Status: 404, Code: "not_found", Message: "no such task"},
		&client.Error{Status: 400, Code: "invalid_field", Message: "acks.3.lease: is required", Field: "acks.3.lease"},
	}
	if d := cmp.Diff(want, errs); d != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", d)
	}
	if errs[0] != nil || !client.IsConflict(errs[1]) || !client.IsNotFound(errs[2]) || client.IsConflict(errs[3]) {
		t.Errorf("IsConflict/IsNotFound of %v", errs)
	}
}

func TestAckManyRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := []client.AckItem{{ID: id1, Lease: "l"}}
	c, f := setup(t, reply{200, `{"results":[]}`})
	if _, err := c.AckMany(ctx, "a", one); err == nil || !strings.Contains(err.Error(), "1 tasks answered with 0 results") {
		t.Errorf("a short answer: %v, want a count mismatch", err)
	}
	if errs, err := c.AckMany(ctx, "a", nil); errs != nil || err != nil {
		t.Errorf("AckMany(nil) = %v, %v; want nil, nil", errs, err)
	}
	if _, err := c.AckMany(ctx, "", one); err == nil {
		t.Error("AckMany without an app: no error")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("sent %d requests, want only the first", n)
	}
	c, _ = setup(t, reply{403, `{"error":{"code":"forbidden","message":"this token does not reach app a"}}`})
	var ce *client.Error
	if errs, err := c.AckMany(ctx, "a", one); !errors.As(err, &ce) || ce.Status != 403 || errs != nil {
		t.Errorf("a refused request: %v, %v; want a 403 for the whole call", errs, err)
	}
}

// TestRoutes checks each call's method, path and body against the routes.
func TestRoutes(t *testing.T) {
	t.Parallel()
	tk := sampleTask()
	due := t0
	tests := []struct {
		name    string
		reply   reply
		call    func(context.Context, *client.Client) (any, error)
		pattern string
		vars    map[string]string
		query   url.Values
		body    string // JSON; "" for no body
		want    any
	}{
		{
			name:    "Get",
			reply:   reply{200, jsonOf(t, tk)},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, id1) },
			pattern: "GET /v1/tasks/{id}",
			vars:    map[string]string{"id": id1.String()},
			want:    tk,
		},
		{
			name:  "GetByKey",
			reply: reply{200, jsonOf(t, tk)},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.GetByKey(ctx, "billing", "order-42")
			},
			pattern: "GET /v1/apps/{app}/keys/{key}",
			vars:    map[string]string{"app": "billing", "key": "order-42"},
			want:    tk,
		},
		{
			name:  "Patch",
			reply: reply{200, jsonOf(t, tk)},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.Patch(ctx, id1, client.PatchRequest{DueAt: &due, Payload: json.RawMessage(`"new"`)})
			},
			pattern: "PATCH /v1/tasks/{id}",
			vars:    map[string]string{"id": id1.String()},
			body:    `{"due_at":"2026-03-01T12:00:00Z","payload":"new"}`,
			want:    tk,
		},
		{
			name:  "PatchDelay",
			reply: reply{200, jsonOf(t, tk)},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.Patch(ctx, id1, client.PatchRequest{Delay: task.Duration(time.Hour)})
			},
			pattern: "PATCH /v1/tasks/{id}",
			vars:    map[string]string{"id": id1.String()},
			body:    `{"delay":"1h0m0s"}`,
			want:    tk,
		},
		{
			name:    "Cancel",
			reply:   reply{204, ""},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return nil, c.Cancel(ctx, id1) },
			pattern: "DELETE /v1/tasks/{id}",
			vars:    map[string]string{"id": id1.String()},
		},
		{
			name:  "CancelByKey",
			reply: reply{204, ""},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return nil, c.CancelByKey(ctx, "billing", "a b")
			},
			pattern: "DELETE /v1/apps/{app}/keys/{key}",
			vars:    map[string]string{"app": "billing", "key": "a b"},
		},
		{
			name:  "ListFirstPage",
			reply: reply{200, `{"tasks":[` + jsonOf(t, tk) + `],"next_cursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.List(ctx, "billing", task.Dead, nil)
			},
			pattern: "GET /v1/apps/{app}/tasks",
			vars:    map[string]string{"app": "billing"},
			query:   url.Values{"state": {"dead"}},
			want:    &client.ListPage{Tasks: []*task.Task{tk}, NextCursor: "c2"},
		},
		{
			name:  "ListNextPage",
			reply: reply{200, `{"tasks":[]}`},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.List(ctx, "billing", task.Scheduled, &client.ListOptions{Limit: 10, Cursor: "a+b/c="})
			},
			pattern: "GET /v1/apps/{app}/tasks",
			vars:    map[string]string{"app": "billing"},
			query:   url.Values{"state": {"scheduled"}, "limit": {"10"}, "cursor": {"a+b/c="}},
			want:    &client.ListPage{Tasks: []*task.Task{}},
		},
		{
			name:    "Retry",
			reply:   reply{200, jsonOf(t, tk)},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.Retry(ctx, id1) },
			pattern: "POST /v1/tasks/{id}/retry",
			vars:    map[string]string{"id": id1.String()},
			want:    tk,
		},
		{
			name:  "Claim",
			reply: reply{200, `{"tasks":[` + jsonOf(t, tk) + `]}`},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.Claim(ctx, "billing", client.ClaimRequest{Max: 100, Lease: task.Duration(30 * time.Second), Wait: task.Duration(10 * time.Second)})
			},
			pattern: "POST /v1/apps/{app}/claim",
			vars:    map[string]string{"app": "billing"},
			body:    `{"max":100,"lease":"30s","wait":"10s"}`,
			want:    []*task.Task{tk},
		},
		{
			name:  "ClaimDefaults",
			reply: reply{200, `{"tasks":[]}`},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.Claim(ctx, "billing", client.ClaimRequest{})
			},
			pattern: "POST /v1/apps/{app}/claim",
			vars:    map[string]string{"app": "billing"},
			body:    `{}`,
			want:    []*task.Task{},
		},
		{
			name:    "Ack",
			reply:   reply{204, ""},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return nil, c.Ack(ctx, id1, "lease-1") },
			pattern: "POST /v1/tasks/{id}/ack",
			vars:    map[string]string{"id": id1.String()},
			body:    `{"lease":"lease-1"}`,
		},
		{
			name:  "Nack",
			reply: reply{204, ""},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return nil, c.Nack(ctx, id1, client.NackRequest{Lease: "lease-1", Error: "boom", RetryIn: task.Duration(5 * time.Second)})
			},
			pattern: "POST /v1/tasks/{id}/nack",
			vars:    map[string]string{"id": id1.String()},
			body:    `{"lease":"lease-1","error":"boom","retry_in":"5s"}`,
		},
		{
			name:    "Healthy",
			reply:   reply{200, `{"status":"ok"}`},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return nil, c.Healthy(ctx) },
			pattern: "GET /healthz",
		},
		{
			name:    "Ready",
			reply:   reply{200, ""},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return nil, c.Ready(ctx) },
			pattern: "GET /readyz",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, tt.reply)
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); tt.want != nil && d != "" {
				t.Errorf("result mismatch (-want +got):\n%s", d)
			}
			s := f.last(t)
			checkRoute(t, s, tt.pattern, tt.vars)
			if tt.query == nil {
				tt.query = url.Values{}
			}
			if d := cmp.Diff(tt.query, s.Query); d != "" {
				t.Errorf("query mismatch (-want +got):\n%s", d)
			}
			if tt.body == "" {
				if s.Body != "" {
					t.Errorf("body = %q, want none", s.Body)
				}
			} else {
				checkJSON(t, "body", tt.body, s.Body)
			}
			if got := s.Header.Get("Authorization"); got != "" {
				t.Errorf("Authorization = %q without a token", got)
			}
		})
	}
}

// TestKeyEscaping sends awkward keys through a real ServeMux and checks
// that the server reads back the same key, in one path segment.
func TestKeyEscaping(t *testing.T) {
	t.Parallel()
	keys := []string{
		"order-42",
		"a/b",
		"/leading/and/trailing/",
		"a//b",
		"with space",
		"ünïcødé/日本語",
		"100%",
		"%2F",
		"a?b#c&d=e",
		"plus+sign",
		".",
		"..",
		"../../v1/tasks",
		"./x/./y",
		"tab\tnewline\n",
		"emoji 🎉",
	}
	for _, key := range keys {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, reply{200, jsonOf(t, sampleTask())})
			ctx := context.Background()
			if _, err := c.GetByKey(ctx, "billing", key); err != nil {
				t.Fatalf("GetByKey: %v", err)
			}
			if err := c.CancelByKey(ctx, "billing", key); err != nil {
				t.Fatalf("CancelByKey: %v", err)
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("server got %d requests, want 2", len(reqs))
			}
			checkRoute(t, reqs[0], "GET /v1/apps/{app}/keys/{key}", map[string]string{"app": "billing", "key": key})
			checkRoute(t, reqs[1], "DELETE /v1/apps/{app}/keys/{key}", map[string]string{"app": "billing", "key": key})
		})
	}
}

func TestEmptyAppOrKeyFailsBeforeSending(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{200, "{}"})
	ctx := context.Background()
	for name, err := range map[string]error{
		"GetByKey no app":    second(c.GetByKey(ctx, "", "k")),
		"GetByKey no key":    second(c.GetByKey(ctx, "a", "")),
		"CancelByKey no key": c.CancelByKey(ctx, "a", ""),
		"List no app":        second(c.List(ctx, "", task.Dead, nil)),
		"Claim no app":       second(c.Claim(ctx, "", client.ClaimRequest{})),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

func second[T any](_ T, err error) error { return err }

func TestErrors(t *testing.T) {
	t.Parallel()
	tk := sampleTask()
	tk.State = task.Delivering
	tests := []struct {
		name     string
		reply    reply
		want     *client.Error
		text     string
		notFound bool
		conflict bool
	}{
		{
			name:  "BadRequest",
			reply: reply{400, `{"error":{"code":"invalid_argument","message":"is required","field":"target.http.url"}}`},
			want:  &client.Error{Status: 400, Code: "invalid_argument", Message: "is required", Field: "target.http.url"},
			text:  "toc: target.http.url: is required (HTTP 400, invalid_argument)",
		},
		{
			name:  "BadRequestMessageNamesField",
			reply: reply{400, `{"error":{"code":"invalid_argument","message":"app: is required","field":"app"}}`},
			want:  &client.Error{Status: 400, Code: "invalid_argument", Message: "app: is required", Field: "app"},
			text:  "toc: app: is required (HTTP 400, invalid_argument)",
		},
		{
			name:     "NotFound",
			reply:    reply{404, `{"error":{"code":"not_found","message":"toc: task not found"}}`},
			want:     &client.Error{Status: 404, Code: "not_found", Message: "toc: task not found"},
			text:     "toc: task not found (HTTP 404, not_found)",
			notFound: true,
		},
		{
			name:     "ConflictWithTask",
			reply:    reply{409, `{"error":{"code":"conflict","message":"task is delivering"},"task":` + jsonOf(t, tk) + `}`},
			want:     &client.Error{Status: 409, Code: "conflict", Message: "task is delivering", Task: tk},
			text:     "toc: task is delivering (HTTP 409, conflict, task " + id1.String() + " is delivering)",
			conflict: true,
		},
		{
			name:  "TooLarge",
			reply: reply{413, `{"error":{"code":"too_large","message":"body is more than 1 MiB"}}`},
			want:  &client.Error{Status: 413, Code: "too_large", Message: "body is more than 1 MiB"},
			text:  "toc: body is more than 1 MiB (HTTP 413, too_large)",
		},
		{
			name:  "NotTocJSON",
			reply: reply{429, "slow down\n  please"},
			want:  &client.Error{Status: 429, Message: "slow down please"},
			text:  "toc: slow down please (HTTP 429)",
		},
		{
			name:  "EmptyBody",
			reply: reply{503, ""},
			want:  &client.Error{Status: 503},
			text:  "toc: service unavailable (HTTP 503)",
		},
		{
			name:  "OtherJSON",
			reply: reply{502, `{"message":"bad gateway"}`},
			want:  &client.Error{Status: 502, Message: `{"message":"bad gateway"}`},
			text:  `toc: {"message":"bad gateway"} (HTTP 502)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := setup(t, tt.reply)
			_, err := c.Get(context.Background(), id1)
			var got *client.Error
			if !errors.As(err, &got) {
				t.Fatalf("err = %#v, want *client.Error", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("error mismatch (-want +got):\n%s", d)
			}
			if got := err.Error(); got != tt.text {
				t.Errorf("Error() = %q, want %q", got, tt.text)
			}
			wrapped := fmt.Errorf("get: %w", err)
			if got := client.IsNotFound(wrapped); got != tt.notFound {
				t.Errorf("IsNotFound = %v, want %v", got, tt.notFound)
			}
			if got := client.IsConflict(wrapped); got != tt.conflict {
				t.Errorf("IsConflict = %v, want %v", got, tt.conflict)
			}
		})
	}
}

func TestErrorsOnEveryMethod(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, reply{409, `{"error":{"code":"conflict","message":"lease is not current"}}`})
	ctx := context.Background()
	for name, err := range map[string]error{
		"Schedule":      func() error { _, _, err := c.Schedule(ctx, client.ScheduleRequest{App: "a"}); return err }(),
		"ScheduleBatch": second(c.ScheduleBatch(ctx, []client.ScheduleRequest{{App: "a"}})),
		"GetByKey":      second(c.GetByKey(ctx, "a", "k")),
		"Patch":         second(c.Patch(ctx, id1, client.PatchRequest{})),
		"Cancel":        c.Cancel(ctx, id1),
		"CancelByKey":   c.CancelByKey(ctx, "a", "k"),
		"List":          second(c.List(ctx, "a", task.Dead, nil)),
		"Retry":         second(c.Retry(ctx, id1)),
		"Claim":         second(c.Claim(ctx, "a", client.ClaimRequest{})),
		"Ack":           c.Ack(ctx, id1, "l"),
		"AckMany":       second(c.AckMany(ctx, "a", []client.AckItem{{ID: id1, Lease: "l"}})),
		"Nack":          c.Nack(ctx, id1, client.NackRequest{Lease: "l"}),
		"Healthy":       c.Healthy(ctx),
		"Ready":         c.Ready(ctx),
	} {
		if !client.IsConflict(err) {
			t.Errorf("%s: err = %v, want a conflict", name, err)
		}
	}
}

func TestUnmatchedRouteIsNotFound(t *testing.T) {
	t.Parallel()
	// A server without the API (wrong base URL) answers ServeMux's text 404.
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c := client.New(client.Config{BaseURL: srv.URL, HTTPClient: srv.Client()})
	_, err := c.Get(context.Background(), id1)
	if !client.IsNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
	if want := "toc: 404 page not found (HTTP 404)"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestBadAnswerBody(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, reply{200, `<html>`})
	_, err := c.Get(context.Background(), id1)
	if err == nil || !strings.Contains(err.Error(), "decode answer to GET /v1/tasks/"+id1.String()) {
		t.Errorf("err = %v, want a decode error naming the request", err)
	}
}

func TestTokenAndBaseURLPrefix(t *testing.T) {
	t.Parallel()
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c := client.New(client.Config{BaseURL: srv.URL + "/toc/", HTTPClient: srv.Client(), Token: "s3cret"})
	if err := c.Cancel(context.Background(), id1); err != nil {
		t.Fatal(err)
	}
	if want := "/toc/v1/tasks/" + id1.String(); got.URL.Path != want {
		t.Errorf("path = %q, want %q", got.URL.Path, want)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want %q", a, "Bearer s3cret")
	}
}

func TestContextCancelsCall(t *testing.T) {
	t.Parallel()
	arrived, stop := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // lets the server notice the client going away
		close(arrived)
		select { // a long-polling claim
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: never leave Close waiting
	c := client.New(client.Config{BaseURL: srv.URL, HTTPClient: srv.Client()})

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := c.Claim(ctx, "billing", client.ClaimRequest{Wait: task.Duration(time.Hour)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	c := client.New(client.Config{BaseURL: base})
	err := c.Healthy(context.Background())
	if err == nil {
		t.Fatal("no error from a closed server")
	}
	var e *client.Error
	if errors.As(err, &e) {
		t.Errorf("network failure reported as *client.Error: %v", err)
	}
}

func TestMalformedBaseURL(t *testing.T) {
	t.Parallel()
	c := client.New(client.Config{BaseURL: "http://bad host:7070"})
	if err := c.Healthy(context.Background()); err == nil {
		t.Error("no error for a malformed base URL")
	}
}
