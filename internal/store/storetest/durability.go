package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// RunDurability checks that what a store holds survives closing and
// reopening it: tasks, and schedules when the store keeps them
// ([store.Schedules]). open must open the store kept in dir, creating it
// when dir is empty; the suite closes every store it opens.
func RunDurability(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	dir := t.TempDir()
	b := setup(t, open(t, dir))
	reopen := func() {
		t.Helper()
		if err := b.s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		b = setup(t, open(t, dir))
	}

	// Tasks in every state and every index.
	var all []*task.Task
	for i := range 60 {
		var opts []func(*task.Task)
		if i%3 == 0 {
			opts = append(opts, withKey(fmt.Sprintf("key-%d", i)))
		}
		if i%2 == 0 {
			opts = append(opts, withPull)
		}
		all = append(all, b.newTask([]string{"a", "b"}[i%2], time.Duration(i%7-3)*time.Second, opts...))
	}
	b.create(t, all...)
	for i, tk := range all {
		switch i % 6 {
		case 1:
			all[i] = b.update(t, tk, delivering(b.now.Add(time.Duration(i)*time.Millisecond)))
		case 2:
			all[i] = b.update(t, tk, finished(task.Delivered, b.now.Add(-time.Duration(i)*time.Minute)))
		case 3:
			all[i] = b.update(t, tk, withNext(b.now.Add(-time.Hour)), withWake(time.Time{}))
		case 4:
			all[i] = b.update(t, tk, finished(task.Cancelled, b.now))
		}
	}
	// Writes with NoSync survive a Close too.
	var (
		at   []int
		many []*task.Task
	)
	for i := 5; i < len(all); i += 6 {
		at, many = append(at, i), append(many, all[i])
	}
	for k, w := range b.updateMany(t, &store.UpdateOpts{NoSync: true}, many, delivering(b.now.Add(time.Minute))) {
		all[at[k]] = w
	}
	reopen()
	check(t, b, all)

	// Keys are still taken, updates and sweeps still work.
	res, err := b.s.Create(b.ctx, []*task.Task{b.newTask("a", time.Minute, withKey("key-0"))})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if diff := cmp.Diff([]store.CreateResult{{Task: all[0]}}, res, cmpOpts); diff != "" {
		t.Errorf("Create with a key taken before reopening (-want +got):\n%s", diff)
	}
	n, err := b.s.Sweep(b.ctx, b.now.Add(-30*time.Minute), 1000)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	var kept []*task.Task
	for _, tk := range all {
		if tk.State == task.Delivered && tk.FinishedAt.Before(b.now.Add(-30*time.Minute)) {
			n--
			continue
		}
		kept = append(kept, tk)
	}
	if n != 0 {
		t.Errorf("Sweep deleted %d tasks more than expected", n)
	}
	all = kept
	all[0] = b.update(t, all[0], delivering(b.now.Add(time.Second)))
	more := b.newTask("b", time.Second, withKey("key-0"))
	b.create(t, more)
	all = append(all, more)
	reopen()
	check(t, b, all)
	reopen()
	check(t, b, all)

	if _, ok := store.As[store.Schedules](b.s); ok {
		scheduleDurability(t, func() *bundle { return b }, reopen)
	}
}
