package timingwheel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// harness runs operations on a Wheel and on a map-based model side by side
// and fails tb at the first difference.
type harness struct {
	tb testing.TB
	w  *Wheel[int]

	at  map[int]int64 // model: key → at as added
	due map[int]int64 // key → the millisecond it must expire in: max(at, now at Add)

	// full makes check verify the wheel's internal invariants every time;
	// otherwise they are verified every 16 checks.
	full   bool
	checks int
}

func newHarness(tb testing.TB, now int64) *harness {
	return &harness{
		tb:  tb,
		w:   New[int](now),
		at:  make(map[int]int64),
		due: make(map[int]int64),
	}
}

func (h *harness) add(k int, at int64) {
	h.tb.Helper()
	h.w.Add(k, at)
	h.at[k] = at
	h.due[k] = max(at, h.w.Now())
	if got, ok := h.w.Contains(k); !ok || got != at {
		h.tb.Fatalf("after Add(%d, %d): Contains = %d, %v", k, at, got, ok)
	}
}

func (h *harness) remove(k int) {
	h.tb.Helper()
	_, want := h.at[k]
	if got := h.w.Remove(k); got != want {
		h.tb.Fatalf("Remove(%d) = %v, want %v", k, got, want)
	}
	delete(h.at, k)
	delete(h.due, k)
}

// advance calls Advance(to), checking every expired key against the model as
// it is reported, then calling react (if not nil) which may add or remove.
// It returns the keys expired, in order.
func (h *harness) advance(to int64, react func(k int, at int64)) []int {
	h.tb.Helper()
	before := h.w.Now()
	target := max(to, before)
	var fired []int
	last := int64(math.MinInt64)
	h.w.Advance(to, func(k int, at int64) {
		h.tb.Helper()
		now := h.w.Now()
		wantAt, ok := h.at[k]
		switch {
		case !ok:
			h.tb.Fatalf("Advance(%d) from %d: expired %d@%d, which is not in the model", to, before, k, at)
		case at != wantAt:
			h.tb.Fatalf("Advance(%d) from %d: expired %d@%d, want at %d", to, before, k, at, wantAt)
		case now != h.due[k]:
			// Covers "not early", "not late" and bucket order at once.
			h.tb.Fatalf("Advance(%d) from %d: expired %d@%d at now %d, want at now %d", to, before, k, at, now, h.due[k])
		case now < last || now > target:
			h.tb.Fatalf("Advance(%d) from %d: callback at now %d after one at %d", to, before, now, last)
		}
		if _, ok := h.w.Contains(k); ok {
			h.tb.Fatalf("Advance: %d still present in its callback", k)
		}
		last = now
		delete(h.at, k)
		delete(h.due, k)
		if h.w.Len() != len(h.at) {
			h.tb.Fatalf("Advance: Len = %d in callback, model has %d", h.w.Len(), len(h.at))
		}
		fired = append(fired, k)
		if react != nil {
			react(k, at)
		}
	})
	if h.w.Now() != target {
		h.tb.Fatalf("Advance(%d) from %d: Now = %d, want %d", to, before, h.w.Now(), target)
	}
	for k, at := range h.at {
		if at <= target {
			h.tb.Fatalf("Advance(%d) from %d: %d@%d not expired", to, before, k, at)
		}
	}
	return fired
}

// check compares Len, Contains and Next with the model.
func (h *harness) check() {
	h.tb.Helper()
	h.checks++
	if h.full || h.checks%16 == 0 {
		if err := checkInvariants(h.w); err != nil {
			h.tb.Fatal(err)
		}
	}
	w := h.w
	if w.Len() != len(h.at) {
		h.tb.Fatalf("Len = %d, model has %d", w.Len(), len(h.at))
	}
	minDue := int64(math.MaxInt64)
	for k, at := range h.at {
		if got, ok := w.Contains(k); !ok || got != at {
			h.tb.Fatalf("Contains(%d) = %d, %v; want %d, true", k, got, ok, at)
		}
		minDue = min(minDue, h.due[k])
	}
	next, ok := w.Next()
	if len(h.at) == 0 {
		if ok {
			h.tb.Fatalf("Next = %d, true on an empty wheel", next)
		}
		return
	}
	if !ok {
		h.tb.Fatalf("Next = false with %d keys", len(h.at))
	}
	// The earliest bucket is the one holding the key due first, and Next is
	// its start: exact in level 0, a lower bound elsewhere.
	want := minDue
	switch level, _ := placement(minDue, w.Now()); level {
	case overflowLevel:
		want = (w.Now()>>spanBits + 1) << spanBits
	default:
		want = minDue >> (slotBits * level) << (slotBits * level)
	}
	if next != want || next < w.Now() || next > minDue {
		h.tb.Fatalf("Next = %d at now %d, want %d (earliest due %d)", next, w.Now(), want, minDue)
	}
}

// checkInvariants verifies that every entry is linked, consistently, in the
// bucket placement selects for the current now, that the bitmaps match the
// buckets, and that every entry index is either live or free.
func checkInvariants[K comparable](w *Wheel[K]) error {
	seen := 0
	for level := range numLevels + 1 {
		for slot := range numSlots {
			head := w.heads[level][slot]
			if bit := w.occupied[level]>>slot&1 == 1; bit != (head != 0) {
				return fmt.Errorf("level %d slot %d: bitmap says %v, head %d", level, slot, bit, head)
			}
			prev := uint32(0)
			for i := head; i != 0; i = w.entry(i).next {
				e := w.entry(i)
				if e.prev != prev {
					return fmt.Errorf("entry %d: prev %d, want %d", i, e.prev, prev)
				}
				if int(e.level) != level || int(e.slot) != slot {
					return fmt.Errorf("entry %d in bucket %d/%d says %d/%d", i, level, slot, e.level, e.slot)
				}
				if l, s := placement(e.at, w.now); l != level || s != slot {
					return fmt.Errorf("entry %v@%d in bucket %d/%d at now %d, want %d/%d", e.key, e.at, level, slot, w.now, l, s)
				}
				if j, ok := w.index[e.key]; !ok || j != i {
					return fmt.Errorf("entry %d (%v): index has %d, %v", i, e.key, j, ok)
				}
				prev = i
				seen++
				if seen > len(w.index) {
					return fmt.Errorf("more entries linked than the %d indexed (cycle?)", len(w.index))
				}
			}
		}
	}
	if seen != len(w.index) {
		return fmt.Errorf("%d entries linked, %d indexed", seen, len(w.index))
	}
	free := 0
	for i := w.free; i != 0; i = w.entry(i).next {
		if free++; free > int(w.used) {
			return fmt.Errorf("free list cycle")
		}
	}
	if seen+free+1 != int(w.used) {
		return fmt.Errorf("%d live + %d free + 1 != %d used", seen, free, w.used)
	}
	return nil
}

const (
	hour = int64(3600 * 1000)
	day  = 24 * hour
	year = 365 * day
)

// satAdd returns a+b, saturated to the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// randomAt returns a time relative to now: past, now, near, far, on a window
// boundary, beyond the top window or at the ends of int64.
func randomAt(r *rand.Rand, now int64) int64 {
	switch r.IntN(20) {
	case 0, 1:
		return satAdd(now, -r.Int64N(1<<r.IntN(40)+1))
	case 2:
		return now
	case 3, 4, 5:
		return satAdd(now, r.Int64N(70))
	case 6, 7:
		return satAdd(now, r.Int64N(5000))
	case 8, 9:
		return satAdd(now, r.Int64N(hour))
	case 10:
		return satAdd(now, r.Int64N(30*day))
	case 11:
		return satAdd(now, r.Int64N(10*year))
	case 12, 13, 14:
		// Just before, on or after the start of the next window of a level.
		shift := slotBits * (1 + r.IntN(numLevels))
		next := satAdd(now>>shift<<shift, 1<<shift)
		return satAdd(next, r.Int64N(3)-1)
	case 15:
		return satAdd(now, 1<<spanBits+r.Int64N(1<<spanBits))
	case 16:
		return satAdd(now, r.Int64N(1<<(r.IntN(62)+1)))
	case 17:
		return math.MaxInt64 - r.Int64N(3)
	case 18:
		return math.MinInt64 + r.Int64N(3)
	default:
		return satAdd(now, r.Int64N(64))
	}
}

// randomTo returns a target for Advance.
func randomTo(r *rand.Rand, w *Wheel[int]) int64 {
	now := w.Now()
	switch r.IntN(16) {
	case 0:
		return now
	case 1, 2:
		return satAdd(now, 1)
	case 3, 4:
		return satAdd(now, 2+r.Int64N(8))
	case 5:
		return satAdd(now, r.Int64N(5000))
	case 6:
		return satAdd(now, r.Int64N(2*hour))
	case 7:
		if r.IntN(8) == 0 {
			return satAdd(now, r.Int64N(3*year))
		}
		return satAdd(now, r.Int64N(day))
	case 8, 9:
		if t, ok := w.Next(); ok {
			return t
		}
		return satAdd(now, 1)
	case 10:
		shift := slotBits * (1 + r.IntN(numLevels))
		next := satAdd(now>>shift<<shift, 1<<shift)
		return satAdd(next, r.Int64N(3)-1)
	case 11:
		return satAdd(now, -r.Int64N(100)) // backwards: only returns due keys
	default:
		return satAdd(now, r.Int64N(128))
	}
}

// randomStart returns an initial time: realistic, zero, negative, just
// before a top-window boundary or near the ends of int64.
func randomStart(r *rand.Rand) int64 {
	switch r.IntN(7) {
	case 0:
		return 0
	case 1:
		return -r.Int64N(1 << 50)
	case 2:
		return (1+r.Int64N(100))<<spanBits - r.Int64N(5000)
	case 3:
		return math.MaxInt64 - r.Int64N(10*year)
	case 4:
		return math.MinInt64 + r.Int64N(10*year)
	default:
		return 1_700_000_000_000 + r.Int64N(100*year)
	}
}

// runRandom runs ops random operations on a fresh harness.
func runRandom(t *testing.T, seed uint64, ops int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, randomStart(r))
	keys := []int{4, 16, 64, 512}[r.IntN(4)]
	h.full = keys <= 64
	for range ops {
		switch op := r.IntN(10); {
		case op < 5:
			h.add(r.IntN(keys), randomAt(r, h.w.Now()))
		case op < 6:
			h.remove(r.IntN(keys))
		case op < 7:
			// Advance to just before Next expires nothing.
			next, ok := h.w.Next()
			if ok && next > h.w.Now() {
				if fired := h.advance(next-1, nil); len(fired) != 0 {
					t.Fatalf("Advance(Next()-1 = %d) expired %v", next-1, fired)
				}
			}
		case op < 8:
			// Add and remove from the callback, sometimes at due times.
			dueAdds := 0
			h.advance(randomTo(r, h.w), func(k int, at int64) {
				switch r.IntN(4) {
				case 0:
					h.remove(r.IntN(keys))
				case 1:
					at := randomAt(r, h.w.Now())
					if at <= h.w.Now() {
						if dueAdds >= 8 {
							return
						}
						dueAdds++
					}
					h.add(r.IntN(keys), at)
				}
			})
		default:
			h.advance(randomTo(r, h.w), nil)
		}
		h.check()
	}
	// Draining everything leaves an empty wheel.
	h.advance(math.MaxInt64, nil)
	h.check()
	if err := checkInvariants(h.w); err != nil {
		t.Fatal(err)
	}
}

func TestModelRandom(t *testing.T) {
	t.Parallel()
	seeds, ops := 100, 3000
	if testing.Short() {
		seeds = 20
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runRandom(t, seed, ops)
		})
	}
}

// FuzzWheel interprets its input as an operation sequence and checks the
// wheel against the model after each operation.
//
// The wheel starts at start. Each operation is a byte c, a key byte and an
// unsigned varint u; c&7 selects the operation and c>>3&7 a scale, so that
// the delta is u<<(6*scale) (saturated).
func FuzzWheel(f *testing.F) {
	f.Add(int64(0), []byte{0, 1, 63, 0, 2, 64, 4, 0, 64})
	f.Add(int64(63), []byte{0, 1, 1, 8, 2, 1, 6, 0, 0, 4, 0, 1, 7, 3, 200, 1})
	f.Add(int64(4095), []byte{0, 1, 1, 0, 2, 0, 2, 3, 5, 16, 3, 1, 0x3c, 0, 1, 6, 0, 0})
	f.Add(int64(1_700_000_000_000), []byte{0x38, 1, 2, 0x30, 2, 1, 0x3c, 0, 3, 7, 0, 5, 4, 0, 100, 3, 1, 0})
	f.Add(int64(math.MaxInt64-100), []byte{0x38, 1, 1, 0, 2, 200, 1, 4, 0, 0x7f, 4, 0, 200, 1})
	f.Add(int64(-1), []byte{0x38, 1, 2, 0x08, 2, 9, 0x3c, 0, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, start int64, data []byte) {
		h := newHarness(t, start)
		h.full = true
		for len(data) >= 2 {
			c, k := data[0], int(data[1]%16)
			data = data[2:]
			u, n := binary.Uvarint(data)
			if n <= 0 {
				u, n = 0, len(data)
			}
			data = data[n:]
			delta := int64(u >> 1)
			if shift := slotBits * int(c>>3&7); shift > 0 {
				if delta > math.MaxInt64>>shift {
					delta = math.MaxInt64
				} else {
					delta <<= shift
				}
			}
			now := h.w.Now()
			switch c & 7 {
			case 0, 1:
				h.add(k, satAdd(now, delta))
			case 2:
				h.add(k, satAdd(now, -delta))
			case 3:
				h.remove(k)
			case 4:
				h.advance(satAdd(now, delta), nil)
			case 5:
				h.advance(satAdd(now, -delta), nil)
			case 6:
				if next, ok := h.w.Next(); ok && next > now {
					if fired := h.advance(next-1, nil); len(fired) != 0 {
						t.Fatalf("Advance(Next()-1 = %d) expired %v", next-1, fired)
					}
					h.check()
					h.advance(next, nil)
				}
			case 7:
				// The callback moves key k+1 to a time around now and
				// removes k+2: some moves are due in this same Advance.
				budget := 8
				h.advance(satAdd(now, delta), func(fk int, _ int64) {
					if budget == 0 {
						return
					}
					budget--
					h.add((fk+1)%16, satAdd(h.w.Now(), int64(u%128)-32))
					h.remove((fk + 2) % 16)
				})
			}
			h.check()
		}
		h.advance(math.MaxInt64, nil)
		h.check()
	})
}
