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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/loadgen"
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
            summed), and with the stores' flags (below) the growth of its
            Redis's used_memory and of the keys under its prefix (--redis,
            --redis-prefix) and of its PostgreSQL databases (--sql), in all
            and per pending task.
  twoapp    fair dispatch: --n tasks of app --app due at one instant (a
            burst) and, from that instant for --spread (default 5s), a task
            of app <--app>-quiet every 10 ms; reports the burst as fire
            --spread 0s does (lateness, "drained") and the quiet app's
            lateness, of all its tasks and of those due while the burst
            drained, with how busy the machine was (/proc/pressure/cpu: the
            share of the run some task waited for a CPU). Push only.
  hot       a hot instant: --n tasks due within one second (--spread,
            default 1s), the first --lead from now, by push; reports the
            lateness, "drained" (the tasks fired per second from the first
            due time to the last first delivery), the server's RSS at the
            first due time and its peak during the drain (--server-pid, or
            this process with --embedded), and the latency (p50 to max) of
            GETs of a task by id at --get-rate per second during the drain,
            each its own request, from a process of their own (this
            command started again), as a user's client would. Push only.

Cost per fire (fire) and per create (schedule): with --embedded,
--server-pid, or the stores' --redis or --sql, what the fires cost over the firing window
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

The stores' flags (--redis, --redis-prefix, --sql, --sql-stats-wait) are
not toc's: their benchmark code is in the bench module of toc's
repository, whose "bash bench/run.sh loadgen" is this command with them.

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
and River), which rewrites bench/RESULTS.md, and the baselines that run no
toc (the push ceiling, timers + HTTP, the create and pull claim servers)
are the bench module of toc's repository: "bash bench/run.sh" (flags:
"bash bench/run.sh -h") and "bash bench/run.sh baseline" (flags:
"bash bench/run.sh baseline -h").

Examples:
  toc bench --embedded --workload fire --n 100000 --spread 10s
  toc bench --embedded --workload schedule --batch 1000 --n 500000
  toc bench --server http://127.0.0.1:7070 --server-pid 1234 --data-dir ./toc-data --workload pending --n 1000000
  toc bench --server http://127.0.0.1:7070,http://127.0.0.1:7071 --workload fire --n 20000 --spread 5s
  bash bench/run.sh loadgen --server http://127.0.0.1:7070,http://127.0.0.1:7071 --server-pid 1234,1235 \
    --workload pending --n 100000 --redis 127.0.0.1:6379 --redis-prefix toc --sql postgres://postgres@127.0.0.1:5432/toc
  bash bench/run.sh loadgen --server http://127.0.0.1:7070 --server-pid 1234 --workload fire --n 20000 --spread 5s \
    --redis 127.0.0.1:6379 --sql postgres://postgres@127.0.0.1:5432/toc
`

// Defaults of --n per workload.
var benchNDefault = map[string]int{
	loadgen.WorkloadFire:     100_000,
	loadgen.WorkloadSchedule: 100_000,
	loadgen.WorkloadPending:  1_000_000,
	loadgen.WorkloadTwoApp:   50_000,
	loadgen.WorkloadHot:      1_000_000,
}

// BenchStores reads a cluster's Redis and SQL databases for the load
// generator: their growth under pending tasks and their cost counters per
// fire. toc has none, so that its binary carries no benchmark code for
// them, and its `toc bench` lacks the flags; the bench module's command
// ("bash bench/run.sh loadgen") gives one to [RunBench].
type BenchStores struct {
	// OpenRedis opens the Redis masters addrs, whose cluster keys are under
	// prefix, and returns it with what closes it.
	OpenRedis func(addrs []string, prefix string) (BenchRedis, func())
	// SQLSize is the size of the SQL databases dsns together.
	SQLSize func(ctx context.Context, dsns []string) (int64, error)
	// SQLCounters returns what reads the cost counters of the SQL
	// databases dsns.
	SQLCounters func(dsns []string) func(context.Context) (loadgen.SQLCounters, error)
}

// BenchRedis is a cluster's Redis, as [BenchStores] opens it.
type BenchRedis interface {
	// UsedMemory is the masters' used_memory summed; Prefix the keys
	// under the cluster's prefix and their bytes.
	UsedMemory(context.Context) (int64, error)
	Prefix(context.Context) (keys, bytes int64, err error)
	// Counters reads the cost counters.
	Counters(context.Context) (loadgen.RedisCounters, error)
}

// RunBench runs `toc bench ARGS` with the stores' flags when stores is not
// nil (the bench module's command); usage errors wrap [ErrUsage].
func RunBench(ctx context.Context, args []string, stdout, stderr io.Writer, stores *BenchStores) error {
	return runBench(ctx, args, stdout, stderr, stores)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer, stores *BenchStores) (err error) {
	if len(args) > 0 && args[0] == "suite" {
		return usagef("bench suite: the benchmark suite is its own module now: run \"bash bench/run.sh\" in toc's repository")
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && name == "baseline" {
			return usagef("bench: the baselines (no toc) are in the bench module now: run \"bash bench/run.sh baseline\" in toc's repository")
		}
	}
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	fs := newFlagSet(e, "bench", benchHelp)
	if stores != nil { // the bench module's command
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: bash bench/run.sh loadgen (--embedded | --server URL) [flags]\n\ntoc bench with the stores' flags.\n\n%s\n\nflags:\n", strings.TrimSpace(benchHelp))
			fs.PrintDefaults()
		}
	}
	conn := addConnFlags(fs)
	embedded := fs.Bool("embedded", false, "start a server in this process on a temporary data directory (instead of --server)")
	workload := fs.String("workload", loadgen.WorkloadFire, "`workload`: fire, schedule, pending, twoapp or hot")
	n := fs.Int("n", 0, "number of tasks (default 100000 for fire and schedule, 1000000 for pending)")
	spread := fs.Duration("spread", 10*time.Second, "fire: spread the due times over this `duration`")
	timeline := fs.Duration("timeline", 0, "fire: also report the lateness per bucket of due time this `wide` (like 100ms; default none)")
	lead := fs.Duration("lead", 0, "fire: the first task is due this long after the start (default 2s plus 100µs per task)")
	grace := fs.Duration("grace", loadgen.GraceDefault, "fire, schedule: after the last due time, stop waiting once no delivery has come for this long (at most --max-wait)")
	maxWait := fs.Duration("max-wait", loadgen.MaxWait, "fire, schedule: stop waiting this `long` after the last due time; tasks not delivered by then count as missing")
	hold := fs.Duration("hold", 0, "schedule: the tasks are due this long after the start (default 2s plus 25µs per task, 10µs in batches)")
	batch := fs.Int("batch", 0, "tasks per request (default 1 for schedule, 1000 otherwise; at most 1000)")
	concurrency := fs.Int("concurrency", loadgen.ConcurrencyDefault, "concurrent scheduling clients")
	pull := fs.Bool("pull", false, "fire, schedule: deliver to pull consumers instead of a webhook")
	consumers := fs.Int("consumers", loadgen.ConsumersDefault, "with --pull: concurrent claiming consumers")
	app := fs.String("app", loadgen.TocAppDefault, "`app` of the benchmark's tasks")
	serverPIDs := fs.String("server-pid", "", "`pid`[,pid...] of the --server processes, to read their memory from /proc (summed)")
	dataDir := fs.String("data-dir", "", "data `directory` of the --server, to measure its size")
	redisAddr, redisPrefix, sqlDSN, sqlStatsWait := new(string), new(string), new(string), new(time.Duration)
	*redisPrefix, *sqlStatsWait = redisindex.PrefixDefault, loadgen.PostgresStatsWait
	if stores != nil {
		fs.StringVar(redisAddr, "redis", "", "pending and fire on a cluster: its Redis `address`[,address...], to measure its memory (pending) or its commands and CPU per fire (fire)")
		fs.StringVar(redisPrefix, "redis-prefix", redisindex.PrefixDefault, "pending on a cluster: the nodes' --redis-prefix")
		fs.StringVar(sqlDSN, "sql", "", "pending and fire on a cluster: its PostgreSQL `DSN`[,DSN...], to measure the databases' size (pending) or their transactions and CPU per fire (fire; MySQL too)")
		fs.DurationVar(sqlStatsWait, "sql-stats-wait", loadgen.PostgresStatsWait, "fire with --sql: read the SQL counters this `long` after the last delivery (PostgreSQL flushes its backends' statistics up to 10 s late)")
	}
	getRate := fs.Float64("get-rate", loadgen.HotGetRateDefault, "hot: GETs of a task by id per second during the drain")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process during the workload to `file` (with --embedded it covers the server)")
	traceFile := fs.String("trace", "", "write a Go execution trace of this process during the workload to `file` (go tool trace; with --embedded it covers the server)")
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

	if _, ok := benchNDefault[*workload]; !ok {
		return usagef("bench: --workload must be fire, schedule, pending, twoapp or hot, got %q", *workload)
	}
	if *n == 0 {
		*n = benchNDefault[*workload]
	}
	if *batch == 0 {
		*batch = loadgen.BatchDefault
		if *workload == loadgen.WorkloadSchedule {
			*batch = 1
		}
	}
	switch {
	case *workload == loadgen.WorkloadHot && (*pull || set["redis"] || set["sql"] || set["timeline"] || set["hold"]):
		return usagef("bench: --workload hot is push only, without --pull, --redis, --sql, --timeline and --hold")
	case set["get-rate"] && *workload != loadgen.WorkloadHot:
		return usagef("bench: --get-rate is for --workload hot")
	case *getRate <= 0:
		return usagef("bench: --get-rate must be positive, got %v", *getRate)
	case *workload == loadgen.WorkloadTwoApp && (*pull || set["redis"] || set["sql"] || set["timeline"] || set["hold"]):
		return usagef("bench: --workload twoapp is push only, without --pull, --redis, --sql, --timeline and --hold")
	case *embedded && (set["server"] || set["server-pid"] || set["data-dir"] || set["redis"] || set["sql"]):
		return usagef("bench: give --embedded or --server (with --server-pid, --data-dir, --redis, --sql), not both")
	case (set["redis"] || set["sql"]) && *workload == loadgen.WorkloadSchedule:
		return usagef("bench: --redis and --sql are for --workload pending and fire")
	case set["redis-prefix"] && *workload != loadgen.WorkloadPending:
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
	case *pull && *workload == loadgen.WorkloadPending:
		return usagef("bench: --pull is for fire and schedule")
	case set["timeline"] && *workload != loadgen.WorkloadFire:
		return usagef("bench: --timeline is for --workload fire")
	case *timeline < 0:
		return usagef("bench: --timeline must not be negative")
	}

	delivery := loadgen.DeliveryPush
	switch {
	case *workload == loadgen.WorkloadPending:
		delivery = loadgen.DeliveryNone
	case *pull:
		delivery = loadgen.DeliveryPull
	}
	var progress io.Writer
	if !*asJSON && isTerminal(stdout) {
		progress = stdout
	}
	fire := loadgen.FireOptions{N: *n, Spread: *spread, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait, Timeline: *timeline, Progress: progress}
	schedule := loadgen.ScheduleOptions{N: *n, Batch: *batch, Concurrency: *concurrency, Hold: *hold, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	defaultGC() // the bench clients run as toc serve does
	if *memProfile != "" {
		defer func() {
			if perr := loadgen.WriteHeapProfile(*memProfile); perr != nil && err == nil {
				err = perr
			}
		}()
	}
	pids, err := parsePIDs(*serverPIDs)
	if err != nil {
		return err
	}
	var (
		clients []*client.Client
		notes   []string
		rss     func() (int64, error)
		hotRSS  func() (int64, error) // read every 50 ms during a hot instant's drain
		dir     = *dataDir
		conns   = *concurrency + *consumers*2 + 8 // a consumer claims on one connection and acks on another
		where   = "server"
		// The first server's URL and the token: a hot instant's GETs go
		// there from a process of their own.
		firstURL, token string
	)
	hc := loadgen.NewHTTPClient(conns)
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
		clients, firstURL = []*client.Client{client.New(client.Config{BaseURL: srv.url, HTTPClient: hc})}, srv.url
		rss, dir = loadgen.SelfRSS, srv.dir
		// During a drain the RSS as it is, garbage included: SelfRSS's
		// forced collections, 20 a second, were most of a hot instant's
		// CPU per fire and its GETs' latency (525 collections in a drain
		// of 100 000 instead of 25).
		hotRSS = func() (int64, error) { return loadgen.ReadRSS(os.Getpid()) }
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
		firstURL, token = urls[0], cmp.Or(conn.token, e.getenv(EnvToken))
		for _, u := range urls {
			clients = append(clients, client.New(client.Config{BaseURL: u, Token: token, HTTPClient: hc}))
		}
		if len(urls) > 1 {
			where = fmt.Sprintf("%d servers", len(urls))
		}
		if len(pids) > 0 {
			rss = func() (int64, error) { return sumRSS(pids) }
			hotRSS = rss
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
	pending := loadgen.PendingOptions{N: *n, Batch: *batch, Concurrency: *concurrency, RSS: rss, DataDir: dir, Progress: progress}
	if *redisAddr != "" && *workload == loadgen.WorkloadPending {
		r, closeRedis := stores.OpenRedis(strings.Split(*redisAddr, ","), *redisPrefix)
		defer closeRedis()
		pending.Redis, pending.RedisPrefix = r.UsedMemory, r.Prefix
		notes = append(notes, "redis_bytes is the growth of the whole Redis's used_memory (other clients of a shared Redis count too); redis_prefix_bytes that of the keys under the cluster's prefix")
	}
	if *sqlDSN != "" && *workload == loadgen.WorkloadPending {
		dsns := strings.Split(*sqlDSN, ",")
		pending.SQL = func(ctx context.Context) (int64, error) { return stores.SQLSize(ctx, dsns) }
	}
	if *workload != loadgen.WorkloadPending && *workload != loadgen.WorkloadTwoApp && (*embedded || len(pids) > 0 || *redisAddr != "" || *sqlDSN != "") {
		probe := &loadgen.CostProbe{Toc: pids}
		if *embedded {
			probe.Toc = []int{os.Getpid()}
			notes = append(notes, "embedded: the cost's toc CPU is this process's (server, bench clients and receiver)")
		} else if len(pids) > 0 {
			// The clients and the receiver cost CPU per fire wherever
			// the server runs; an embedded run counts them in toc's.
			probe.Load = []int{os.Getpid()}
			notes = append(notes, "cost: the load generator's CPU (this process: bench clients and receiver) counts in the total")
		}
		if *redisAddr != "" {
			r, closeRedis := stores.OpenRedis(strings.Split(*redisAddr, ","), *redisPrefix)
			defer closeRedis()
			probe.Redis = r.Counters
		}
		if *redisAddr != "" || *sqlDSN != "" {
			notes = append(notes, "cost: the SQL server's CPU and transactions and the Redis's commands count all their clients' work, not the cluster's alone")
		}
		if *sqlDSN != "" {
			dsns := strings.Split(*sqlDSN, ",")
			probe.SQL = stores.SQLCounters(dsns)
			probe.SQLWait = *sqlStatsWait
			if !set["sql-stats-wait"] && !strings.HasPrefix(dsns[0], "postgres") {
				probe.SQLWait = 0 // MySQL's status counters are current
			}
		}
		fire.Cost, schedule.Cost = probe, probe
	}

	stopProfile, err := loadgen.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopTrace, err := loadgen.StartTrace(*traceFile)
	if err != nil {
		return err
	}
	defer stopTrace()

	var rec *loadgen.Recorder
	if delivery != loadgen.DeliveryNone {
		rec = loadgen.NewRecorder(*n)
	}
	tc := loadgen.TocConfig{Clients: clients, Recorder: rec, Delivery: delivery, App: *app, Consumers: *consumers}
	if *workload == loadgen.WorkloadHot {
		tc.KeepIDsEvery = max(1, *n/1000) // about 1000 tasks to GET
	}
	sys, err := loadgen.NewToc(tc)
	if err != nil {
		return err
	}
	twoApp := loadgen.TwoAppOptions{N: *n, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait, Progress: progress}
	if set["spread"] {
		twoApp.Spread = *spread
	}
	var quiet *loadgen.Toc
	var quietRec *loadgen.Recorder
	if *workload == loadgen.WorkloadTwoApp {
		quietRec = loadgen.NewRecorder(twoApp.QuietN())
		quiet, err = loadgen.NewToc(loadgen.TocConfig{Clients: clients, Recorder: quietRec, Delivery: delivery, App: *app + "-quiet"})
		if err != nil {
			_ = sys.Close()
			return err
		}
	}
	var res *loadgen.Result
	switch *workload {
	case loadgen.WorkloadFire:
		res, err = loadgen.Fire(ctx, sys, rec, fire)
	case loadgen.WorkloadSchedule:
		res, err = loadgen.Schedule(ctx, sys, rec, schedule)
	case loadgen.WorkloadPending:
		res, err = loadgen.Pending(ctx, sys, pending)
	case loadgen.WorkloadTwoApp:
		res, err = loadgen.TwoApp(ctx, sys, rec, quiet, quietRec, twoApp)
	case loadgen.WorkloadHot:
		// The GETs come from a process of their own, as users' do: here
		// their client would wait for a CPU behind the bench's receiver
		// and clients, in the scheduler the embedded server shares.
		probe := loadgen.GetProbe{Server: firstURL, Token: token}
		hot := loadgen.HotOptions{N: *n, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, MaxWait: *maxWait,
			Cost: fire.Cost, Progress: progress, GetRate: *getRate, IDs: sys.IDs, RSS: hotRSS, Probe: probe.Run}
		if set["spread"] {
			hot.Spread = *spread
		}
		res, err = loadgen.Hot(ctx, sys, rec, hot)
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
	if delivery != loadgen.DeliveryNone {
		res.Variant = delivery + ", " + where
	}
	res.Notes = append(res.Notes, sys.Notes()...)
	if res.RSSBytes == 0 && rss != nil {
		if res.RSSBytes, err = rss(); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
	}
	if res.DiskBytes == 0 && dir != "" {
		if res.DiskBytes, err = loadgen.DiskUsage(dir); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
	}
	res.Notes = append(res.Notes, notes...)
	return printResult(stdout, res, *asJSON)
}

// printResult prints res as JSON or as a table.
func printResult(stdout io.Writer, res *loadgen.Result, asJSON bool) error {
	if asJSON {
		b, err := res.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return loadgen.WriteTable(stdout, res)
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
		n, err := loadgen.ReadRSS(pid)
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
