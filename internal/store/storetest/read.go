package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// wakeupOf is the wake-time entry of t.
func wakeupOf(t *task.Task) store.Wakeup {
	return store.Wakeup{ID: t.ID, At: t.WakeAt, State: t.State, Kind: t.Target.Kind(), App: t.App, Key: t.Key}
}

func cursorOf(w store.Wakeup) store.Cursor { return store.Cursor{At: w.At, ID: w.ID} }

func testWakeupsOrder(t *testing.T, b *bundle) {
	s := time.Second
	var ts []*task.Task
	for i, due := range []time.Duration{5 * s, s, 3 * s, s, 5 * s, 2 * s, s, -10 * s} {
		var opts []func(*task.Task)
		if i%2 == 0 {
			opts = append(opts, withPull)
		}
		ts = append(ts, b.newTask("app", due, opts...))
	}
	done := b.newTask("app", s, finished(task.Delivered, b.now))
	leased := b.newTask("other", 0, delivering(task.Ms(b.now.Add(2*s))))
	b.create(t, append(ts, done, leased)...)

	want := []store.Wakeup{
		wakeupOf(ts[7]),
		wakeupOf(ts[1]), wakeupOf(ts[3]), wakeupOf(ts[6]),
		wakeupOf(ts[5]), wakeupOf(leased),
		wakeupOf(ts[2]),
		wakeupOf(ts[0]), wakeupOf(ts[4]),
	}
	if want[5].State != task.Delivering || want[0].Kind != "http" || want[3].Kind != "pull" {
		t.Fatalf("bad test: %v", want)
	}
	got := b.wakeups(t, store.Cursor{}, farFuture)
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("Wakeups (-want +got):\n%s", diff)
	}
}

// testWakeupsKinds checks that a wakeup carries its task's target kind,
// whatever the kind.
func testWakeupsKinds(t *testing.T, b *bundle) {
	targets := []task.Target{
		{HTTP: &task.HTTPTarget{URL: "https://example.com/hook"}},
		{Pull: &task.PullTarget{}},
		{AMQP: &task.AMQPTarget{Exchange: "timers", RoutingKey: "app"}},
		{NATS: &task.NATSTarget{Subject: "timers.app"}},
	}
	var ts []*task.Task
	for i, target := range targets {
		ts = append(ts, b.newTask("app", time.Duration(i+1)*time.Second, func(t *task.Task) { t.Target = target }))
	}
	b.create(t, ts...)
	var want []store.Wakeup
	for _, tk := range ts {
		want = append(want, wakeupOf(tk))
	}
	if diff := cmp.Diff(want, b.wakeups(t, store.Cursor{}, farFuture), cmpOpts); diff != "" {
		t.Errorf("Wakeups (-want +got):\n%s", diff)
	}
	// Kinds change with the target.
	ts[3] = b.update(t, ts[3], withPull)
	ts[1] = b.update(t, ts[1], func(t *task.Task) { t.Target = targets[2] })
	check(t, b, ts)
}

func testWakeupsCursor(t *testing.T, b *bundle) {
	s := time.Second
	for i, due := range []time.Duration{3 * s, s, 2 * s, s, 3 * s, s} {
		var opts []func(*task.Task)
		if i%2 == 1 {
			opts = append(opts, withPull)
		}
		b.create(t, b.newTask("app", due, opts...))
	}
	all := b.wakeups(t, store.Cursor{}, farFuture)
	if len(all) != 6 {
		t.Fatalf("Wakeups returned %d entries, want 6", len(all))
	}
	wakeups := func(after store.Cursor, want []store.Wakeup) {
		t.Helper()
		got := b.wakeups(t, after, farFuture)
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Errorf("Wakeups(after %v) (-want +got):\n%s", after, diff)
		}
	}
	// The cursor is exclusive.
	for i, w := range all {
		wakeups(cursorOf(w), all[i+1:])
	}
	// all[0:3] are at 1s, all[3] at 2s, all[4:6] at 3s.
	at := all[3].At
	var maxID task.ID
	for i := range maxID {
		maxID[i] = 0xFF
	}
	wakeups(store.Cursor{At: at}, all[3:])
	wakeups(store.Cursor{At: at, ID: maxID}, all[4:])
	wakeups(store.Cursor{At: at.Add(-time.Millisecond), ID: maxID}, all[3:])
	wakeups(store.Cursor{At: all[0].At}, all)
	wakeups(store.Cursor{At: all[0].At.Add(-time.Hour)}, all)
	wakeups(store.Cursor{At: farFuture}, nil)
	// Compared at millisecond precision, whatever the location.
	wakeups(store.Cursor{At: at.Add(500 * time.Microsecond), ID: all[3].ID}, all[4:])
	wakeups(store.Cursor{At: at.In(time.FixedZone("X", 3600)), ID: all[3].ID}, all[4:])
}

func testWakeupsUntil(t *testing.T, b *bundle) {
	s := time.Second
	for _, due := range []time.Duration{s, 2 * s, s, 3 * s} {
		b.create(t, b.newTask("app", due))
	}
	all := b.wakeups(t, store.Cursor{}, farFuture)
	if len(all) != 4 {
		t.Fatalf("Wakeups returned %d entries, want 4", len(all))
	}
	until := func(until time.Time, want []store.Wakeup) {
		t.Helper()
		got := b.wakeups(t, store.Cursor{}, until)
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Errorf("Wakeups(until %s) (-want +got):\n%s", until, diff)
		}
	}
	at := all[2].At // 2s
	until(at, all[:3])
	until(at.In(time.FixedZone("X", -3600)), all[:3])
	until(at.Add(-time.Millisecond), all[:2])
	until(all[0].At.Add(-time.Millisecond), nil)
	until(b.now, nil)
	until(all[3].At, all)
	// until and the cursor together.
	got, err := b.s.Wakeups(b.ctx, cursorOf(all[0]), at, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all[1:3], got, cmpOpts); diff != "" {
		t.Errorf("Wakeups(after all[0], until 2s) (-want +got):\n%s", diff)
	}
	// A cursor past until.
	got, err = b.s.Wakeups(b.ctx, cursorOf(all[3]), at, 10)
	if err != nil || len(got) != 0 {
		t.Errorf("Wakeups(after all[3], until 2s) = %v, %v; want nothing", got, err)
	}
}

func testWakeupsLimit(t *testing.T, b *bundle) {
	for i := range 10 {
		b.create(t, b.newTask("app", time.Duration(10-i)*time.Second))
	}
	all := b.wakeups(t, store.Cursor{}, farFuture)
	if len(all) != 10 {
		t.Fatalf("Wakeups returned %d entries, want 10", len(all))
	}
	for _, limit := range []int{1, 4, 10, 11} {
		got, err := b.s.Wakeups(b.ctx, store.Cursor{}, farFuture, limit)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(all[:min(limit, 10)], got, cmpOpts); diff != "" {
			t.Errorf("Wakeups(limit %d) (-want +got):\n%s", limit, diff)
		}
	}
}

func testClaimable(t *testing.T, b *bundle) {
	s := time.Second
	a1 := b.newTask("app", -3*s, withPull)
	a2 := b.newTask("app", -s, withPull)
	a3 := b.newTask("app", -s, withPull)
	a4 := b.newTask("app", 0, withPull) // NextAttemptAt == now: claimable
	a5 := b.newTask("app", -2*s, withPull)
	future := b.newTask("app", time.Millisecond, withPull)
	httpTask := b.newTask("app", -5*s)
	leased := b.newTask("app", -5*s, withPull, delivering(b.now.Add(s)))
	done := b.newTask("app", -5*s, withPull, finished(task.Delivered, b.now))
	// A retry: due long ago, next attempt later.
	retry := b.newTask("app", -time.Hour, withPull, withNext(b.now.Add(-time.Millisecond)))
	o := b.newTask("other", -s, withPull)
	all := []*task.Task{a1, a2, a3, a4, a5, future, httpTask, leased, done, retry, o}
	b.create(t, all...)

	claimable := func(app string, now time.Time, limit int, want ...*task.Task) {
		t.Helper()
		got, err := b.s.Claimable(b.ctx, app, now, limit)
		if err != nil {
			t.Fatalf("Claimable: %v", err)
		}
		if diff := cmp.Diff(ids(want), got, cmpOpts); diff != "" {
			t.Errorf("Claimable(%q, %s, %d) (-want +got):\n%s", app, now, limit, diff)
		}
	}
	claimable("app", b.now, 100, a1, a5, a2, a3, retry, a4)
	claimable("app", b.now, 3, a1, a5, a2)
	claimable("app", b.now, 1, a1)
	claimable("app", b.now.Add(-s), 100, a1, a5, a2, a3)
	claimable("app", b.now.Add(time.Millisecond), 100, a1, a5, a2, a3, retry, a4, future)
	claimable("other", b.now, 100, o)
	claimable("ap", b.now, 100)
	claimable("app2", b.now, 100)
	check(t, b, all)
}

func testList(t *testing.T, b *bundle) {
	var sched, deliv, done, other []*task.Task
	for i := range 12 {
		switch i % 4 {
		case 0, 1:
			sched = append(sched, b.newTask("app", time.Duration(12-i)*time.Second))
		case 2:
			deliv = append(deliv, b.newTask("app", 0, delivering(b.now.Add(time.Minute))))
		case 3:
			done = append(done, b.newTask("app", 0, finished(task.Delivered, b.now)))
		}
		other = append(other, b.newTask("app-other", 0))
	}
	var all []*task.Task
	for _, ts := range [][]*task.Task{other, done, sched, deliv} {
		all = append(all, ts...)
	}
	b.create(t, all...)

	list := func(app string, state task.State, after task.ID, limit int, want []*task.Task) {
		t.Helper()
		got, err := b.s.List(b.ctx, app, state, after, limit)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Errorf("List(%q, %s, %s, %d) (-want +got):\n%s", app, state, after, limit, diff)
		}
	}
	list("app", task.Scheduled, task.ID{}, 100, sched)
	list("app", task.Scheduled, task.ID{}, 2, sched[:2])
	list("app", task.Scheduled, sched[1].ID, 100, sched[2:])
	list("app", task.Scheduled, sched[1].ID, 3, sched[2:5])
	list("app", task.Scheduled, sched[len(sched)-1].ID, 100, nil)
	// after need not be the id of a task in the list.
	list("app", task.Scheduled, deliv[0].ID, 100, sched[2:])
	list("app", task.Delivering, task.ID{}, 100, deliv)
	list("app", task.Delivered, task.ID{}, 100, done)
	list("app", task.Dead, task.ID{}, 100, nil)
	list("app-other", task.Scheduled, task.ID{}, 100, other)
	list("app-other", task.Scheduled, other[5].ID, 4, other[6:10])
	list("ap", task.Scheduled, task.ID{}, 100, nil)
	check(t, b, all)
}

// testReadsSeeReturnedWrites checks, with writes running concurrently, that
// a scan begun after a Create or Update returned sees it: the engine relies
// on this to not miss a task it was just told about.
func testReadsSeeReturnedWrites(t *testing.T, b *bundle) {
	const writers, each = 8, 20
	var maxID task.ID
	for i := range maxID {
		maxID[i] = 0xFF
	}
	// wakesAt reports whether id is in the wake-time order at exactly at.
	wakesAt := func(id task.ID, at time.Time) bool {
		ws, err := b.s.Wakeups(b.ctx, store.Cursor{At: at.Add(-time.Millisecond), ID: maxID}, at, 1000)
		if err != nil {
			t.Errorf("Wakeups: %v", err)
		}
		for _, w := range ws {
			if w.ID == id {
				return true
			}
		}
		return false
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// A millisecond of its own for each task, and another for
				// where it moves.
				n := time.Duration(w*each+i+1) * time.Millisecond
				tk := b.newTask("app", n, withPull)
				if _, err := b.s.Create(b.ctx, []*task.Task{tk}); err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				if !wakesAt(tk.ID, tk.WakeAt) {
					t.Errorf("Wakeups begun after Create returned misses %s", tk.ID)
				}
				ids, err := b.s.Claimable(b.ctx, "app", tk.NextAttemptAt, 1000)
				if err != nil || !slices.Contains(ids, tk.ID) {
					t.Errorf("Claimable begun after Create returned misses %s (%v)", tk.ID, err)
				}
				moved := tk.WakeAt.Add(time.Hour)
				if _, err := b.s.Update(b.ctx, tk.ID, nil, withWakeErr(moved)); err != nil {
					t.Errorf("Update: %v", err)
					return
				}
				if !wakesAt(tk.ID, moved) || wakesAt(tk.ID, tk.WakeAt) {
					t.Errorf("Wakeups begun after Update returned does not see %s moved", tk.ID)
				}
			}
		})
	}
	wg.Wait()
}

// withWakeErr is withWake as an Update fn.
func withWakeErr(at time.Time) func(*task.Task) error {
	return func(t *task.Task) error { t.WakeAt = at; return nil }
}
