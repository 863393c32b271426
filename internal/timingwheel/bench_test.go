package timingwheel

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
)

// benchKey is shaped like task.ID, the engine's key.
type benchKey [16]byte

func key(i uint64) benchKey {
	var k benchKey
	binary.BigEndian.PutUint64(k[:8], 0x0190_0000_0000_0000|i*0x9e37) // creation-time-like prefix
	binary.BigEndian.PutUint64(k[8:], i)
	return k
}

const (
	benchNow = int64(1_700_000_000_000)
	batch    = 1024 // keys added or removed between re-fills
)

var sizes = []struct {
	name string
	n    int
}{{"1k", 1 << 10}, {"1M", 1 << 20}}

// filled returns a wheel holding keys 0..n-1 due within the next hour.
func filled(n int) *Wheel[benchKey] {
	r := rand.New(rand.NewPCG(1, 2))
	w := New[benchKey](benchNow)
	for i := range n {
		w.Add(key(uint64(i)), benchNow+1+r.Int64N(hour))
	}
	return w
}

// hourTimes returns batch random times within the next hour.
func hourTimes() []int64 {
	r := rand.New(rand.NewPCG(3, 4))
	ts := make([]int64, batch)
	for i := range ts {
		ts[i] = benchNow + 1 + r.Int64N(hour)
	}
	return ts
}

// BenchmarkAdd adds a new key to a wheel holding n keys (n to n+1024: the
// added keys are removed, off the clock, every 1024 operations).
func BenchmarkAdd(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			w, ts := filled(size.n), hourTimes()
			extra := make([]benchKey, batch)
			for i := range extra {
				extra[i] = key(uint64(size.n + i))
			}
			j := 0
			b.ReportAllocs()
			for b.Loop() {
				if j == batch {
					b.StopTimer()
					for _, k := range extra {
						w.Remove(k)
					}
					j = 0
					b.StartTimer()
				}
				w.Add(extra[j], ts[j])
				j++
			}
		})
	}
}

// BenchmarkMove re-adds a present key at a new time in a wheel of n keys.
func BenchmarkMove(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			w, ts := filled(size.n), hourTimes()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				w.Add(key(uint64(i%size.n)), ts[i%batch])
				i++
			}
		})
	}
}

// BenchmarkRemove removes a key from a wheel holding n keys (n+1024 to n:
// the removed keys are added back, off the clock, every 1024 operations).
func BenchmarkRemove(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			w, ts := filled(size.n), hourTimes()
			extra := make([]benchKey, batch)
			for i := range extra {
				extra[i] = key(uint64(size.n + i))
			}
			j := batch
			b.ReportAllocs()
			for b.Loop() {
				if j == batch {
					b.StopTimer()
					for i, k := range extra {
						w.Add(k, ts[i])
					}
					j = 0
					b.StartTimer()
				}
				w.Remove(extra[j])
				j++
			}
		})
	}
}

// BenchmarkAdvance expires one key per operation from a wheel of n keys due
// 1 ms apart, its callback re-adding the key n ms later, so that keys pass
// through every level they would in use (1M ms is about 17 minutes).
func BenchmarkAdvance(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			w := New[benchKey](benchNow)
			for i := range size.n {
				w.Add(key(uint64(i)), benchNow+1+int64(i))
			}
			n := int64(size.n)
			expired := 0
			readd := func(k benchKey, at int64) {
				expired++
				w.Add(k, at+n)
			}
			b.ReportAllocs()
			for b.Loop() {
				w.Advance(w.Now()+1, readd)
			}
			b.ReportMetric(float64(expired)/float64(b.N), "expired/op")
		})
	}
}

// BenchmarkNext is the owner's call after every change.
func BenchmarkNext(b *testing.B) {
	w := filled(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		w.Next()
	}
}

// BenchmarkBytesPerEntry reports the heap a wheel of n 16-byte keys takes
// per key (entries and key map), measured with runtime.MemStats.
func BenchmarkBytesPerEntry(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			var perEntry float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				w := filled(size.n)
				runtime.GC()
				runtime.ReadMemStats(&after)
				perEntry = float64(after.HeapAlloc-before.HeapAlloc) / float64(size.n)
				runtime.KeepAlive(w)
			}
			b.ReportMetric(perEntry, "B/entry")
		})
	}
}
