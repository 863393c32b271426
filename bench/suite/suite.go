// Package suite runs toc's whole benchmark suite, as `bash bench/run.sh`
// does, and writes bench/RESULTS.md with [report.WriteMarkdown]:
//
//   - toc embedded: fire (push and pull), a burst due at one instant (push
//     and pull) and schedule (one task per request and in batches), each a
//     `toc bench --embedded` process, and the baselines of the same sizes
//     (`bash bench/run.sh baseline`, [Config.Bench]: no toc), after the
//     push ceiling (`bash bench/run.sh baseline --workload ceiling`) that
//     sets the push rate R and the pull baseline that sets the pull rate
//     (issue #25);
//   - toc pending: far-future tasks on a separate `toc serve` process, so
//     that its RSS is the server's alone;
//   - toc's cluster mode: each workload on a fresh cluster of 1, 2 and 3
//     `toc serve` nodes over one PostgreSQL and one Redis;
//   - the peers: the same workloads through asynq and River (the bench/peers
//     module, built with the go command).
//
// # Processes and services
//
// Every process it starts is the toc binary it is given ([Config.Exe]: the
// bench module's command builds it), the bench module's command
// ([Config.Bench]: the baselines and the cluster's load generator), the go command (to build the peers) or the peers'
// binary; each is bounded in time ([Config.RunTimeout], and [StartTimeout] and
// [StopTimeout] for servers) and is stopped by its pid only, also when the
// suite fails or its context is cancelled. Servers listen on 127.0.0.1 and
// the services must be on loopback: traffic stays on this machine.
//
// The cluster runs over PostgreSQL database [Config.ClusterDB] and the Redis
// keys under [Config.ClusterPrefix]: both are cleared before each run and
// dropped or deleted after it, also on failure. The peers use Redis database
// [Config.RedisDB] (flushed afterwards) and a PostgreSQL database of their
// own (created and dropped). A service that does not answer skips what needs
// it, and the file says so.
package suite

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/bench/report"
	"github.com/toc-dev/toc/internal/loadgen"
)

// Defaults of [Config]. The embedded figures are the (10,000 fires/s);
// the cluster delivers about 700 tasks/s on a 2-core box, and its figures
// keep a node count's runs to about two minutes (at most about four: see
// ClusterMaxWaitDefault).
const (
	FireNDefault      = 50_000 // over FireSpreadDefault: 10,000 fires/s at most (R: see Config.FireN)
	FireSpreadDefault = 5 * time.Second
	PullNDefault      = 250_000 // the same through pull consumers: 50,000/s at most (see Config.PullN)
	// CeilingDurationDefault: the push ceiling's senders POST this long.
	CeilingDurationDefault = baseline.CeilingDurationDefault
	// BatchConcurrency: the clients creating in batches of 1000 (issue #25).
	BatchConcurrency = 4
	BurstNDefault    = 100_000   // due at one instant, by push and by pull
	HotNDefault      = 1_000_000 // a hot instant: due within one second, by push
	// pullLeadPerJob: the pull fire run's lead is bench.LeadBase and this
	// much a job, enough to schedule them in batches (12 s for
	// PullNDefault; the default of 100 µs a job would wait 27 s).
	pullLeadPerJob     = 40 * time.Microsecond
	SingleNDefault     = 20_000 // schedule, one task per request, 16 clients,
	SingleHoldDefault  = 6 * time.Second
	BatchNDefault      = 100_000 // schedule, batches of 1000
	BatchHoldDefault   = 10 * time.Second
	PendingNDefault    = 1_000_000 // the figure (fewer leave Pebble's 32 MiB memtable unspread)
	PeerSingleNDefault = 10_000
	PeerBatchNDefault  = 50_000
	RedisDBDefault     = 13
	PGURLDefault       = "postgres://postgres@127.0.0.1:5432/postgres"

	ClusterFireNDefault    = 20_000 // over the fire spread: 4,000 fires/s
	ClusterFireLeadDefault = 8 * time.Second
	// The cluster's creates: as many as embedded's (SingleNDefault,
	// BatchNDefault), which they are compared with (issue #25). With
	// fewer (5 000 and 10 000, 0.9 s and 10 requests of 1000) the figure
	// was mostly the node's warm-up: its first connections, statements
	// and heap (one node, batches of 1000: 34 µs of the node's CPU per
	// create at 10 000, 16.5 at 100 000). The holds leave a slower node
	// count time to create all before the first is due.
	ClusterSingleNDefault    = SingleNDefault
	ClusterSingleHoldDefault = 8 * time.Second
	ClusterBatchNDefault     = BatchNDefault
	ClusterBatchHoldDefault  = BatchHoldDefault
	ClusterPendingNDefault   = 100_000 // far-future tasks, 1 node
	ClusterMaxWaitDefault    = 60 * time.Second
	ClusterDBDefault         = "toc_bench_cluster"
	ClusterPrefixDefault     = "toc-bench-cluster"
	ClusterRedisDefault      = "127.0.0.1:6379"

	// RunTimeoutDefault bounds each benchmark process and the peers' build.
	RunTimeoutDefault = 10 * time.Minute
	// StartTimeout bounds how long a `toc serve` may take to answer
	// /readyz; StopTimeout how long it may take to exit after SIGTERM
	// before it is killed.
	StartTimeout = 30 * time.Second
	StopTimeout  = 20 * time.Second
)

// ClusterNodesDefault are the cluster's node counts.
var ClusterNodesDefault = []int{1, 2, 3}

// peersRedis is where the peers' asynq runs (their --redis default).
const peersRedis = "127.0.0.1:6379"

// Config configures [Run]. Zero fields take the defaults above.
type Config struct {
	// Exe is the toc binary the suite runs (`toc bench`, `toc serve`).
	// Required.
	Exe string
	// Bench is the bench module's command (this program, and the
	// arguments that come before its own): the suite runs the baselines
	// (no toc) as `Bench baseline ARGS`, and the cluster's runs, which
	// read its Redis and PostgreSQL, as `Bench loadgen ARGS` (`toc bench`
	// with the stores' flags). Required unless SkipEmbedded and
	// SkipCluster.
	Bench []string
	// Root is the repository's root: the peers are built from
	// Root/bench/peers, and the commit is read from its git. Required unless
	// SkipPeers.
	Root string
	// Out is the Markdown file written at the end. Required.
	Out string
	// Command is how the file says it was written. Default "bash bench/run.sh".
	Command string
	// Stderr gets progress and the benchmarks' own errors. Default
	// io.Discard.
	Stderr io.Writer

	// toc embedded and pending. SkipEmbedded leaves both out (a run of the
	// cluster or the peers alone).
	SkipEmbedded bool
	// SkipHot leaves out the hot instant (a toc binary from before the
	// hot workload, in a before/after pair).
	SkipHot bool
	// CeilingDuration is how long the push ceiling's senders POST.
	CeilingDuration time.Duration
	// FireN over FireSpread is the most the push fire runs at: they run at
	// R = min(FireN/FireSpread, half the push ceiling), R × FireSpread
	// tasks. PullN likewise bounds the evenly due pull run, at min(5 R, 0.3×
	// the pull baseline's drain rate).
	FireN      int
	FireSpread time.Duration
	PullN      int
	BurstN     int
	// HotN tasks are due within one second (a hot instant, issue #25),
	// while the API is asked for a task by id 50 times a second.
	HotN       int
	SingleN    int
	SingleHold time.Duration
	BatchN     int
	BatchHold  time.Duration
	PendingN   int

	// SkipPeers leaves asynq and River out. PeerFireN defaults to FireN.
	SkipPeers   bool
	PeerFireN   int
	PeerSingleN int
	PeerBatchN  int
	// RedisDB is asynq's Redis database: it must be empty, and is flushed
	// afterwards. 0 means RedisDBDefault (database 0 is never flushed).
	RedisDB int
	// PGURL is the PostgreSQL the peers and the cluster use, a DSN ending in
	// /DATABASE; the databases they create are on the same server.
	PGURL string

	// SkipCluster leaves toc's cluster mode out.
	SkipCluster       bool
	ClusterNodes      []int
	ClusterFireN      int
	ClusterFireSpread time.Duration // default FireSpread
	ClusterFireLead   time.Duration
	ClusterSingleN    int
	ClusterSingleHold time.Duration
	ClusterBatchN     int
	ClusterBatchHold  time.Duration
	ClusterPendingN   int
	// ClusterMaxWait bounds each cluster run's wait for deliveries.
	ClusterMaxWait time.Duration
	// ClusterDB is the cluster's database, created and dropped around each
	// run; ClusterPrefix its --redis-prefix, whose keys are deleted around
	// each run; ClusterRedis the Redis address.
	ClusterDB     string
	ClusterPrefix string
	ClusterRedis  string
	// ClusterLogs, when set, is a directory that keeps the nodes' logs.
	ClusterLogs string

	// RunTimeout bounds each benchmark process and the peers' build.
	RunTimeout time.Duration
}

// EnsureDefaults fills the zero fields of c with the defaults.
func (c *Config) EnsureDefaults() {
	c.Command = cmp.Or(c.Command, "bash bench/run.sh")
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	c.CeilingDuration = cmp.Or(c.CeilingDuration, CeilingDurationDefault)
	c.FireN = cmp.Or(c.FireN, FireNDefault)
	c.FireSpread = cmp.Or(c.FireSpread, FireSpreadDefault)
	c.PullN = cmp.Or(c.PullN, PullNDefault)
	c.BurstN = cmp.Or(c.BurstN, BurstNDefault)
	c.HotN = cmp.Or(c.HotN, HotNDefault)
	c.SingleN = cmp.Or(c.SingleN, SingleNDefault)
	c.SingleHold = cmp.Or(c.SingleHold, SingleHoldDefault)
	c.BatchN = cmp.Or(c.BatchN, BatchNDefault)
	c.BatchHold = cmp.Or(c.BatchHold, BatchHoldDefault)
	c.PendingN = cmp.Or(c.PendingN, PendingNDefault)
	c.PeerFireN = cmp.Or(c.PeerFireN, c.FireN)
	c.PeerSingleN = cmp.Or(c.PeerSingleN, PeerSingleNDefault)
	c.PeerBatchN = cmp.Or(c.PeerBatchN, PeerBatchNDefault)
	c.RedisDB = cmp.Or(c.RedisDB, RedisDBDefault)
	c.PGURL = cmp.Or(c.PGURL, PGURLDefault)
	if len(c.ClusterNodes) == 0 {
		c.ClusterNodes = ClusterNodesDefault
	}
	c.ClusterFireN = cmp.Or(c.ClusterFireN, ClusterFireNDefault)
	c.ClusterFireSpread = cmp.Or(c.ClusterFireSpread, c.FireSpread)
	c.ClusterFireLead = cmp.Or(c.ClusterFireLead, ClusterFireLeadDefault)
	c.ClusterSingleN = cmp.Or(c.ClusterSingleN, ClusterSingleNDefault)
	c.ClusterSingleHold = cmp.Or(c.ClusterSingleHold, ClusterSingleHoldDefault)
	c.ClusterBatchN = cmp.Or(c.ClusterBatchN, ClusterBatchNDefault)
	c.ClusterBatchHold = cmp.Or(c.ClusterBatchHold, ClusterBatchHoldDefault)
	c.ClusterPendingN = cmp.Or(c.ClusterPendingN, ClusterPendingNDefault)
	c.ClusterMaxWait = cmp.Or(c.ClusterMaxWait, ClusterMaxWaitDefault)
	c.ClusterDB = cmp.Or(c.ClusterDB, ClusterDBDefault)
	c.ClusterPrefix = cmp.Or(c.ClusterPrefix, ClusterPrefixDefault)
	c.ClusterRedis = cmp.Or(c.ClusterRedis, ClusterRedisDefault)
	c.RunTimeout = cmp.Or(c.RunTimeout, RunTimeoutDefault)
}

// ConfigError is a field of a [Config] that is not valid.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "suite: Config." + e.Field + " " + e.Reason }

var (
	dbName     = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	prefixName = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
)

// Validate reports the first field of c that is not valid, after
// EnsureDefaults, as a *ConfigError.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Exe == "":
		return bad("Exe", "is required")
	case c.Out == "":
		return bad("Out", "is required")
	case c.Root == "" && !c.SkipPeers:
		return bad("Root", "is required to build the peers")
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"FireN", c.FireN}, {"PullN", c.PullN}, {"BurstN", c.BurstN}, {"HotN", c.HotN}, {"SingleN", c.SingleN}, {"BatchN", c.BatchN}, {"PendingN", c.PendingN},
		{"PeerFireN", c.PeerFireN}, {"PeerSingleN", c.PeerSingleN}, {"PeerBatchN", c.PeerBatchN}, {"RedisDB", c.RedisDB},
		{"ClusterFireN", c.ClusterFireN}, {"ClusterSingleN", c.ClusterSingleN}, {"ClusterBatchN", c.ClusterBatchN},
		{"ClusterPendingN", c.ClusterPendingN},
	} {
		if f.v < 1 {
			return bad(f.name, "must be at least 1, got %d", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"CeilingDuration", c.CeilingDuration}, {"FireSpread", c.FireSpread}, {"SingleHold", c.SingleHold}, {"BatchHold", c.BatchHold},
		{"ClusterFireSpread", c.ClusterFireSpread}, {"ClusterFireLead", c.ClusterFireLead},
		{"ClusterSingleHold", c.ClusterSingleHold}, {"ClusterBatchHold", c.ClusterBatchHold},
		{"ClusterMaxWait", c.ClusterMaxWait}, {"RunTimeout", c.RunTimeout},
	} {
		if f.v < 0 {
			return bad(f.name, "must not be negative, got %s", f.v)
		}
	}
	for _, n := range c.ClusterNodes {
		if n < 1 || n > 16 {
			return bad("ClusterNodes", "must be node counts from 1 to 16, got %d", n)
		}
	}
	u, err := url.Parse(c.PGURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || len(u.Path) < 2 {
		return bad("PGURL", "must be a postgres:// URL ending in /DATABASE, got %q", c.PGURL)
	}
	if !loopback(u.Host) {
		return bad("PGURL", "must be on loopback (127.0.0.1, ::1 or localhost), got %q", u.Host)
	}
	if !loopback(c.ClusterRedis) {
		return bad("ClusterRedis", "must be a loopback host:port, got %q", c.ClusterRedis)
	}
	if !dbName.MatchString(c.ClusterDB) {
		return bad("ClusterDB", "must be a lower-case SQL name, got %q", c.ClusterDB)
	}
	if !prefixName.MatchString(c.ClusterPrefix) {
		return bad("ClusterPrefix", "must be letters, digits and _.:- only, got %q", c.ClusterPrefix)
	}
	return nil
}

// loopback reports whether hostport (a port optional) names this machine.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// clusterDSN is c.PGURL with the cluster's database instead of its own.
func (c *Config) clusterDSN() string {
	u, _ := url.Parse(c.PGURL) // checked by Validate
	u.Path = "/" + c.ClusterDB
	return u.String()
}

// Run runs the suite and writes c.Out. A failure of an embedded or pending
// run ends it with an error (and no file); a cluster or peer run that fails,
// or whose service does not answer, is noted in the file instead.
func Run(ctx context.Context, c Config) (err error) {
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "toc-bench.")
	if err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = fmt.Errorf("suite: %w", rerr)
		}
	}()
	s := &suite{cfg: c, work: work, rep: &report.Report{
		Command: c.Command, ClusterNodes: c.ClusterNodes, ClusterMaxWait: c.ClusterMaxWait,
	}}
	started := time.Now()
	before := loadAverage()
	if err := s.all(ctx); err != nil {
		return err
	}
	s.rep.Took = time.Since(started)
	s.rep.Written = time.Now()
	s.rep.Machine = s.machine(ctx, before)
	if err := writeFile(c.Out, s.rep); err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "wrote %s in %ds\n", c.Out, int64(s.rep.Took.Seconds()))
	return nil
}

// suite is one run of the suite.
type suite struct {
	cfg   Config
	work  string // a temporary directory, removed at the end
	rep   *report.Report
	peers string // the peers' binary, once built
}

func (s *suite) all(ctx context.Context) error {
	c := &s.cfg
	if !c.SkipPeers {
		if err := s.buildPeers(ctx); err != nil {
			return err
		}
	}

	if !c.SkipEmbedded {
		if err := s.embedded(ctx); err != nil {
			return err
		}
	}
	if !c.SkipCluster {
		if err := s.cluster(ctx); err != nil {
			return err
		}
	}
	if !c.SkipPeers {
		if err := s.runPeers(ctx); err != nil {
			return err
		}
	}
	return nil
}

// embedded runs toc embedded (the server in the bench process) and pending
// (on a separate server). Each baseline (no toc: the physical limit) runs
// beside the toc run of the same size, so that the machine is as busy for
// both.
func (s *suite) embedded(ctx context.Context) error {
	c := &s.cfg
	run := func(args ...string) (*loadgen.Result, error) {
		bench := s.benchToc
		if args[0] == "--baseline" {
			bench, args = s.benchBaseline, args[1:]
		}
		if err := bench(ctx, "", args...); err != nil {
			return nil, err
		}
		return s.rep.Results[len(s.rep.Results)-1], nil
	}
	ceiling, err := run("--baseline", "--workload", baseline.WorkloadCeiling, "--duration", dur(c.CeilingDuration))
	if err != nil {
		return err
	}
	fireN, pullN := c.FireN, c.PullN
	var rate float64 // R, fires/s
	if c.FireSpread > 0 {
		rate = report.PushRate(ceiling.DrainPerSec, float64(c.FireN)/c.FireSpread.Seconds())
		fireN = max(1, int(rate*c.FireSpread.Seconds()))
		fmt.Fprintf(c.Stderr, "  -> push ceiling %.0f/s: R = %.0f fires/s\n", ceiling.DrainPerSec, rate)
	}
	fire := []string{"--workload", "fire", "--n", itoa(fireN), "--spread", dur(c.FireSpread)}
	burst := []string{"--workload", "fire", "--n", itoa(c.BurstN), "--spread", "0s"}
	for _, args := range [][]string{
		append([]string{"--embedded"}, fire...),
		append([]string{"--baseline"}, fire...),
	} {
		if _, err := run(args...); err != nil {
			return err
		}
	}
	pullBase, err := run(append([]string{"--baseline", "--pull"}, burst...)...)
	if err != nil {
		return err
	}
	if c.FireSpread > 0 {
		pullN = max(1, min(c.PullN, int(report.PullRate(rate, pullBase.DrainPerSec)*c.FireSpread.Seconds())))
	}
	single := []string{"--workload", "schedule", "--n", itoa(c.SingleN), "--batch", "1", "--concurrency", "16", "--hold", dur(c.SingleHold)}
	batch := []string{"--workload", "schedule", "--n", itoa(c.BatchN), "--batch", "1000", "--concurrency", itoa(BatchConcurrency), "--hold", dur(c.BatchHold)}
	var hot []string // a hot instant, against the push ceiling
	if !c.SkipHot {
		hot = []string{"--embedded", "--workload", "hot", "--n", itoa(c.HotN)}
	}
	for _, args := range [][]string{
		append([]string{"--embedded", "--pull"}, burst...),
		{"--embedded", "--workload", "fire", "--n", itoa(pullN), "--spread", dur(c.FireSpread), "--lead", dur(loadgen.LeadBase + time.Duration(pullN)*pullLeadPerJob), "--pull"},
		append([]string{"--embedded"}, burst...),
		append([]string{"--baseline"}, burst...),
		hot,
		{"--embedded", "--workload", "twoapp", "--n", itoa(c.BurstN), "--spread", dur(c.FireSpread)}, // the quiet app's tasks over the spread
		append([]string{"--embedded"}, single...),
		append([]string{"--baseline"}, single...),
		append([]string{"--embedded"}, batch...),
		append([]string{"--baseline"}, batch...),
	} {
		if args == nil {
			continue
		}
		if _, err := run(args...); err != nil {
			return err
		}
	}
	return s.pending(ctx)
}

// pending runs the pending workload on a separate `toc serve`, so that its
// RSS is the server's alone.
func (s *suite) pending(ctx context.Context) (err error) {
	data := filepath.Join(s.work, "pending-data")
	srv, err := startServe(s.cfg.Exe, filepath.Join(s.work, "serve.err"),
		"--data", data, "--listen", "127.0.0.1:0", "--log-level", "warn")
	if err != nil {
		return err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			err = fmt.Errorf("suite: stop toc serve: %w", serr)
		}
	}()
	url, err := srv.ready(ctx, StartTimeout)
	if err != nil {
		return fmt.Errorf("suite: toc serve did not start: %w", err)
	}
	pid := itoa(srv.pid())
	s.command(fmt.Sprintf("toc serve --data DIR --listen 127.0.0.1:0   # pid %s, %s", pid, url))
	return s.benchToc(ctx, "", "--server", url, "--server-pid", pid, "--data-dir", data, "--workload", "pending", "--n", itoa(s.cfg.PendingN))
}

var serverVariant = regexp.MustCompile(`(server|[0-9]+ servers)$`)

// benchToc runs `toc bench ARGS --json` (Config.Exe) and records the
// command and the result, marked with the targets it meets. With where set (a cluster run), the result's variant says it
// instead of "server", and a failure is noted rather than returned.
//
// A run that reads a cluster's stores (--redis, --sql) is the bench
// module's `bash bench/run.sh loadgen ARGS` (Config.Bench): toc bench with
// the stores' flags, which toc's binary does not carry.
func (s *suite) benchToc(ctx context.Context, where string, args ...string) error {
	shown, name, pre := "toc bench ", s.cfg.Exe, []string{"bench"}
	if slices.Contains(args, "--redis") || slices.Contains(args, "--sql") {
		if len(s.cfg.Bench) == 0 {
			return fmt.Errorf("suite: loadgen %s: Config.Bench is not set", strings.Join(args, " "))
		}
		shown, name, pre = "bash bench/run.sh loadgen ", s.cfg.Bench[0], append(slices.Clone(s.cfg.Bench[1:]), "loadgen")
	}
	shown += strings.Join(args, " ")
	r, stderr, err := s.runJSON(ctx, shown, name, "", append(append(pre, args...), "--json")...)
	if err != nil {
		if where == "" || ctx.Err() != nil {
			return err
		}
		s.skip("failed: `%s` (%s): %s", shown, where, oneLine(stderrOr(stderr, err), 300))
		return nil
	}
	r.Targets = report.TocTargets(r) // as toc bench ran it, before the variant says where
	if where != "" {
		r.Variant = serverVariant.ReplaceAllLiteralString(r.Variant, where)
	}
	s.record(r)
	return nil
}

// benchBaseline runs `bash bench/run.sh baseline ARGS --json` (Config.Bench)
// and records the command and the result. where is unused: it is
// benchToc's.
func (s *suite) benchBaseline(ctx context.Context, where string, args ...string) error {
	shown := "bash bench/run.sh baseline " + strings.Join(args, " ")
	c := s.cfg.Bench
	if len(c) == 0 {
		return fmt.Errorf("suite: %s: Config.Bench is not set", shown)
	}
	r, _, err := s.runJSON(ctx, shown, c[0], "", append(append(slices.Clone(c[1:]), "baseline"), append(args, "--json")...)...)
	if err != nil {
		return err
	}
	r.Targets = report.TocTargets(r) // as for toc's runs
	s.record(r)
	return nil
}

// runJSON runs one benchmark process with a timeout and decodes the result
// it prints; stderr is what it wrote there, also passed on to
// Config.Stderr.
func (s *suite) runJSON(ctx context.Context, shown, name, dir string, args ...string) (r *loadgen.Result, stderr string, err error) {
	fmt.Fprintln(s.cfg.Stderr, shown)
	s.command(shown)
	var out, errOut bytes.Buffer
	err = runBounded(ctx, s.cfg.RunTimeout, dir, &out, &errOut, name, args...)
	s.cfg.Stderr.Write(errOut.Bytes())
	stderr = errOut.String()
	if err != nil {
		return nil, stderr, fmt.Errorf("suite: %s: %w: %s", shown, err, strings.TrimSpace(stderr))
	}
	r = new(loadgen.Result)
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		return nil, stderr, fmt.Errorf("suite: %s: its output is not a result: %w", shown, err)
	}
	return r, stderr, nil
}

// stderrOr is what a failed process wrote to stderr, or err when it wrote
// nothing.
func stderrOr(stderr string, err error) string {
	if strings.TrimSpace(stderr) == "" {
		return err.Error()
	}
	return stderr
}

// record adds r to the report and says how it went.
func (s *suite) record(r *loadgen.Result) {
	s.rep.Results = append(s.rep.Results, r)
	fmt.Fprintf(s.cfg.Stderr, "  -> fired %d/%d, %d/s, p99 %s ms, max %s ms\n",
		r.Fired, r.N, int64(r.SchedulePerSec), num(r.LatenessMs.P99), num(r.LatenessMs.Max))
}

func (s *suite) command(c string) { s.rep.Commands = append(s.rep.Commands, c) }

func (s *suite) skip(format string, args ...any) {
	s.rep.Skipped = append(s.rep.Skipped, fmt.Sprintf(format, args...))
}

// runBounded runs name with args in dir, bounded by timeout: when it is
// over or ctx is done the process gets SIGTERM, and SIGKILL StopTimeout
// later.
func runBounded(ctx context.Context, timeout time.Duration, dir string, stdout, stderr io.Writer, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = StopTimeout
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	return err
}

// writeFile writes rep to path: to a temporary file beside it, renamed
// over it once complete.
func writeFile(path string, rep *report.Report) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".results-*.md")
	if err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	err = report.WriteMarkdown(f, rep)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("suite: write %s: %w", path, err)
	}
	return nil
}

// oneLine is the first max bytes of s with its line breaks and tabs as
// spaces.
func oneLine(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}

func itoa(n int) string { return strconv.Itoa(n) }

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// dur is d as a flag takes it, without zero units: "60s" is "1m".
func dur(d time.Duration) string { return report.DurationString(d) }

// Module is toc's module path, which FindRoot looks for.
const Module = "github.com/toc-dev/toc"

// FindRoot returns the nearest of dir and its parents whose go.mod is
// toc's module, or "" when there is none.
func FindRoot(dir string) string {
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for line := range strings.Lines(string(b)) {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && f[1] == Module {
					return dir
				}
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
