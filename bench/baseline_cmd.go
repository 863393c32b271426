package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
)

// gcPercent is toc serve's collector target (internal/cli's
// gcPercentDefault): the baselines run with it unless GOGC is set, as toc
// and its load generator do.
const gcPercent = 200

const baselineHelp = `
Runs a workload with no toc: the physical limit of this machine, which the
suite sets toc's figures beside ("bash bench/run.sh baseline" in toc's
repository; "go run . baseline" in the bench module). The suite runs it as
its own process, so that the cost's CPU is the baseline's alone.

Workloads:
  fire      a Go runtime timer per task POSTs what toc's webhook sink would
            send, at the due time, to a receiver like toc bench's, at most
            512 at once (timers + HTTP). With --pull: pull consumers
            (--consumers) claiming 1000 at a time from a server in this
            process that holds the tasks in memory and answers batch acks
            once an fdatasync has covered the acked ids (the pull claim
            server).
  schedule  toc bench's create requests to a server in this process that
            decodes each task and appends it to a log file, answering once
            an fdatasync has covered it (group commit: the requests that
            come during a sync share the next).
  ceiling   the push ceiling: --concurrency senders (default 64) POST a
            64-byte payload back to back to the receiver for --duration
            (default 3s); drain_per_sec is the POSTs answered per second.

The flags and the output (a table, or with --json toc bench's JSON) are
toc bench's; the cost's toc CPU is this process's.

Examples:
  bash bench/run.sh baseline --workload fire --n 50000 --spread 5s
  bash bench/run.sh baseline --workload schedule --n 20000
  bash bench/run.sh baseline --workload ceiling
  bash bench/run.sh baseline --pull --workload fire --n 100000 --spread 0s
`

// runBaseline is the baseline command: "bench baseline ARGS".
func runBaseline(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bash bench/run.sh baseline [flags]\n\n%s\n\nflags:\n", strings.TrimSpace(baselineHelp))
		fs.PrintDefaults()
	}
	workload := fs.String("workload", loadgen.WorkloadFire, "`workload`: fire, schedule or ceiling")
	n := fs.Int("n", 100_000, "number of tasks (fire and schedule)")
	spread := fs.Duration("spread", 10*time.Second, "fire: spread the due times over this `duration`")
	lead := fs.Duration("lead", 0, "fire: the first task is due this long after the start (default 2s plus 100µs per task)")
	grace := fs.Duration("grace", loadgen.GraceDefault, "fire, schedule: after the last due time, stop waiting once no delivery has come for this long (at most --max-wait)")
	maxWait := fs.Duration("max-wait", loadgen.MaxWait, "fire, schedule: stop waiting this `long` after the last due time; tasks not delivered by then count as missing")
	hold := fs.Duration("hold", 0, "schedule: the tasks are due this long after the start (default 2s plus 25µs per task, 10µs in batches)")
	batch := fs.Int("batch", 0, "tasks per request (default 1 for schedule, 1000 otherwise; at most 1000)")
	concurrency := fs.Int("concurrency", loadgen.ConcurrencyDefault, "concurrent scheduling clients (ceiling: senders, default 64)")
	pull := fs.Bool("pull", false, "fire: pull consumers claiming from the pull claim server")
	consumers := fs.Int("consumers", loadgen.ConsumersDefault, "with --pull: concurrent claiming consumers")
	app := fs.String("app", loadgen.TocAppDefault, "`app` of the tasks")
	duration := fs.Duration("duration", baseline.CeilingDurationDefault, "ceiling: how `long` the senders POST")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process during the workload to `file`")
	memProfile := fs.String("memprofile", "", "write the allocations of this process, from its start to the workload's end, to `file` (go tool pprof -sample_index=alloc_space)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return usagef("baseline: unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *workload != loadgen.WorkloadFire && *workload != loadgen.WorkloadSchedule && *workload != baseline.WorkloadCeiling:
		return usagef("baseline: --workload must be fire, schedule or ceiling, got %q", *workload)
	case set["duration"] && *workload != baseline.WorkloadCeiling:
		return usagef("baseline: --duration is for --workload ceiling")
	case *workload == baseline.WorkloadCeiling && *duration <= 0:
		return usagef("baseline: --duration must be positive, got %s", *duration)
	case *pull && *workload != loadgen.WorkloadFire:
		return usagef("baseline: --pull is for --workload fire")
	case *n < 1:
		return usagef("baseline: --n must be at least 1, got %d", *n)
	case *batch < 0 || *batch > 1000:
		return usagef("baseline: --batch must be between 1 and 1000, got %d", *batch)
	case *concurrency < 1:
		return usagef("baseline: --concurrency must be at least 1, got %d", *concurrency)
	case *consumers < 1:
		return usagef("baseline: --consumers must be at least 1, got %d", *consumers)
	case *spread < 0 || *lead < 0 || *grace < 0 || *hold < 0 || *maxWait < 0:
		return usagef("baseline: --spread, --lead, --grace, --hold and --max-wait must not be negative")
	}
	if *batch == 0 {
		*batch = loadgen.BatchDefault
		if *workload == loadgen.WorkloadSchedule {
			*batch = 1
		}
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if *memProfile != "" {
		defer func() {
			if perr := loadgen.WriteHeapProfile(*memProfile); perr != nil && err == nil {
				err = perr
			}
		}()
	}
	stopProfile, err := loadgen.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var progress io.Writer // none: the suite reads the JSON
	fire := loadgen.FireOptions{N: *n, Spread: *spread, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	schedule := loadgen.ScheduleOptions{N: *n, Batch: *batch, Concurrency: *concurrency, Hold: *hold, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	var res *loadgen.Result
	switch {
	case *workload == baseline.WorkloadCeiling:
		senders := baseline.CeilingSendersDefault
		if set["concurrency"] {
			senders = *concurrency
		}
		res, err = baseline.PushCeiling(ctx, baseline.CeilingOptions{Senders: senders, Duration: *duration, App: *app})
	case *workload == loadgen.WorkloadFire && *pull:
		res, err = baselinePull(ctx, *app, *consumers, fire)
	case *workload == loadgen.WorkloadFire:
		res, err = baselineFire(ctx, *app, fire)
	default:
		res, err = baselineSchedule(ctx, *app, schedule)
	}
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	res.System = baseline.SystemBaseline
	if *asJSON {
		b, err := res.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return loadgen.WriteTable(stdout, res)
}

func baselineFire(ctx context.Context, app string, o loadgen.FireOptions) (*loadgen.Result, error) {
	rec := loadgen.NewRecorder(o.N)
	sys, err := baseline.NewTimers(baseline.TimersConfig{Recorder: rec, App: app})
	if err != nil {
		return nil, err
	}
	o.Cost = &loadgen.CostProbe{Toc: []int{os.Getpid()}}
	res, err := loadgen.Fire(ctx, sys, rec, o)
	if cerr := sys.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("stop receiver: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	res.Variant = baseline.VariantTimers
	res.Notes = append(append(res.Notes, sys.Notes()...),
		"baseline: no toc; the cost's toc CPU is this process's (the timers, their HTTP client and the receiver)")
	return res, nil
}

func baselineSchedule(ctx context.Context, app string, o loadgen.ScheduleOptions) (res *loadgen.Result, err error) {
	dir, err := os.MkdirTemp("", "toc-bench-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := baseline.StartLogServer(baseline.GroupLogConfig{Path: filepath.Join(dir, "log"), Preallocate: baseline.PreallocateDefault})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	hc := loadgen.NewHTTPClient(cmp.Or(o.Concurrency, loadgen.ConcurrencyDefault) + 8)
	defer hc.CloseIdleConnections()
	o.Cost = &loadgen.CostProbe{Toc: []int{os.Getpid()}}
	// Push tasks, as toc's runs create; their receiver gets nothing.
	sys, err := loadgen.NewToc(loadgen.TocConfig{
		Clients:  []*client.Client{client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})},
		Recorder: loadgen.NewRecorder(o.N), App: app,
	})
	if err != nil {
		return nil, err
	}
	res, err = loadgen.Schedule(ctx, sys, nil, o)
	if err = errors.Join(err, sys.Close()); err != nil {
		return nil, err
	}
	res.Variant = baseline.VariantGroupLog
	res.Notes = append(res.Notes, srv.Notes()...)
	res.Notes = append(res.Notes, "baseline: no toc; the cost's toc CPU is this process's (the clients and the log server)")
	return res, nil
}

// baselinePull runs the fire workload through pull consumers against
// [baseline.ClaimServer]: tasks in memory, claims answered at once, acks
// made durable with group commit.
func baselinePull(ctx context.Context, app string, consumers int, o loadgen.FireOptions) (res *loadgen.Result, err error) {
	dir, err := os.MkdirTemp("", "toc-bench-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := baseline.StartClaimServer(baseline.GroupLogConfig{Path: filepath.Join(dir, "acks"), Preallocate: baseline.PreallocateDefault})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	hc := loadgen.NewHTTPClient(cmp.Or(o.Concurrency, loadgen.ConcurrencyDefault) + 2*consumers + 8)
	defer hc.CloseIdleConnections()
	rec := loadgen.NewRecorder(o.N)
	sys, err := loadgen.NewToc(loadgen.TocConfig{
		Clients:  []*client.Client{client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})},
		Recorder: rec, Delivery: loadgen.DeliveryPull, App: app, Consumers: consumers,
	})
	if err != nil {
		return nil, err
	}
	o.Cost = &loadgen.CostProbe{Toc: []int{os.Getpid()}}
	res, err = loadgen.Fire(ctx, sys, rec, o)
	if err = errors.Join(err, sys.Close()); err != nil {
		return nil, err
	}
	res.Variant = baseline.VariantClaimServer
	res.Notes = append(append(append(res.Notes, sys.Notes()...), srv.Notes()...),
		"baseline: no toc; the cost's toc CPU is this process's (the consumers and the claim server)")
	return res, nil
}
