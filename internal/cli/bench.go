package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/bench"
)

const benchHelp = `
Benchmarks a toc server: a running one (--server) or one started in this
process (--embedded, on a temporary data directory, removed afterwards).

Workloads:
  fire      --n tasks due at instants spread over --spread, the first --lead
            from now; reports the lateness of each delivery (receive time
            minus Toc-Due-At) at a webhook receiver in this process, or with
            --pull at --consumers pull consumers (claim return time minus due).
  schedule  tasks accepted durably per second: one per request (--batch 1)
            or in batches, from --concurrency clients; then the tasks fire
            (all due --hold after the start) and each is checked off.
  pending   --n far-future tasks (a day ahead, expiring unclaimed a minute
            after their due time) and the server's memory (--server-pid, or
            this process with --embedded) and disk (--data-dir, known with
            --embedded) per pending task, and the schedule rate on top of them.

Prints a table, or with --json one object with the keys workload, n, fired,
missing, duplicates, schedule_per_sec, lateness_ms {p50, p90, p99, p999,
max}, rss_bytes, disk_bytes and more. Nothing asserts the targets; the
output says which were met.

Examples:
  toc bench --embedded --workload fire --n 100000 --spread 10s
  toc bench --embedded --workload schedule --batch 1000 --n 500000
  toc bench --server http://127.0.0.1:7070 --server-pid 1234 --data-dir ./toc-data --workload pending --n 1000000
`

// Defaults of --n per workload.
var benchNDefault = map[string]int{
	bench.WorkloadFire:     100_000,
	bench.WorkloadSchedule: 100_000,
	bench.WorkloadPending:  1_000_000,
}

// embeddedStartTimeout bounds how long an --embedded server may take to
// start listening.
const embeddedStartTimeout = 30 * time.Second

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	fs := newFlagSet(e, "bench", benchHelp)
	conn := addConnFlags(fs)
	embedded := fs.Bool("embedded", false, "start a server in this process on a temporary data directory (instead of --server)")
	workload := fs.String("workload", bench.WorkloadFire, "`workload`: fire, schedule or pending")
	n := fs.Int("n", 0, "number of tasks (default 100000 for fire and schedule, 1000000 for pending)")
	spread := fs.Duration("spread", 10*time.Second, "fire: spread the due times over this `duration`")
	lead := fs.Duration("lead", 0, "fire: the first task is due this long after the start (default 2s plus 100µs per task)")
	grace := fs.Duration("grace", bench.GraceDefault, "fire, schedule: after the last due time, stop waiting once no delivery has come for this long (at most 5m)")
	hold := fs.Duration("hold", 0, "schedule: the tasks are due this long after the start (default 2s plus 25µs per task, 10µs in batches)")
	batch := fs.Int("batch", 0, "tasks per request (default 1 for schedule, 1000 otherwise; at most 1000)")
	concurrency := fs.Int("concurrency", bench.ConcurrencyDefault, "concurrent scheduling clients")
	pull := fs.Bool("pull", false, "fire, schedule: deliver to pull consumers instead of a webhook")
	consumers := fs.Int("consumers", bench.ConsumersDefault, "with --pull: concurrent claiming consumers")
	app := fs.String("app", bench.TocAppDefault, "`app` of the benchmark's tasks")
	serverPID := fs.Int("server-pid", 0, "`pid` of the --server process, to read its memory from /proc")
	dataDir := fs.String("data-dir", "", "data `directory` of the --server, to measure its size")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process during the workload to `file` (with --embedded it covers the server)")
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
		return usagef("bench: --workload must be fire, schedule or pending, got %q", *workload)
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
	case *embedded && (set["server"] || set["server-pid"] || set["data-dir"]):
		return usagef("bench: give --embedded or --server (with --server-pid, --data-dir), not both")
	case *n < 1:
		return usagef("bench: --n must be at least 1, got %d", *n)
	case *batch < 1 || *batch > 1000:
		return usagef("bench: --batch must be between 1 and 1000, got %d", *batch)
	case *concurrency < 1:
		return usagef("bench: --concurrency must be at least 1, got %d", *concurrency)
	case *consumers < 1:
		return usagef("bench: --consumers must be at least 1, got %d", *consumers)
	case *spread < 0 || *lead < 0 || *grace < 0 || *hold < 0:
		return usagef("bench: --spread, --lead, --grace and --hold must not be negative")
	case *pull && *workload == bench.WorkloadPending:
		return usagef("bench: --pull is for fire and schedule")
	}

	delivery := bench.DeliveryPush
	switch {
	case *workload == bench.WorkloadPending:
		delivery = bench.DeliveryNone
	case *pull:
		delivery = bench.DeliveryPull
	}
	var (
		c     *client.Client
		notes []string
		rss   func() (int64, error)
		dir   = *dataDir
		conns = *concurrency + *consumers*(1+bench.AckWorkersPerClaim) + 8
		where = "server"
	)
	hc := bench.NewHTTPClient(conns)
	defer hc.CloseIdleConnections()
	if *embedded {
		srv, err := startEmbedded(ctx, stderr)
		if err != nil {
			return err
		}
		defer func() {
			if serr := srv.stop(); serr != nil {
				fmt.Fprintf(stderr, "toc bench: embedded server: %v\n", serr)
			}
		}()
		c = client.New(client.Config{BaseURL: srv.url, HTTPClient: hc})
		rss, dir = bench.SelfRSS, srv.dir
		where = "embedded"
		notes = append(notes, "embedded: the server runs in the bench process; rss_bytes is that process (server, bench clients and receiver)")
		if os.Getenv("TOC_NOSYNC") != "" {
			notes = append(notes, "TOC_NOSYNC is set: the embedded store does not fsync")
		}
	} else {
		if _, err := conn.client(e, "bench"); err != nil { // checks --server
			return err
		}
		// The same server and token, with a client that keeps enough
		// connections open.
		c = client.New(client.Config{
			BaseURL:    cmp.Or(conn.server, e.getenv(EnvServer), client.BaseURLDefault),
			Token:      cmp.Or(conn.token, e.getenv(EnvToken)),
			HTTPClient: hc,
		})
		if *serverPID > 0 {
			pid := *serverPID
			rss = func() (int64, error) { return bench.ReadRSS(pid) }
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = c.Ready(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("bench: server not ready: %w", err)
	}

	var progress io.Writer
	if !*asJSON && isTerminal(stdout) {
		progress = stdout
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("bench: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	var rec *bench.Recorder
	if delivery != bench.DeliveryNone {
		rec = bench.NewRecorder(*n)
	}
	sys, err := bench.NewToc(bench.TocConfig{Client: c, Recorder: rec, Delivery: delivery, App: *app, Consumers: *consumers})
	if err != nil {
		return err
	}
	var res *bench.Result
	switch *workload {
	case bench.WorkloadFire:
		res, err = bench.Fire(ctx, sys, rec, bench.FireOptions{
			N: *n, Spread: *spread, Lead: *lead, Batch: *batch, Concurrency: *concurrency, Grace: *grace, Progress: progress,
		})
	case bench.WorkloadSchedule:
		res, err = bench.Schedule(ctx, sys, rec, bench.ScheduleOptions{
			N: *n, Batch: *batch, Concurrency: *concurrency, Hold: *hold, Grace: *grace, Progress: progress,
		})
	case bench.WorkloadPending:
		res, err = bench.Pending(ctx, sys, bench.PendingOptions{
			N: *n, Batch: *batch, Concurrency: *concurrency, RSS: rss, DataDir: dir, Progress: progress,
		})
	}
	if cerr := sys.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("stop receiver: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	res.System, res.Variant = "toc", where
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
	res.Targets = bench.TocTargets(res)
	if *asJSON {
		b, err := res.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return bench.WriteTable(stdout, res)
}

// embeddedServer is a toc server run by runServe in this process.
type embeddedServer struct {
	url, dir string
	cancel   context.CancelFunc
	done     chan error    // runServe's result
	drained  chan struct{} // its stdout has been read to the end
}

// startEmbedded runs `toc serve` in this process on a temporary directory
// and a free loopback port, and returns once it listens.
func startEmbedded(ctx context.Context, stderr io.Writer) (*embeddedServer, error) {
	dir, err := os.MkdirTemp("", "toc-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &embeddedServer{dir: dir, cancel: cancel, done: make(chan error, 1), drained: make(chan struct{})}
	pr, pw := io.Pipe()
	go func() {
		err := runServe(ctx, []string{"--data", dir, "--listen", "127.0.0.1:0", "--log-level", "warn"}, pw, stderr)
		pw.Close()
		s.done <- err
	}()
	first := make(chan string, 1)
	go func() {
		defer close(s.drained)
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, br) // until runServe returns
	}()
	timeout := time.NewTimer(embeddedStartTimeout)
	defer timeout.Stop()
	select {
	case line := <-first:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "toc listening on ")
		switch {
		case ok:
			s.url = u
			return s, nil
		case line == "":
			err = errors.New("bench: embedded server stopped before listening")
		default:
			err = fmt.Errorf("bench: embedded server printed %q, not its address", line)
		}
	case <-timeout.C:
		err = fmt.Errorf("bench: embedded server did not listen within %s", embeddedStartTimeout)
	}
	if serr := s.stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	return nil, err
}

// stop shuts the server down, waits for it and removes its directory.
func (s *embeddedServer) stop() error {
	s.cancel()
	err := <-s.done
	<-s.drained
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	s.done <- err // stop may be called again
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
