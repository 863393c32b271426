package loadgen

import (
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Recorder checks off the deliveries of one run's n jobs. It is safe for
// concurrent use and holds no locks: a counter and a lateness slot per job.
type Recorder struct {
	count    []atomic.Uint32
	late     []atomic.Int64 // ns, set by the first delivery of each job
	distinct atomic.Int64
	foreign  atomic.Int64  // deliveries whose seq is not of this run
	done     chan struct{} // closed when every job has been delivered
}

// NewRecorder returns a Recorder for jobs 0 to n-1.
func NewRecorder(n int) *Recorder {
	r := &Recorder{
		count: make([]atomic.Uint32, n),
		late:  make([]atomic.Int64, n),
		done:  make(chan struct{}),
	}
	if n == 0 {
		close(r.done)
	}
	return r
}

// Record notes that job seq, due at due, was received at at. Deliveries of
// a seq outside the run are counted apart and otherwise ignored.
func (r *Recorder) Record(seq int, due, at time.Time) {
	if seq < 0 || seq >= len(r.count) {
		r.foreign.Add(1)
		return
	}
	if r.count[seq].Add(1) != 1 {
		return
	}
	r.late[seq].Store(int64(at.Sub(due)))
	if r.distinct.Add(1) == int64(len(r.count)) {
		close(r.done)
	}
}

// Delivered is the number of jobs delivered at least once so far.
func (r *Recorder) Delivered() int { return int(r.distinct.Load()) }

// Done is closed once every job has been delivered.
func (r *Recorder) Done() <-chan struct{} { return r.done }

// Tally is a Recorder's counts at one moment.
type Tally struct {
	Fired, Missing, Duplicates, Early, Foreign int
	Lateness                                   Lateness
}

// Tally counts what has been recorded so far.
func (r *Recorder) Tally() Tally {
	var t Tally
	lates := make([]time.Duration, 0, len(r.count))
	for i := range r.count {
		c := int(r.count[i].Load())
		if c == 0 {
			t.Missing++
			continue
		}
		t.Fired++
		t.Duplicates += c - 1
		l := time.Duration(r.late[i].Load())
		if l < 0 {
			t.Early++
		}
		lates = append(lates, l)
	}
	t.Foreign = int(r.foreign.Load())
	t.Lateness = Summarize(lates)
	return t
}

// Summarize returns the nearest-rank percentiles of ds in milliseconds. It
// sorts ds.
func Summarize(ds []time.Duration) Lateness {
	if len(ds) == 0 {
		return Lateness{}
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[max(0, min(i, len(ds)-1))])
	}
	return Lateness{Min: ms(ds[0]), P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: ms(ds[len(ds)-1])}
}

// ms converts d to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// Bucket is the lateness of the jobs of a run due within one bucket of its
// timeline: from FromMs to FromMs plus the bucket's width after the first
// due time. Percentiles are nearest-rank, in milliseconds, of the first
// delivery of each job delivered; N counts those jobs.
type Bucket struct {
	FromMs float64 `json:"from_ms"`
	N      int     `json:"n"`
	P50    float64 `json:"p50"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Timeline groups the lateness recorded so far by due time: job seq falls
// in bucket offset(seq)/width, offset(seq) being its due time minus the
// first due time of the run. It returns the buckets that hold a delivered
// job, in order of due time; jobs not delivered count in none. width must
// be positive.
func (r *Recorder) Timeline(width time.Duration, offset func(seq int) time.Duration) []Bucket {
	if width <= 0 {
		panic("bench: Timeline width must be positive")
	}
	byBucket := map[int64][]time.Duration{}
	for seq := range r.count {
		if r.count[seq].Load() == 0 {
			continue
		}
		o := offset(seq)
		i := int64(o / width)
		if o < 0 && o%width != 0 {
			i-- // floor, so a bucket is always [from, from+width)
		}
		byBucket[i] = append(byBucket[i], time.Duration(r.late[seq].Load()))
	}
	keys := slices.Sorted(maps.Keys(byBucket))
	out := make([]Bucket, 0, len(keys))
	for _, i := range keys {
		ds := byBucket[i]
		l := Summarize(ds)
		out = append(out, Bucket{FromMs: ms(time.Duration(i) * width), N: len(ds), P50: l.P50, P99: l.P99, Max: l.Max})
	}
	return out
}
