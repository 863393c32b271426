package storetest

import (
	"cmp"
	"reflect"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// This file holds the model: what each read must return, computed from the
// tasks that should be stored.

func compareIDs(a, b task.ID) int { return slices.Compare(a[:], b[:]) }

// diff is gocmp.Diff(want, got, cmpOpts) with a fast path: check compares a
// lot, and go-cmp is slow.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return gocmp.Diff(want, got, cmpOpts)
}

// wantWakeups is the wake-time order of tasks: those with a WakeAt, by
// (WakeAt ms, ID).
func wantWakeups(tasks []*task.Task) []store.Wakeup {
	var out []store.Wakeup
	for _, t := range tasks {
		if t.WakeAt.IsZero() {
			continue
		}
		out = append(out, store.Wakeup{ID: t.ID, At: t.WakeAt, State: t.State, Kind: t.Target.Kind(), App: t.App, Key: t.Key})
	}
	slices.SortFunc(out, func(a, b store.Wakeup) int {
		return cmp.Or(cmp.Compare(a.At.UnixMilli(), b.At.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	return out
}

// wantClaimable is what Claimable(app, now, ∞) returns.
func wantClaimable(tasks []*task.Task, app string, now time.Time) []task.ID {
	var c []*task.Task
	for _, t := range tasks {
		if t.App == app && t.State == task.Scheduled && t.Target.Kind() == "pull" &&
			t.NextAttemptAt.UnixMilli() <= now.UnixMilli() {
			c = append(c, t)
		}
	}
	slices.SortFunc(c, func(a, b *task.Task) int {
		return cmp.Or(cmp.Compare(a.NextAttemptAt.UnixMilli(), b.NextAttemptAt.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	return ids(c)
}

// wantList is what List(app, state, zero, ∞) returns.
func wantList(tasks []*task.Task, app string, state task.State) []*task.Task {
	var out []*task.Task
	for _, t := range tasks {
		if t.App == app && t.State == state {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *task.Task) int { return compareIDs(a.ID, b.ID) })
	return out
}

// check compares everything the store can be asked with what the model
// says, given that want is exactly the set of stored tasks: each task by id
// and by key, the whole wake-time order, Claimable of every app at now and
// in the far future, and List of every app and state. Wake-time and list
// orders are read in small pages, to exercise the cursors.
func check(t *testing.T, b *bundle, want []*task.Task) {
	t.Helper()
	apps := map[string]bool{"no-such-app": true}
	for _, w := range want {
		apps[w.App] = true
		got, err := b.s.Get(b.ctx, w.ID)
		if err != nil {
			t.Errorf("Get(%s): %v", w.ID, err)
			continue
		}
		if d := diff(w, got); d != "" {
			t.Errorf("Get(%s) (-want +got):\n%s", w.ID, d)
		}
		if w.Key == "" {
			continue
		}
		got, err = b.s.GetByKey(b.ctx, w.App, w.Key)
		if err != nil {
			t.Errorf("GetByKey(%q, %q): %v", w.App, w.Key, err)
			continue
		}
		if d := diff(w, got); d != "" {
			t.Errorf("GetByKey(%q, %q) (-want +got):\n%s", w.App, w.Key, d)
		}
	}

	// Small pages exercise the cursors; with many tasks, not too small.
	pageSize := max(3, len(want)/20)

	var wakeups []store.Wakeup
	var cur store.Cursor
	for {
		page, err := b.s.Wakeups(b.ctx, cur, farFuture, pageSize)
		if err != nil {
			t.Fatalf("Wakeups: %v", err)
		}
		if len(page) > pageSize {
			t.Fatalf("Wakeups(limit %d) returned %d", pageSize, len(page))
		}
		wakeups = append(wakeups, page...)
		if len(page) < pageSize {
			break
		}
		last := page[len(page)-1]
		cur = store.Cursor{At: last.At, ID: last.ID}
	}
	if d := diff(wantWakeups(want), wakeups); d != "" {
		t.Errorf("Wakeups, paged by %d (-want +got):\n%s", pageSize, d)
	}

	for app := range apps {
		for _, now := range []time.Time{b.now, farFuture} {
			got, err := b.s.Claimable(b.ctx, app, now, 1<<20)
			if err != nil {
				t.Fatalf("Claimable: %v", err)
			}
			if d := diff(wantClaimable(want, app, now), got); d != "" {
				t.Errorf("Claimable(%q, %s) (-want +got):\n%s", app, now, d)
			}
		}
		for _, state := range task.States {
			var got []*task.Task
			var after task.ID
			for {
				page, err := b.s.List(b.ctx, app, state, after, pageSize)
				if err != nil {
					t.Fatalf("List: %v", err)
				}
				if len(page) > pageSize {
					t.Fatalf("List(limit %d) returned %d", pageSize, len(page))
				}
				got = append(got, page...)
				if len(page) < pageSize {
					break
				}
				after = page[len(page)-1].ID
			}
			if d := diff(wantList(want, app, state), got); d != "" {
				t.Errorf("List(%q, %s), paged by %d (-want +got):\n%s", app, state, pageSize, d)
			}
		}
	}
}
