package metrics

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// RecentWindow is how far back [Metrics.Recent] reaches.
const RecentWindow = 15 * time.Minute

// recentSeconds is RecentWindow in seconds: the size of the ring.
const recentSeconds = int64(RecentWindow / time.Second)

// sampleMax bounds the lateness values kept for the second under way; past
// it, a uniform sample of the second's attempts (reservoir sampling) stands
// for all of them. The count and the maximum stay exact.
const sampleMax = 1024

// Second sums up the lateness of the delivery attempts that started in one
// second. Percentiles come from a uniform sample of at most 1024 attempts;
// Count and MaxMs are exact.
type Second struct {
	T     int64   `json:"t"` // Unix seconds
	Count int64   `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// recent keeps a Second for each of the last RecentWindow seconds. It is a
// pure data structure: time comes in as an argument, and its owner
// (Metrics) holds the lock.
type recent struct {
	ring [recentSeconds]Second // ring[t % recentSeconds] is second t, if its T says so
	cur  struct {
		t      int64 // the second under way; 0 before the first value
		count  int64
		max    time.Duration
		sample []time.Duration
	}
}

// add records the lateness of an attempt that started at now.
func (r *recent) add(now time.Time, late time.Duration) {
	late = max(late, 0) // never early; a clock step must not show as negative
	s := now.Unix()
	if s != r.cur.t {
		if s < r.cur.t {
			s = r.cur.t // the clock stepped back: count it in the second under way
		} else {
			r.flush()
			r.cur.t = s
		}
	}
	r.cur.count++
	r.cur.max = max(r.cur.max, late)
	if len(r.cur.sample) < sampleMax {
		r.cur.sample = append(r.cur.sample, late)
	} else if i := rand.Int64N(r.cur.count); i < sampleMax {
		r.cur.sample[i] = late
	}
}

// flush files the second under way into the ring.
func (r *recent) flush() {
	if r.cur.count == 0 {
		return
	}
	slices.Sort(r.cur.sample)
	r.ring[r.cur.t%recentSeconds] = Second{
		T:     r.cur.t,
		Count: r.cur.count,
		P50Ms: ms(quantile(r.cur.sample, 0.50)),
		P99Ms: ms(quantile(r.cur.sample, 0.99)),
		MaxMs: ms(r.cur.max),
	}
	r.cur.count, r.cur.max, r.cur.sample = 0, 0, r.cur.sample[:0]
}

// seconds returns the finished seconds of the last RecentWindow before
// now's second, oldest first, leaving out seconds without attempts.
func (r *recent) seconds(now time.Time) []Second {
	s := now.Unix()
	if r.cur.t < s {
		r.flush()
	}
	var out []Second
	for t := s - recentSeconds; t < s; t++ {
		if e := r.ring[((t%recentSeconds)+recentSeconds)%recentSeconds]; e.T == t && e.Count > 0 {
			out = append(out, e)
		}
	}
	return out
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// mergeSeconds merges series of Seconds, each oldest first, into one: see
// [Metrics.RecentOf] for how the figures of one second are combined.
func mergeSeconds(series [][]Second) []Second {
	switch len(series) {
	case 0:
		return nil
	case 1:
		return series[0]
	}
	byT := make(map[int64]Second)
	for _, ss := range series {
		for _, s := range ss {
			m, ok := byT[s.T]
			if !ok {
				byT[s.T] = s
				continue
			}
			m.Count += s.Count
			m.P50Ms, m.P99Ms, m.MaxMs = max(m.P50Ms, s.P50Ms), max(m.P99Ms, s.P99Ms), max(m.MaxMs, s.MaxMs)
			byT[s.T] = m
		}
	}
	out := make([]Second, 0, len(byT))
	for _, s := range byT {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Second) int { return cmp.Compare(a.T, b.T) })
	return out
}
