package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the workload options.
const (
	LeadBase           = 2 * time.Second
	LeadPerJob         = 100 * time.Microsecond
	GraceDefault       = 10 * time.Second
	BatchDefault       = 1000 // fire and pending; schedule sends one job per request by default
	ConcurrencyDefault = 16
	DueInDefault       = 24 * time.Hour
	// MaxWait bounds the wait for deliveries after the last due time.
	MaxWait = 5 * time.Minute
)

// FireOptions configures [Fire].
type FireOptions struct {
	// N jobs are due at instants spread evenly over Spread, the first Lead
	// after the start (default [LeadBase] plus [LeadPerJob] per job, enough
	// at 10,000 jobs per second): scheduling them all must end before the
	// first is due, or the result carries a note.
	N      int
	Spread time.Duration
	Lead   time.Duration
	// Batch jobs per Schedule call (default [BatchDefault]) from
	// Concurrency clients (default [ConcurrencyDefault]).
	Batch, Concurrency int
	// Grace: after the last due time, stop waiting for stragglers once
	// none has arrived for this long (and at the latest [MaxWait] after
	// it). Default [GraceDefault].
	Grace time.Duration
	// MaxWait bounds the wait after the last due time; jobs not delivered
	// by then count as missing. Default [MaxWait].
	MaxWait time.Duration
	// Cost, when set, says what to measure the cost of the fires on; the
	// result's Cost has the figures. The window opens just before the first
	// job falls due.
	Cost *CostProbe
	// Timeline, when positive, is the width of the buckets of due time the
	// result's Timeline gives the lateness of, from the first due time on.
	// Default 0: no timeline.
	Timeline time.Duration
	// Progress, when set, gets a progress line rewritten with \r.
	Progress io.Writer
	// During, when set, runs in a goroutine of its own from the first due
	// time (first) until every job is delivered or the wait for them ends:
	// then its ctx is cancelled, and Fire waits for it to return.
	During func(ctx context.Context, first time.Time)
}

// Fire schedules o.N jobs due at known instants, waits for their
// deliveries and reports lateness. rec must be the Recorder sys reports to,
// sized for o.N.
func Fire(ctx context.Context, sys System, rec *Recorder, o FireOptions) (*Result, error) {
	if o.Lead == 0 {
		o.Lead = LeadBase + time.Duration(o.N)*LeadPerJob
	}
	o.Batch = cmp.Or(o.Batch, BatchDefault)
	o.Concurrency = cmp.Or(o.Concurrency, ConcurrencyDefault)
	o.Grace = cmp.Or(o.Grace, GraceDefault)
	o.MaxWait = cmp.Or(o.MaxWait, MaxWait)
	if err := checkSizes(o.N, o.Batch, o.Concurrency, rec); err != nil {
		return nil, err
	}
	if o.Spread < 0 || o.Lead < 0 || o.Grace < 0 || o.MaxWait < 0 || o.Timeline < 0 {
		return nil, errors.New("bench: spread, lead, grace, max wait and timeline must not be negative")
	}
	start := time.Now()
	first := start.Add(o.Lead)
	n := int64(o.N)
	sinceFirst := func(seq int) time.Duration {
		return time.Duration(int64(o.Spread) * int64(seq) / n)
	}
	due := func(seq int) time.Time { return first.Add(sinceFirst(seq)) }
	took, err := scheduleAll(ctx, sys, o.N, o.Batch, o.Concurrency, due, o.Progress, "fire: scheduling")
	if err != nil {
		return nil, err
	}
	r := &Result{
		Workload:       WorkloadFire,
		N:              o.N,
		Batch:          o.Batch,
		Concurrency:    o.Concurrency,
		SpreadSec:      o.Spread.Seconds(),
		SchedulePerSec: rate(o.N, took),
		ScheduleSec:    took.Seconds(),
	}
	if late := time.Since(first); late > 0 {
		r.Notef("scheduling ended %s after the first due time: lateness includes it; raise --lead", late.Round(time.Millisecond))
	}
	var cost *CostMeter
	if o.Cost != nil {
		sleep(ctx, time.Until(first.Add(-costLead)))
		cost = o.Cost.Begin(ctx, r)
		if late := time.Since(first); late >= time.Millisecond {
			r.Notef("cost: the window opened %s after the first due time; fires before it count in the divisor, not in the cost", late.Round(time.Millisecond))
		}
	}
	stopDuring := func() {}
	if o.During != nil {
		dctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { // owned by Fire, which cancels it and waits for it
			defer close(done)
			sleep(dctx, time.Until(first))
			if dctx.Err() == nil {
				o.During(dctx, first)
			}
		}()
		stopDuring = func() { cancel(); <-done }
	}
	err = waitDeliveries(ctx, rec, first.Add(o.Spread), o.Grace, o.MaxWait, o.Progress, "fire: delivered")
	stopDuring()
	if err != nil {
		return nil, err
	}
	last := time.Now()
	r.fill(rec, o.MaxWait)
	if o.Spread == 0 {
		r.drained()
	}
	if o.Timeline > 0 {
		r.TimelineMs, r.Timeline = ms(o.Timeline), rec.Timeline(o.Timeline, sinceFirst)
	}
	if cost != nil {
		r.Cost = cost.End(ctx, r, last, r.Fired)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	r.ElapsedSec = time.Since(start).Seconds()
	return r, nil
}

// ScheduleOptions configures [Schedule].
type ScheduleOptions struct {
	// N jobs in Schedule calls of Batch jobs (default 1: one per request)
	// from Concurrency clients (default [ConcurrencyDefault]).
	N, Batch, Concurrency int
	// Hold: every job is due this long after the start, so that none fires
	// while the rate is measured. Default 2s plus 25µs per job (10µs in
	// batches), enough at 40,000 (100,000) jobs per second; when scheduling
	// takes longer the result carries a note.
	Hold time.Duration
	// Grace: after the due time, stop waiting for deliveries once none has
	// arrived for this long (and at the latest [MaxWait] after it). Default
	// [GraceDefault].
	Grace time.Duration
	// MaxWait bounds the wait after the due time; jobs not delivered by then
	// count as missing. Default [MaxWait].
	MaxWait time.Duration
	// Cost, when set, says what to measure the cost of the creates on: the
	// result's CreateCost has the figures, over the scheduling window, per
	// job accepted.
	Cost     *CostProbe
	Progress io.Writer
}

// Schedule measures how fast sys accepts o.N jobs. With a non-nil rec (sized
// for o.N, the Recorder sys reports to) it then waits for the jobs to fire
// and counts them; with a nil one it only schedules.
func Schedule(ctx context.Context, sys System, rec *Recorder, o ScheduleOptions) (*Result, error) {
	o.Batch = cmp.Or(o.Batch, 1)
	o.Concurrency = cmp.Or(o.Concurrency, ConcurrencyDefault)
	if o.Hold == 0 {
		per := 25 * time.Microsecond
		if o.Batch > 1 {
			per = 10 * time.Microsecond
		}
		o.Hold = 2*time.Second + time.Duration(o.N)*per
	}
	o.Grace = cmp.Or(o.Grace, GraceDefault)
	o.MaxWait = cmp.Or(o.MaxWait, MaxWait)
	if err := checkSizes(o.N, o.Batch, o.Concurrency, rec); err != nil {
		return nil, err
	}
	if o.Hold < 0 || o.Grace < 0 || o.MaxWait < 0 {
		return nil, errors.New("bench: hold, grace and max wait must not be negative")
	}
	r := &Result{Workload: WorkloadSchedule, N: o.N, Batch: o.Batch, Concurrency: o.Concurrency}
	var cost *CostMeter
	if o.Cost != nil {
		p := *o.Cost
		p.Settle = time.Nanosecond // a create is done when answered
		// Read the SQL counters at once: waiting SQLWait for PostgreSQL's
		// late statistics would count the transactions of the fires that
		// follow (the jobs are due Hold after the start).
		p.SQLWait = 0
		cost = p.Begin(ctx, r)
	}
	start := time.Now()
	at := start.Add(o.Hold)
	took, clean, err := scheduleUntil(ctx, sys, o.N, o.Batch, o.Concurrency, func(int) time.Time { return at }, at, o.Progress, "schedule")
	if err != nil {
		return nil, err
	}
	if cost != nil {
		r.CreateCost = cost.End(ctx, r, time.Now(), o.N)
		if c := r.CreateCost; o.Cost.SQLWait > 0 && c.SQLXacts != nil {
			// Read at once, PostgreSQL's counters lag up to 10 s: left out
			// rather than given too low.
			c.SQLXacts, c.SQLXactsPerFire, c.SQLStatements, c.SQLStatementsPerFire = nil, nil, nil, nil
			r.Notef("create cost: no SQL transactions or statements: PostgreSQL reports them up to 10 s late, and by then the tasks fire")
		}
	}
	r.SchedulePerSec, r.ScheduleSec = rate(o.N, took), took.Seconds()
	if took > o.Hold {
		// The jobs began to fire before the last was scheduled: only the
		// window before that measures scheduling alone.
		r.SchedulePerSec, r.ScheduleSec = rate(clean, o.Hold), o.Hold.Seconds()
		r.Notef("scheduling took %s, longer than the hold of %s: the rate is of the %d jobs accepted before any was due; the rest were scheduled while jobs fired (raise --hold to measure all)",
			took.Round(time.Millisecond), o.Hold.Round(time.Millisecond), clean)
	}
	if rec == nil {
		r.Notef("deliveries not checked")
		r.ElapsedSec = time.Since(start).Seconds()
		return r, nil
	}
	if err := waitDeliveries(ctx, rec, at, o.Grace, o.MaxWait, o.Progress, "schedule: delivered"); err != nil {
		return nil, err
	}
	r.fill(rec, o.MaxWait)
	r.drained()
	r.Notef("all %d jobs were due at one instant: lateness is how fast the burst drained", o.N)
	r.ElapsedSec = time.Since(start).Seconds()
	return r, nil
}

// PendingOptions configures [Pending].
type PendingOptions struct {
	// N far-future jobs, due DueIn (default [DueInDefault]) after the start
	// and spread over the hour after that, in Schedule calls of Batch jobs
	// (default [BatchDefault]) from Concurrency clients (default
	// [ConcurrencyDefault]).
	N, Batch, Concurrency int
	DueIn                 time.Duration
	// Probe jobs are scheduled after the N, to measure throughput while
	// they are pending. Default N/10, at most 100,000, at least 1.
	Probe int
	// RSS reads the server's resident memory (of a cluster: the sum over
	// its nodes); nil when unknown.
	RSS func() (int64, error)
	// DataDir is the server's data directory; "" when unknown.
	DataDir string
	// Of a cluster, each nil when not measured: Redis reads the used memory
	// of its Redis, RedisPrefix the memory and number of the keys under its
	// prefix, and SQL the size of its SQL databases.
	Redis       func(context.Context) (int64, error)
	RedisPrefix func(context.Context) (keys, bytes int64, err error)
	SQL         func(context.Context) (int64, error)
	Progress    io.Writer
}

// Pending fills sys with o.N far-future jobs and reports the server's memory
// and disk per pending job, and the rate of scheduling o.Probe more on top.
func Pending(ctx context.Context, sys System, o PendingOptions) (*Result, error) {
	o.Batch = cmp.Or(o.Batch, BatchDefault)
	o.Concurrency = cmp.Or(o.Concurrency, ConcurrencyDefault)
	o.DueIn = cmp.Or(o.DueIn, DueInDefault)
	if o.Probe == 0 {
		o.Probe = max(1, min(o.N/10, 100_000))
	}
	if err := checkSizes(o.N, o.Batch, o.Concurrency, nil); err != nil {
		return nil, err
	}
	start := time.Now()
	base := start.Add(o.DueIn)
	due := func(seq int) time.Time {
		// Spread over an hour, out of order, as real timers are.
		return base.Add(time.Duration(int64(seq)*7919%3_600_000) * time.Millisecond)
	}
	r := &Result{Workload: WorkloadPending, N: o.N, Batch: o.Batch, Concurrency: o.Concurrency}
	before := r.measure(ctx, o)

	took, err := scheduleAll(ctx, sys, o.N, o.Batch, o.Concurrency, due, o.Progress, "pending: filling")
	if err != nil {
		return nil, err
	}
	r.FillPerSec = rate(o.N, took)
	probe := func(seq int) time.Time { return due(o.N + seq) }
	took, err = scheduleAll(ctx, offset{sys, o.N}, o.Probe, o.Batch, o.Concurrency, probe, o.Progress, "pending: probe")
	if err != nil {
		return nil, err
	}
	r.SchedulePerSec = rate(o.Probe, took)
	r.ScheduleSec = took.Seconds()

	after := r.measure(ctx, o)
	total := float64(o.N + o.Probe)
	perTask := func(grown int64) *float64 {
		v := float64(grown) / total
		return &v
	}
	if o.RSS != nil {
		r.RSSBytes = after.rss
		r.RSSPerTask = float64(after.rss-before.rss) / total
	}
	if o.DataDir != "" {
		r.DiskBytes = after.disk
		r.DiskPerTask = float64(after.disk-before.disk) / total
	}
	// A figure that could not be read before or after stays nil (the
	// notes say why).
	if before.redisOK && after.redisOK {
		grown := after.redis - before.redis
		r.RedisBytes, r.RedisPerTask = &grown, perTask(grown)
	}
	if before.prefixOK && after.prefixOK {
		grown := after.prefixBytes - before.prefixBytes
		r.RedisPrefixBytes = &grown
		r.Notef("redis: %d keys under the cluster's prefix before the fill, %d after (%d bytes of MEMORY USAGE)", before.prefixKeys, after.prefixKeys, after.prefixBytes)
	}
	if before.sqlOK && after.sqlOK {
		grown := after.sql - before.sql
		r.SQLBytes, r.SQLPerTask = &grown, perTask(grown)
	}
	r.Notef("%d jobs pending (%d + a probe of %d); per-task figures are growth from before the fill", o.N+o.Probe, o.N, o.Probe)
	r.ElapsedSec = time.Since(start).Seconds()
	return r, nil
}

// sizes are the server's figures at one moment; 0 when not measured. The
// ok fields say which of the cluster's were read.
type sizes struct {
	rss, disk, redis, sql    int64
	prefixKeys, prefixBytes  int64
	redisOK, prefixOK, sqlOK bool
}

// measure reads what o says to measure, noting failures in r.
func (r *Result) measure(ctx context.Context, o PendingOptions) sizes {
	var s sizes
	var err error
	note := func(what string) bool {
		if err != nil {
			r.Notef("%s: %v", what, err)
		}
		return err == nil
	}
	if o.RSS != nil {
		s.rss, err = o.RSS()
		note("rss")
	}
	if o.DataDir != "" {
		s.disk, err = DiskUsage(o.DataDir)
		note("disk")
	}
	if o.Redis != nil {
		s.redis, err = o.Redis(ctx)
		s.redisOK = note("redis")
	}
	if o.RedisPrefix != nil {
		s.prefixKeys, s.prefixBytes, err = o.RedisPrefix(ctx)
		s.prefixOK = note("redis prefix")
	}
	if o.SQL != nil {
		s.sql, err = o.SQL(ctx)
		s.sqlOK = note("sql")
	}
	return s
}

// offset shifts the seqs of the jobs it schedules by n.
type offset struct {
	sys System
	n   int
}

func (o offset) Schedule(ctx context.Context, jobs []Job) error {
	for i := range jobs {
		jobs[i].Seq += o.n
	}
	return o.sys.Schedule(ctx, jobs)
}

// fill takes the deliveries from rec, after a wait of at most maxWait.
func (r *Result) fill(rec *Recorder, maxWait time.Duration) {
	t := rec.Tally()
	r.Fired, r.Missing, r.Duplicates, r.Early = t.Fired, t.Missing, t.Duplicates, t.Early
	r.LatenessMs = t.Lateness
	if t.Foreign > 0 {
		r.Notef("%d deliveries of jobs not of this run were ignored", t.Foreign)
	}
	if t.Missing > 0 {
		r.Notef("%d jobs not delivered when the wait ended (after the grace without a delivery, or at the latest %s after the last due time): late or lost, the run cannot tell", t.Missing, maxWait)
	}
}

// drained sets DrainPerSec, of a run whose jobs were all due at one instant.
func (r *Result) drained() {
	if r.Fired > 0 && r.LatenessMs.Max > 0 {
		r.DrainPerSec = math.Round(float64(r.Fired) / (r.LatenessMs.Max / 1000))
	}
}

func checkSizes(n, batch, conc int, rec *Recorder) error {
	switch {
	case n < 1:
		return fmt.Errorf("bench: n must be at least 1, got %d", n)
	case batch < 1:
		return fmt.Errorf("bench: batch must be at least 1, got %d", batch)
	case conc < 1:
		return fmt.Errorf("bench: concurrency must be at least 1, got %d", conc)
	case rec != nil && len(rec.count) != n:
		return fmt.Errorf("bench: recorder is sized for %d jobs, the run has %d", len(rec.count), n)
	}
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// scheduleAll schedules jobs 0 to n-1, due at due(seq), in calls of batch
// jobs from conc goroutines, and returns how long it took. The first error
// stops it. Systems must not keep the slice they are given.
func scheduleAll(ctx context.Context, sys System, n, batch, conc int, due func(int) time.Time, progress io.Writer, label string) (time.Duration, error) {
	took, _, err := scheduleUntil(ctx, sys, n, batch, conc, due, time.Time{}, progress, label)
	return took, err
}

// scheduleUntil is scheduleAll that also counts the jobs accepted before
// cut (all of them when cut is zero).
func scheduleUntil(ctx context.Context, sys System, n, batch, conc int, due func(int) time.Time, cut time.Time, progress io.Writer, label string) (took time.Duration, beforeCut int, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done, early atomic.Int64
	stop := startMeter(progress, label, n, func() int { return int(done.Load()) })
	start := time.Now()
	var wg sync.WaitGroup
	for range min(conc, (n+batch-1)/batch) {
		wg.Go(func() {
			jobs := make([]Job, 0, batch)
			for ctx.Err() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= n {
					return
				}
				hi := min(lo+batch, n)
				jobs = jobs[:0]
				for s := lo; s < hi; s++ {
					jobs = append(jobs, Job{Seq: s, DueAt: due(s)})
				}
				if err := sys.Schedule(ctx, jobs); err != nil {
					cancel(fmt.Errorf("schedule jobs %d to %d: %w", lo, hi-1, err))
					return
				}
				done.Add(int64(hi - lo))
				if cut.IsZero() || time.Now().Before(cut) {
					early.Add(int64(hi - lo))
				}
			}
		})
	}
	wg.Wait()
	took = time.Since(start)
	stop()
	if err := context.Cause(ctx); err != nil {
		return 0, 0, err
	}
	return took, int(early.Load()), nil
}

// waitDeliveries waits until every job of rec has been delivered, or, once
// last (the last due time) has passed, until nothing has arrived for idle,
// or at most until last+maxWait.
func waitDeliveries(ctx context.Context, rec *Recorder, last time.Time, idle, maxWait time.Duration, progress io.Writer, label string) error {
	stop := startMeter(progress, label, len(rec.count), rec.Delivered)
	defer stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	seen, since := rec.Delivered(), time.Now()
	for {
		select {
		case <-rec.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if d := rec.Delivered(); d != seen {
				seen, since = d, now
			}
			quiet := now.Sub(since)
			if since.Before(last) {
				quiet = now.Sub(last)
			}
			if now.After(last) && (quiet >= idle || now.Sub(last) >= maxWait) {
				return nil
			}
		}
	}
}

// startMeter rewrites a progress line on w every 200ms until stop is called;
// stop clears the line. A nil w shows nothing.
func startMeter(w io.Writer, label string, total int, count func() int) (stop func()) {
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
				c := count()
				fmt.Fprintf(w, "\r\033[K%s %d/%d (%.0f%%) %.0f/s", label, c, total,
					100*float64(c)/float64(total), float64(c)/time.Since(start).Seconds())
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}
