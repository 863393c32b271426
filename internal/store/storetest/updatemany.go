package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// updateMany runs UpdateMany of olds with opts and fn = change for every
// task, checks what it returns, and returns the tasks as they should now be
// stored.
func (b *bundle) updateMany(t *testing.T, opts *store.UpdateOpts, olds []*task.Task, change func(*task.Task)) []*task.Task {
	t.Helper()
	got, errs := b.s.UpdateMany(b.ctx, ids(olds), opts, func(ts []*task.Task) []error {
		for _, x := range ts {
			if x != nil { // nil only with an error: reported below
				change(x)
			}
		}
		return make([]error, len(ts))
	})
	if len(got) != len(olds) || len(errs) != len(olds) {
		t.Fatalf("UpdateMany of %d tasks returned %d tasks and %d errors", len(olds), len(got), len(errs))
	}
	want := make([]*task.Task, len(olds))
	for i, old := range olds {
		if errs[i] != nil {
			t.Fatalf("UpdateMany: task %d (%s): %v", i, old.ID, errs[i])
		}
		want[i] = apply(old, change)
		if d := diff(want[i], got[i]); d != "" {
			t.Fatalf("UpdateMany returned for task %d (%s) (-want +got):\n%s", i, old.ID, d)
		}
	}
	return want
}

// testUpdateManyMixed updates, in one call, tasks of two apps with and
// without keys (so in several shards of a sharded store), given out of id
// order, with a missing id and a task fn refuses among them, each changed
// in another index. fn must be called once, with a copy of each task in the
// order of ids; the results and every index must show the changes fn
// accepted and nothing else.
func testUpdateManyMixed(t *testing.T, b *bundle) {
	var ts []*task.Task
	for i := range 8 {
		opts := []func(*task.Task){withKey(fmt.Sprintf("k%d", i))}
		if i%2 == 0 {
			opts = append(opts, withPull)
		}
		ts = append(ts, b.newTask([]string{"app", "other"}[i%2], time.Duration(i+1)*time.Second, opts...))
	}
	keyless := b.newTask("app", time.Minute)
	untouched := b.newTask("app", time.Minute, withKey("untouched"))
	b.create(t, append(slices.Clone(ts), keyless, untouched)...)

	sentinel := errors.New("engine says no")
	lease := b.now.Add(30 * time.Second)
	batch := []struct {
		old    *task.Task // nil: an id not stored
		change func(*task.Task)
		err    error // fn's
	}{
		{ts[5], delivering(lease), nil},
		{nil, nil, nil},
		{ts[0], withNext(b.now.Add(-time.Second)), nil}, // becomes claimable
		{keyless, finished(task.Cancelled, b.now), nil},
		{ts[3], func(t *task.Task) {
			delivering(b.now.Add(time.Hour))(t)
			finished(task.Dead, b.now)(t)
			withPull(t)
			t.NextAttemptAt = b.now.Add(-time.Hour)
		}, sentinel},
		{ts[1], withWake(time.Time{}), nil},
		{ts[6], delivering(lease), nil}, // leaves the claimable order
		{ts[2], withHTTP, nil},
		{ts[7], finished(task.Delivered, b.now), nil},
		{ts[4], func(t *task.Task) { t.LastError, t.Payload = "x", nil }, nil},
	}
	missing := b.gen.New(b.now, 0)
	batchIDs := make([]task.ID, len(batch))
	for i, e := range batch {
		batchIDs[i] = missing
		if e.old != nil {
			batchIDs[i] = e.old.ID
		}
	}

	calls := 0
	var given []*task.Task // what fn was given, kept past the call
	got, errs := b.s.UpdateMany(b.ctx, batchIDs, nil, func(xs []*task.Task) []error {
		calls++
		given = xs
		out := make([]error, len(xs))
		if len(xs) != len(batch) {
			t.Errorf("fn got %d tasks for %d ids", len(xs), len(batch))
			return out
		}
		for i, e := range batch {
			switch {
			case e.old == nil && xs[i] != nil:
				t.Errorf("fn got %v for an id not stored", xs[i])
			case e.old == nil:
			case xs[i] == nil:
				t.Errorf("fn got nil for task %d (%s)", i, e.old.ID)
			default:
				if d := diff(e.old, xs[i]); d != "" {
					t.Errorf("fn got for task %d (-want +got):\n%s", i, d)
				}
				e.change(xs[i])
				out[i] = e.err
			}
		}
		return out
	})
	if calls != 1 {
		t.Fatalf("UpdateMany called fn %d times, want once", calls)
	}
	if len(got) != len(batch) || len(errs) != len(batch) {
		t.Fatalf("UpdateMany of %d ids returned %d tasks and %d errors", len(batch), len(got), len(errs))
	}

	stored := map[task.ID]*task.Task{keyless.ID: keyless, untouched.ID: untouched}
	for _, x := range ts {
		stored[x.ID] = x
	}
	for i, e := range batch {
		switch {
		case e.old == nil:
			if !errors.Is(errs[i], store.ErrNotFound) || got[i] != nil {
				t.Errorf("UpdateMany: id not stored: %v, %v; want nil, ErrNotFound", got[i], errs[i])
			}
		case e.err != nil:
			if errs[i] != e.err { // the contract says unchanged: not wrapped
				t.Errorf("UpdateMany: error of the refused task = %v, want fn's, unchanged", errs[i])
			}
			if d := diff(e.old, got[i]); d != "" {
				t.Errorf("UpdateMany returned for the refused task (-want as read +got):\n%s", d)
			}
		case errs[i] != nil:
			t.Errorf("UpdateMany: task %d (%s): %v", i, e.old.ID, errs[i])
		default:
			want := apply(e.old, e.change)
			if d := diff(want, got[i]); d != "" {
				t.Errorf("UpdateMany returned for task %d (-want +got):\n%s", i, d)
			}
			stored[want.ID] = want
		}
	}
	all := make([]*task.Task, 0, len(stored))
	for _, x := range stored {
		all = append(all, x)
	}
	check(t, b, all)

	// What fn was given and what UpdateMany returned are the caller's own.
	for _, x := range slices.Concat(given, got) {
		if x != nil {
			x.Attempts, x.LastError = 99, "scribbled"
		}
	}
	check(t, b, all)
}

// testUpdateManyChecks: a change Update refuses (of identity, to an unknown
// state) is refused in UpdateMany for its task only, which comes back as
// read.
func testUpdateManyChecks(t *testing.T, b *bundle) {
	ok := b.newTask("app", time.Minute, withKey("ok"))
	moved := b.newTask("app", time.Minute, withKey("moved"))
	rekeyed := b.newTask("app", time.Minute, withKey("rekeyed"))
	bogus := b.newTask("app", time.Minute)
	olds := []*task.Task{ok, moved, rekeyed, bogus}
	b.create(t, olds...)
	got, errs := b.s.UpdateMany(b.ctx, ids(olds), nil, func(ts []*task.Task) []error {
		ts[0].Attempts++
		ts[1].App = "elsewhere"
		ts[2].Key = "another"
		ts[3].State = "bogus"
		return make([]error, len(ts))
	})
	if len(got) != len(olds) || len(errs) != len(olds) {
		t.Fatalf("UpdateMany of %d tasks returned %d tasks and %d errors", len(olds), len(got), len(errs))
	}
	ok = apply(ok, func(t *task.Task) { t.Attempts++ })
	if errs[0] != nil {
		t.Errorf("UpdateMany: the valid change: %v", errs[0])
	}
	if d := diff(ok, got[0]); d != "" {
		t.Errorf("UpdateMany returned for the valid change (-want +got):\n%s", d)
	}
	for i, old := range olds[1:] {
		if errs[i+1] == nil {
			t.Errorf("UpdateMany accepted invalid change %d", i+1)
		}
		if d := diff(old, got[i+1]); d != "" {
			t.Errorf("UpdateMany returned for invalid change %d (-want as read +got):\n%s", i+1, d)
		}
	}
	check(t, b, []*task.Task{ok, moved, rekeyed, bogus})
}

// createKeyed creates n tasks of app "app", keyed k0 to k<n-1>, due in a
// minute.
func createKeyed(t *testing.T, b *bundle, n int) []*task.Task {
	t.Helper()
	ts := make([]*task.Task, n)
	for i := range ts {
		ts[i] = b.newTask("app", time.Minute, withKey(fmt.Sprintf("k%d", i)))
	}
	b.create(t, ts...)
	return ts
}

// testUpdateManyConcurrent runs UpdateManys of overlapping batches, each in
// an order of its own, and Updates of their tasks from many goroutines, all
// incrementing Attempts, half of them with NoSync: no increment may be lost,
// each must see the one before, and nothing may deadlock.
func testUpdateManyConcurrent(t *testing.T, b *bundle) {
	const tasks, goroutines, rounds = 12, 8, 24
	ts := createKeyed(t, b, tasks)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[task.ID][]int{} // Attempts as returned, by task
	)
	saw := func(x *task.Task) {
		mu.Lock()
		seen[x.ID] = append(seen[x.ID], x.Attempts)
		mu.Unlock()
	}
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 20300601))
			for n := range rounds {
				opts := &store.UpdateOpts{NoSync: n%2 == 0}
				if n%4 == 3 {
					got, err := b.s.Update(b.ctx, ts[r.IntN(tasks)].ID, opts, func(t *task.Task) error {
						t.Attempts++
						return nil
					})
					if err != nil {
						t.Errorf("Update: %v", err)
						return
					}
					saw(got)
					continue
				}
				perm := r.Perm(tasks)[:2+r.IntN(tasks-1)]
				batch := make([]task.ID, len(perm))
				for i, k := range perm {
					batch[i] = ts[k].ID
				}
				got, errs := b.s.UpdateMany(b.ctx, batch, opts, func(xs []*task.Task) []error {
					for _, x := range xs {
						if x != nil { // nil only with an error: reported below
							x.Attempts++
						}
					}
					return make([]error, len(xs))
				})
				if err := errors.Join(errs...); err != nil {
					t.Errorf("UpdateMany: %v", err)
					return
				}
				for _, x := range got {
					saw(x)
				}
			}
		})
	}
	wg.Wait() // a deadlock hangs here, until go test's -timeout dumps the goroutines

	checkCounted(t, b, ts, seen)
}

// testUpdateManyOptimistic: UpdateManys with UpdateOpts.Optimistic racing
// each other and locked Updates over the same tasks never lose a write: a
// task changed between an optimistic read and its write comes back with
// ErrConflict and nothing written (the writer tries again), every write
// that returned nil is counted once, and each returned copy is what was
// stored.
func testUpdateManyOptimistic(t *testing.T, b *bundle) {
	const tasks, goroutines, rounds = 6, 8, 24
	ts := createKeyed(t, b, tasks)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		seen      = map[task.ID][]int{}
		conflicts int
	)
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 20261123))
			for n := range rounds {
				if n%3 == 2 {
					got, err := b.s.Update(b.ctx, ts[r.IntN(tasks)].ID, nil, func(t *task.Task) error {
						t.Attempts++
						return nil
					})
					if err != nil {
						t.Errorf("Update: %v", err)
						return
					}
					mu.Lock()
					seen[got.ID] = append(seen[got.ID], got.Attempts)
					mu.Unlock()
					continue
				}
				perm := r.Perm(tasks)[:1+r.IntN(tasks)]
				batch := make([]task.ID, len(perm))
				for i, k := range perm {
					batch[i] = ts[k].ID
				}
				for len(batch) > 0 {
					got, errs := b.s.UpdateMany(b.ctx, batch, &store.UpdateOpts{NoSync: true, Optimistic: true}, func(xs []*task.Task) []error {
						for _, x := range xs {
							if x != nil {
								x.Attempts++
							}
						}
						return make([]error, len(xs))
					})
					var again []task.ID
					for i, err := range errs {
						switch {
						case errors.Is(err, store.ErrConflict):
							again = append(again, batch[i])
							mu.Lock()
							conflicts++
							mu.Unlock()
						case err != nil:
							t.Errorf("UpdateMany: %v", err)
							return
						default:
							mu.Lock()
							seen[got[i].ID] = append(seen[got[i].ID], got[i].Attempts)
							mu.Unlock()
						}
					}
					batch = again
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d conflicts tried again", conflicts)
	checkCounted(t, b, ts, seen)
}

// checkCounted checks tasks whose writes each added one to Attempts: the
// Attempts each write returned (seen, by task) are 1, 2, … without a gap or
// a repeat, and the store holds their count.
func checkCounted(t *testing.T, b *bundle, ts []*task.Task, seen map[task.ID][]int) {
	t.Helper()
	want := make([]*task.Task, len(ts))
	for i, x := range ts {
		got := seen[x.ID]
		slices.Sort(got)
		in := make([]int, len(got))
		for k := range in {
			in[k] = k + 1
		}
		if d := cmp.Diff(in, got); d != "" {
			t.Errorf("Attempts of task %d as returned (-want +got):\n%s", i, d)
		}
		want[i] = apply(x, func(t *task.Task) { t.Attempts = len(got) })
	}
	check(t, b, want)
}
