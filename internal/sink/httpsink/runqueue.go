package httpsink

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// While this process's goroutines queue for a CPU, the answer times of a
// receiver's pushes are mostly that queue: an answer that has come waits
// its turn to be read, as does the receiver's own goroutine when it is in
// this process. Little's law then takes the queue for the receiver's
// latency and asks for more connections, which only lengthen the queue:
// a burst of 100 000 pushes to a receiver in the same process (toc bench
// --workload hot) kept every attempt its app may run (512) in flight, and
// each goroutine they woke, the API's included, waited behind the others
// for a CPU: a GET by id took 30–65 ms at p50 during the drain, 4–15 ms
// with the limit at 64 (2-core machine, load 4–7).
//
// cpuQueue tells that state from the scheduler: the mean time a goroutine
// waited runnable for a CPU over the last window (the runtime's
// /sched/latencies:seconds), read once a window for the whole process.
// During that burst it was 1–5 ms with 512 pushes in flight (answers in
// 17–56 ms), 0.3–0.9 ms with 64. A push's answer waits for a CPU a few
// times (the mean counts many waits of none: a goroutine woken by the
// running one runs next), so an answer time under queueHops mean waits
// is the queue's; a slow receiver's (100 ms) is not, even on a busy
// machine.
const (
	// cpuBoundWait is the mean wait for a CPU above which the process
	// counts as CPU-bound.
	cpuBoundWait = time.Millisecond
	// queueHops is how many mean waits for a CPU an answer time may be
	// and still count as the run queue's.
	queueHops = 20
)

// cpuQueue measures the process's run queue, at most once a limitWindow.
type cpuQueue struct {
	mu struct {
		sync.Mutex
		at     time.Time
		sample []metrics.Sample
		counts []uint64 // the histogram's counts at at
		wait   time.Duration
	}
}

// processCPU is the process's one cpuQueue: the run queue is the
// process's, whatever the receiver.
var processCPU cpuQueue

// wait returns the mean time goroutines waited for a CPU over the last
// window; it reads the scheduler again when its last reading is older
// than limitWindow at now.
func (q *cpuQueue) wait(now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Sub(q.mu.at) < limitWindow {
		return q.mu.wait
	}
	if q.mu.sample == nil {
		q.mu.sample = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	}
	metrics.Read(q.mu.sample)
	if q.mu.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0 // a runtime without it
	}
	h := q.mu.sample[0].Value.Float64Histogram()
	if len(q.mu.counts) == len(h.Counts) {
		q.mu.wait = time.Duration(meanWait(h, q.mu.counts) * float64(time.Second))
	}
	q.mu.counts = append(q.mu.counts[:0], h.Counts...)
	q.mu.at = now
	return q.mu.wait
}

// meanWait is the mean of the waits h counts beyond before, in seconds,
// each bucket's taken at its middle (at its finite bound when the other
// is infinite).
func meanWait(h *metrics.Float64Histogram, before []uint64) float64 {
	var n uint64
	var sum float64
	for i, c := range h.Counts {
		d := c - before[i]
		if d == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		mid := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			mid = max(hi, 0)
		case math.IsInf(hi, 1):
			mid = lo
		}
		n += d
		sum += float64(d) * mid
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
