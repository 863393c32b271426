package pebblestore

import (
	"errors"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// TestRecentSet: a full set gives way to a task needed sooner, keeps what
// is needed soonest, and forgets finished and far-future tasks.
func TestRecentSet(t *testing.T) {
	now := time.Now()
	var g task.IDGenerator
	mk := func(wake time.Duration, st task.State) *task.Task {
		return &task.Task{ID: g.New(now, 0), State: st, WakeAt: now.Add(wake), UpdatedAt: now}
	}
	var r recentSet
	var first []*task.Task
	for i := range recentPerStripe {
		x := mk(time.Duration(i+1)*100*time.Millisecond, task.Scheduled)
		first = append(first, x)
		r.keep(x.ID, x, now)
	}
	soon := mk(50*time.Millisecond, task.Scheduled)
	r.keep(soon.ID, soon, now)
	if _, ok := r.get(soon.ID); !ok {
		t.Error("a task needed sooner than all kept was not kept")
	}
	if _, ok := r.get(first[len(first)-1].ID); ok {
		t.Error("the task needed last was not the one evicted")
	}
	late := mk(20*time.Second, task.Scheduled)
	r.keep(late.ID, late, now)
	if _, ok := r.get(late.ID); ok {
		t.Error("a task needed after all kept evicted one needed sooner")
	}
	// A delivering task is needed now (its outcome), before any waiting one.
	leased := mk(15*time.Second, task.Delivering)
	r.keep(leased.ID, leased, now)
	if _, ok := r.get(leased.ID); !ok {
		t.Error("a task under delivery was not kept")
	}
	// A new version replaces the old; finished or far-future ones are forgotten.
	v2 := *first[0]
	v2.Attempts = 7
	r.keep(v2.ID, &v2, now)
	if got, _ := r.get(v2.ID); got == nil || got.Attempts != 7 {
		t.Errorf("after keeping a new version: %+v", got)
	}
	done := v2
	done.State = task.Delivered
	r.keep(done.ID, &done, now)
	if _, ok := r.get(done.ID); ok {
		t.Error("a delivered task is still kept")
	}
	far := *first[1]
	far.WakeAt = now.Add(time.Hour)
	r.keep(far.ID, &far, now)
	if _, ok := r.get(far.ID); ok {
		t.Error("a task rescheduled an hour out is still kept")
	}
	if len(r.tasks) > recentPerStripe {
		t.Errorf("%d kept, more than %d", len(r.tasks), recentPerStripe)
	}
	checkRecentSet(t, &r)
}

// checkRecentSet checks that the set's ids and times are its tasks'.
func checkRecentSet(t *testing.T, r *recentSet) {
	t.Helper()
	if len(r.ids) != len(r.tasks) || len(r.need) != len(r.tasks) {
		t.Fatalf("%d ids, %d times, %d tasks", len(r.ids), len(r.need), len(r.tasks))
	}
	for i, x := range r.tasks {
		if r.ids[i] != x.ID || r.need[i] != instantOf(needed(x)) {
			t.Fatalf("entry %d: id %s, needed %v; its task %s, needed %v", i, r.ids[i], r.need[i], x.ID, needed(x))
		}
	}
}

// BenchmarkRecentKeep: a create keeps its new task in a full set (the
// bench's creates, due within the horizon).
func BenchmarkRecentKeep(b *testing.B) {
	now := time.Now()
	var g task.IDGenerator
	var r recentSet
	for i := range recentPerStripe {
		x := &task.Task{ID: g.New(now, 0), State: task.Scheduled, WakeAt: now.Add(time.Duration(i) * time.Millisecond)}
		r.keep(x.ID, x, now)
	}
	ts := make([]*task.Task, 1024)
	for i := range ts {
		ts[i] = &task.Task{ID: g.New(now, 0), State: task.Scheduled, WakeAt: now.Add(time.Duration(i%128) * time.Millisecond)}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		x := ts[i%len(ts)]
		r.keep(x.ID, x, now)
		i++
	}
}

// TestRecentHandsOutCopies: what Create and Update return, even the task as
// read when fn fails, is the caller's own: changing it changes neither the
// database nor the kept task the next Update reads.
func TestRecentHandsOutCopies(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	tk := &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, DueAt: now, NextAttemptAt: now,
		WakeAt: now.Add(time.Second), CreatedAt: now, UpdatedAt: now, Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://x"}}}
	res, err := s.Create(ctx, []*task.Task{tk})
	if err != nil {
		t.Fatal(err)
	}
	if _, kept := s.recent[s.idStripe(tk.ID)].get(tk.ID); !kept {
		t.Fatal("a task waking in a second was not kept")
	}
	res[0].Task.Attempts = 50
	refused := errors.New("no")
	got, err := s.Update(ctx, tk.ID, nil, func(*task.Task) error { return refused })
	if !errors.Is(err, refused) || got == nil || got.Attempts != 0 {
		t.Fatalf("Update with a failing fn: %+v, %v; want the task as stored (0 attempts) and the error", got, err)
	}
	got.Attempts = 60
	got, err = s.Update(ctx, tk.ID, nil, func(x *task.Task) error { x.Attempts++; return nil })
	if err != nil || got.Attempts != 1 {
		t.Fatalf("Update after changing handed-out tasks: %+v, %v; want 1 attempt", got, err)
	}
	got.Attempts = 70
	stored, err := s.Get(ctx, tk.ID)
	if err != nil || stored.Attempts != 1 {
		t.Fatalf("Get: %+v, %v; want 1 attempt", stored, err)
	}
	if kept, _ := s.recent[s.idStripe(tk.ID)].get(tk.ID); kept.Attempts != 1 {
		t.Errorf("the kept task has %d attempts, want 1", kept.Attempts)
	}
}

// TestCreateHandsBackItsTasks: Create answers with the tasks it was handed
// (store.Store's Create: the caller hands them over), copying a task only
// for the recent set, and only one it keeps. Before, it made two copies of
// every task it created.
func TestCreateHandsBackItsTasks(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	mk := func(wake time.Duration) *task.Task {
		return &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, DueAt: now, NextAttemptAt: now,
			WakeAt: now.Add(wake), CreatedAt: now, UpdatedAt: now, Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://x"}}}
	}
	soon, late := mk(time.Second), mk(time.Hour)
	res, err := s.Create(t.Context(), []*task.Task{soon, late})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Task != soon || res[1].Task != late {
		t.Fatal("Create answered with copies of the tasks it was handed")
	}
	kept, ok := s.recent[s.idStripe(soon.ID)].get(soon.ID)
	if !ok || kept == soon {
		t.Fatalf("the task waking in a second: kept %v, the caller's own %v; want a copy kept", ok, kept == soon)
	}
	if _, ok := s.recent[s.idStripe(late.ID)].get(late.ID); ok {
		t.Error("the task waking in an hour was kept")
	}
}
