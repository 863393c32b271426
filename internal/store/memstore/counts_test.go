package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := task.Ms(time.Now())
	var gen task.IDGenerator
	newTask := func(app string, state task.State) *task.Task {
		due := now.Add(time.Hour)
		tk := &task.Task{
			ID: gen.New(now, 0), App: app, State: state,
			DueAt: due, NextAttemptAt: due, WakeAt: due,
			Target:    task.Target{Pull: &task.PullTarget{}},
			CreatedAt: now, UpdatedAt: now,
		}
		if state.Final() {
			tk.FinishedAt, tk.WakeAt = &now, time.Time{}
		}
		return tk
	}
	ts := []*task.Task{
		newTask("a", task.Scheduled), newTask("a", task.Scheduled), newTask("a", task.Dead),
		newTask("b", task.Delivered), newTask("b", task.Cancelled),
	}
	if _, err := s.Create(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, ts[0].ID, nil, func(tk *task.Task) error {
		tk.State, tk.FinishedAt, tk.WakeAt = task.Expired, &now, time.Time{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[task.State]int64{
		"a": {task.Scheduled: 1, task.Dead: 1, task.Expired: 1},
		"b": {task.Delivered: 1, task.Cancelled: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Counts(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Counts after Close: error = %v, want ErrClosed", err)
	}
}
