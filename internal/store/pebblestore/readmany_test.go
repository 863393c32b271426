package pebblestore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// BenchmarkReadMany reads, as a fire job's look does, batches of 128 tasks
// created together (consecutive ids) out of 100,000 flushed to sstables and
// not kept in the recent sets, writing none of them.
func BenchmarkReadMany(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	epoch := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC) // far: not kept
	var gen task.IDGenerator
	var ids []task.ID
	for range 100 {
		ts := make([]*task.Task, 1000)
		for i := range ts {
			due := task.Ms(epoch.Add(time.Duration(i) * time.Millisecond))
			ts[i] = &task.Task{
				ID: gen.New(epoch, 0), App: "bench", DueAt: due, NextAttemptAt: due, WakeAt: due,
				Payload: []byte(`{"seq":12345}`), Target: task.Target{Pull: &task.PullTarget{}},
				Retry: task.RetryPolicy{}.WithDefaults(), State: task.Scheduled, CreatedAt: epoch, UpdatedAt: epoch,
			}
			ids = append(ids, ts[i].ID)
		}
		if _, err := s.Create(b.Context(), ts); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	skip := errors.New("skip")
	opts := &store.UpdateOpts{NoSync: true, Optimistic: true, Shared: true}
	const batch = 128
	i := 0
	for b.Loop() {
		if i+batch > len(ids) {
			i = 0
		}
		ts, _ := s.UpdateMany(b.Context(), ids[i:i+batch], opts, func(ts []*task.Task) []error {
			return slices.Repeat([]error{skip}, len(ts))
		})
		for _, t := range ts {
			if t == nil {
				b.Fatal("not read")
			}
		}
		i += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}

// BenchmarkAckMany writes, as the outcomes of acks do, batches of 1000
// pull tasks delivered over their known copies (UpdateKnown), out of
// 100,000 due.
func BenchmarkAckMany(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now().Truncate(time.Millisecond)
	var gen task.IDGenerator
	opts := &store.UpdateOpts{NoSync: true, Optimistic: true, Shared: true}
	const batch = 1000
	var ts []*task.Task
	fill := func() {
		ts = make([]*task.Task, 0, 100*batch)
		for range 100 {
			c := make([]*task.Task, batch)
			for i := range c {
				c[i] = &task.Task{
					ID: gen.New(now, 0), App: "bench", DueAt: task.Ms(now), NextAttemptAt: now, WakeAt: now,
					Payload: []byte(`{"seq":12345}`), Target: task.Target{Pull: &task.PullTarget{}},
					Retry: task.RetryPolicy{}.WithDefaults(), State: task.Scheduled, CreatedAt: now, UpdatedAt: now,
				}
			}
			if _, err := s.Create(b.Context(), c); err != nil {
				b.Fatal(err)
			}
			ts = append(ts, c...)
		}
	}
	fill()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i+batch > len(ts) {
			b.StopTimer()
			fill()
			i = 0
			b.StartTimer()
		}
		olds := ts[i : i+batch]
		_, errs := s.UpdateKnown(b.Context(), olds, opts, func(ts []*task.Task) []error {
			for k, t := range ts {
				t = t.Clone()
				ts[k] = t
				t.Attempts = 1
				t.Record(now, "attempt", 1, "")
				t.Record(now, "delivered", 1, "")
				t.State, t.WakeAt, t.UpdatedAt, t.FinishedAt = task.Delivered, time.Time{}, now, &now
			}
			return make([]error, len(ts))
		})
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		i += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}
