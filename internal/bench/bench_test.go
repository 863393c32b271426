package bench_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/bench"
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
	want := bench.Lateness{Min: 1, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if d := cmp.Diff(want, bench.Summarize(ds)); d != "" {
		t.Errorf("Summarize (-want +got):\n%s", d)
	}
	if d := cmp.Diff(bench.Lateness{}, bench.Summarize(nil)); d != "" {
		t.Errorf("Summarize(nil) (-want +got):\n%s", d)
	}
	one := bench.Summarize([]time.Duration{-1500 * time.Microsecond})
	if one.P50 != -1.5 || one.Max != -1.5 || one.Min != -1.5 {
		t.Errorf("Summarize of one early delivery = %+v, want all -1.5", one)
	}
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := bench.NewRecorder(3)
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
	want := bench.Tally{Fired: 2, Missing: 1, Duplicates: 1, Early: 1, Foreign: 2,
		Lateness: bench.Lateness{Min: -1, P50: -1, P90: 2, P99: 2, P999: 2, Max: 2}}
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

// fakeSystem delivers each job at its due time, by a timer, once or twice.
type fakeSystem struct {
	rec   *bench.Recorder
	twice bool
	fail  error

	mu     sync.Mutex
	calls  []int // batch sizes
	timers []*time.Timer
}

func (f *fakeSystem) Schedule(ctx context.Context, jobs []bench.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, len(jobs))
	if f.fail != nil {
		return f.fail
	}
	for _, j := range jobs {
		deliver := func() { f.rec.Record(j.Seq, j.DueAt, time.Now()) }
		f.timers = append(f.timers, time.AfterFunc(time.Until(j.DueAt), func() {
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
	rec := bench.NewRecorder(250)
	sys := &fakeSystem{rec: rec, twice: true}
	defer sys.stop()
	var progress bytes.Buffer
	res, err := bench.Fire(context.Background(), sys, rec, bench.FireOptions{
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
}

func TestFireMissing(t *testing.T) {
	t.Parallel()
	rec := bench.NewRecorder(10)
	sys := &fakeSystem{rec: bench.NewRecorder(10)} // delivers elsewhere: nothing arrives
	defer sys.stop()
	start := time.Now()
	res, err := bench.Fire(context.Background(), sys, rec, bench.FireOptions{
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
	rec := bench.NewRecorder(40)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	res, err := bench.Schedule(context.Background(), sys, rec, bench.ScheduleOptions{N: 40, Concurrency: 4, Hold: 100 * time.Millisecond})
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
	_, err := bench.Schedule(context.Background(), sys, nil, bench.ScheduleOptions{N: 100, Batch: 10})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestPending(t *testing.T) {
	t.Parallel()
	sys := &fakeSystem{rec: bench.NewRecorder(0)}
	defer sys.stop()
	dir := t.TempDir()
	res, err := bench.Pending(context.Background(), sys, bench.PendingOptions{
		N: 300, Batch: 100, RSS: bench.SelfRSS, DataDir: dir,
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
	sys := &fakeSystem{rec: bench.NewRecorder(0)}
	defer sys.stop()
	var redisReads, sqlReads atomic.Int64
	res, err := bench.Pending(context.Background(), sys, bench.PendingOptions{
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

	plain, err := bench.Pending(context.Background(), sys, bench.PendingOptions{N: 10})
	if err != nil {
		t.Fatal(err)
	}
	if plain.RedisBytes != nil || plain.SQLBytes != nil || plain.RedisPrefixBytes != nil {
		t.Errorf("without Redis and SQL: redis %v, sql %v, want nil", plain.RedisBytes, plain.SQLBytes)
	}

	down := errors.New("connection refused")
	failed, err := bench.Pending(context.Background(), sys, bench.PendingOptions{N: 10,
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
	rec := bench.NewRecorder(10)
	sys := &fakeSystem{rec: rec}
	defer sys.stop()
	// Job 9 is due an hour late: the wait ends at MaxWait, not at the grace.
	late := &lateSystem{fakeSystem: sys, seq: 9, by: time.Hour}
	start := time.Now()
	res, err := bench.Fire(context.Background(), late, rec, bench.FireOptions{
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

func (l *lateSystem) Schedule(ctx context.Context, jobs []bench.Job) error {
	for i := range jobs {
		if jobs[i].Seq == l.seq {
			jobs[i].DueAt = jobs[i].DueAt.Add(l.by)
		}
	}
	return l.fakeSystem.Schedule(ctx, jobs)
}

func TestTocTargets(t *testing.T) {
	t.Parallel()
	fire := &bench.Result{Workload: "fire", N: 100_000, SpreadSec: 10, LatenessMs: bench.Lateness{P99: 4, Max: 60}}
	got := bench.TocTargets(fire)
	if len(got) != 2 || !got[0].Met || got[1].Met {
		t.Errorf("fire targets %+v, want p99 met and max missed", got)
	}
	if got := bench.TocTargets(&bench.Result{Workload: "fire", N: 100, SpreadSec: 1}); len(got) != 0 {
		t.Errorf("targets at 100 fires/s: %+v, want none", got)
	}
	single := &bench.Result{Workload: "schedule", Batch: 1, Concurrency: 16, SchedulePerSec: 41_000}
	if got := bench.TocTargets(single); len(got) != 1 || !got[0].Met {
		t.Errorf("single schedule targets %+v, want one met", got)
	}
	batch := &bench.Result{Workload: "schedule", Batch: 1000, Concurrency: 16, SchedulePerSec: 150_000}
	if got := bench.TocTargets(batch); len(got) != 1 || got[0].Met {
		t.Errorf("batch schedule targets %+v, want one missed", got)
	}
	pending := &bench.Result{Workload: "pending", RSSBytes: 1 << 30, RSSPerTask: 150}
	if got := bench.TocTargets(pending); len(got) != 1 || !got[0].Met {
		t.Errorf("pending targets %+v, want one met", got)
	}
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if n, err := bench.DiskUsage(dir); err != nil || n < 0 {
		t.Fatalf("DiskUsage(empty) = %d, %v", n, err)
	}
	if _, err := bench.DiskUsage(dir + "/nope"); err == nil {
		t.Errorf("DiskUsage of a missing directory: no error")
	}
}
