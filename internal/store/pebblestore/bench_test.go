package pebblestore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/store/storetest"
	"github.com/toc-dev/toc/task"
)

// The benchmarks write to a real directory with fsync on, as the product
// does. Parallel ones run 16 goroutines per CPU: a commit waits on the disk,
// not the CPU, and concurrent commits share an fsync (group commit), so
// throughput grows with concurrency while each call's latency does not drop.

var benchEpoch = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

func openBench(b *testing.B) *pebblestore.Store {
	b.Helper()
	s, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	return s
}

// benchTasks makes n tasks as the engine would, due over the next hour, a
// third of them with a key and half with a pull target.
type benchTasks struct {
	gen task.IDGenerator
	n   atomic.Int64
}

func (g *benchTasks) make(n int) []*task.Task {
	ts := make([]*task.Task, n)
	for i := range ts {
		k := g.n.Add(1)
		due := task.Ms(benchEpoch.Add(time.Duration(k*7919%3600_000) * time.Millisecond))
		t := &task.Task{
			ID:            g.gen.New(benchEpoch, 0),
			App:           "bench",
			DueAt:         due,
			NextAttemptAt: due,
			Payload:       []byte(`{"order":12345,"action":"cancel-if-unpaid"}`),
			Target:        task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/hooks/orders"}},
			Retry:         task.RetryPolicy{}.WithDefaults(),
			State:         task.Scheduled,
			CreatedAt:     benchEpoch,
			UpdatedAt:     benchEpoch,
			WakeAt:        due,
		}
		if k%3 == 0 {
			t.Key = fmt.Sprintf("order-%d", k)
		}
		if k%2 == 0 {
			t.Target = task.Target{Pull: &task.PullTarget{}}
		}
		ts[i] = t
	}
	return ts
}

func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := openBench(b)
			var g benchTasks
			for b.Loop() {
				if _, err := s.Create(ctx, g.make(batch)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
		})
		b.Run(fmt.Sprintf("batch=%d/parallel", batch), func(b *testing.B) {
			s := openBench(b)
			var g benchTasks
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Create(ctx, g.make(batch)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	setup := func(b *testing.B) (*pebblestore.Store, []*task.Task) {
		s := openBench(b)
		var g benchTasks
		ts := g.make(1000)
		if _, err := s.Create(ctx, ts); err != nil {
			b.Fatal(err)
		}
		return s, ts
	}
	// fn is what the dispatcher does: take a lease, move the wake time.
	fn := func(t *task.Task) error {
		t.State = task.Delivering
		t.Attempts++
		t.WakeAt = t.WakeAt.Add(time.Second)
		t.UpdatedAt = t.UpdatedAt.Add(time.Millisecond)
		return nil
	}
	b.Run("serial", func(b *testing.B) {
		s, ts := setup(b)
		i := 0
		for b.Loop() {
			if _, err := s.Update(ctx, ts[i%len(ts)].ID, nil, fn); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s, ts := setup(b)
		var next atomic.Int64
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := ts[next.Add(1)%int64(len(ts))].ID
				if _, err := s.Update(ctx, id, nil, fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel/same-task", func(b *testing.B) {
		s, ts := setup(b)
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Update(ctx, ts[0].ID, nil, fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkUpdateMany compares Update one by one with UpdateMany, 64 tasks
// at a time, with NoSync (the dispatcher's writes).
func BenchmarkUpdateMany(b *testing.B) {
	storetest.BenchUpdateMany(b, func(b *testing.B) store.Store { return openBench(b) })
}

// BenchmarkWakeups reads pages of 100 from the wake-time order of 100,000
// tasks, as the loader does.
func BenchmarkWakeups(b *testing.B) {
	ctx := context.Background()
	s := openBench(b)
	var g benchTasks
	for range 100 {
		if _, err := s.Create(ctx, g.make(1000)); err != nil {
			b.Fatal(err)
		}
	}
	until := benchEpoch.Add(time.Hour)
	var cur store.Cursor
	for b.Loop() {
		ws, err := s.Wakeups(ctx, cur, until, 100)
		if err != nil {
			b.Fatal(err)
		}
		if len(ws) < 100 {
			cur = store.Cursor{} // start over
			continue
		}
		cur = store.Cursor{At: ws[len(ws)-1].At, ID: ws[len(ws)-1].ID}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "wakeups/s")
}
