package pebblestore

import (
	"errors"
	"fmt"
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

// TestUpdateManyReadsMany: UpdateMany reads the tasks no recent set keeps
// with one iterator (getMany) in id order, and gives each back in its
// caller's place; the ids not stored get store.ErrNotFound.
func TestUpdateManyReadsMany(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	epoch := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC) // far: not kept
	var gen task.IDGenerator
	var ts []*task.Task
	var missing []task.ID
	for i := range 20 {
		id := gen.New(epoch, 0)
		if i%4 == 1 {
			missing = append(missing, id) // between stored ones
			continue
		}
		due := task.Ms(epoch.Add(time.Duration(i) * time.Millisecond))
		ts = append(ts, &task.Task{
			ID: id, App: "a", DueAt: due, NextAttemptAt: due, WakeAt: due, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Target: task.Target{Pull: &task.PullTarget{}}, Retry: task.RetryPolicy{}.WithDefaults(),
			State: task.Scheduled, CreatedAt: epoch, UpdatedAt: epoch,
		})
	}
	if _, err := s.Create(t.Context(), ts); err != nil {
		t.Fatal(err)
	}
	// Out of order, the missing ones among them, before and after the rest.
	ids := []task.ID{missing[len(missing)-1]}
	for i := len(ts) - 1; i >= 0; i-- {
		ids = append(ids, ts[i].ID)
		if i%3 == 0 && i/3 < len(missing)-1 {
			ids = append(ids, missing[i/3])
		}
	}
	ids = append(ids, task.ID{})
	if n := len(ids) - len(ts); n < getManyMin {
		t.Fatalf("only %d ids missing", n)
	}
	skip := errors.New("skip")
	var got []*task.Task
	_, errs := s.UpdateMany(t.Context(), ids, &store.UpdateOpts{Shared: true}, func(read []*task.Task) []error {
		got = slices.Clone(read)
		return slices.Repeat([]error{skip}, len(read))
	})
	byID := map[task.ID]*task.Task{}
	for _, x := range ts {
		byID[x.ID] = x
	}
	for i, id := range ids {
		want, stored := byID[id]
		switch {
		case !stored && !errors.Is(errs[i], store.ErrNotFound):
			t.Errorf("ids[%d] (not stored): error %v, want ErrNotFound", i, errs[i])
		case !stored:
		case got[i] == nil || got[i].ID != id || string(got[i].Payload) != string(want.Payload):
			t.Errorf("ids[%d]: read %v, want the task %s with payload %s", i, got[i], id, want.Payload)
		case !errors.Is(errs[i], skip):
			t.Errorf("ids[%d]: error %v, want fn's", i, errs[i])
		}
	}
}
