// Command peers runs toc's fire and schedule workloads (package
// internal/loadgen) through hibiken/asynq on Redis and riverqueue/river on
// PostgreSQL, and prints the same result as `toc bench`.
//
//	go run . --system asynq --poll tight --workload fire --n 50000 --spread 5s --json
//	go run . --system river --workload schedule --batch 1000 --n 100000
//
// asynq uses Redis database --redis-db, which must be empty; it is flushed
// afterwards. River uses a database it creates (--river-db) and drops
// afterwards. Only loopback addresses are expected.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toc-dev/toc/internal/loadgen"
)

// Settings of a peer.
const (
	PollDefaults = "defaults" // the peer's own poll intervals
	PollTight    = "tight"    // the shortest poll intervals the peer accepts (see each peer)
)

// peer is a system under test that must be shut down.
type peer interface {
	loadgen.System
	// Close stops the peer's workers and removes what the run stored.
	Close(ctx context.Context) error
	// Variant describes the peer's settings, like "tight poll (...)".
	Variant() string
}

type options struct {
	system, poll, workload string
	n, batch, concurrency  int
	workers                int
	spread, lead           time.Duration
	grace, hold            time.Duration
	redisAddr              string
	redisDB                int
	pgURL, riverDB         string
	json                   bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.system, "system", "asynq", "peer to run: asynq or river")
	fs.StringVar(&o.poll, "poll", PollDefaults, "poll settings: defaults or tight")
	fs.StringVar(&o.workload, "workload", loadgen.WorkloadFire, "workload: fire or schedule")
	fs.IntVar(&o.n, "n", 50_000, "number of jobs")
	fs.IntVar(&o.batch, "batch", 0, "jobs per insert call (default 1 for schedule, 1000 for fire)")
	fs.IntVar(&o.concurrency, "concurrency", loadgen.ConcurrencyDefault, "concurrent scheduling clients")
	fs.IntVar(&o.workers, "workers", 1000, "concurrent job handlers (asynq Config.Concurrency, River MaxWorkers); toc's --max-in-flight is 1024")
	fs.DurationVar(&o.spread, "spread", 5*time.Second, "fire: spread the due times over this duration")
	fs.DurationVar(&o.lead, "lead", 0, "fire: the first job is due this long after the start (default 2s plus 100µs per job)")
	fs.DurationVar(&o.grace, "grace", loadgen.GraceDefault, "after the last due time, stop waiting once no delivery has come for this long (at most 5m)")
	fs.DurationVar(&o.hold, "hold", 0, "schedule: the jobs are due this long after the start (default 2s plus 25µs per job, 10µs in batches)")
	fs.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "asynq: Redis address")
	fs.IntVar(&o.redisDB, "redis-db", 13, "asynq: Redis database number; must be empty, flushed afterwards")
	fs.StringVar(&o.pgURL, "pg", "postgres://postgres@127.0.0.1:5432/postgres", "river: PostgreSQL URL of a database from which to create --river-db")
	fs.StringVar(&o.riverDB, "river-db", "toc_bench_river", "river: database created for the run and dropped afterwards")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.poll != PollDefaults && o.poll != PollTight {
		return fmt.Errorf("--poll must be %s or %s, got %q", PollDefaults, PollTight, o.poll)
	}
	if o.batch == 0 {
		o.batch = loadgen.BatchDefault
		if o.workload == loadgen.WorkloadSchedule {
			o.batch = 1
		}
	}
	if o.n < 1 || o.workers < 1 {
		return errors.New("--n and --workers must be at least 1")
	}

	rec := loadgen.NewRecorder(o.n)
	var p peer
	var err error
	switch o.system {
	case "asynq":
		p, err = newAsynq(ctx, o, rec)
	case "river":
		p, err = newRiver(ctx, o, rec)
	default:
		return fmt.Errorf("--system must be asynq or river, got %q", o.system)
	}
	if err != nil {
		return err
	}
	var progress io.Writer
	if f, ok := stdout.(*os.File); ok && !o.json {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			progress = stdout
		}
	}
	var res *loadgen.Result
	switch o.workload {
	case loadgen.WorkloadFire:
		res, err = loadgen.Fire(ctx, p, rec, loadgen.FireOptions{
			N: o.n, Spread: o.spread, Lead: o.lead, Batch: o.batch, Concurrency: o.concurrency, Grace: o.grace, Progress: progress,
		})
	case loadgen.WorkloadSchedule:
		res, err = loadgen.Schedule(ctx, p, rec, loadgen.ScheduleOptions{
			N: o.n, Batch: o.batch, Concurrency: o.concurrency, Hold: o.hold, Grace: o.grace, Progress: progress,
		})
	default:
		err = fmt.Errorf("--workload must be fire or schedule, got %q", o.workload)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if cerr := p.Close(cctx); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close %s: %w", o.system, cerr))
	}
	if err != nil {
		return err
	}
	res.System, res.Variant = o.system, p.Variant()
	if o.batch > 1 && o.system == "asynq" {
		res.Notes = append(res.Notes, "asynq has no batch enqueue: a batch is that many Enqueue calls in a row")
	}
	if o.json {
		b, err := res.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return loadgen.WriteTable(stdout, res)
}

// payload is what a job carries to its handler.
type payload struct {
	Seq int   `json:"seq"`
	Due int64 `json:"due"` // unix ns
}

func variant(poll string, tight ...string) string {
	if poll == PollTight {
		return "tight poll (" + strings.Join(tight, ", ") + ")"
	}
	return "defaults"
}
