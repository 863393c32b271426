package pebblestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// batchWriter is what a task's write adds its keys to: a pebble.Batch, or
// sortedWrites gathering them first.
type batchWriter interface {
	Set(key, value []byte, _ *pebble.WriteOptions) error
	Delete(key []byte, _ *pebble.WriteOptions) error
}

var (
	_ batchWriter = (*pebble.Batch)(nil)
	_ batchWriter = (*sortedWrites)(nil)
)

// sortedWrites gathers the keys of a batch of task writes and adds them to
// a pebble.Batch in key order (applyTo). Pebble inserts a batch's keys
// into its memtable's skiplist one after the other, starting each search
// from where the last insert left off: in the order a task writes them
// (its record, then each index entry, then the next task's) every insert
// searched the whole list, and acking 1000 pull tasks (six keys each) took
// most of its CPU there. In key order each search starts next to its
// place.
type sortedWrites struct {
	ops    []sortedOp
	vals   []byte     // the values, copied (a caller may reuse its buffer)
	byKind []sortedOp // applyTo's
	// keys is where writeTask cuts the keys it adds from (takeKeys), so
	// that a batch's keys cost no allocation per task once a batch as
	// large has been written: two or three per task (its record's key,
	// its old and new index entries) were made and dropped each write.
	keys []byte
}

// sortedWritesFree keeps the gathering buffers from one batch to the
// next: a few, as Pebble takes one write at a time and the store's
// writers (creates, the fire path, outcomes) overlap little. Not a
// sync.Pool, which the collector empties: under load a collection came
// every few batches, and each batch grew its buffers again from nothing
// (a third of a kilobyte per task acked in toc bench's pull burst).
var sortedWritesFree = make(chan *sortedWrites, 2)

// getSortedWrites returns an empty sortedWrites, to give back with put.
func getSortedWrites() *sortedWrites {
	select {
	case w := <-sortedWritesFree:
		return w
	default:
		return new(sortedWrites)
	}
}

// put empties w and keeps it for the next batch, unless it grew past what
// a batch of some thousands of small tasks takes (at most
// cap(sortedWritesFree) are kept, about 4 MiB each).
func (w *sortedWrites) put() {
	if cap(w.vals) > 2<<20 || cap(w.ops) > 32<<10 || cap(w.keys) > 1<<20 {
		return
	}
	w.reset()
	select {
	case sortedWritesFree <- w:
	default:
	}
}

// reset empties w, keeping its buffers.
func (w *sortedWrites) reset() {
	clear(w.ops) // the keys
	w.ops, w.vals, w.byKind, w.keys = w.ops[:0], w.vals[:0], w.byKind[:0], w.keys[:0]
}

// sortedOp is one key written: set to vals[from:to], or deleted.
type sortedOp struct {
	key      []byte
	from, to int32 // its value in vals
	seq      int32 // the order it came in
	del      bool
}

// takeKeys returns an empty buffer with room for n bytes, cut from the
// end of *arena (nil: a buffer of its own), which it extends past them.
// When the arena has no room left, it is replaced by one twice as large:
// the keys cut from the old one keep it alive until they are done with
// (applyTo has copied them into the batch), and the new one, given back
// with its sortedWrites, serves the next batches whole.
func takeKeys(arena *[]byte, n int) []byte {
	if arena == nil {
		return make([]byte, 0, n)
	}
	a := *arena
	if cap(a)-len(a) < n {
		a = make([]byte, 0, max(2*cap(a), n, 4<<10))
	}
	*arena = a[:len(a)+n]
	return a[len(a) : len(a) : len(a)+n]
}

// Set adds a set of key to value. key must stay unchanged until applyTo
// (the key builders make a new one each time); value is copied.
func (w *sortedWrites) Set(key, value []byte, _ *pebble.WriteOptions) error {
	from := len(w.vals)
	w.vals = append(w.vals, value...)
	w.ops = append(w.ops, sortedOp{key: key, from: int32(from), to: int32(len(w.vals)), seq: int32(len(w.ops))})
	return nil
}

// Delete adds a delete of key, which must stay unchanged until applyTo.
func (w *sortedWrites) Delete(key []byte, _ *pebble.WriteOptions) error {
	w.ops = append(w.ops, sortedOp{key: key, seq: int32(len(w.ops)), del: true})
	return nil
}

// batchSize is the size of a pebble.Batch that holds the writes gathered
// (its header, and per write its kind, key and value with their varint
// lengths): a batch made that size at once is not grown and copied again
// and again as a thousand tasks' keys are added.
func (w *sortedWrites) batchSize() int {
	n := batchHeaderLen + len(w.vals)
	for _, o := range w.ops {
		n += 1 + 2*binary.MaxVarintLen32 + len(o.key)
	}
	return n
}

// batchHeaderLen is the size of a pebble.Batch's header (its sequence
// number and count).
const batchHeaderLen = 12

// applyTo adds the writes gathered to b in key order; writes of one key
// keep the order they came in (the last wins).
//
// The keys are first put in order of their first byte (the key's kind:
// records, each index), a pass that keeps the order they came in; each
// kind's run is then sorted only when it is not in order already (a batch
// of tasks in id order writes most kinds in order).
func (w *sortedWrites) applyTo(b *pebble.Batch) error {
	var count [257]int
	for _, o := range w.ops {
		count[int(o.key[0])+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	byKind := slices.Grow(w.byKind[:0], len(w.ops))[:len(w.ops)]
	w.byKind = byKind
	for _, o := range w.ops {
		byKind[count[o.key[0]]] = o
		count[o.key[0]]++
	}
	less := func(x, y sortedOp) int {
		if c := bytes.Compare(x.key, y.key); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	}
	for from := 0; from < len(byKind); {
		to := from + 1
		for to < len(byKind) && byKind[to].key[0] == byKind[from].key[0] {
			to++
		}
		if run := byKind[from:to]; !slices.IsSortedFunc(run, less) {
			slices.SortFunc(run, less)
		}
		from = to
	}
	defer clear(byKind) // the keys
	for _, o := range byKind {
		var err error
		if o.del {
			err = b.Delete(o.key, nil)
		} else {
			err = b.Set(o.key, w.vals[o.from:o.to], nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
