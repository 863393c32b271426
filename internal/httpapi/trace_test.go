package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// The W3C trace context of creates (tracing off, as in every test of this
// package: no OTEL_* provider): a task keeps the caller's traceparent and
// tracestate and its pushes carry them unchanged; a task created without
// one is pushed without one.

const (
	testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testState  = "rojo=00f067aa0ba902b7"
)

// doTraced is do with the trace context headers (none for empty strings).
func doTraced(t *testing.T, method, u, body, traceparent, tracestate string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	if tracestate != "" {
		req.Header.Set("tracestate", tracestate)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestCreateKeepsTraceContext(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	url := rcv.URL + "/hook"
	create := func(key, traceparent, tracestate string) *task.Task {
		t.Helper()
		code, b := doTraced(t, "POST", s.url+"/v1/tasks",
			`{"app":"tr","key":"`+key+`","delay":"50ms","target":{"http":{"url":"`+url+`"}}}`, traceparent, tracestate)
		var tk task.Task
		if code != http.StatusCreated || json.Unmarshal(b, &tk) != nil {
			t.Fatalf("create %s: %d %s", key, code, b)
		}
		return &tk
	}
	traced := create("traced", testParent, testState)
	plain := create("plain", "", "")
	bad := create("bad", "00-not-a-trace-01", testState) // ignored, as W3C says

	code, b := doTraced(t, "POST", s.url+"/v1/tasks:batch", `{"tasks":[{"app":"tr","key":"b1","delay":"50ms","target":{"http":{"url":"`+url+`"}}},`+
		`{"app":"tr","key":"b2","delay":"50ms","target":{"http":{"url":"`+url+`"}}}]}`, testParent, "")
	var batch struct {
		Results []struct {
			Task *task.Task `json:"task"`
		} `json:"results"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &batch) != nil || len(batch.Results) != 2 {
		t.Fatalf("batch: %d %s", code, b)
	}

	want := map[task.ID][2]string{traced.ID: {testParent, testState}, plain.ID: {}, bad.ID: {}}
	for _, r := range batch.Results {
		want[r.Task.ID] = [2]string{testParent, ""}
	}
	for id, w := range want {
		got, err := s.client.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tp, ts := traceOf(got); tp != w[0] || ts != w[1] {
			t.Errorf("task %s (%s): trace context %q %q, want %q %q", id, got.Key, tp, ts, w[0], w[1])
		}
	}
	rcv.WaitCount(t, 5, 10*time.Second)
	for _, a := range rcv.Deliveries() {
		id, _ := task.ParseID(a.Header.Get("Toc-Task-Id"))
		w := want[id]
		if a.Header.Get("traceparent") != w[0] || a.Header.Get("tracestate") != w[1] || len(a.Header.Values("traceparent")) > 1 {
			t.Errorf("push of %s: traceparent %q tracestate %q, want %q %q", id, a.Header.Values("traceparent"), a.Header.Get("tracestate"), w[0], w[1])
		}
	}
}

// TestScheduleKeepsTraceContext: a schedule keeps its creator's trace
// context and gives it to each occurrence.
func TestScheduleKeepsTraceContext(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	rcv := testkit.NewReceiver(t)
	code, b := doTraced(t, "POST", s.url+"/v1/schedules",
		`{"app":"tr","key":"every","every":"1s","target":{"http":{"url":"`+rcv.URL+`/hook"}}}`, testParent, testState)
	var sc task.Schedule
	if code != http.StatusCreated || json.Unmarshal(b, &sc) != nil {
		t.Fatalf("create schedule: %d %s", code, b)
	}
	if sc.TraceParent != testParent || sc.TraceState != testState {
		t.Errorf("schedule's trace context %q %q, want the creator's", sc.TraceParent, sc.TraceState)
	}
	rcv.WaitCount(t, 1, 10*time.Second)
	a := rcv.Deliveries()[0]
	if a.Header.Get("traceparent") != testParent || a.Header.Get("tracestate") != testState {
		t.Errorf("occurrence's push: traceparent %q tracestate %q, want the schedule's", a.Header.Get("traceparent"), a.Header.Get("tracestate"))
	}
	occ := occurrencesOf(t, s, "tr", "every")
	if len(occ) == 0 || occ[0].Trace == nil || occ[0].Trace.Parent != testParent {
		t.Errorf("occurrences %v: want the schedule's traceparent", occ)
	}
}

// TestImportTraceContext: an import keeps a task's trace context and
// refuses an invalid one, naming the field.
func TestImportTraceContext(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	line := func(id, traceparent string) string {
		return `{"id":"` + id + `","app":"tr","due_at":"2030-01-01T00:00:00Z","next_attempt_at":"2030-01-01T00:00:00Z",` +
			`"target":{"pull":{}},"state":"scheduled","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z",` +
			`"traceparent":"` + traceparent + `","tracestate":"` + testState + `"}` + "\n"
	}
	id := new(task.IDGenerator).New(time.Now(), 0)
	code, b := doTraced(t, "POST", s.url+"/v1/admin/import", line(id.String(), "00-zz"), "", "")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "traceparent") {
		t.Errorf("import of an invalid traceparent: %d %s, want 400 naming traceparent", code, b)
	}
	code, b = doTraced(t, "POST", s.url+"/v1/admin/import", line(id.String(), testParent), "", "")
	if code != http.StatusOK {
		t.Fatalf("import: %d %s", code, b)
	}
	got, err := s.client.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tp, ts := traceOf(got); tp != testParent || ts != testState {
		t.Errorf("imported task's trace context %q %q", tp, ts)
	}
}

func traceOf(t *task.Task) (traceparent, tracestate string) {
	if t.Trace == nil {
		return "", ""
	}
	return t.Trace.Parent, t.Trace.State
}
