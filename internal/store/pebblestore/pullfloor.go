package pebblestore

import (
	"bytes"
	"sync"

	"github.com/toc-dev/toc/task"
)

// pullFloors remembers, per app, a key at or below every claimable entry of
// the app, where a claim's scan may start. Without it every claim scanned
// from the start of the app's range and stepped over the entries the claims
// before it deleted, whose tombstones Pebble keeps until a compaction drops
// them: draining a backlog of n in claims of m stepped over n²/2m of them
// (100 000 in claims of 1000: 5 million, a tenth of the drain's CPU, #13).
//
// A floor rises only to the first entry a scan found (or the scan's end
// when it found none), and only when no entry of the app was noted written
// since the scan began; a new entry is noted once its batch has committed,
// and lowers the floor to it. An entry committed while a scan runs is thus
// either seen by the scan or noted before the scan would raise the floor
// (which it then does not), or noted after and lowers it again.
type pullFloors struct {
	mu sync.Mutex
	m  map[string]*pullFloor
}

type pullFloor struct {
	key []byte // nil: the start of the app's range
	gen uint64 // counts the entries of the app written
}

// wrote notes that a committed batch wrote task c over old: a new
// claimable entry of c's app lowers its floor.
func (p *pullFloors) wrote(old, c *task.Task) {
	if c == nil || !waitsUnwoken(c) {
		return
	}
	ms := c.NextAttemptAt.UnixMilli()
	if old != nil && waitsUnwoken(old) && old.App == c.App && old.NextAttemptAt.UnixMilli() == ms {
		return // the same entry
	}
	k := pullKey(c.App, ms, c.ID)
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.m[c.App]
	if f == nil {
		return // at the start already
	}
	f.gen++
	if f.key != nil && bytes.Compare(k, f.key) < 0 {
		f.key = k
	}
}

// start returns where a scan of app's entries may begin (nil: at the start
// of its range) and the generation to give raise.
func (p *pullFloors) start(app string) (key []byte, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pullFloor{}
	}
	f := p.m[app]
	if f == nil {
		f = &pullFloor{}
		p.m[app] = f
	}
	return f.key, f.gen
}

// raise moves app's floor up to key, the first entry a scan begun at
// generation gen found (or the scan's end), unless an entry of app was
// written since it began.
func (p *pullFloors) raise(app string, gen uint64, key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.m[app]
	if f == nil || f.gen != gen || (f.key != nil && bytes.Compare(key, f.key) <= 0) {
		return
	}
	f.key = bytes.Clone(key)
}
