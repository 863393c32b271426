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
	// Get fetches a task by id; IDs returns the ids to fetch, round robin
	// (the jobs' own, as [Toc.IDs] keeps them). Required.
	Get func(ctx context.Context, id task.ID) error
	IDs func() []task.ID
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
	if o.Get == nil || o.IDs == nil {
		return nil, errors.New("bench: hot: Get and IDs are required")
	}
	if o.GetRate < 0 || o.RSSEvery < 0 {
		return nil, errors.New("bench: hot: the GET rate and the RSS interval must not be negative")
	}
	var (
		mu    sync.Mutex // guards stats and lats
		stats HotStats
		lats  []time.Duration
		first time.Time
	)
	stats.GetRate = o.GetRate
	during := func(ctx context.Context, at time.Time) {
		first = at
		var wg sync.WaitGroup // the GETs in flight, waited for before returning
		defer wg.Wait()
		// The GETs keep to the rate from the first due time: a wakeup that
		// comes late (a busy process) sends every GET due by then, where a
		// ticker would drop them.
		interval := time.Duration(float64(time.Second) / o.GetRate)
		get := time.NewTimer(interval)
		defer get.Stop()
		sent := 0
		var rss <-chan time.Time
		if o.RSS != nil {
			t := time.NewTicker(o.RSSEvery)
			defer t.Stop()
			rss = t.C
			if b, err := o.RSS(); err == nil {
				stats.RSSAtDueBytes, stats.PeakRSSBytes = b, b
			}
		}
		ids := o.IDs()
		for {
			select {
			case <-ctx.Done():
				return
			case <-rss:
				if b, err := o.RSS(); err == nil {
					mu.Lock()
					stats.PeakRSSBytes = max(stats.PeakRSSBytes, b)
					mu.Unlock()
				}
			case <-get.C:
				due := int(time.Since(at) / interval)
				for ; sent < due; sent++ {
					if len(ids) == 0 {
						continue // nothing to GET: the run keeps no ids
					}
					id := ids[sent%len(ids)]
					wg.Add(1)
					go func() { // owned by during, which waits for it
						defer wg.Done()
						gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hotGetTimeout)
						defer cancel()
						start := time.Now()
						err := o.Get(gctx, id)
						took := time.Since(start)
						mu.Lock()
						defer mu.Unlock()
						stats.Gets++
						if err != nil {
							stats.GetErrors++
							return
						}
						lats = append(lats, took)
					}()
				}
				get.Reset(time.Until(at.Add(time.Duration(sent+1) * interval)))
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
	stats.GetMs = Summarize(lats)
	if !first.IsZero() {
		if last, ok := rec.lastArrival(first, o.Spread); ok && last.After(first) {
			stats.DrainSec = math.Round(last.Sub(first).Seconds()*1000) / 1000
			r.DrainPerSec = math.Round(float64(r.Fired) / last.Sub(first).Seconds())
		}
	}
	r.Hot = &stats
	r.Notef("hot instant: %d jobs due within %s; drain_per_sec is the jobs delivered per second from the first due time to the last first delivery; %s GETs of a task by id per second during the drain (%d sent, %d failed)",
		o.N, o.Spread, num(o.GetRate), stats.Gets, stats.GetErrors)
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
