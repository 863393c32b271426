package loadgen_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/loadgen"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 1000; i >= 1; i-- { // 1ms to 1000ms, out of order
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	want := loadgen.Lateness{Min: 1, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if d := cmp.Diff(want, loadgen.Summarize(ds)); d != "" {
		t.Errorf("Summarize (-want +got):\n%s", d)
	}
	if d := cmp.Diff(loadgen.Lateness{}, loadgen.Summarize(nil)); d != "" {
		t.Errorf("Summarize(nil) (-want +got):\n%s", d)
	}
	one := loadgen.Summarize([]time.Duration{-1500 * time.Microsecond})
	if one.P50 != -1.5 || one.Max != -1.5 || one.Min != -1.5 {
		t.Errorf("Summarize of one early delivery = %+v, want all -1.5", one)
	}
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := loadgen.NewRecorder(3)
	r.Record(0, due, due.Add(2*time.Millisecond))
	r.Record(0, due, due.Add(9*time.Millisecond)) // a duplicate: lateness stays the first's
	r.Record(2, due, due.Add(-time.Millisecond))  // early
	r.Record(7, due, due)                         // not of this run
	r.Record(-1, due, due)
	select {
	case <-r.Done():
		t.Fatal("Done closed with job 1 missing")
	default:
	}
	got := r.Tally()
	want := loadgen.Tally{Fired: 2, Missing: 1, Duplicates: 1, Early: 1, Foreign: 2,
		Lateness: loadgen.Lateness{Min: -1, P50: -1, P90: 2, P99: 2, P999: 2, Max: 2}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Tally (-want +got):\n%s", d)
	}
	r.Record(1, due, due)
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed with every job delivered")
	}
	if r.Delivered() != 3 {
		t.Errorf("Delivered = %d, want 3", r.Delivered())
	}
}

// TestRecorderTimeline buckets fixed deliveries by due time: a bucket is
// [from, from+width) of the due time minus the first, undelivered jobs and
// empty buckets are left out, and duplicates count once.
func TestRecorderTimeline(t *testing.T) {
	t.Parallel()
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Job seq is due seq*30ms after the first: jobs 0-3 in bucket 0 (0, 30,
	// 60, 90 ms), 4-6 in bucket 1 (120, 150, 180), 7 missing (210), 8-9 in
	// bucket 2 (240, 270), 10-16 missing, 17 in bucket 5 (510).
	sinceFirst := func(seq int) time.Duration { return time.Duration(seq) * 30 * time.Millisecond }
	late := map[int]time.Duration{
		0: 1 * time.Millisecond, 1: 4 * time.Millisecond, 2: 2 * time.Millisecond, 3: 3 * time.Millisecond,
		4: 50 * time.Millisecond, 5: -500 * time.Microsecond, 6: 7 * time.Millisecond,
		8: 2500 * time.Microsecond, 9: 100 * time.Millisecond,
		17: 9 * time.Millisecond,
	}
	r := loadgen.NewRecorder(18)
	for seq, l := range late {
		at := due.Add(sinceFirst(seq))
		r.Record(seq, at, at.Add(l))
	}
	r.Record(4, due, due.Add(time.Hour)) // a duplicate: the first delivery counts
	want := []loadgen.Bucket{
		{FromMs: 0, N: 4, P50: 2, P99: 4, Max: 4},
		{FromMs: 100, N: 3, P50: 7, P99: 50, Max: 50},
		{FromMs: 200, N: 2, P50: 2.5, P99: 100, Max: 100},
		{FromMs: 500, N: 1, P50: 9, P99: 9, Max: 9},
	}
	if d := cmp.Diff(want, r.Timeline(100*time.Millisecond, sinceFirst)); d != "" {
		t.Errorf("Timeline(100ms) (-want +got):\n%s", d)
	}
	// Negative offsets (due before the first) floor to the bucket below.
	neg := func(seq int) time.Duration { return sinceFirst(seq) - 45*time.Millisecond }
	got := r.Timeline(100*time.Millisecond, neg)
	if len(got) == 0 || got[0].FromMs != -100 || got[0].N != 2 {
		t.Errorf("Timeline with offsets from -45ms starts %+v, want bucket -100 holding jobs 0 and 1", got)
	}
	if got := loadgen.NewRecorder(3).Timeline(time.Second, sinceFirst); len(got) != 0 {
		t.Errorf("Timeline with nothing delivered = %+v, want none", got)
	}
}

// fakeSystem delivers each job at its due time, by a timer, once or twice.
type fakeSystem struct {
	rec   *loadgen.Recorder
	twice bool
	fail  error
	late  func(seq int) time.Duration // nil: on time

	mu     sync.Mutex
	calls  []int // batch sizes
	timers []*time.Timer
}

func (f *fakeSystem) Schedule(ctx context.Context, jobs []loadgen.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, len(jobs))
	if f.fail != nil {
		return f.fail
	}
	for _, j := range jobs {
		deliver := func() { f.rec.Record(j.Seq, j.DueAt, time.Now()) }
		at := j.DueAt
		if f.late != nil {
			at = at.Add(f.late(j.Seq))
		}
		f.timers = append(f.timers, time.AfterFunc(time.Until(at), func() {
			deliver()
			if f.twice {
				deliver()
			}
		}))
	}
	return nil
}

func (f *fakeSystem) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.timers {
		t.Stop()
	}
}

func TestFire(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(250)
	sys := &fakeSystem{rec: rec, twice: true}
	defer sys.stop()
	var progress bytes.Buffer
	res, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{
		N: 250, Spread: 200 * time.Millisecond, Lead: 300 * time.Millisecond, Batch: 100, Concurrency: 2, Grace: time.Second, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The run ends when the last job's first delivery arrives, so its
	// second may land after the tally: 249 or 250 duplicates.
	if res.Workload != "fire" || res.N != 250 || res.Fired != 250 || res.Missing != 0 || res.Duplicates < 249 || res.Duplicates > 250 || res.Early != 0 {
		t.Errorf("result %+v, want fire of 250, all (but perhaps the last) fired twice, none early", res)
	}
	if res.SchedulePerSec <= 0 || res.SpreadSec != 0.2 || res.Batch != 100 || res.Concurrency != 2 {
		t.Errorf("result %+v: want a rate, spread 0.2, batch 100, 2 clients", res)
	}
	// 250 jobs in batches of 100: 100, 100, 50 in some order.
	var total int
	for _, c := range sys.calls {
		total += c
	}
	if len(sys.calls) != 3 || total != 250 {
		t.Errorf("Schedule calls %v, want 3 batches of 250 in all", sys.calls)
	}
	if s := progress.String(); s != "" && !strings.HasPrefix(s, "\r") {
		t.Errorf("progress %q, want \\r lines", s)
	}
	if res.Timeline != nil || res.TimelineMs != 0 {
		t.Errorf("timeline %+v without FireOptions.Timeline, want none", res.Timeline)
	}
}

// TestFireTimeline: with a timeline, every delivered job is in one bucket
// of its due time, and the buckets cover the spread.
func TestFireTimeline(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(100)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	res, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{
		N: 100, Spread: 200 * time.Millisecond, Lead: 100 * time.Millisecond, Grace: time.Second, Timeline: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Job seq is due 2ms*seq after the first: 25 jobs in each of 4 buckets.
	var from []float64
	for _, b := range res.Timeline {
		from = append(from, b.FromMs)
		if b.N != 25 || b.Max < b.P99 || b.P99 < b.P50 {
			t.Errorf("bucket %+v: want 25 jobs and p50 <= p99 <= max", b)
		}
	}
	if d := cmp.Diff([]float64{0, 50, 100, 150}, from); d != "" || res.TimelineMs != 50 {
		t.Errorf("timeline of %g ms buckets from (-want +got):\n%s", res.TimelineMs, d)
	}
	var out bytes.Buffer
	if err := loadgen.WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"per 50 ms of due time", "+0.000s", "+0.150s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFireMissing(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(10)
	sys := &fakeSystem{rec: loadgen.NewRecorder(10)} // delivers elsewhere: nothing arrives
	defer sys.stop()
	start := time.Now()
	res, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{
		N: 10, Spread: 10 * time.Millisecond, Lead: 10 * time.Millisecond, Grace: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fired != 0 || res.Missing != 10 {
		t.Errorf("fired %d missing %d, want 0 10", res.Fired, res.Missing)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waited %s for deliveries that never come; grace is 100ms", took)
	}
}

func TestScheduleVerifies(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(40)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	res, err := loadgen.Schedule(context.Background(), sys, rec, loadgen.ScheduleOptions{N: 40, Concurrency: 4, Hold: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Workload != "schedule" || res.Batch != 1 || res.Fired != 40 || res.Missing != 0 || len(sys.calls) != 40 {
		t.Errorf("result %+v after %d calls, want 40 single schedules, all fired", res, len(sys.calls))
	}
}

func TestScheduleError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	sys := &fakeSystem{fail: boom}
	_, err := loadgen.Schedule(context.Background(), sys, nil, loadgen.ScheduleOptions{N: 100, Batch: 10})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestPending(t *testing.T) {
	t.Parallel()
	sys := &fakeSystem{rec: loadgen.NewRecorder(0)}
	defer sys.stop()
	dir := t.TempDir()
	res, err := loadgen.Pending(context.Background(), sys, loadgen.PendingOptions{
		N: 300, Batch: 100, RSS: loadgen.SelfRSS, DataDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Workload != "pending" || res.N != 300 || res.RSSBytes <= 0 || res.SchedulePerSec <= 0 || res.FillPerSec <= 0 {
		t.Errorf("result %+v, want pending of 300 with rss and rates", res)
	}
	var total int
	for _, c := range sys.calls {
		total += c
	}
	if total != 330 { // the 300 and a probe of 30
		t.Errorf("scheduled %d jobs, want 330", total)
	}
}

// TestPendingCluster: the Redis and SQL figures are growth from before the
// fill, and per pending job.
func TestPendingCluster(t *testing.T) {
	t.Parallel()
	sys := &fakeSystem{rec: loadgen.NewRecorder(0)}
	defer sys.stop()
	var redisReads, sqlReads atomic.Int64
	res, err := loadgen.Pending(context.Background(), sys, loadgen.PendingOptions{
		N: 100, Batch: 50,
		Redis: func(context.Context) (int64, error) { return 1000 + 1100*(redisReads.Add(1)-1), nil },
		RedisPrefix: func(context.Context) (int64, int64, error) {
			return 3, 500, nil
		},
		SQL: func(context.Context) (int64, error) { return 8192 + 11000*(sqlReads.Add(1)-1), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	deref := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	derefF := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	// 110 jobs pending: the 100 and a probe of 10.
	if deref(res.RedisBytes) != 1100 || derefF(res.RedisPerTask) != 10 || deref(res.RedisPrefixBytes) != 0 ||
		deref(res.SQLBytes) != 11000 || derefF(res.SQLPerTask) != 100 {
		t.Errorf("redis %d (%g/task), prefix %d, sql %d (%g/task); want 1100 (10), 0, 11000 (100)",
			deref(res.RedisBytes), derefF(res.RedisPerTask), deref(res.RedisPrefixBytes), deref(res.SQLBytes), derefF(res.SQLPerTask))
	}
	if redisReads.Load() != 2 || sqlReads.Load() != 2 {
		t.Errorf("redis read %d times, sql %d, want 2 each (before and after)", redisReads.Load(), sqlReads.Load())
	}

	plain, err := loadgen.Pending(context.Background(), sys, loadgen.PendingOptions{N: 10})
	if err != nil {
		t.Fatal(err)
	}
	if plain.RedisBytes != nil || plain.SQLBytes != nil || plain.RedisPrefixBytes != nil {
		t.Errorf("without Redis and SQL: redis %v, sql %v, want nil", plain.RedisBytes, plain.SQLBytes)
	}

	down := errors.New("connection refused")
	failed, err := loadgen.Pending(context.Background(), sys, loadgen.PendingOptions{N: 10,
		Redis: func(context.Context) (int64, error) { return 0, down },
		SQL:   func(context.Context) (int64, error) { return 0, down },
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed.RedisBytes != nil || failed.SQLBytes != nil {
		t.Errorf("unreadable Redis and SQL: redis %v, sql %v, want nil (not a growth of 0)", failed.RedisBytes, failed.SQLBytes)
	}
	if !slices.ContainsFunc(failed.Notes, func(n string) bool { return strings.Contains(n, "redis: connection refused") }) {
		t.Errorf("notes %q do not say why Redis was not measured", failed.Notes)
	}
}

func TestFireMaxWait(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(10)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	// Job 9 is due an hour late: the wait ends at MaxWait, not at the grace.
	late := &lateSystem{fakeSystem: sys, seq: 9, by: time.Hour}
	start := time.Now()
	res, err := loadgen.Fire(context.Background(), late, rec, loadgen.FireOptions{
		N: 10, Spread: 10 * time.Millisecond, Lead: 10 * time.Millisecond, Grace: time.Hour, MaxWait: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fired != 9 || res.Missing != 1 {
		t.Errorf("fired %d missing %d, want 9 1", res.Fired, res.Missing)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waited %s; MaxWait is 200ms", took)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "1 jobs not delivered") }) {
		t.Errorf("notes %q lack the missing job", res.Notes)
	}
}

// lateSystem delivers job seq late by by.
type lateSystem struct {
	*fakeSystem
	seq int
	by  time.Duration
}

func (l *lateSystem) Schedule(ctx context.Context, jobs []loadgen.Job) error {
	for i := range jobs {
		if jobs[i].Seq == l.seq {
			jobs[i].DueAt = jobs[i].DueAt.Add(l.by)
		}
	}
	return l.fakeSystem.Schedule(ctx, jobs)
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if n, err := loadgen.DiskUsage(dir); err != nil || n < 0 {
		t.Fatalf("DiskUsage(empty) = %d, %v", n, err)
	}
	if _, err := loadgen.DiskUsage(dir + "/nope"); err == nil {
		t.Errorf("DiskUsage of a missing directory: no error")
	}
}

// TestFireCost: with a CostProbe, the counters are read just before the
// first job is due and after the last delivery (the SQL ones SQLWait after
// it), and the result has the cost per fire.
func TestFireCost(t *testing.T) {
	t.Parallel()
	const n, lead = 50, 300 * time.Millisecond
	rec := loadgen.NewRecorder(n)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	var (
		mu                sync.Mutex
		sqlAt, redisAt    []time.Time
		sqlXacts, redisCm = []int64{100, 150}, []int64{1000, 1302}
	)
	probe := &loadgen.CostProbe{
		Toc: []int{os.Getpid()},
		SQL: func(context.Context) (loadgen.SQLCounters, error) {
			mu.Lock()
			defer mu.Unlock()
			sqlAt = append(sqlAt, time.Now())
			return loadgen.SQLCounters{Xacts: sqlXacts[len(sqlAt)-1], Statements: -1, OwnXacts: 1}, nil
		},
		Redis: func(context.Context) (loadgen.RedisCounters, error) {
			mu.Lock()
			defer mu.Unlock()
			redisAt = append(redisAt, time.Now())
			return loadgen.RedisCounters{Commands: redisCm[len(redisAt)-1], OwnCommands: 2}, nil
		},
		Settle:  50 * time.Millisecond,
		SQLWait: 400 * time.Millisecond,
	}
	start := time.Now()
	res, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{N: n, Spread: 100 * time.Millisecond, Lead: lead, Grace: time.Second, Cost: probe})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cost
	if c == nil || c.Fires != n || c.CPUUsPerFire.Toc == nil || c.CPUUsPerFire.SQL != nil || c.CPUUsPerFire.Redis != nil {
		t.Fatalf("cost %+v, want %d fires and the toc CPU only (no SQL or Redis processes given)", c, n)
	}
	deref := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	// (150-100-1)/50 and (1302-1000-2)/50.
	if deref(c.SQLXactsPerFire) != 0.98 || deref(c.RedisCommandsPerFire) != 6 || c.SQLStatementsPerFire != nil {
		t.Errorf("sql %v, redis %v, statements %v per fire; want 0.98, 6, nil", deref(c.SQLXactsPerFire), deref(c.RedisCommandsPerFire), c.SQLStatementsPerFire)
	}
	if len(sqlAt) != 2 || len(redisAt) != 2 {
		t.Fatalf("read sql %d times, redis %d; want 2 each", len(sqlAt), len(redisAt))
	}
	if first := start.Add(lead); sqlAt[0].After(first) || redisAt[0].After(first) {
		t.Errorf("first reads %s and %s after the start, want before the first due time (%s)", sqlAt[0].Sub(start), redisAt[0].Sub(start), lead)
	}
	if gap := sqlAt[1].Sub(redisAt[1]); gap < 300*time.Millisecond {
		t.Errorf("the SQL counters were read %s after the Redis ones, want about SQLWait - Settle = 350ms", gap)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "SQL server's processes were not found") }) {
		t.Errorf("notes %q do not say the SQL CPU is not counted", res.Notes)
	}
}

// TestScheduleCreateCost: a schedule run with a cost probe reports the CPU
// per create, and the SQL transactions per create only when the counters
// are current (MySQL): PostgreSQL's lag (SQLWait), and waiting for them
// would count the fires that follow.
func TestScheduleCreateCost(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, time.Minute} {
		var xacts atomic.Int64
		probe := &loadgen.CostProbe{
			Toc:     []int{os.Getpid()},
			SQLWait: wait,
			SQL: func(context.Context) (loadgen.SQLCounters, error) {
				return loadgen.SQLCounters{Xacts: xacts.Add(10), Statements: -1}, nil
			},
		}
		sys := &fakeSystem{rec: loadgen.NewRecorder(50)} // its timers fire after the run: stopped below
		start := time.Now()
		res, err := loadgen.Schedule(context.Background(), sys, nil, loadgen.ScheduleOptions{N: 50, Batch: 10, Cost: probe})
		sys.stop()
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("SQLWait %s: the run took %s: it waited for the SQL counters", wait, took)
		}
		c := res.CreateCost
		if c == nil || c.Fires != 50 || c.CPUUsPerFire.Toc == nil {
			t.Fatalf("SQLWait %s: create cost %+v, want 50 creates with the CPU", wait, c)
		}
		if got := c.SQLXactsPerFire != nil; got != (wait == 0) {
			t.Errorf("SQLWait %s: SQL transactions per create given: %v", wait, got)
		}
		if res.Cost != nil {
			t.Errorf("SQLWait %s: a fire cost on a schedule run", wait)
		}
	}
}

// TestTwoApp: the burst's figures are a fire run's with no spread; the
// quiet app's jobs, due every Every over Spread, are tallied apart, those
// due while the burst drained too.
func TestTwoApp(t *testing.T) {
	t.Parallel()
	o := loadgen.TwoAppOptions{N: 200, Lead: 300 * time.Millisecond, Spread: 400 * time.Millisecond, Every: 10 * time.Millisecond, Batch: 50, Concurrency: 2, Grace: time.Second}
	if n := o.QuietN(); n != 41 {
		t.Fatalf("QuietN = %d, want 41", n)
	}
	brec, qrec := loadgen.NewRecorder(o.N), loadgen.NewRecorder(o.QuietN())
	burst := &fakeSystem{rec: brec, late: func(seq int) time.Duration { return time.Duration(seq) * time.Millisecond }} // drains at 1000/s
	quiet := &fakeSystem{rec: qrec}
	defer burst.stop()
	defer quiet.stop()
	res, err := loadgen.TwoApp(context.Background(), burst, brec, quiet, qrec, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Workload != "twoapp" || res.Fired != 200 || res.Missing != 0 || res.DrainPerSec <= 0 || res.DrainPerSec > 1200 {
		t.Errorf("result %+v: want 200 fired of the burst, drained at about 1000/s", res)
	}
	q := res.Quiet
	switch {
	case q == nil:
		t.Fatal("no quiet app in the result")
	case q.N != 41 || q.Fired != 41 || q.Missing != 0:
		t.Errorf("quiet app %+v, want 41 fired", q)
	case q.DuringDrainN < 20 || q.DuringDrainN > 30:
		t.Errorf("quiet app: %d due during the drain, want about 20 (199 ms / 10 ms)", q.DuringDrainN)
	case q.LatenessMs.Max > 100 || q.DuringDrainMs.Max > q.LatenessMs.Max:
		t.Errorf("quiet app lateness %+v, during the drain %+v: want timer accuracy", q.LatenessMs, q.DuringDrainMs)
	}
	if _, err := loadgen.TwoApp(context.Background(), burst, brec, quiet, loadgen.NewRecorder(3), o); err == nil {
		t.Error("TwoApp with a quiet recorder of the wrong size: no error")
	}
}
