package pebblestore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// keyedTasks returns n tasks of app "app" with keys prefix-0 to prefix-(n-1).
func keyedTasks(gen *task.IDGenerator, prefix string, n int) []*task.Task {
	now := time.Now().UTC().Truncate(time.Millisecond)
	ts := make([]*task.Task, n)
	for i := range ts {
		due := now.Add(time.Hour)
		ts[i] = &task.Task{ID: gen.New(now, 0), App: "app", Key: fmt.Sprintf("%s-%d", prefix, i),
			DueAt: due, NextAttemptAt: due, WakeAt: due, Payload: []byte(`{"n":1}`),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:9/hook"}},
			State:  task.Scheduled, CreatedAt: now, UpdatedAt: now}
	}
	return ts
}

func openQuiet(tb testing.TB) *Store {
	tb.Helper()
	s, err := Open(Options{Dir: tb.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// TestCreateFindsKeysInTables: a batch's keys are looked up in one pass
// (keyOwners); keys whose entries are in sstables, in the memtable and
// nowhere are told apart, in any order in the batch.
func TestCreateFindsKeysInTables(t *testing.T) {
	ctx := context.Background()
	s := openQuiet(t)
	var gen task.IDGenerator
	flushed := keyedTasks(&gen, "flushed", 40)
	if _, err := s.Create(ctx, flushed); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	inMem := keyedTasks(&gen, "mem", 40)
	if _, err := s.Create(ctx, inMem); err != nil {
		t.Fatal(err)
	}
	fresh := keyedTasks(&gen, "new", 40)
	// Interleaved, backwards for the old ones: the lookups sort.
	var batch, owner []*task.Task
	for i := range 40 {
		j := 39 - i
		dupF := keyedTasks(&gen, "flushed", 40)[j]
		dupM := keyedTasks(&gen, "mem", 40)[j]
		batch = append(batch, dupF, fresh[i], dupM)
		owner = append(owner, flushed[j], nil, inMem[j])
	}
	res, err := s.Create(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		switch want := owner[i]; {
		case want == nil && (!r.Created || r.Task.ID != batch[i].ID):
			t.Errorf("task %d (key %s): created %v, id %s; want created, id %s", i, batch[i].Key, r.Created, r.Task.ID, batch[i].ID)
		case want != nil && (r.Created || r.Task.ID != want.ID):
			t.Errorf("task %d (key %s): created %v, id %s; want the existing %s", i, batch[i].Key, r.Created, r.Task.ID, want.ID)
		}
	}
}

// BenchmarkKeyLookups compares a Get per key entry with keyOwners' one
// pass, for keys not stored, over a store of 150 000 keyed tasks.
//
//	go test -run '^$' -bench KeyLookups ./internal/store/pebblestore/
func BenchmarkKeyLookups(b *testing.B) {
	ctx := context.Background()
	s := openQuiet(b)
	var gen task.IDGenerator
	for i := range 150 {
		if _, err := s.Create(ctx, keyedTasks(&gen, fmt.Sprintf("old%d", i), 1000)); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{1, 2, 16, 1000} {
		kks := make([][]byte, n)
		for i := range kks {
			kks[i] = keyKey("app", fmt.Sprintf("new-%d", i))
		}
		b.Run(fmt.Sprintf("get/keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, kk := range kks {
					if _, ok, err := keyEntry(s.db, kk, "key"); ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
		b.Run(fmt.Sprintf("keyOwners/keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				if owners, _, err := keyOwners(s.db, kks); len(owners) > 0 || err != nil {
					b.Fatal(owners, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

// BenchmarkCreateNoSync is Create's CPU without the disk's sync: batches
// of keyed tasks into a store that holds 100 000 already.
//
//	go test -run '^$' -bench CreateNoSync ./internal/store/pebblestore/
func BenchmarkCreateNoSync(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{16, 1000} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s := openQuiet(b)
			var gen task.IDGenerator
			for i := range 100 {
				if _, err := s.Create(ctx, keyedTasks(&gen, fmt.Sprintf("old%d", i), 1000)); err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				i++
				if _, err := s.Create(ctx, keyedTasks(&gen, fmt.Sprintf("new%d", i), n)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*n), "cpu-ns/task")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
