package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestBatchMinimal: with "Prefer: return=minimal" a batch answers each task
// with its id alone, in the same shape; the tasks are created all the same,
// a repeated key answers the existing task's id, and refused items keep
// their errors.
func TestBatchMinimal(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	ctx := context.Background()
	var reqs []client.ScheduleRequest
	for i := range 12 {
		reqs = append(reqs, client.ScheduleRequest{App: "m", Key: fmt.Sprintf("k%d", i%10), Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
	}
	reqs = append(reqs, client.ScheduleRequest{App: "m", Delay: task.Duration(time.Hour)}) // no target
	rs, err := s.client.ScheduleBatchMinimal(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[:12] {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		if r.Created != (i < 10) {
			t.Errorf("item %d: created %v", i, r.Created)
		}
		if r.Task.App != "" || r.Task.Key != "" || r.Task.ID.IsZero() {
			t.Errorf("item %d: %+v, want the id alone", i, r.Task)
		}
		got, err := s.client.GetByKey(ctx, "m", reqs[i].Key)
		if err != nil || got.ID != r.Task.ID {
			t.Errorf("item %d: answered id %s, the task of key %s is %v (%v)", i, r.Task.ID, reqs[i].Key, got, err)
		}
	}
	if ce, ok := rs[12].Err.(*client.Error); !ok || ce.Field != "target" {
		t.Errorf("item without target: %v, want an error naming the field target", rs[12].Err)
	}

	// The raw answer: the header that says so, and nothing but the id.
	body := `{"tasks":[{"app":"m","key":"raw","delay":"1h","target":{"pull":{}}}]}`
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/tasks:batch", strings.NewReader(body))
	req.Header.Set("Prefer", "return=minimal")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Preference-Applied") != "return=minimal" || len(out.Results) != 1 {
		t.Fatalf("status %d, Preference-Applied %q, %d results", resp.StatusCode, resp.Header.Get("Preference-Applied"), len(out.Results))
	}
	var tk map[string]any
	if err := json.Unmarshal(out.Results[0]["task"], &tk); err != nil || len(tk) != 1 || tk["id"] == nil || string(out.Results[0]["created"]) != "true" {
		t.Errorf("result %s (%v), want {\"task\":{\"id\":...},\"created\":true}", out.Results[0], err)
	}
}
