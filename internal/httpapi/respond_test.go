package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// sampleTasks are tasks with every kind of field set and not set.
func sampleTasks() []*task.Task {
	due := time.Date(2026, 11, 24, 10, 30, 0, 123456789, time.UTC)
	var ids task.IDGenerator
	deadline := due.Add(time.Hour)
	full := &task.Task{
		ID: ids.New(due, 0), App: "shop", Key: "order-1234", State: task.Scheduled,
		DueAt: due, NextAttemptAt: due, Deadline: &deadline, Attempts: 2, LastError: "503 \"busy\"\n",
		Payload: []byte(`{"order": 1234, "note": "<tag> & ü"}`),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:9/hook"}},
	}
	full.Record(due, "created", 0, "")
	binary := &task.Task{
		ID: ids.New(due, 0), App: "shop", State: task.Delivering, DueAt: due,
		Payload: []byte{0xff, 0x00, 'x'}, Target: task.Target{Pull: &task.PullTarget{}},
	}
	return []*task.Task{full, binary, {ID: ids.New(due, 0), App: "a"}}
}

// The hand-framed answers must be what json.Marshal of the same values
// writes, byte for byte.
func TestHandFramedAnswers(t *testing.T) {
	ts := sampleTasks()
	yes, no := true, false
	items := []batchItem{
		{Task: ts[0], Created: &yes},
		{Error: itemError(badField("tasks.1.due_at", "is in the past"))},
		{Task: ts[1], Created: &no},
		{Error: itemError(errors.New("boom"))},
		{Task: ts[2], Created: &yes},
	}
	check := func(name string, write func(http.ResponseWriter), want any) {
		t.Helper()
		rec := httptest.NewRecorder()
		write(rec)
		wantB, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, append(wantB, '\n')) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, wantB)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", name, ct)
		}
		if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(rec.Body.Len()) {
			t.Errorf("%s: Content-Length %q for %d bytes", name, cl, rec.Body.Len())
		}
	}
	check("results", func(w http.ResponseWriter) { writeResults(w, items, false) }, map[string]any{"results": items})
	check("tasks", func(w http.ResponseWriter) { writeTasks(w, "tasks", ts) }, map[string]any{"tasks": ts})
	check("no tasks", func(w http.ResponseWriter) { writeTasks(w, "tasks", nil) }, map[string]any{"tasks": []*task.Task{}})
	check("tasks again", func(w http.ResponseWriter) { writeTasks(w, "tasks", ts[1:]) }, map[string]any{"tasks": ts[1:]}) // a reused buffer
	check("one task", func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, ts[0]) }, ts[0])

	// Minimal: the same shape, each task as its id alone.
	type idOnly struct {
		ID task.ID `json:"id"`
	}
	type minItem struct {
		Task    *idOnly    `json:"task,omitempty"`
		Created *bool      `json:"created,omitempty"`
		Error   *errorBody `json:"error,omitempty"`
	}
	var mins []minItem
	for _, it := range items {
		m := minItem{Created: it.Created, Error: it.Error}
		if it.Task != nil {
			m.Task = &idOnly{it.Task.ID}
		}
		mins = append(mins, m)
	}
	check("minimal results", func(w http.ResponseWriter) { writeResults(w, items, true) }, map[string]any{"results": mins})
}

func TestPreferMinimal(t *testing.T) {
	for _, c := range []struct {
		prefer []string
		want   bool
	}{
		{nil, false},
		{[]string{"return=minimal"}, true},
		{[]string{"Return = \"minimal\""}, true},
		{[]string{"respond-async, return=minimal"}, true},
		{[]string{"handling=lenient", "return=minimal; x=1"}, true}, // parameters are ignored
		{[]string{"return=representation"}, false},
		{[]string{"minimal"}, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/tasks:batch", nil)
		for _, p := range c.prefer {
			r.Header.Add("Prefer", p)
		}
		if got := preferMinimal(r); got != c.want {
			t.Errorf("Prefer %q: minimal %v, want %v", c.prefer, got, c.want)
		}
	}
}
