package timingwheel

import (
	"math"
	"math/bits"
)

const (
	slotBits  = 6             // a level has 1<<slotBits slots
	numSlots  = 1 << slotBits // 64
	slotMask  = numSlots - 1
	numLevels = 8 // levels 0..7; a slot of level L spans 64^L ms

	// spanBits is the number of low time bits the levels cover: the top
	// level's window spans 1<<spanBits ms, about 8919 years.
	spanBits = slotBits * numLevels

	// overflowLevel is the pseudo-level holding, in its slot 0, the entries
	// beyond the top level's current window.
	overflowLevel = numLevels

	chunkBits = 10 // entries are allocated in chunks of 1<<chunkBits
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// entry is one scheduled key, linked into the list of its bucket. Links are
// indices into the wheel's chunks rather than pointers, which halves their
// size and, for keys without pointers, keeps the chunks out of the garbage
// collector's scans. Index 0 is never handed out and means nil.
type entry[K comparable] struct {
	key        K
	at         int64
	next, prev uint32 // bucket list; next also chains the free list
	tag        uint32 // the owner's (see AddTagged); in what would be padding
	level      uint8  // 0..numLevels-1, or overflowLevel
	slot       uint8
}

// Wheel[K] holds keys each due at a millisecond. Not safe for concurrent use.
//
// Times are int64 Unix milliseconds supplied by the caller: the wheel reads
// no clock, starts no goroutine and takes no lock. Its owner serialises all
// calls (typically under its own mutex), arms one timer at [Wheel.Next] and
// calls [Wheel.Advance] when it fires. The zero value is not usable: call
// [New].
type Wheel[K comparable] struct {
	// Invariant: every entry is linked in the bucket that placement(at, now)
	// selects. As a consequence level 0 only holds slots >= digit 0 of now,
	// and a level L > 0 only slots > digit L of now, so the lowest set bit
	// of the lowest non-empty level is the earliest bucket. Advance keeps the
	// invariant by moving now either to the start of the earliest bucket
	// (and then expiring or re-placing that bucket's entries) or to a time
	// before it, where no entry's placement changes. checkInvariants in the
	// tests verifies it after every operation.
	now int64

	index  map[K]uint32           // key → entry index
	chunks []*[chunkSize]entry[K] // entry i is chunks[i>>chunkBits][i&chunkMask]
	used   uint32                 // indices handed out so far, counting the reserved 0
	free   uint32                 // head of the free list, chained through next

	heads    [numLevels + 1][numSlots]uint32 // bucket list heads
	occupied [numLevels + 1]uint64           // bit s set iff heads[L][s] != 0

	advancing bool // guards against Advance from inside its callback
}

// New returns an empty wheel whose time is now, in Unix milliseconds (any
// int64 is accepted, including negative ones).
func New[K comparable](now int64) *Wheel[K] {
	return &Wheel[K]{now: now, index: make(map[K]uint32), used: 1}
}

// Now returns the wheel's time: the value given to [New], or the largest
// value given to [Wheel.Advance] since.
func (w *Wheel[K]) Now() int64 { return w.now }

// Len returns the number of keys in the wheel.
func (w *Wheel[K]) Len() int { return len(w.index) }

// Add schedules k at `at`. If k is already present it is moved to `at` (no
// duplicate). An `at` <= Now() is due immediately: returned by the next
// Advance (or by the running one when Add is called from its callback).
//
// Any int64 is accepted: times beyond the top level's window (about 8919
// years past Now) wait in an overflow bucket and are expired at their exact
// time all the same. Add does not allocate once the wheel has held as many
// keys before (the key map aside, which Go grows as it sees fit).
func (w *Wheel[K]) Add(k K, at int64) {
	if i, ok := w.index[k]; ok {
		e := w.entry(i)
		w.unlink(e)
		e.at = at
		w.link(i, e)
		return
	}
	i := w.alloc()
	e := w.entry(i)
	e.key, e.at = k, at
	w.link(i, e)
	w.index[k] = i
}

// AddTagged is Add that also sets k's tag, a number the wheel keeps with
// the key for its owner (the engine's scheduling core keeps the key's app
// there) and hands back with it from [Wheel.AdvanceTags]. It returns the tag
// k had: 0 when it was not present. Add leaves the tag of a key it moves
// as it was, and gives a new key the tag 0. The tag costs no memory: it
// fills what would be padding in the entry.
func (w *Wheel[K]) AddTagged(k K, at int64, tag uint32) (old uint32) {
	if i, ok := w.index[k]; ok {
		e := w.entry(i)
		old = e.tag
		w.unlink(e)
		e.at, e.tag = at, tag
		w.link(i, e)
		return old
	}
	i := w.alloc()
	e := w.entry(i)
	e.key, e.at, e.tag = k, at, tag
	w.link(i, e)
	w.index[k] = i
	return 0
}

// Tag returns k's tag (see [Wheel.AddTagged]) and whether k is present.
func (w *Wheel[K]) Tag(k K) (uint32, bool) {
	i, ok := w.index[k]
	if !ok {
		return 0, false
	}
	return w.entry(i).tag, true
}

// Remove deletes k and reports whether it was present.
func (w *Wheel[K]) Remove(k K) bool {
	i, ok := w.index[k]
	if !ok {
		return false
	}
	w.unlink(w.entry(i))
	delete(w.index, k)
	w.release(i)
	return true
}

// Contains returns the time k is scheduled at, exactly as given to
// [Wheel.Add], and whether k is present.
func (w *Wheel[K]) Contains(k K) (at int64, ok bool) {
	i, ok := w.index[k]
	if !ok {
		return 0, false
	}
	return w.entry(i).at, true
}

// Next returns the earliest time at which Advance could return a key, i.e.
// the start of the earliest non-empty bucket (exact for keys in the finest
// level, a lower bound otherwise), and false when empty. The owner arms its
// timer there and calls Advance when it fires; Advance cascades coarse
// buckets down and the owner calls Next again.
//
// Next returns Now() exactly when some key is due (at <= Now()), and never
// returns less than Now(). It costs a few bit operations and does not
// change the wheel.
func (w *Wheel[K]) Next() (int64, bool) {
	t, _, _, ok := w.next()
	return t, ok
}

// Advance moves the wheel's time to now (never backwards: a smaller now is a
// no-op apart from returning due keys) and calls fn for every key whose at <=
// now, removing it first (fn may call Add/Remove on the wheel). Keys are
// expired in bucket order: all keys of an earlier millisecond before those of
// a later one.
//
// A key is expired in the millisecond max(at, Now() when it was added):
// during fn, Now() returns that millisecond. The order of keys expired in
// the same millisecond is unspecified. Keys that fn adds with an at <= the
// target now are expired by this same call, so when Advance returns no
// key is due and Next() > Now(); fn must therefore not keep re-adding due
// keys forever. fn must not be nil and must not call Advance (which panics).
//
// Advance visits only non-empty buckets: its cost is that of the keys
// expired plus at most one cascade per key and level, however far it jumps.
func (w *Wheel[K]) Advance(now int64, fn func(k K, at int64)) {
	w.AdvanceTags(now, func(k K, at int64, _ uint32) { fn(k, at) })
}

// AdvanceTags is [Wheel.Advance] that also hands fn each key's tag (see
// [Wheel.AddTagged]).
func (w *Wheel[K]) AdvanceTags(now int64, fn func(k K, at int64, tag uint32)) {
	if w.advancing {
		panic("timingwheel: Advance called from its own callback")
	}
	w.advancing = true
	defer func() { w.advancing = false }()

	to := max(now, w.now)
	for {
		t, level, slot, ok := w.next()
		if !ok || t > to {
			break
		}
		// t is the start of the earliest bucket, so moving now there leaves
		// every other entry where placement puts it (see the invariant).
		w.now = t
		if level == 0 {
			w.expire(slot, fn)
		} else {
			w.cascade(level, slot)
		}
	}
	// No bucket starts at or before to: no entry's placement changes.
	w.now = to
}

// All calls fn for every key (any order), without changing the wheel. fn
// must not change the wheel either.
func (w *Wheel[K]) All(fn func(k K, at int64)) {
	for k, i := range w.index {
		fn(k, w.entry(i).at)
	}
}

// placement returns the bucket an entry due at `at` belongs in when the
// wheel's time is now: the lowest level L whose window (64^(L+1) ms, aligned)
// holds both max(at, now) and now, and slot digit L of max(at, now). Times
// outside the top level's window go to the overflow bucket.
func placement(at, now int64) (level, slot int) {
	at = max(at, now)
	x := uint64(at ^ now) // the bits where at and now differ
	if x == 0 {
		return 0, int(at & slotMask)
	}
	level = (bits.Len64(x) - 1) / slotBits
	if level >= numLevels {
		return overflowLevel, 0
	}
	return level, int(at>>(slotBits*level)) & slotMask
}

// next returns the start, level and slot of the earliest non-empty bucket.
func (w *Wheel[K]) next() (t int64, level, slot int, ok bool) {
	for l := range numLevels {
		if bm := w.occupied[l]; bm != 0 {
			// By the invariant, every set bit is at or after now's digit.
			shift := slotBits * l
			s := bits.TrailingZeros64(bm)
			window := w.now >> (shift + slotBits) << (shift + slotBits)
			return window + int64(s)<<shift, l, s, true
		}
	}
	if w.occupied[overflowLevel] != 0 {
		// Overflow entries lie beyond the top window, which cannot be the
		// last one (it would hold every int64 >= now).
		return (w.now>>spanBits + 1) << spanBits, overflowLevel, 0, true
	}
	return 0, 0, 0, false
}

// expire pops and reports every entry of level 0's slot. Entries fn adds at
// a due time land in this same slot and are popped too.
func (w *Wheel[K]) expire(slot int, fn func(K, int64, uint32)) {
	head := &w.heads[0][slot]
	for *head != 0 {
		i := *head
		e := w.entry(i)
		k, at, tag := e.key, e.at, e.tag
		w.unlink(e)
		delete(w.index, k)
		w.release(i)
		fn(k, at, tag)
	}
}

// cascade re-places every entry of a bucket relative to the current now, at
// a lower level (or, for the overflow bucket, anywhere).
func (w *Wheel[K]) cascade(level, slot int) {
	i := w.heads[level][slot]
	w.heads[level][slot] = 0
	w.occupied[level] &^= 1 << slot
	for i != 0 {
		e := w.entry(i)
		next := e.next
		w.link(i, e)
		i = next
	}
}

func (w *Wheel[K]) entry(i uint32) *entry[K] {
	return &w.chunks[i>>chunkBits][i&chunkMask]
}

// link pushes entry i onto the front of the bucket placement selects.
func (w *Wheel[K]) link(i uint32, e *entry[K]) {
	level, slot := placement(e.at, w.now)
	e.level, e.slot = uint8(level), uint8(slot)
	head := &w.heads[level][slot]
	e.prev, e.next = 0, *head
	if *head != 0 {
		w.entry(*head).prev = i
	}
	*head = i
	w.occupied[level] |= 1 << slot
}

// unlink removes e from its bucket.
func (w *Wheel[K]) unlink(e *entry[K]) {
	if e.prev != 0 {
		w.entry(e.prev).next = e.next
	} else {
		w.heads[e.level][e.slot] = e.next
		if e.next == 0 {
			w.occupied[e.level] &^= 1 << e.slot
		}
	}
	if e.next != 0 {
		w.entry(e.next).prev = e.prev
	}
}

// alloc returns the index of an unused entry.
func (w *Wheel[K]) alloc() uint32 {
	if i := w.free; i != 0 {
		w.free = w.entry(i).next
		return i
	}
	if w.used == math.MaxUint32 {
		panic("timingwheel: too many keys")
	}
	if int(w.used>>chunkBits) == len(w.chunks) {
		w.chunks = append(w.chunks, new([chunkSize]entry[K]))
	}
	i := w.used
	w.used++
	return i
}

// release puts entry i on the free list, clearing its key so that it keeps
// nothing alive.
func (w *Wheel[K]) release(i uint32) {
	*w.entry(i) = entry[K]{next: w.free}
	w.free = i
}
