package engine

import (
	"context"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/task"
)

// BenchmarkHeldCycle is the held service's share of a pull task's way on
// one node, per task, with 100 000 tasks held at once (as in the pull
// burst): a look holds it (hold), its fire job queues it (queue), the
// fire path asks whether it is held (queued), a claim of 1000 leases it
// (lease), and its ack's write touches it (touch). The store and the
// wheel are left out: what is measured is the bookkeeping's maps.
func BenchmarkHeldCycle(b *testing.B) {
	const n, claim = 100_000, 1000
	now := time.Now()
	var gen task.IDGenerator
	ts := make([]*task.Task, n)
	for i := range ts {
		ts[i] = &task.Task{
			ID: gen.New(now, 0), App: "bench", State: task.Scheduled, NextAttemptAt: now,
			Target: task.Target{Pull: &task.PullTarget{}}, History: []task.Event{{At: now, What: "created"}},
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	done := 0
	for b.Loop() {
		b.StopTimer()
		h := &held{attempts: newAttempts(), tk: &timekeeper{}, alog: &attemptLog{}, clock: clock.Real{}, max: 2 * n}
		h.mu.init()
		b.StartTimer()
		for _, t := range ts {
			if hold, _ := h.hold(t); !hold {
				b.Fatal("not held")
			}
		}
		for _, t := range ts {
			h.queue(t)
		}
		for _, t := range ts {
			if !h.queued(t.ID) {
				b.Fatal("not queued")
			}
		}
		for range n / claim {
			if got := h.lease(ctx, "bench", LeaseParams{Max: claim, Lease: time.Minute}); len(got) != claim {
				b.Fatalf("leased %d, want %d", len(got), claim)
			}
		}
		for _, t := range ts {
			h.touch(t.ID)
		}
		done += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/task")
}
