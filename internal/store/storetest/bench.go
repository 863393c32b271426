package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// BenchUpdateMany measures what the dispatcher does with the tasks that come
// due together, 64 at a time, with NoSync: an Update of each, one after
// another, against one UpdateMany of them all. The tasks have keys, so a
// sharded store spreads them over its shards. It reports ns/task. open
// returns a fresh store and closes it when its benchmark ends.
func BenchUpdateMany(b *testing.B, open func(b *testing.B) store.Store) {
	const batch, batches = 64, 16
	opts := &store.UpdateOpts{NoSync: true}
	// change is what the dispatcher does: take a lease, move the wake time.
	change := func(t *task.Task) {
		t.State = task.Delivering
		t.Attempts++
		t.WakeAt = t.WakeAt.Add(time.Second)
		t.UpdatedAt = t.UpdatedAt.Add(time.Millisecond)
	}
	setup := func(b *testing.B) (store.Store, [][]task.ID) {
		s := open(b)
		bd := &bundle{s: s, ctx: b.Context(), gen: new(task.IDGenerator), now: epoch}
		var ts []*task.Task
		for i := range batch * batches {
			ts = append(ts, bd.newTask("bench", time.Duration(i)*time.Millisecond, withKey(fmt.Sprintf("order-%d", i))))
		}
		if _, err := s.Create(b.Context(), ts); err != nil {
			b.Fatal(err)
		}
		all := ids(ts)
		var out [][]task.ID
		for len(all) > 0 {
			out, all = append(out, all[:batch]), all[batch:]
		}
		return s, out
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
	}

	b.Run("update", func(b *testing.B) {
		s, bs := setup(b)
		fn := func(t *task.Task) error { change(t); return nil }
		n := 0
		for b.Loop() {
			for _, id := range bs[n%len(bs)] {
				if _, err := s.Update(b.Context(), id, opts, fn); err != nil {
					b.Fatal(err)
				}
			}
			n++
		}
		report(b)
	})
	b.Run("update-many", func(b *testing.B) {
		s, bs := setup(b)
		fn := func(ts []*task.Task) []error {
			for _, t := range ts {
				change(t)
			}
			return make([]error, len(ts))
		}
		n := 0
		for b.Loop() {
			_, errs := s.UpdateMany(b.Context(), bs[n%len(bs)], opts, fn)
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			n++
		}
		report(b)
	})
}
