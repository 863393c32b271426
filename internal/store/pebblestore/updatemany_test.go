package pebblestore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// openWithSoon opens a store with opts, closed when t ends, and creates n
// tasks in it that wake within a second, which the recent sets keep.
func openWithSoon(t *testing.T, opts Options, n int) (*Store, []*task.Task) {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	ts := make([]*task.Task, n)
	for i := range ts {
		ts[i] = &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, DueAt: now, NextAttemptAt: now,
			WakeAt: now.Add(time.Second), CreatedAt: now, UpdatedAt: now, Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://x"}}}
	}
	if _, err := s.Create(t.Context(), ts); err != nil {
		t.Fatal(err)
	}
	return s, ts
}

// TestUpdateManyNoSync counts the syncs of the write-ahead log: an
// UpdateMany with NoSync makes none, one without makes one.
func TestUpdateManyNoSync(t *testing.T) {
	var syncs atomic.Int64
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				syncs.Add(1)
			}
		}
		return nil
	}))
	s, ts := openWithSoon(t, Options{Dir: "db", FS: fs}, 4)
	ctx := t.Context()
	ids := []task.ID{ts[2].ID, ts[0].ID, ts[3].ID}
	inc := func(xs []*task.Task) []error {
		for _, x := range xs {
			x.Attempts++
		}
		return make([]error, len(xs))
	}
	for _, tt := range []struct {
		opts      *store.UpdateOpts
		wantSyncs int64
	}{
		{&store.UpdateOpts{NoSync: true}, 0},
		{nil, 1},
		{&store.UpdateOpts{}, 1},
	} {
		before := syncs.Load()
		if _, errs := s.UpdateMany(ctx, ids, tt.opts, inc); errors.Join(errs...) != nil {
			t.Fatal(errs)
		}
		if got := syncs.Load() - before; got != tt.wantSyncs {
			t.Errorf("UpdateMany(%+v) synced the log %d times, want %d", tt.opts, got, tt.wantSyncs)
		}
	}
}

// TestUpdateManyRecent: UpdateMany reads the tasks the recent sets keep,
// keeps what it writes there as Update does, and hands out copies of them.
func TestUpdateManyRecent(t *testing.T) {
	s, ts := openWithSoon(t, Options{Dir: t.TempDir(), NoSync: true}, 3)
	ctx := t.Context()
	kept := func(id task.ID) *task.Task {
		x, _ := s.recent[s.idStripe(id)].get(id)
		return x
	}
	refused := errors.New("no")
	ids := []task.ID{ts[0].ID, ts[1].ID, ts[2].ID}
	var given []*task.Task
	got, errs := s.UpdateMany(ctx, ids, nil, func(xs []*task.Task) []error {
		given = xs
		xs[0].Attempts = 1
		xs[1].Attempts = 1
		xs[2].State = task.Delivered // finished: to be forgotten
		return []error{nil, refused, nil}
	})
	if errs[0] != nil || errs[1] != refused || errs[2] != nil {
		t.Fatalf("UpdateMany errors = %v", errs)
	}
	if k := kept(ts[0].ID); k == nil || k.Attempts != 1 {
		t.Errorf("the kept version of the written task is %+v, want 1 attempt", k)
	}
	if k := kept(ts[1].ID); k == nil || k.Attempts != 0 {
		t.Errorf("the kept version of the refused task is %+v, want 0 attempts", k)
	}
	if k := kept(ts[2].ID); k != nil {
		t.Errorf("a delivered task is still kept: %+v", k)
	}

	// Scribbling on what was handed out changes nothing kept or stored.
	for _, x := range append(given, got...) {
		x.Attempts = 50
	}
	got, errs = s.UpdateMany(ctx, ids[:2], nil, func(xs []*task.Task) []error {
		for _, x := range xs {
			x.Attempts++
		}
		return make([]error, len(xs))
	})
	if errors.Join(errs...) != nil || got[0].Attempts != 2 || got[1].Attempts != 1 {
		t.Fatalf("UpdateMany after scribbling: %v; attempts %d and %d, want 2 and 1", errs, got[0].Attempts, got[1].Attempts)
	}
	for i, want := range []int{2, 1} {
		if stored, err := s.Get(ctx, ids[i]); err != nil || stored.Attempts != want {
			t.Errorf("Get(task %d) = %+v, %v; want %d attempts", i, stored, err, want)
		}
		if k := kept(ids[i]); k == nil || k.Attempts != want {
			t.Errorf("kept task %d: %+v, want %d attempts", i, k, want)
		}
	}
}

// TestUpdateKnown: a write over the version stored, as the caller knows
// it, lands without a read and moves the task's wake entry; one over a
// version the recent set knows is out of date is a conflict and writes
// nothing.
func TestUpdateKnown(t *testing.T) {
	s, ts := openWithSoon(t, Options{Dir: t.TempDir()}, 2)
	ctx := t.Context()
	old, err := s.Get(ctx, ts[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	later := old.WakeAt.Add(2 * time.Second) // within the recent sets' horizon
	write := func(olds []*task.Task) ([]*task.Task, []error) {
		return s.UpdateKnown(ctx, olds, nil, func(xs []*task.Task) []error {
			for i, x := range xs {
				if x == nil {
					continue // refused: not the version stored
				}
				c := x.Clone()
				c.Attempts++
				c.WakeAt, c.NextAttemptAt = later, later
				c.UpdatedAt = c.UpdatedAt.Add(time.Millisecond)
				xs[i] = c
			}
			return make([]error, len(xs))
		})
	}
	res, errs := write([]*task.Task{old})
	if errs[0] != nil || res[0].Attempts != 1 {
		t.Fatalf("UpdateKnown: %v, %+v", errs[0], res[0])
	}
	got, err := s.Get(ctx, old.ID)
	if err != nil || got.Attempts != 1 || !got.WakeAt.Equal(later) {
		t.Fatalf("stored %+v, %v; want 1 attempt, waking at %v", got, err, later)
	}
	ws, err := s.Wakeups(ctx, store.Cursor{}, later.Add(time.Second), 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range ws {
		if w.ID == old.ID {
			n++
			if !w.At.Equal(later) {
				t.Errorf("wake entry at %v; want %v", w.At, later)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d wake entries of the task; want 1", n)
	}
	// old is out of date now, and the recent set knows it.
	_, errs = write([]*task.Task{old})
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("UpdateKnown over an old version: %v; want a conflict", errs[0])
	}
	if got, _ := s.Get(ctx, old.ID); got.Attempts != 1 {
		t.Errorf("stored %d attempts after the refused write; want 1", got.Attempts)
	}
}
