package pebblestore

import (
	"encoding/binary"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestBlockCacheKeepsBlocks: once the memtables have grown to their full
// size and one was flushed, the block cache still keeps the blocks read
// (Pebble charges memtables to it: a cache of CacheSize alone held none).
func TestBlockCacheKeepsBlocks(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i int) []byte { return binary.BigEndian.AppendUint32([]byte{'z'}, uint32(i)) }
	v := make([]byte, 4<<10)
	// Enough to fill memtables up to memTableSize (they start at 256 KiB
	// and double) and flush them.
	for i := range 3 * memTableSize / len(v) {
		if err := s.db.Set(key(i), v, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	before := s.db.Metrics().BlockCache
	for range 2 {
		for i := range 100 {
			_, c, err := s.db.Get(key(i))
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
	after := s.db.Metrics().BlockCache
	if hits := after.Hits - before.Hits; hits < 100 {
		t.Fatalf("the second reads of 100 keys hit the block cache %d times (misses %d, cache size %d): it keeps no blocks", hits, after.Misses-before.Misses, after.Size)
	}
}
