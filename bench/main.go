// Command bench runs toc's benchmark suite and rewrites bench/RESULTS.md:
// "bash bench/run.sh" runs it ("go run ." in this module; flags: -h). It
// drives toc through its binary, `toc serve` and the load generator
// `toc bench`, and is its own module so that the product binary carries
// none of it. "bash bench/run.sh baseline" runs one baseline (no toc: the
// push ceiling, timers + HTTP, the create and the pull claim servers; flags:
// "baseline -h"), as the suite does, each in a process of its own; "bash
// bench/run.sh loadgen" is `toc bench` with the flags that read a cluster's
// Redis and PostgreSQL (--redis, --sql), which toc's binary does not carry.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/toc-dev/toc/bench/suite"
	"github.com/toc-dev/toc/internal/cli"
	"github.com/toc-dev/toc/internal/loadgen"
)

// errUsage is wrapped by the errors of the command line itself; the exit
// status is then 2.
var errUsage = errors.New("usage error")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch {
	case os.Getenv(loadgen.EnvGetProbe) == "1": // a hot instant's GET probe (loadgen.GetProbe): "loadgen --workload hot" started this binary again
		err = cli.RunGetProbe(ctx, os.Stdin, os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "baseline":
		err = runBaseline(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "loadgen":
		err = runLoadgen(ctx, os.Args[2:], os.Stdout, os.Stderr)
	default:
		err = runBenchSuite(ctx, os.Args[1:], os.Stderr)
	}
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, err)
	if errors.Is(err, errUsage) || errors.Is(err, cli.ErrUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}

const benchSuiteHelp = `
Runs toc's benchmarks and the peer comparison, and rewrites
bench/RESULTS.md (--out) with the figures, the machine and the exact
commands; "bash bench/run.sh" runs it from a checkout (it is "go run ." in
the bench module). It drives toc through its binary (--toc: by default one
built from the repository with go build). The default run takes about ten
minutes, and a few more for the hot instant's 1 000 000 tasks (--hot-n):

  1. toc embedded: first the push ceiling ("bash bench/run.sh baseline
     --workload ceiling": 64 senders POSTing back to back for
     --ceiling-duration); then fire (push at R = min(--fire-n over
     --fire-spread, half the ceiling), and pull at min(5 R, 0.3x the pull
     baseline's drain rate), at most --pull-n), a burst (--burst-n tasks due
     at one instant, by push and by pull), a hot instant (--hot-n tasks
     due within one second, drained against the push ceiling while a
     task is read by id 50 times a second: the GETs' p99 and the server's
     peak RSS), schedule (one task per request
     from 16 clients, and in batches of 1000 from 4), each a "toc bench
     --embedded" process, and beside each push fire, burst and schedule run
     its baseline of the same size ("bash bench/run.sh baseline": no toc,
     the physical limit; the pull burst's is "baseline --pull"), which
     RESULTS.md sets it beside as a ratio, with the CPU per operation of
     the processes and of the whole machine, and issue 25's targets;
  2. toc pending: --pending-n far-future tasks on a separate "toc serve";
  3. toc's cluster mode: each workload on a fresh cluster of each of
     --cluster-nodes "toc serve" nodes over PostgreSQL database --cluster-db
     and the Redis keys under --cluster-prefix; both are cleared before,
     and dropped or deleted after each run, also when the suite fails or is
     interrupted. The fire runs measure the cost per fire (CPU of the
     nodes, PostgreSQL and Redis; SQL transactions; Redis commands);
  4. the peers (the bench/peers module, built with go): asynq on Redis
     127.0.0.1:6379 database --redis-db (which must be empty, and is flushed
     afterwards) and River on --pg (database toc_bench_river is created and
     dropped). A peer whose service does not answer is skipped and said so.

Every process it starts (toc, the baselines, go and the peers) is bounded in time
(--run-timeout) and stopped by its pid only. All traffic stays on loopback:
--pg and --cluster-redis must be there. Run it from the repository (for the
peers, the commit and the default --out), with Go installed for the peers.

"bash bench/run.sh baseline" runs one baseline alone (flags: "baseline
-h"); the suite runs each in a process of its own that way. "bash
bench/run.sh loadgen" is toc bench with the flags that read a cluster's
Redis and PostgreSQL (--redis, --sql; flags: "loadgen -h"): the suite's
cluster fire and pending runs.

Examples:
  bash bench/run.sh
  bash bench/run.sh --fire-n 100000 --fire-spread 10s --pending-n 10000000
  bash bench/run.sh --peers=false            # toc only
  bash bench/run.sh --cluster=false          # without toc's cluster mode
  bash bench/run.sh --embedded=false --peers=false --cluster-nodes 3
  bash bench/run.sh --cluster-nodes 1,3 --cluster-logs /tmp/toc-logs
`

// benchSuiteFlags are the flags of the suite, set on a Config.
func benchSuiteFlags(fs *flag.FlagSet, c *suite.Config) (embedded, peers, cluster *bool, nodes, out *string) {
	embedded = fs.Bool("embedded", true, "run toc embedded and pending (--embedded=false: only the cluster and the peers)")
	fs.DurationVar(&c.CeilingDuration, "ceiling-duration", suite.CeilingDurationDefault, "push ceiling: its 64 senders POST back to back for this `long`")
	fs.IntVar(&c.FireN, "fire-n", suite.FireNDefault, "embedded fire: the most tasks over --fire-spread (the run is at R = min(this rate, half the push ceiling))")
	fs.DurationVar(&c.FireSpread, "fire-spread", suite.FireSpreadDefault, "fire: spread the due times over this `duration` (embedded and the peers)")
	fs.IntVar(&c.PullN, "pull-n", suite.PullNDefault, "embedded fire through pull consumers: the most tasks over --fire-spread (the run is at min(5 R, 0.3x the pull baseline's drain rate))")
	fs.IntVar(&c.BurstN, "burst-n", suite.BurstNDefault, "embedded burst, by push and by pull consumers: tasks due at one instant")
	fs.IntVar(&c.HotN, "hot-n", suite.HotNDefault, "embedded hot instant: tasks due within one second, by push, while a task is read by id 50 times a second (--hot=false: none)")
	fs.IntVar(&c.SingleN, "single-n", suite.SingleNDefault, "embedded schedule, one task per request from 16 clients: tasks")
	fs.DurationVar(&c.SingleHold, "single-hold", suite.SingleHoldDefault, "embedded schedule, one per request: the tasks are due this `long` after the start")
	fs.IntVar(&c.BatchN, "batch-n", suite.BatchNDefault, "embedded schedule in batches of 1000: tasks")
	fs.DurationVar(&c.BatchHold, "batch-hold", suite.BatchHoldDefault, "embedded schedule in batches: the tasks are due this `long` after the start")
	fs.IntVar(&c.PendingN, "pending-n", suite.PendingNDefault, "pending: far-future tasks on a separate toc serve")
	fs.BoolFunc("hot", "run the hot instant (default true; --hot=false: without it, for a toc binary from before the hot workload)", func(v string) error {
		on, err := strconv.ParseBool(v)
		c.SkipHot = !on
		return err
	})
	peers = fs.Bool("peers", true, "run the peers, asynq and River (--peers=false: toc only)")
	fs.IntVar(&c.PeerFireN, "peer-fire-n", 0, "peers' fire: tasks over --fire-spread (default --fire-n)")
	fs.IntVar(&c.PeerSingleN, "peer-single-n", suite.PeerSingleNDefault, "peers' schedule, one task per call: tasks")
	fs.IntVar(&c.PeerBatchN, "peer-batch-n", suite.PeerBatchNDefault, "peers' schedule in batches of 1000: tasks")
	fs.IntVar(&c.RedisDB, "redis-db", suite.RedisDBDefault, "asynq's Redis `database` (1 to 15): must be empty; flushed afterwards")
	fs.StringVar(&c.PGURL, "pg", suite.PGURLDefault, "PostgreSQL `URL` ending in /DATABASE, for River and the cluster (their databases are created beside it)")
	cluster = fs.Bool("cluster", true, "run toc's cluster mode (--cluster=false: without it)")
	nodes = fs.String("cluster-nodes", "1,2,3", "the cluster's node `counts`, separated by commas")
	fs.IntVar(&c.ClusterFireN, "cluster-fire-n", suite.ClusterFireNDefault, "cluster fire: tasks over --cluster-fire-spread")
	fs.DurationVar(&c.ClusterFireSpread, "cluster-fire-spread", 0, "cluster fire: spread the due times over this `duration` (default --fire-spread)")
	fs.DurationVar(&c.ClusterFireLead, "cluster-fire-lead", suite.ClusterFireLeadDefault, "cluster fire: the first task is due this `long` after the start")
	fs.IntVar(&c.ClusterSingleN, "cluster-single-n", suite.ClusterSingleNDefault, "cluster schedule, one task per request from 16 clients: tasks")
	fs.DurationVar(&c.ClusterSingleHold, "cluster-single-hold", suite.ClusterSingleHoldDefault, "cluster schedule, one per request: the tasks are due this `long` after the start")
	fs.IntVar(&c.ClusterBatchN, "cluster-batch-n", suite.ClusterBatchNDefault, "cluster schedule in batches of 1000: tasks")
	fs.DurationVar(&c.ClusterBatchHold, "cluster-batch-hold", suite.ClusterBatchHoldDefault, "cluster schedule in batches: the tasks are due this `long` after the start")
	fs.IntVar(&c.ClusterPendingN, "cluster-pending-n", suite.ClusterPendingNDefault, "cluster pending (1 node): far-future tasks")
	fs.DurationVar(&c.ClusterMaxWait, "cluster-max-wait", suite.ClusterMaxWaitDefault, "bounds each cluster run's wait for deliveries (its --max-wait)")
	fs.StringVar(&c.ClusterDB, "cluster-db", suite.ClusterDBDefault, "the cluster's PostgreSQL `database`: created and dropped around each run")
	fs.StringVar(&c.ClusterPrefix, "cluster-prefix", suite.ClusterPrefixDefault, "the cluster's Redis key `prefix`: its keys are deleted around each run")
	fs.StringVar(&c.ClusterRedis, "cluster-redis", suite.ClusterRedisDefault, "the cluster's Redis `address`")
	fs.StringVar(&c.ClusterLogs, "cluster-logs", "", "keep the cluster nodes' logs in this `directory`")
	fs.DurationVar(&c.RunTimeout, "run-timeout", suite.RunTimeoutDefault, "bounds each benchmark process and the peers' build")
	out = fs.String("out", "", "write the results to this `file` (default bench/RESULTS.md of the repository)")
	return embedded, peers, cluster, nodes, out
}

// benchSuiteConfig parses the suite's arguments into a Config with its
// defaults filled in and validated, and the toc binary to run (--toc; ""
// to build one). root is the repository's root ("" when unknown).
func benchSuiteConfig(stderr io.Writer, args []string, root string) (suite.Config, string, error) {
	const name = "bench"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bash bench/run.sh [flags]\n\n%s\n\nflags:\n", strings.TrimSpace(benchSuiteHelp))
		fs.PrintDefaults()
	}
	var c suite.Config
	embedded, peers, cluster, nodes, out := benchSuiteFlags(fs, &c)
	exe := fs.String("toc", "", "the toc `binary` to run (default: built from the repository)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, "", err
		}
		return c, "", usagef("%s: %v", name, err)
	}
	if fs.NArg() > 0 {
		return c, "", usagef("%s: unexpected argument %q", name, fs.Arg(0))
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok && bad == nil {
			if n, ok := g.Get().(int); ok && n < 1 {
				bad = usagef("%s: --%s must be at least 1, got %d", name, f.Name, n)
			}
		}
	})
	if bad != nil {
		return c, "", bad
	}
	c.SkipEmbedded, c.SkipPeers, c.SkipCluster = !*embedded, !*peers, !*cluster
	for s := range strings.FieldsFuncSeq(*nodes, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return c, "", usagef("%s: --cluster-nodes: want node counts separated by commas, got %q", name, *nodes)
		}
		c.ClusterNodes = append(c.ClusterNodes, n)
	}
	if len(c.ClusterNodes) == 0 {
		return c, "", usagef("%s: --cluster-nodes: want node counts separated by commas, got %q", name, *nodes)
	}
	c.Exe, c.Root, c.Out, c.Stderr = cmp.Or(*exe, "toc"), root, *out, stderr
	if c.Out == "" && root != "" {
		c.Out = filepath.Join(root, "bench", "RESULTS.md")
	}
	if c.Out == "" {
		return c, "", usagef("%s: not in toc's repository: give --out", name)
	}
	if c.Root == "" && !c.SkipPeers {
		return c, "", usagef("%s: not in toc's repository, which has the peers: run it there, or give --peers=false", name)
	}
	if c.Root == "" && *exe == "" {
		return c, "", usagef("%s: not in toc's repository, to build toc from: run it there, or give --toc", name)
	}
	c.Command = strings.Join(append([]string{"bash", "bench/run.sh"}, args...), " ")
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		var ce *suite.ConfigError
		if errors.As(err, &ce) && ce.Field != "Exe" {
			return c, "", usagef("%s: --%s %s", name, flagName(ce.Field), ce.Reason)
		}
		return c, "", err
	}
	return c, *exe, nil
}

// flagName is the flag of a Config field: ClusterFireN is cluster-fire-n.
func flagName(field string) string {
	switch field {
	case "PGURL":
		return "pg"
	case "ClusterNodes":
		return "cluster-nodes"
	}
	var b strings.Builder
	rs := []rune(field)
	for i, r := range rs {
		upper := unicode.IsUpper(r)
		if i > 0 && upper && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// runBenchSuite runs the suite with args: it builds toc unless --toc names
// a binary.
func runBenchSuite(ctx context.Context, args []string, stderr io.Writer) error {
	var root string
	if wd, err := os.Getwd(); err == nil {
		root = suite.FindRoot(wd)
	}
	c, exe, err := benchSuiteConfig(stderr, args, root)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: the baselines run this command again: %w", err)
	}
	c.Bench = []string{self}
	if exe == "" {
		dir, err := os.MkdirTemp("", "toc-bench-bin-")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		if c.Exe, err = buildToc(ctx, root, dir, c.RunTimeout); err != nil {
			return err
		}
	}
	return suite.Run(ctx, c) // its errors say "suite: "
}

// buildToc builds cmd/toc of the repository at root into dir, within
// timeout, and returns the binary's path.
func buildToc(ctx context.Context, root, dir string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bin := filepath.Join(dir, "toc")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/toc")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: build toc in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}
