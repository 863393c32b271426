package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/bench"
	"github.com/toc-dev/toc/internal/bench/storesize"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/server"
	"github.com/toc-dev/toc/internal/store/redisindex"
)

const benchHelp = `
Benchmarks a toc server: a running one (--server), the nodes of a running
cluster (--server URL1,URL2,...), or one started in this process
(--embedded, on a temporary data directory, removed afterwards).

With several servers, each scheduling request goes to the next one in turn,
as a round-robin load balancer in front of the nodes would send it (each
request, not each client: the nodes get equal shares whatever --concurrency
is); pull consumers are spread over the nodes the same way. Deliveries come
to the one receiver in this process, whichever node fires them.

Workloads:
  fire      --n tasks due at instants spread over --spread, the first --lead
            from now; reports the lateness of each delivery (receive time
            minus Toc-Due-At) at a webhook receiver in this process, or with
            --pull at --consumers pull consumers, each claiming up to 1000
            at a time and acking each claim in one request (lateness: claim
            return time minus due).
            With --timeline 100ms, also per 100 ms of due time (from the
            first due time): the count, p50, p99 and max lateness, to see
            when in the run the late deliveries fall. With --spread 0s all
            are due at one instant (a burst): "drained" is the tasks fired
            per second from that instant to the last first delivery.
  schedule  tasks accepted durably per second: one per request (--batch 1)
            or in batches (asking for minimal answers: the ids alone), from
            --concurrency clients; then the tasks fire (all due --hold after
            the start, a burst: "drained" as above) and each is checked off.
  pending   --n far-future tasks (a day ahead, expiring unclaimed a minute
            after their due time) and the server's memory (--server-pid, or
            this process with --embedded) and disk (--data-dir, known with
            --embedded) per pending task, and the schedule rate on top of them.
            Of a cluster: the nodes' memory (--server-pid PID1,PID2,...,
            summed), the growth of its Redis's used_memory and of the keys
            under its prefix (--redis, --redis-prefix) and of its PostgreSQL
            databases (--sql), in all and per pending task.
  twoapp    fair dispatch: --n tasks of app --app due at one instant (a
            burst) and, from that instant for --spread (default 5s), a task
            of app <--app>-quiet every 10 ms; reports the burst as fire
            --spread 0s does (lateness, "drained") and the quiet app's
            lateness, of all its tasks and of those due while the burst
            drained, with how busy the machine was (/proc/pressure/cpu: the
            share of the run some task waited for a CPU). Push only.

Cost per fire (fire) and per create (schedule): with --embedded,
--server-pid, --redis or --sql, what the fires cost over the firing window
(from just before the first task is due to a second after the last
delivery), per task delivered, or what the creates cost over the
scheduling window, per task accepted (their SQL transactions and
statements only on MySQL: PostgreSQL's come too late): the CPU time
(user + system, /proc/PID/stat at 100 ticks/s) of the toc servers
(--server-pid; with --embedded this process, bench clients and receiver
included), of the PostgreSQL server of --sql (the postmaster and all its
children: every database's work counts; MySQL: mysqld or mariadbd) and of
the Redis of --redis (each master's process_id); the transactions of the
--sql databases (pg_stat_database, read --sql-stats-wait after the last
delivery, as PostgreSQL flushes its backends' statistics up to 10 s late;
MySQL: the whole server's Com_commit + Com_rollback) and their statements
(pg_stat_statements when installed in them, else n/a; MySQL: Questions);
and the Redis commands (INFO commandstats over every master, those of Lua
scripts included, the benchmark's own INFO calls left out).

Baseline (--baseline: fire, schedule, ceiling): the same workload with no
toc, the physical limit of this machine; the cost's toc CPU is this
process's. fire: a Go runtime timer per task POSTs what toc's webhook sink
would send, at the due time, to the same kind of receiver, at most 512 at
once. fire --pull: pull consumers (--consumers) claiming 1000 at a time from
a server in this process that holds the tasks in memory and answers batch
acks once an fdatasync has covered the acked ids. schedule: the same create
requests to a server in this process that decodes each task and appends it
to a log file, answering once an fdatasync has covered it (group commit:
the requests that come during a sync share the next). ceiling (the push
ceiling): --concurrency senders (default 64) POST a 64-byte payload back to
back to the receiver for --duration (default 3s); drain_per_sec is the
POSTs answered per second.

Prints a table, or with --json one object with the keys workload, nodes, n,
fired, missing, duplicates, schedule_per_sec, lateness_ms {p50, p90, p99,
p999, max}, rss_bytes, disk_bytes and more (fire with --timeline:
timeline_ms, the width, and timeline [{from_ms, n, p50, p99, max}], the
buckets that hold a delivery; pending on a cluster: redis_bytes,
redis_bytes_per_task, redis_prefix_bytes, sql_bytes, sql_bytes_per_task;
fire with a cost: cost {window_sec, fires, cpu_us_per_fire {total, toc,
sql, redis}, sql_xacts_per_fire, sql_statements_per_fire,
redis_commands_per_fire, and the totals}). The benchmark suite
("bash bench/run.sh") marks each run against the project's targets.

The benchmark suite (toc embedded, pending, cluster and the peers asynq
and River), which rewrites bench/RESULTS.md, is the bench module of toc's
repository: "bash bench/run.sh" (flags: "bash bench/run.sh -h").

Examples:
  toc bench --embedded --workload fire --n 100000 --spread 10s
  toc bench --embedded --workload schedule --batch 1000 --n 500000
  toc bench --server http://127.0.0.1:7070 --server-pid 1234 --data-dir ./toc-data --workload pending --n 1000000
  toc bench --server http://127.0.0.1:7070,http://127.0.0.1:7071 --workload fire --n 20000 --spread 5s
  toc bench --server http://127.0.0.1:7070,http://127.0.0.1:7071 --server-pid 1234,1235 --workload pending \
    --n 100000 --redis 127.0.0.1:6379 --redis-prefix toc --sql postgres://postgres@127.0.0.1:5432/toc
  toc bench --server http://127.0.0.1:7070 --server-pid 1234 --workload fire --n 20000 --spread 5s \
    --redis 127.0.0.1:6379 --sql postgres://postgres@127.0.0.1:5432/toc
  toc bench --baseline --workload fire --n 50000 --spread 5s
  toc bench --baseline --workload schedule --n 20000
  toc bench --baseline --workload ceiling
  toc bench --baseline --pull --workload fire --n 100000 --spread 0s
`

// Defaults of --n per workload.
var benchNDefault = map[string]int{
	bench.WorkloadFire:     100_000,
	bench.WorkloadSchedule: 100_000,
	bench.WorkloadPending:  1_000_000,
	bench.WorkloadTwoApp:   50_000,
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	if len(args) > 0 && args[0] == "suite" {
		return usagef("bench suite: the benchmark suite is its own module now: run \"bash bench/run.sh\" in toc's repository")
	}
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	fs := newFlagSet(e, "bench", benchHelp)
	conn := addConnFlags(fs)
	embedded := fs.Bool("embedded", false, "start a server in this process on a temporary data directory (instead of --server)")
	workload := fs.String("workload", bench.WorkloadFire, "`workload`: fire, schedule, pending, twoapp, or ceiling (with --baseline)")
	n := fs.Int("n", 0, "number of tasks (default 100000 for fire and schedule, 1000000 for pending)")
	spread := fs.Duration("spread", 10*time.Second, "fire: spread the due times over this `duration`")
	timeline := fs.Duration("timeline", 0, "fire: also report the lateness per bucket of due time this `wide` (like 100ms; default none)")
	lead := fs.Duration("lead", 0, "fire: the first task is due this long after the start (default 2s plus 100µs per task)")
	grace := fs.Duration("grace", bench.GraceDefault, "fire, schedule: after the last due time, stop waiting once no delivery has come for this long (at most --max-wait)")
	maxWait := fs.Duration("max-wait", bench.MaxWait, "fire, schedule: stop waiting this `long` after the last due time; tasks not delivered by then count as missing")
	hold := fs.Duration("hold", 0, "schedule: the tasks are due this long after the start (default 2s plus 25µs per task, 10µs in batches)")
	batch := fs.Int("batch", 0, "tasks per request (default 1 for schedule, 1000 otherwise; at most 1000)")
	concurrency := fs.Int("concurrency", bench.ConcurrencyDefault, "concurrent scheduling clients")
	pull := fs.Bool("pull", false, "fire, schedule: deliver to pull consumers instead of a webhook")
	consumers := fs.Int("consumers", bench.ConsumersDefault, "with --pull: concurrent claiming consumers")
	app := fs.String("app", bench.TocAppDefault, "`app` of the benchmark's tasks")
	serverPIDs := fs.String("server-pid", "", "`pid`[,pid...] of the --server processes, to read their memory from /proc (summed)")
	dataDir := fs.String("data-dir", "", "data `directory` of the --server, to measure its size")
	redisAddr := fs.String("redis", "", "pending and fire on a cluster: its Redis `address`[,address...], to measure its memory (pending) or its commands and CPU per fire (fire)")
	redisPrefix := fs.String("redis-prefix", redisindex.PrefixDefault, "pending on a cluster: the nodes' --redis-prefix")
	sqlDSN := fs.String("sql", "", "pending and fire on a cluster: its PostgreSQL `DSN`[,DSN...], to measure the databases' size (pending) or their transactions and CPU per fire (fire; MySQL too)")
	sqlStatsWait := fs.Duration("sql-stats-wait", bench.PostgresStatsWait, "fire with --sql: read the SQL counters this `long` after the last delivery (PostgreSQL flushes its backends' statistics up to 10 s late)")
	baseline := fs.Bool("baseline", false, "fire, schedule, ceiling: run the workload with no toc, the physical-limit baseline (see above)")
	duration := fs.Duration("duration", bench.CeilingDurationDefault, "ceiling: how `long` the senders POST")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process during the workload to `file` (with --embedded it covers the server)")
	memProfile := fs.String("memprofile", "", "write the allocations of this process, from its start to the workload's end, to `file` (go tool pprof -sample_index=alloc_space)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("bench", pos); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if *workload == bench.WorkloadCeiling {
		switch {
		case !*baseline:
			return usagef("bench: --workload ceiling needs --baseline (it runs no toc)")
		case *duration <= 0:
			return usagef("bench: --duration must be positive, got %s", *duration)
		case set["concurrency"] && *concurrency < 1:
			return usagef("bench: --concurrency must be at least 1, got %d", *concurrency)
		}
		defaultGC()
		senders := bench.CeilingSendersDefault
		if set["concurrency"] {
			senders = *concurrency
		}
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		res, err := bench.PushCeiling(ctx, bench.CeilingOptions{Senders: senders, Duration: *duration, App: *app})
		stopProfile()
		if err == nil && *memProfile != "" {
			err = writeHeapProfile(*memProfile)
		}
		if err != nil {
			return err
		}
		return printResult(stdout, res, *asJSON)
	}
	if set["duration"] {
		return usagef("bench: --duration is for --workload ceiling")
	}
	if _, ok := benchNDefault[*workload]; !ok {
		return usagef("bench: --workload must be fire, schedule, pending, twoapp or ceiling, got %q", *workload)
	}
	if *n == 0 {
		*n = benchNDefault[*workload]
	}
	if *batch == 0 {
		*batch = bench.BatchDefault
		if *workload == bench.WorkloadSchedule {
			*batch = 1
		}
	}
	switch {
	case *baseline && (*embedded || set["server"] || set["server-pid"] || set["data-dir"] || set["redis"] || set["sql"]):
		return usagef("bench: --baseline runs no toc: give it without --embedded, --server, --server-pid, --data-dir, --redis and --sql")
	case *baseline && *pull && *workload != bench.WorkloadFire:
		return usagef("bench: --baseline --pull is for --workload fire")
	case *baseline && (*workload == bench.WorkloadPending || *workload == bench.WorkloadTwoApp):
		return usagef("bench: --baseline is for fire and schedule")
	case *workload == bench.WorkloadTwoApp && (*pull || set["redis"] || set["sql"] || set["timeline"] || set["hold"]):
		return usagef("bench: --workload twoapp is push only, without --pull, --redis, --sql, --timeline and --hold")
	case *embedded && (set["server"] || set["server-pid"] || set["data-dir"] || set["redis"] || set["sql"]):
		return usagef("bench: give --embedded or --server (with --server-pid, --data-dir, --redis, --sql), not both")
	case (set["redis"] || set["sql"]) && *workload == bench.WorkloadSchedule:
		return usagef("bench: --redis and --sql are for --workload pending and fire")
	case set["redis-prefix"] && *workload != bench.WorkloadPending:
		return usagef("bench: --redis-prefix is for --workload pending")
	case set["sql-stats-wait"] && !set["sql"]:
		return usagef("bench: --sql-stats-wait needs --sql")
	case set["redis-prefix"] && !set["redis"]:
		return usagef("bench: --redis-prefix needs --redis")
	case *n < 1:
		return usagef("bench: --n must be at least 1, got %d", *n)
	case *batch < 1 || *batch > 1000:
		return usagef("bench: --batch must be between 1 and 1000, got %d", *batch)
	case *concurrency < 1:
		return usagef("bench: --concurrency must be at least 1, got %d", *concurrency)
	case *consumers < 1:
		return usagef("bench: --consumers must be at least 1, got %d", *consumers)
	case *spread < 0 || *lead < 0 || *grace < 0 || *hold < 0 || *maxWait < 0 || *sqlStatsWait < 0:
		return usagef("bench: --spread, --lead, --grace, --hold, --max-wait and --sql-stats-wait must not be negative")
	case *pull && *workload == bench.WorkloadPending:
		return usagef("bench: --pull is for fire and schedule")
	case set["timeline"] && *workload != bench.WorkloadFire:
		return usagef("bench: --timeline is for --workload fire")
	case *timeline < 0:
		return usagef("bench: --timeline must not be negative")
	}

	delivery := bench.DeliveryPush
	switch {
	case *workload == bench.WorkloadPending:
		delivery = bench.DeliveryNone
	case *pull:
		delivery = bench.DeliveryPull
	}
	var progress io.Writer
	if !*asJSON && isTerminal(stdout) {
		progress = stdout
	}
	fire := bench.FireOptions{N: *n, Spread: *spread, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait, Timeline: *timeline, Progress: progress}
	schedule := bench.ScheduleOptions{N: *n, Batch: *batch, Concurrency: *concurrency, Hold: *hold, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	defaultGC() // the baselines and the bench clients run as toc serve does
	if *memProfile != "" {
		defer func() {
			if perr := writeHeapProfile(*memProfile); perr != nil && err == nil {
				err = perr
			}
		}()
	}
	if *baseline {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
		res, err := runBaseline(ctx, *workload, *app, *pull, *consumers, fire, schedule)
		if err != nil {
			return err
		}
		return printResult(stdout, res, *asJSON)
	}
	pids, err := parsePIDs(*serverPIDs)
	if err != nil {
		return err
	}
	var (
		clients []*client.Client
		notes   []string
		rss     func() (int64, error)
		dir     = *dataDir
		conns   = *concurrency + *consumers*2 + 8 // a consumer claims on one connection and acks on another
		where   = "server"
	)
	hc := bench.NewHTTPClient(conns)
	defer hc.CloseIdleConnections()
	if *embedded {
		srv, err := startEmbedded(ctx, stderr, nil)
		if err != nil {
			return err
		}
		defer func() {
			if serr := srv.stop(); serr != nil {
				fmt.Fprintf(stderr, "toc bench: embedded server: %v\n", serr)
			}
		}()
		clients = []*client.Client{client.New(client.Config{BaseURL: srv.url, HTTPClient: hc})}
		rss, dir = bench.SelfRSS, srv.dir
		where = "embedded"
		notes = append(notes, "embedded: the server runs in the bench process; rss_bytes is that process (server, bench clients and receiver)")
		if os.Getenv("TOC_NOSYNC") != "" {
			notes = append(notes, "TOC_NOSYNC is set: the embedded store does not fsync")
		}
	} else {
		urls, err := benchServers(conn, e)
		if err != nil {
			return err
		}
		// The same servers and token, with a client that keeps enough
		// connections open.
		for _, u := range urls {
			clients = append(clients, client.New(client.Config{BaseURL: u, Token: cmp.Or(conn.token, e.getenv(EnvToken)), HTTPClient: hc}))
		}
		if len(urls) > 1 {
			where = fmt.Sprintf("%d servers", len(urls))
		}
		if len(pids) > 0 {
			rss = func() (int64, error) { return sumRSS(pids) }
		}
	}
	for i, c := range clients {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Ready(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: server %d of %d not ready: %w", i+1, len(clients), err)
		}
	}
	pending := bench.PendingOptions{N: *n, Batch: *batch, Concurrency: *concurrency, RSS: rss, DataDir: dir, Progress: progress}
	if *redisAddr != "" && *workload == bench.WorkloadPending {
		r := storesize.OpenRedis(strings.Split(*redisAddr, ","), *redisPrefix)
		defer r.Close()
		pending.Redis, pending.RedisPrefix = r.UsedMemory, r.Prefix
		notes = append(notes, "redis_bytes is the growth of the whole Redis's used_memory (other clients of a shared Redis count too); redis_prefix_bytes that of the keys under the cluster's prefix")
	}
	if *sqlDSN != "" && *workload == bench.WorkloadPending {
		dsns := strings.Split(*sqlDSN, ",")
		pending.SQL = func(ctx context.Context) (int64, error) { return storesize.PostgresSize(ctx, dsns) }
	}
	if *workload != bench.WorkloadPending && *workload != bench.WorkloadTwoApp && (*embedded || len(pids) > 0 || *redisAddr != "" || *sqlDSN != "") {
		probe := &bench.CostProbe{Toc: pids}
		if *embedded {
			probe.Toc = []int{os.Getpid()}
			notes = append(notes, "embedded: the cost's toc CPU is this process's (server, bench clients and receiver)")
		}
		if *redisAddr != "" {
			r := storesize.OpenRedis(strings.Split(*redisAddr, ","), *redisPrefix)
			defer r.Close()
			probe.Redis = redisCounters(r)
		}
		if *redisAddr != "" || *sqlDSN != "" {
			notes = append(notes, "cost: the SQL server's CPU and transactions and the Redis's commands count all their clients' work, not the cluster's alone")
		}
		if *sqlDSN != "" {
			dsns := strings.Split(*sqlDSN, ",")
			probe.SQL = sqlCounters(dsns)
			probe.SQLWait = *sqlStatsWait
			if !set["sql-stats-wait"] && !strings.HasPrefix(dsns[0], "postgres") {
				probe.SQLWait = 0 // MySQL's status counters are current
			}
		}
		fire.Cost, schedule.Cost = probe, probe
	}

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	var rec *bench.Recorder
	if delivery != bench.DeliveryNone {
		rec = bench.NewRecorder(*n)
	}
	sys, err := bench.NewToc(bench.TocConfig{Clients: clients, Recorder: rec, Delivery: delivery, App: *app, Consumers: *consumers})
	if err != nil {
		return err
	}
	twoApp := bench.TwoAppOptions{N: *n, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	if set["spread"] {
		twoApp.Spread = *spread
	}
	var quiet *bench.Toc
	var quietRec *bench.Recorder
	if *workload == bench.WorkloadTwoApp {
		quietRec = bench.NewRecorder(twoApp.QuietN())
		quiet, err = bench.NewToc(bench.TocConfig{Clients: clients, Recorder: quietRec, Delivery: delivery, App: *app + "-quiet"})
		if err != nil {
			_ = sys.Close()
			return err
		}
	}
	var res *bench.Result
	switch *workload {
	case bench.WorkloadFire:
		res, err = bench.Fire(ctx, sys, rec, fire)
	case bench.WorkloadSchedule:
		res, err = bench.Schedule(ctx, sys, rec, schedule)
	case bench.WorkloadPending:
		res, err = bench.Pending(ctx, sys, pending)
	case bench.WorkloadTwoApp:
		res, err = bench.TwoApp(ctx, sys, rec, quiet, quietRec, twoApp)
	}
	if cerr := sys.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("stop receiver: %w", cerr)
	}
	if quiet != nil {
		if cerr := quiet.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("stop the quiet app's receiver: %w", cerr)
		}
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	res.System, res.Variant, res.Nodes = "toc", where, len(clients)
	if delivery != bench.DeliveryNone {
		res.Variant = delivery + ", " + where
	}
	res.Notes = append(res.Notes, sys.Notes()...)
	if res.RSSBytes == 0 && rss != nil {
		if res.RSSBytes, err = rss(); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
	}
	if res.DiskBytes == 0 && dir != "" {
		if res.DiskBytes, err = bench.DiskUsage(dir); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
	}
	res.Notes = append(res.Notes, notes...)
	return printResult(stdout, res, *asJSON)
}

// startCPUProfile starts a CPU profile of this process to path ("": none)
// and returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// printResult prints res as JSON or as a table.
func printResult(stdout io.Writer, res *bench.Result, asJSON bool) error {
	if asJSON {
		b, err := res.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return bench.WriteTable(stdout, res)
}

// runBaseline runs the fire or schedule workload with no toc: Go timers
// POSTing to a receiver (fire), or a server that only appends the requests
// to a log with group commit (schedule).
func runBaseline(ctx context.Context, workload, app string, pull bool, consumers int, fire bench.FireOptions, schedule bench.ScheduleOptions) (*bench.Result, error) {
	var (
		res *bench.Result
		err error
	)
	switch {
	case workload == bench.WorkloadFire && pull:
		res, err = baselinePull(ctx, app, consumers, fire)
	case workload == bench.WorkloadFire:
		res, err = baselineFire(ctx, app, fire)
	case workload == bench.WorkloadSchedule:
		res, err = baselineSchedule(ctx, app, schedule)
	default:
		return nil, usagef("bench: --baseline is for fire and schedule")
	}
	if err != nil {
		return nil, fmt.Errorf("bench: baseline: %w", err)
	}
	res.System = bench.SystemBaseline
	return res, nil
}

func baselineFire(ctx context.Context, app string, o bench.FireOptions) (*bench.Result, error) {
	rec := bench.NewRecorder(o.N)
	sys, err := bench.NewTimers(bench.TimersConfig{Recorder: rec, App: app})
	if err != nil {
		return nil, err
	}
	o.Cost = &bench.CostProbe{Toc: []int{os.Getpid()}}
	res, err := bench.Fire(ctx, sys, rec, o)
	if cerr := sys.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("stop receiver: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	res.Variant = bench.VariantTimers
	res.Notes = append(append(res.Notes, sys.Notes()...),
		"baseline: no toc; the cost's toc CPU is this process's (the timers, their HTTP client and the receiver)")
	return res, nil
}

func baselineSchedule(ctx context.Context, app string, o bench.ScheduleOptions) (res *bench.Result, err error) {
	dir, err := os.MkdirTemp("", "toc-bench-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := bench.StartLogServer(bench.GroupLogConfig{Path: filepath.Join(dir, "log"), Preallocate: bench.PreallocateDefault})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	hc := bench.NewHTTPClient(cmp.Or(o.Concurrency, bench.ConcurrencyDefault) + 8)
	defer hc.CloseIdleConnections()
	o.Cost = &bench.CostProbe{Toc: []int{os.Getpid()}}
	// Push tasks, as toc's runs create; their receiver gets nothing.
	sys, err := bench.NewToc(bench.TocConfig{
		Clients:  []*client.Client{client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})},
		Recorder: bench.NewRecorder(o.N), App: app,
	})
	if err != nil {
		return nil, err
	}
	res, err = bench.Schedule(ctx, sys, nil, o)
	if err = errors.Join(err, sys.Close()); err != nil {
		return nil, err
	}
	res.Variant = bench.VariantGroupLog
	res.Notes = append(res.Notes, srv.Notes()...)
	res.Notes = append(res.Notes, "baseline: no toc; the cost's toc CPU is this process's (the clients and the log server)")
	return res, nil
}

// baselinePull runs the fire workload through pull consumers against
// [bench.ClaimServer]: tasks in memory, claims answered at once, acks made
// durable with group commit.
func baselinePull(ctx context.Context, app string, consumers int, o bench.FireOptions) (res *bench.Result, err error) {
	dir, err := os.MkdirTemp("", "toc-bench-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := bench.StartClaimServer(bench.GroupLogConfig{Path: filepath.Join(dir, "acks"), Preallocate: bench.PreallocateDefault})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	hc := bench.NewHTTPClient(cmp.Or(o.Concurrency, bench.ConcurrencyDefault) + 2*consumers + 8)
	defer hc.CloseIdleConnections()
	rec := bench.NewRecorder(o.N)
	sys, err := bench.NewToc(bench.TocConfig{
		Clients:  []*client.Client{client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})},
		Recorder: rec, Delivery: bench.DeliveryPull, App: app, Consumers: consumers,
	})
	if err != nil {
		return nil, err
	}
	o.Cost = &bench.CostProbe{Toc: []int{os.Getpid()}}
	res, err = bench.Fire(ctx, sys, rec, o)
	if err = errors.Join(err, sys.Close()); err != nil {
		return nil, err
	}
	res.Variant = bench.VariantClaimServer
	res.Notes = append(append(append(res.Notes, sys.Notes()...), srv.Notes()...),
		"baseline: no toc; the cost's toc CPU is this process's (the consumers and the claim server)")
	return res, nil
}

// redisCounters reads the cost counters of the Redis of r.
func redisCounters(r *storesize.Redis) func(context.Context) (bench.RedisCounters, error) {
	return func(ctx context.Context) (bench.RedisCounters, error) {
		a, err := r.Activity(ctx)
		if err != nil {
			return bench.RedisCounters{}, err
		}
		// A process_id of another PID namespace (Redis in a container)
		// names no redis-server here.
		return bench.RedisCounters{Commands: a.Calls, OwnCommands: a.Own, Servers: bench.PIDsNamed(a.PIDs, "redis-server")}, nil
	}
}

// sqlCounters reads the cost counters of the SQL databases of dsns.
func sqlCounters(dsns []string) func(context.Context) (bench.SQLCounters, error) {
	return func(ctx context.Context) (bench.SQLCounters, error) {
		a, err := storesize.ReadSQLActivity(ctx, dsns)
		if err != nil {
			return bench.SQLCounters{}, err
		}
		c := bench.SQLCounters{Xacts: a.Xacts, Statements: a.Statements, OwnXacts: a.OwnXacts, OwnStatements: a.OwnStatements}
		if a.MySQL {
			c.Servers, err = bench.ProcsNamed("mysqld", "mariadbd")
			return c, err
		}
		// Each server's postmaster: the parent of its backends and
		// workers.
		for _, pids := range a.Servers {
			if pm := bench.ParentNamed(pids, "postgres"); pm != 0 {
				c.Servers = append(c.Servers, pm)
			}
		}
		return c, nil
	}
}

// embeddedServer is a toc server run in this process.
type embeddedServer struct {
	url, dir string
	srv      *server.Server
}

// startEmbedded starts a toc server in this process on a temporary
// directory and a free loopback port, logging warnings and errors to
// stderr, with the options set changes (nil: none), and returns once it
// listens.
func startEmbedded(ctx context.Context, stderr io.Writer, set func(*server.Options)) (*embeddedServer, error) {
	dir, err := os.MkdirTemp("", "toc-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	o := server.DefaultOptions()
	o.Data, o.Listen = dir, "127.0.0.1:0"
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if set != nil {
		set(&o)
	}
	srv, err := server.New(o)
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: embedded server: %w", err), os.RemoveAll(dir))
	}
	return &embeddedServer{url: srv.URL(), dir: dir, srv: srv}, nil
}

// stop shuts the server down within engine.ShutdownDefault and removes its
// directory. Only the first call does the work.
func (s *embeddedServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), engine.ShutdownDefault)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// benchServers returns the URLs of --server (else $TOC_SERVER, else the
// default): one, or the nodes of a cluster separated by commas.
func benchServers(conn *connFlags, e *env) ([]string, error) {
	from, list := "--server", conn.server
	if list == "" {
		from, list = "$"+EnvServer, e.getenv(EnvServer)
	}
	list = cmp.Or(list, client.BaseURLDefault)
	var urls []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("bench: %s: want http:// or https:// URLs separated by commas, got %q", from, s)
		}
		if slices.Contains(urls, s) {
			return nil, usagef("bench: %s: %s is given twice", from, s)
		}
		urls = append(urls, s)
	}
	return urls, nil
}

// parsePIDs parses --server-pid: process ids separated by commas.
func parsePIDs(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var pids []int
	for s := range strings.SplitSeq(list, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || pid < 1 {
			return nil, usagef("bench: --server-pid: want process ids separated by commas, got %q", list)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// sumRSS is the resident memory of the processes pids together.
func sumRSS(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		n, err := bench.ReadRSS(pid)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writeHeapProfile writes the process's allocations profile to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
