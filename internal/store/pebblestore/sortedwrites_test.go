package pebblestore

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
