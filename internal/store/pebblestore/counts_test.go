package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// countsTask returns a task of app in state, filled the way the engine
// fills one.
func countsTask(gen *task.IDGenerator, now time.Time, app, key string, state task.State) *task.Task {
	due := now.Add(time.Hour)
	t := &task.Task{
		ID: gen.New(now, 0), App: app, Key: key, State: state,
		DueAt: due, NextAttemptAt: due, WakeAt: due,
		Target:    task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/hook"}},
		Retry:     task.RetryPolicy{}.WithDefaults(),
		CreatedAt: now, UpdatedAt: now,
	}
	switch {
	case state == task.Delivering:
		t.Attempts, t.Lease, t.LeaseExpiresAt = 1, "lease", &due
	case state.Final():
		t.FinishedAt, t.WakeAt = &now, time.Time{}
	}
	return t
}

func counts(t *testing.T, s store.Counter) map[string]map[task.State]int64 {
	t.Helper()
	got, err := s.Counts(context.Background())
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return got
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	defer func() { _ = s.Close() }()
	now := task.Ms(time.Now())
	var gen task.IDGenerator

	if diff := cmp.Diff(map[string]map[task.State]int64{}, counts(t, s)); diff != "" {
		t.Errorf("empty store: Counts (-want +got):\n%s", diff)
	}

	// "a" is a prefix of "ab": the separator must end the app.
	var ts []*task.Task
	add := func(app string, state task.State, n int) {
		for i := range n {
			ts = append(ts, countsTask(&gen, now, app, fmt.Sprintf("%s-%s-%d", app, state, i), state))
		}
	}
	add("a", task.Scheduled, 3)
	add("a", task.Dead, 2)
	add("ab", task.Scheduled, 1)
	add("ab", task.Delivering, 1)
	add("ab", task.Delivered, 4)
	add("shop.eu-1", task.Cancelled, 1)
	add("shop.eu-1", task.Expired, 1)
	if _, err := s.Create(ctx, ts); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[task.State]int64{
		"a":         {task.Scheduled: 3, task.Dead: 2},
		"ab":        {task.Scheduled: 1, task.Delivering: 1, task.Delivered: 4},
		"shop.eu-1": {task.Cancelled: 1, task.Expired: 1},
	}
	if diff := cmp.Diff(want, counts(t, s)); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}

	// A state change moves the task between counts.
	if _, err := s.Update(ctx, ts[0].ID, nil, func(tk *task.Task) error {
		tk.State, tk.FinishedAt, tk.WakeAt = task.Dead, &now, time.Time{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want["a"][task.Scheduled], want["a"][task.Dead] = 2, 3
	if diff := cmp.Diff(want, counts(t, s)); diff != "" {
		t.Errorf("after an update: Counts (-want +got):\n%s", diff)
	}

	// A sweep removes finished tasks from the counts; an app left without
	// tasks is left out.
	if _, err := s.Sweep(ctx, now.Add(time.Millisecond), 1000); err != nil {
		t.Fatal(err)
	}
	want = map[string]map[task.State]int64{
		"a":  {task.Scheduled: 2},
		"ab": {task.Scheduled: 1, task.Delivering: 1},
	}
	if diff := cmp.Diff(want, counts(t, s)); diff != "" {
		t.Errorf("after a sweep: Counts (-want +got):\n%s", diff)
	}

	// The counts come from the index on disk.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Counts(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Counts after Close: error = %v, want ErrClosed", err)
	}
	s = open(t, dir)
	if diff := cmp.Diff(want, counts(t, s)); diff != "" {
		t.Errorf("after a reopen: Counts (-want +got):\n%s", diff)
	}
}

// TestCountsMany counts past the point where Counts checks its context,
// and stops when the context is done.
func TestCountsMany(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer func() { _ = s.Close() }()
	now := task.Ms(time.Now())
	var gen task.IDGenerator
	const n = 10_000
	for i := 0; i < n; i += 1000 {
		ts := make([]*task.Task, 0, 1000)
		for range 1000 {
			ts = append(ts, countsTask(&gen, now, "bulk", "", task.Scheduled))
		}
		if _, err := s.Create(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[task.State]int64{"bulk": {task.Scheduled: n}}
	if diff := cmp.Diff(want, counts(t, s)); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Counts(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Counts with a cancelled context: error = %v, want context.Canceled", err)
	}
}
