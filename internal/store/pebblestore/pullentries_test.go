package pebblestore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/task"
)

// TestWokenPullEntriesDropped: a pull task woken at its next attempt has
// no p entry; Open deletes those an earlier layout wrote (and gives an
// app-less w entry of such a task its app), keeps those of the tasks
// waiting unwoken, and Claimable finds each claimable task once, from
// either order.
func TestWokenPullEntriesDropped(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	woken := func(app string, due time.Time) *task.Task {
		x := pullTask(&g, app, due)
		x.WakeAt = due
		return x
	}
	a := woken("a", now.Add(-2*time.Second))
	b := woken("b", now.Add(-time.Second))
	c := pullTask(&g, "a", now.Add(-time.Second)) // waiting unwoken: no wake
	d := woken("a", now.Add(-3*time.Second))      // woken: no p entry ever written
	if _, err := s.Create(ctx, []*task.Task{a, b, c, d}); err != nil {
		t.Fatal(err)
	}
	has := func(k []byte) bool {
		t.Helper()
		_, closer, err := s.db.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return closer.Close() == nil
	}
	if has(pullKey("a", d.NextAttemptAt.UnixMilli(), d.ID)) {
		t.Errorf("a woken pull task was created with a p entry")
	}
	// What the earlier layout wrote: p entries for every scheduled pull
	// task, w entries without their app.
	sb, _ := stateByte(task.Scheduled)
	kb, _ := kindByte("pull")
	for _, x := range []*task.Task{a, b} {
		if err := s.db.Set(pullKey(x.App, x.NextAttemptAt.UnixMilli(), x.ID), nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Set(wakeKey(b.WakeAt.UnixMilli(), b.ID), []byte{sb, kb}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, x := range []*task.Task{a, b} {
		if has(pullKey(x.App, x.NextAttemptAt.UnixMilli(), x.ID)) {
			t.Errorf("task %s of %s: the p entry of a woken task is still there after Open", x.ID, x.App)
		}
	}
	if !has(pullKey("a", c.NextAttemptAt.UnixMilli(), c.ID)) {
		t.Errorf("the p entry of a task waiting unwoken is gone")
	}
	v, closer, err := s.db.Get(wakeKey(b.WakeAt.UnixMilli(), b.ID))
	if err != nil {
		t.Fatal(err)
	}
	if string(v[2:]) != "b" {
		t.Errorf("b's w entry = %x, want its app after the state and kind", v)
	}
	closer.Close()

	for _, tc := range []struct {
		app  string
		want []task.ID
	}{
		{"a", []task.ID{d.ID, a.ID, c.ID}},
		{"b", []task.ID{b.ID}},
	} {
		got, err := s.Claimable(ctx, tc.app, now, 100)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Claimable(%q) = %v, want %v", tc.app, got, tc.want)
		}
		if got, err := s.Claimable(ctx, tc.app, now, 1); err != nil || !slices.Equal(got, tc.want[:1]) {
			t.Errorf("Claimable(%q, limit 1) = %v, %v; want %v", tc.app, got, err, tc.want[:1])
		}
	}
	if got, err := s.ClaimableWaiting(ctx, "a", now, 100); err != nil || !slices.Equal(got, []task.ID{c.ID}) {
		t.Errorf("ClaimableWaiting(a) = %v, %v; want %v", got, err, []task.ID{c.ID})
	}
}
