package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

func testSweep(t *testing.T, b *bundle) {
	cutoff := b.now.Add(-time.Hour)
	old := []*task.Task{
		b.newTask("app", -4*time.Hour, withKey("k1"), finished(task.Delivered, b.now.Add(-3*time.Hour))),
		b.newTask("app", -4*time.Hour, finished(task.Dead, b.now.Add(-2*time.Hour))),
		b.newTask("other", -4*time.Hour, finished(task.Expired, cutoff.Add(-time.Millisecond))),
		// Odd but possible: a final task still in the wake-time order. It
		// must leave every index.
		b.newTask("app", -4*time.Hour, withKey("k"), withPull,
			finished(task.Cancelled, b.now.Add(-2*time.Hour)), withWake(b.now.Add(time.Minute))),
	}
	keep := []*task.Task{
		b.newTask("app", -4*time.Hour, finished(task.Cancelled, cutoff)), // not before cutoff
		b.newTask("app", -4*time.Hour, finished(task.Delivered, b.now)),
		b.newTask("app", time.Minute, withKey("live")),
		b.newTask("app", -time.Minute, withPull, delivering(b.now.Add(time.Minute))),
		// Not final, so never swept, whatever its FinishedAt says.
		b.newTask("app", -time.Minute, withPull, func(t *task.Task) {
			at := b.now.Add(-3 * time.Hour)
			t.FinishedAt = &at
		}),
	}
	b.create(t, append(old, keep...)...)

	n, err := b.s.Sweep(b.ctx, cutoff, 100)
	if err != nil || n != len(old) {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, len(old))
	}
	for _, o := range old {
		if got, err := b.s.Get(b.ctx, o.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(swept %s) = %v, %v; want ErrNotFound", o.ID, got, err)
		}
		if _, err := b.s.Update(b.ctx, o.ID, nil, func(*task.Task) error { return nil }); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Update(swept %s) error = %v, want ErrNotFound", o.ID, err)
		}
	}
	for _, k := range []string{"k", "k1"} {
		if got, err := b.s.GetByKey(b.ctx, "app", k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetByKey(app, %q) of a swept task = %v, %v; want ErrNotFound", k, got, err)
		}
	}
	check(t, b, keep)

	// The keys are free again.
	k := b.newTask("app", time.Minute, withKey("k"))
	k1 := b.newTask("app", time.Minute, withKey("k1"))
	b.create(t, k, k1)
	keep = append(keep, k, k1)
	check(t, b, keep)

	if n, err := b.s.Sweep(b.ctx, cutoff, 100); err != nil || n != 0 {
		t.Errorf("second Sweep = %d, %v; want 0", n, err)
	}
	check(t, b, keep)
}

func testSweepLimit(t *testing.T, b *bundle) {
	var done []*task.Task
	for i := range 5 {
		done = append(done, b.newTask("app", -time.Hour, withKey(string(rune('a'+i))),
			finished(task.Delivered, b.now.Add(-time.Duration(i+1)*time.Minute))))
	}
	live := []*task.Task{b.newTask("app", time.Minute), b.newTask("app", time.Minute, withPull)}
	b.create(t, append(done, live...)...)

	left := len(done)
	for _, want := range []int{2, 2, 1, 0} {
		n, err := b.s.Sweep(b.ctx, b.now, 2)
		if err != nil || n != want {
			t.Fatalf("Sweep(limit 2) = %d, %v; want %d", n, err, want)
		}
		left -= n
		got, err := b.s.List(b.ctx, "app", task.Delivered, task.ID{}, 100)
		if err != nil || len(got) != left {
			t.Fatalf("List(delivered) after Sweep = %d tasks, %v; want %d", len(got), err, left)
		}
	}
	check(t, b, live)
}
