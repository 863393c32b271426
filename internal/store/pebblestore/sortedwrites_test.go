package pebblestore

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/toc-dev/toc/task"
)

// TestSortedWritesLastWins: sortedWrites adds its keys in key order, and the
// writes of one key in the order they came, so the last one holds.
func TestSortedWritesLastWins(t *testing.T) {
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("b1"), []byte("old"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	var w sortedWrites
	buf := []byte("v1")
	w.Set([]byte("b1"), buf, nil)
	copy(buf, "xx") // the caller reuses its buffer: the value was copied
	w.Delete([]byte("b1"), nil)
	w.Set([]byte("c2"), []byte("first"), nil)
	w.Set([]byte("a0"), []byte("a"), nil)
	w.Delete([]byte("c2"), nil)
	w.Set([]byte("c2"), []byte("last"), nil)
	w.Set([]byte("b0"), []byte("v1"), nil)
	b := db.NewBatch()
	if err := w.applyTo(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a0": "a", "b0": "v1", "b1": "", "c2": "last"}
	for k, v := range want {
		got, c, err := db.Get([]byte(k))
		switch {
		case v == "" && !errors.Is(err, pebble.ErrNotFound):
			t.Errorf("%s: got %q, %v; want it deleted", k, got, err)
		case v == "":
		case err != nil:
			t.Errorf("%s: %v", k, err)
		default:
			if string(got) != v {
				t.Errorf("%s: got %q, want %q", k, got, v)
			}
		}
		if c != nil {
			c.Close()
		}
	}
	// Pebble received them in key order.
	r := b.Reader()
	var keys []string
	for {
		_, k, _, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		keys = append(keys, string(k))
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] < keys[i-1] {
			t.Fatalf("batch keys not in order: %q", keys)
		}
	}
}

// TestWriteTaskKeysFromArena: a task's write gathered in a sortedWrites
// used before cuts its keys (the record's and the index entries', old and
// new) from the sortedWrites' arena, with no allocation of its own, and
// what it gathers is what a pebble.Batch gets from writeTask directly.
func TestWriteTaskKeysFromArena(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	var gen task.IDGenerator
	old := &task.Task{
		ID: gen.New(now, 0), App: "bench", Key: "k1", DueAt: task.Ms(now), NextAttemptAt: now, WakeAt: now,
		Payload: []byte(`{"seq":12345}`), Target: task.Target{Pull: &task.PullTarget{}},
		Retry: task.RetryPolicy{}.WithDefaults(), State: task.Scheduled, CreatedAt: now, UpdatedAt: now,
	}
	acked := old.Clone()
	acked.Attempts = 1
	acked.Record(now, "attempt", 1, "")
	acked.Record(now, "delivered", 1, "")
	acked.State, acked.WakeAt, acked.FinishedAt = task.Delivered, time.Time{}, &now

	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	direct, gathered := db.NewBatch(), db.NewBatch()
	defer direct.Close()
	defer gathered.Close()
	if err := writeTask(direct, old, acked); err != nil {
		t.Fatal(err)
	}
	w := new(sortedWrites)
	if err := writeTask(w, old, acked); err != nil { // the arena grows once
		t.Fatal(err)
	}
	w.reset()
	if n := testing.AllocsPerRun(20, func() {
		w.reset()
		if err := writeTask(w, old, acked); err != nil {
			t.Fatal(err)
		}
	}); n != 0 && !raceEnabled { // the record's buffer comes from a sync.Pool
		t.Errorf("writeTask into a used sortedWrites allocates %v times, want 0", n)
	}
	if err := w.applyTo(gathered); err != nil {
		t.Fatal(err)
	}
	if direct.Count() != gathered.Count() || direct.Len() != gathered.Len() {
		t.Errorf("gathered %d writes (%d bytes), written directly %d (%d bytes)", gathered.Count(), gathered.Len(), direct.Count(), direct.Len())
	}
}

// TestSortedWritesKeptAcrossCollections: the buffers of a sortedWrites
// given back serve the next batch even after collections (a sync.Pool,
// which the collector empties, made each batch grow them again under
// load).
func TestSortedWritesKeptAcrossCollections(t *testing.T) {
	for len(sortedWritesFree) > 0 {
		<-sortedWritesFree
	}
	w := getSortedWrites()
	w.Set(append(takeKeys(&w.keys, 3), "key"...), make([]byte, 1000), nil)
	w.put()
	runtime.GC()
	runtime.GC()
	if w := getSortedWrites(); cap(w.vals) < 1000 || len(w.ops) != 0 || len(w.vals) != 0 || len(w.keys) != 0 {
		t.Errorf("after two collections: a sortedWrites with room for %d bytes of values (%d ops, %d bytes, %d of keys), want the one given back, empty", cap(w.vals), len(w.ops), len(w.vals), len(w.keys))
	}
}
