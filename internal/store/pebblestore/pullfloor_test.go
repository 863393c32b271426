package pebblestore

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/task"
)

func pullTask(g *task.IDGenerator, app string, due time.Time) *task.Task {
	return &task.Task{ID: g.New(due, 0), App: app, State: task.Scheduled, DueAt: due, NextAttemptAt: due,
		CreatedAt: due, UpdatedAt: due, Target: task.Target{Pull: &task.PullTarget{}}}
}

// take marks ids claimed, as the engine's claim does: delivering, out of
// the claimable range.
func take(t *testing.T, s *Store, ids []task.ID) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	_, errs := s.UpdateMany(t.Context(), ids, nil, func(ts []*task.Task) []error {
		for _, x := range ts {
			exp := now.Add(time.Minute)
			x.State, x.Lease, x.LeaseExpiresAt, x.Attempts = task.Delivering, "lease", &exp, x.Attempts+1
		}
		return make([]error, len(ts))
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("take %s: %v", ids[i], err)
		}
	}
}

// TestPullFloor: claims start where the last one found its first entry,
// and an entry written below that (a new task due earlier, a claim rolled
// back) is still found first.
func TestPullFloor(t *testing.T) {
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var g task.IDGenerator
	var ts []*task.Task
	for i := range 50 {
		ts = append(ts, pullTask(&g, "a", now.Add(time.Duration(i-50)*time.Second)))
	}
	if _, err := s.Create(ctx, append(ts, pullTask(&g, "b", now.Add(-time.Hour)))); err != nil {
		t.Fatal(err)
	}
	claim := func(app string, n int) []task.ID {
		t.Helper()
		ids, err := s.Claimable(ctx, app, now, n)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for round := range 3 {
		ids := claim("a", 10)
		for i, id := range ids {
			if want := ts[round*10+i].ID; id != want {
				t.Fatalf("round %d: claimable %d is %s, want %s", round, i, id, want)
			}
		}
		take(t, s, ids)
	}
	if f := s.pull.m["a"]; f == nil || f.key == nil {
		t.Fatal("the floor did not rise")
	}

	// Below the floor: a new task due before all, and a claim rolled back
	// to before that.
	early := pullTask(&g, "a", now.Add(-time.Hour))
	if _, err := s.Create(ctx, []*task.Task{early}); err != nil {
		t.Fatal(err)
	}
	if ids := claim("a", 1); len(ids) != 1 || ids[0] != early.ID {
		t.Fatalf("after a task due earlier was created: %v, want %s", ids, early.ID)
	}
	back := ts[5].ID
	if _, err := s.Update(ctx, back, nil, func(x *task.Task) error {
		x.State, x.Lease, x.LeaseExpiresAt = task.Scheduled, "", nil
		x.NextAttemptAt = now.Add(-2 * time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ids := claim("a", 2); len(ids) != 2 || ids[0] != back || ids[1] != early.ID {
		t.Fatalf("after a claim rolled back below the floor: %v, want %s then %s", ids, back, early.ID)
	}
	if ids := claim("b", 5); len(ids) != 1 {
		t.Fatalf("app b: %v, want its one task", ids)
	}
	// Nothing due: the floor rises to the scan's end, and a task due next
	// is still found once due.
	take(t, s, claim("a", 100))
	if ids := claim("a", 100); len(ids) != 0 {
		t.Fatalf("all taken, yet claimable: %v", ids)
	}
	next := pullTask(&g, "a", now)
	if _, err := s.Create(ctx, []*task.Task{next}); err != nil {
		t.Fatal(err)
	}
	if ids := claim("a", 100); len(ids) != 1 || ids[0] != next.ID {
		t.Fatalf("a task due now: %v, want %s", ids, next.ID)
	}
}

// TestPullFloorRace: claimers and creators of tasks due at random past
// times race; every task is claimed, once.
func TestPullFloorRace(t *testing.T) {
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const creators, perCreator = 4, 300
	now := time.Now().UTC().Truncate(time.Millisecond)
	var created atomic.Int64
	var mu sync.Mutex
	claimed := map[task.ID]int{}
	var wg sync.WaitGroup
	for c := range creators {
		wg.Go(func() {
			var g task.IDGenerator
			r := rand.New(rand.NewPCG(uint64(c), 1))
			for range perCreator {
				due := now.Add(-time.Duration(r.IntN(60_000)) * time.Millisecond)
				if _, err := s.Create(ctx, []*task.Task{pullTask(&g, "a", due)}); err != nil {
					t.Error(err)
					return
				}
				created.Add(1)
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for range 2 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(claimed) == creators*perCreator
				mu.Unlock()
				if done {
					return
				}
				ids, err := s.Claimable(ctx, "a", now, 7)
				if err != nil {
					t.Error(err)
					return
				}
				// Claim as the engine does: only what is still claimable
				// when locked (the other claimer may have it).
				var got []task.ID
				_, errs := s.UpdateMany(ctx, ids, nil, func(ts []*task.Task) []error {
					errs := make([]error, len(ts))
					got = got[:0]
					for i, x := range ts {
						if x.State != task.Scheduled {
							errs[i] = errSkipTest
							continue
						}
						exp := now.Add(time.Minute)
						x.State, x.Lease, x.LeaseExpiresAt = task.Delivering, "l", &exp
						got = append(got, x.ID)
					}
					return errs
				})
				_ = errs
				mu.Lock()
				for _, id := range got {
					claimed[id]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := int(created.Load()); len(claimed) != n {
		t.Fatalf("%d tasks created, %d claimed", n, len(claimed))
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
}

var errSkipTest = errorString("claimed meanwhile")

type errorString string

func (e errorString) Error() string { return string(e) }
