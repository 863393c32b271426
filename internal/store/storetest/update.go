package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

func testUpdatePersists(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"))
	o := b.newTask("app", time.Minute)
	b.create(t, a, o)
	lease := b.now.Add(30 * time.Second)
	a = b.update(t, a, delivering(lease), func(t *task.Task) {
		t.LastError = "boom"
		t.Payload = []byte("not json")
		t.UpdatedAt = b.now.Add(time.Second)
	})
	check(t, b, []*task.Task{a, o})

	a = b.update(t, a, func(t *task.Task) {
		t.State = task.Scheduled
		t.Lease, t.LeaseExpiresAt = "", nil
		t.NextAttemptAt = b.now.Add(2 * time.Minute)
		t.WakeAt = t.NextAttemptAt
		t.Deadline = nil
		t.Payload = nil
		t.Retry.MaxAttempts = 3
	})
	check(t, b, []*task.Task{a, o})
}

func testUpdateFnError(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"), withPull)
	b.create(t, a)
	sentinel := errors.New("engine says no")
	var called bool
	got, err := b.s.Update(b.ctx, a.ID, nil, func(t *task.Task) error {
		called = true
		// Change everything an index depends on, then refuse.
		delivering(b.now.Add(time.Hour))(t)
		finished(task.Dead, b.now)(t)
		withHTTP(t)
		t.NextAttemptAt = b.now.Add(-time.Hour)
		return sentinel
	})
	if !called {
		t.Fatal("Update did not call fn")
	}
	if err != sentinel { // the contract says unchanged: not wrapped
		t.Errorf("Update error = %v, want the error fn returned, unchanged", err)
	}
	if got != nil {
		if diff := cmp.Diff(a, got, cmpOpts); diff != "" {
			t.Errorf("Update returned, with fn's error (-want the task as read +got):\n%s", diff)
		}
	}
	check(t, b, []*task.Task{a})
}

func testUpdateNotFound(t *testing.T, b *bundle) {
	b.create(t, b.newTask("app", time.Minute))
	_, err := b.s.Update(b.ctx, b.gen.New(b.now, 0), nil, func(*task.Task) error {
		t.Error("fn called for a missing task")
		return nil
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update(missing) error = %v, want ErrNotFound", err)
	}
}

// testUpdateConcurrent increments Attempts from many goroutines: no
// increment may be lost, and each Update must see the one before.
func testUpdateConcurrent(t *testing.T, b *bundle) {
	const goroutines, each = 16, 25
	a := b.newTask("app", time.Minute)
	o := b.newTask("app", time.Minute)
	b.create(t, a, o)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen []int // Attempts as returned by each Update
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				got, err := b.s.Update(b.ctx, a.ID, nil, func(t *task.Task) error {
					t.Attempts++
					return nil
				})
				if err != nil {
					t.Errorf("Update: %v", err)
					return
				}
				mu.Lock()
				seen = append(seen, got.Attempts)
				mu.Unlock()
			}
		})
	}
	// Other tasks are not held up meanwhile.
	b.update(t, o, func(t *task.Task) { t.LastError = "x" })
	wg.Wait()

	slices.Sort(seen)
	want := make([]int, goroutines*each)
	for i := range want {
		want[i] = i + 1
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("Attempts returned by the Updates (-want +got):\n%s", diff)
	}
	if got := b.get(t, a.ID).Attempts; got != goroutines*each {
		t.Errorf("Attempts = %d, want %d", got, goroutines*each)
	}
}

func testUpdateMovesList(t *testing.T, b *bundle) {
	x := b.newTask("app", time.Minute)
	y := b.newTask("app", time.Minute, withKey("y"))
	z := b.newTask("app", time.Minute)
	o := b.newTask("other", time.Minute)
	b.create(t, x, y, z, o)
	all := func() []*task.Task { return []*task.Task{x, y, z, o} }
	check(t, b, all())

	y = b.update(t, y, delivering(b.now.Add(time.Minute)))
	check(t, b, all())
	y = b.update(t, y, finished(task.Delivered, b.now))
	check(t, b, all())
	x = b.update(t, x, finished(task.Cancelled, b.now))
	z = b.update(t, z, delivering(b.now.Add(time.Minute)))
	check(t, b, all())
	z = b.update(t, z, func(t *task.Task) {
		t.State = task.Scheduled
		t.Lease, t.LeaseExpiresAt = "", nil
		t.NextAttemptAt = b.now.Add(time.Second)
		t.WakeAt = t.NextAttemptAt
	})
	check(t, b, all())
	z = b.update(t, z, finished(task.Expired, b.now))
	o = b.update(t, o, finished(task.Dead, b.now))
	check(t, b, all())
}

func testUpdateMovesWakeups(t *testing.T, b *bundle) {
	x := b.newTask("app", time.Minute)
	y := b.newTask("app", 2*time.Minute, withPull)
	z := b.newTask("app", 2*time.Minute)
	b.create(t, x, y, z)
	all := func() []*task.Task { return []*task.Task{x, y, z} }
	check(t, b, all())

	x = b.update(t, x, withWake(b.now.Add(3*time.Minute)))
	check(t, b, all())
	// Earlier, and into the same ms as y and z.
	x = b.update(t, x, withWake(y.WakeAt))
	check(t, b, all())
	// State and kind travel with the entry.
	y = b.update(t, y, delivering(b.now.Add(time.Second)))
	check(t, b, all())
	z = b.update(t, z, withPull)
	check(t, b, all())
	z = b.update(t, z, withWake(time.Time{}))
	check(t, b, all())
	y = b.update(t, y, finished(task.Delivered, b.now))
	check(t, b, all())
	z = b.update(t, z, withWake(b.now.Add(-time.Hour)))
	check(t, b, all())
	if got := b.wakeups(t, store.Cursor{}, farFuture); len(got) != 2 || got[0].ID != z.ID {
		t.Errorf("Wakeups = %v, want z then x", got)
	}
}

func testUpdateClaimable(t *testing.T, b *bundle) {
	p := b.newTask("app", -time.Second, withPull)
	q := b.newTask("app", time.Minute, withPull)
	h := b.newTask("app", -time.Second)
	o := b.newTask("other", -time.Second, withPull)
	b.create(t, p, q, h, o)
	all := func() []*task.Task { return []*task.Task{p, q, h, o} }
	claimable := func(app string, now time.Time, want ...*task.Task) {
		t.Helper()
		got, err := b.s.Claimable(b.ctx, app, now, 100)
		if err != nil {
			t.Fatalf("Claimable: %v", err)
		}
		if diff := cmp.Diff(ids(want), got, cmpOpts); diff != "" {
			t.Errorf("Claimable(%q, %s) (-want +got):\n%s", app, now, diff)
		}
	}
	claimable("app", b.now, p)
	claimable("other", b.now, o)

	q = b.update(t, q, withNext(b.now.Add(-2*time.Second)))
	claimable("app", b.now, q, p)
	p = b.update(t, p, delivering(b.now.Add(time.Minute)))
	claimable("app", b.now, q)
	p = b.update(t, p, func(t *task.Task) {
		t.State = task.Scheduled
		t.Lease, t.LeaseExpiresAt = "", nil
		t.NextAttemptAt = b.now.Add(time.Minute)
		t.WakeAt = t.NextAttemptAt
	})
	claimable("app", b.now, q)
	claimable("app", b.now.Add(time.Minute), q, p)
	q = b.update(t, q, withHTTP)
	claimable("app", b.now)
	h = b.update(t, h, withPull)
	claimable("app", b.now, h)
	h = b.update(t, h, finished(task.Cancelled, b.now))
	claimable("app", b.now)
	claimable("other", b.now, o)
	check(t, b, all())
}
