package sqlstore

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// storeOf returns a Store with dbs databases of tables tables that is only
// good for routing.
func storeOf(dbs, tables int) *Store {
	s := &Store{tables: tables}
	for i := range dbs {
		s.dbs = append(s.dbs, &database{index: i})
	}
	return s
}

// TestShardForIsStable pins the hash (values computed apart from Go, by
// FNV-1a 64 in Python): a task's shard is on disk (in its id
// and its table), so it must never change.
func TestShardForIsStable(t *testing.T) {
	s := storeOf(8, 1024) // the design's 8 databases × 1024 tables
	var id task.ID
	binary.BigEndian.PutUint64(id[8:], 0x0123456789abcdef)
	for _, tt := range []struct {
		app, key string
		id       task.ID
		want     uint16
	}{
		{"app", "k", task.ID{}, 1277},
		{"orders", "order-12345", task.ID{}, 5002},
		{"app", "", id, 8037},
		{"other", "", id, 8037}, // a keyless task's shard is its id's
	} {
		if got := s.ShardFor(tt.app, tt.key, tt.id); got != tt.want {
			t.Errorf("ShardFor(%q, %q, %x) = %d, want %d", tt.app, tt.key, tt.id[:], got, tt.want)
		}
	}
}

func TestShardFor(t *testing.T) {
	s := storeOf(2, 4)
	var gen task.IDGenerator
	counts := make([]int, s.Shards())
	for range 8000 {
		id := gen.New(time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC), 0)
		sh := s.ShardFor("app", "", id)
		counts[sh]++
		// The shard field does not feed the hash: writing the shard into
		// the id keeps it.
		binary.BigEndian.PutUint16(id[6:8], sh)
		if again := s.ShardFor("app", "", id); again != sh {
			t.Fatalf("ShardFor changed from %d to %d once the id carried it", sh, again)
		}
		// A keyed task's shard is its key's, whatever the id.
		if a, b := s.ShardFor("app", "k", id), s.ShardFor("app", "k", task.ID{}); a != b {
			t.Fatalf("ShardFor(app, k) depends on the id: %d, %d", a, b)
		}
	}
	for sh, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("shard %d got %d of 8000 keyless ids, want about 1000", sh, n)
		}
	}
	// The separator keeps ("a", "bc") and ("ab", "c") apart.
	hits := 0
	for i := range 100 {
		a := string(rune('a' + i%26))
		if s.ShardFor(a, "bc", task.ID{}) == s.ShardFor(a+"b", "c", task.ID{}) {
			hits++
		}
	}
	if hits == 100 {
		t.Error(`ShardFor does not separate app from key`)
	}
}

func TestRoute(t *testing.T) {
	s := storeOf(2, 4)
	for shard := range 8 {
		db, table, ok := s.route(uint16(shard))
		if !ok || db.index != shard/4 || table != shard%4 {
			t.Errorf("route(%d) = database %v, table %d, %v; want %d, %d", shard, db, table, ok, shard/4, shard%4)
		}
	}
	if _, _, ok := s.route(8); ok {
		t.Error("route(8) of 8 shards succeeded")
	}
}
