package sqlstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/internal/store/storetest"
	"github.com/toc-dev/toc/task"
)

// The benchmarks run on each server, on a store of two fresh databases of
// sixteen tables (the default), with the servers' durability settings as
// they are (PostgreSQL's synchronous_commit and InnoDB's
// innodb_flush_log_at_trx_commit default to a flush per commit). Parallel
// ones run 16 goroutines per CPU: a commit waits on the server, and
// concurrent commits share a flush.

const benchTables = 16

var benchEpoch = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// forEachServer runs fn as a sub-benchmark per server.
func forEachServer(b *testing.B, fn func(b *testing.B, sv *server)) {
	for _, sv := range servers {
		b.Run(sv.name, func(b *testing.B) { fn(b, sv.use(b)) })
	}
}

func openBench(b *testing.B, sv *server) *sqlstore.Store {
	b.Helper()
	s, err := sqlstore.Open(context.Background(), sqlstore.Options{
		DSNs: sv.databases(b, 2), Tables: benchTables, MaxConns: 32, Logger: testLogger(b),
	})
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

// benchTasks makes tasks as the engine would, due over the next hour, a
// third of them with a key and half with a pull target, each id carrying
// its shard.
type benchTasks struct {
	s   *sqlstore.Store
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
		binary.BigEndian.PutUint16(t.ID[6:8], g.s.ShardFor(t.App, t.Key, t.ID))
		ts[i] = t
	}
	return ts
}

func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	forEachServer(b, func(b *testing.B, sv *server) {
		for _, batch := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
				s := openBench(b, sv)
				g := benchTasks{s: s}
				for b.Loop() {
					if _, err := s.Create(ctx, g.make(batch)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
			})
			b.Run(fmt.Sprintf("batch=%d/parallel", batch), func(b *testing.B) {
				s := openBench(b, sv)
				g := benchTasks{s: s}
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
	})
}

func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	// fn is what the dispatcher does: take a lease, move the wake time.
	fn := func(t *task.Task) error {
		t.State = task.Delivering
		t.Attempts++
		t.WakeAt = t.WakeAt.Add(time.Second)
		t.UpdatedAt = t.UpdatedAt.Add(time.Millisecond)
		return nil
	}
	forEachServer(b, func(b *testing.B, sv *server) {
		setup := func(b *testing.B) (*sqlstore.Store, []*task.Task) {
			s := openBench(b, sv)
			g := benchTasks{s: s}
			ts := g.make(1000)
			if _, err := s.Create(ctx, ts); err != nil {
				b.Fatal(err)
			}
			return s, ts
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
		for _, noSync := range []bool{false, true} {
			name := "parallel"
			if noSync {
				name += "/nosync"
			}
			b.Run(name, func(b *testing.B) {
				s, ts := setup(b)
				var next atomic.Int64
				opts := &store.UpdateOpts{NoSync: noSync}
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						id := ts[next.Add(1)%int64(len(ts))].ID
						if _, err := s.Update(ctx, id, opts, fn); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
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
	})
}

// BenchmarkUpdateMany compares Update one by one with UpdateMany, 64 tasks
// at a time over the 32 shards, with NoSync (the dispatcher's writes).
func BenchmarkUpdateMany(b *testing.B) {
	forEachServer(b, func(b *testing.B, sv *server) {
		storetest.BenchUpdateMany(b, func(b *testing.B) store.Store { return openBench(b, sv) })
	})
}

// BenchmarkWakeups reads pages of 100 from the wake-time order of 100,000
// tasks in 32 shards, as the loader does: each page is a query per database
// over its tables.
func BenchmarkWakeups(b *testing.B) {
	ctx := context.Background()
	forEachServer(b, func(b *testing.B, sv *server) {
		s := openBench(b, sv)
		g := benchTasks{s: s}
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
	})
}
