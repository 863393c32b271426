package loadgen

import (
	"cmp"
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"github.com/toc-dev/toc/task"
)

// WorkloadHot is the Workload of a hot instant's [Result] ([Hot]).
const WorkloadHot = "hot"

// Defaults of [HotOptions].
const (
	// HotSpreadDefault: the jobs of a hot instant are due within one
	// second ("close every unpaid order at midnight").
	HotSpreadDefault = time.Second
	// HotGetRateDefault is the GETs per second during the drain.
	HotGetRateDefault = 50
	// HotRSSEveryDefault is how often the server's RSS is read during the
	// drain.
	HotRSSEveryDefault = 50 * time.Millisecond
	// hotGetTimeout bounds one GET: a slower answer counts as an error.
	hotGetTimeout = 10 * time.Second
)

// HotOptions configures [Hot].
type HotOptions struct {
	// N jobs due within Spread (default [HotSpreadDefault]), the first
	// Lead after the start (default [Fire]'s), scheduled in Batch jobs per
	// call from Concurrency clients; Grace, MaxWait, Cost and Progress are
	// [FireOptions]'.
	N                  int
	Spread, Lead       time.Duration
	Batch, Concurrency int
	Grace, MaxWait     time.Duration
	Cost               *CostProbe
	Progress           io.Writer
	// GetRate is the GETs of a task by id per second during the drain,
	// from the first due time until every job is delivered (or the wait
	// ends), each in its own goroutine so that a slow answer does not
	// delay the next (no coordinated omission); a late wakeup sends every
	// GET due by then. Default [HotGetRateDefault].
	GetRate float64
	// Get fetches a task by id, in this process; IDs returns the ids to
	// fetch, round robin (the jobs' own, as [Toc.IDs] keeps them). IDs and
	// Get or Probe are required.
	Get func(ctx context.Context, id task.ID) error
	IDs func() []task.ID
	// Probe, when set, makes the GETs instead of Get, until ctx is done:
	// [GetProbe.Run] makes them from another process, as a client of the
	// server would, so that their answers wait for the server's goroutines
	// alone and not also for a client's that shares the server's process
	// (an embedded run's).
	Probe func(ctx context.Context, ids []task.ID, rate float64) (HotGets, error)
	// RSS reads the server's resident memory, every RSSEvery (default
	// [HotRSSEveryDefault]) during the drain; nil: not measured.
	RSS      func() (int64, error)
	RSSEvery time.Duration
}

// HotStats are what a hot instant measures besides lateness.
type HotStats struct {
	// GetRate is the GETs per second asked for; Gets those sent during
	// the drain, GetErrors those that failed or timed out; GetMs the
	// latency of the ones answered, in ms.
	GetRate   float64  `json:"get_rate"`
	Gets      int      `json:"gets"`
	GetErrors int      `json:"get_errors"`
	GetMs     Lateness `json:"get_ms"`
	// RSSAtDueBytes is the server's RSS at the first due time (every job
	// pending), PeakRSSBytes the most read during the drain; 0 when not
	// measured.
	RSSAtDueBytes int64 `json:"rss_at_due_bytes,omitempty"`
	PeakRSSBytes  int64 `json:"peak_rss_bytes,omitempty"`
	// DrainSec is from the first due time to the last first delivery.
	DrainSec float64 `json:"drain_sec"`
}

// Hot runs a hot instant: o.N jobs due within o.Spread, as [Fire] does,
// while o.Get fetches a task by id at o.GetRate and o.RSS is read. The
// result's DrainPerSec is the jobs delivered per second from the first due
// time to the last first delivery, and Hot has the GETs' latency and the
// server's peak RSS during the drain.
func Hot(ctx context.Context, sys System, rec *Recorder, o HotOptions) (*Result, error) {
	o.Spread = cmp.Or(o.Spread, HotSpreadDefault)
	o.GetRate = cmp.Or(o.GetRate, HotGetRateDefault)
	o.RSSEvery = cmp.Or(o.RSSEvery, HotRSSEveryDefault)
	if (o.Get == nil && o.Probe == nil) || o.IDs == nil {
		return nil, errors.New("bench: hot: Get or Probe, and IDs, are required")
	}
	if o.GetRate < 0 || o.RSSEvery < 0 {
		return nil, errors.New("bench: hot: the GET rate and the RSS interval must not be negative")
	}
	var (
		mu     sync.Mutex // guards stats and getErr
		stats  HotStats
		getErr string
		first  time.Time
	)
	stats.GetRate = o.GetRate
	during := func(ctx context.Context, at time.Time) {
		first = at
		var wg sync.WaitGroup // the GETs, waited for before returning
		defer wg.Wait()
		ids := o.IDs()
		wg.Add(1)
		go func() { // owned by during, which waits for it
			defer wg.Done()
			var g HotGets
			if o.Probe != nil {
				var err error
				if g, err = o.Probe(ctx, ids, o.GetRate); err != nil {
					g.Err = err.Error()
				}
			} else {
				g = GetAtRate(ctx, ids, o.GetRate, o.Get)
			}
			mu.Lock()
			defer mu.Unlock()
			stats.Gets, stats.GetErrors, stats.GetMs, getErr = g.Gets, g.Errors, Summarize(g.latencies()), g.Err
		}()
		if o.RSS == nil {
			<-ctx.Done()
			return
		}
		t := time.NewTicker(o.RSSEvery)
		defer t.Stop()
		if b, err := o.RSS(); err == nil {
			mu.Lock()
			stats.RSSAtDueBytes, stats.PeakRSSBytes = b, b
			mu.Unlock()
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if b, err := o.RSS(); err == nil {
					mu.Lock()
					stats.PeakRSSBytes = max(stats.PeakRSSBytes, b)
					mu.Unlock()
				}
			}
		}
	}
	r, err := Fire(ctx, sys, rec, FireOptions{
		N: o.N, Spread: o.Spread, Lead: o.Lead, Batch: o.Batch, Concurrency: o.Concurrency,
		Grace: o.Grace, MaxWait: o.MaxWait, Cost: o.Cost, Progress: o.Progress, During: during,
	})
	if err != nil {
		return nil, err
	}
	r.Workload = WorkloadHot
	mu.Lock()
	defer mu.Unlock()
	if !first.IsZero() {
		if last, ok := rec.lastArrival(first, o.Spread); ok && last.After(first) {
			stats.DrainSec = math.Round(last.Sub(first).Seconds()*1000) / 1000
			r.DrainPerSec = math.Round(float64(r.Fired) / last.Sub(first).Seconds())
		}
	}
	r.Hot = &stats
	r.Notef("hot instant: %d jobs due within %s; drain_per_sec is the jobs delivered per second from the first due time to the last first delivery; %s GETs of a task by id per second during the drain (%d sent, %d failed)",
		o.N, o.Spread, num(o.GetRate), stats.Gets, stats.GetErrors)
	if getErr != "" {
		r.Notef("hot instant: the GETs: %s", getErr)
	}
	if stats.GetErrors > 0 {
		r.Notef("hot instant: %d GETs failed or took over %s", stats.GetErrors, hotGetTimeout)
	}
	if o.RSS == nil {
		r.Notef("hot instant: the server's RSS was not read (give --server-pid)")
	}
	return r, nil
}

// lastArrival is the time of the last first delivery of the jobs due
// evenly over spread from first, as [Fire] spreads them; false when none
// was delivered.
func (r *Recorder) lastArrival(first time.Time, spread time.Duration) (time.Time, bool) {
	n := int64(len(r.count))
	var last time.Time
	ok := false
	for i := range r.count {
		if r.count[i].Load() == 0 {
			continue
		}
		due := first.Add(time.Duration(int64(spread) * int64(i) / n))
		at := due.Add(time.Duration(r.late[i].Load()))
		if !ok || at.After(last) {
			last, ok = at, true
		}
	}
	return last, ok
}
