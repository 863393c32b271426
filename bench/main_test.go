package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toc-dev/toc/bench/report"
	"github.com/toc-dev/toc/bench/storesize"
	"github.com/toc-dev/toc/bench/suite"
	"github.com/toc-dev/toc/internal/testsvc"
)

// TestBenchSuiteFlags: the flags of the suite and their defaults, which
// are run.sh's.
func TestBenchSuiteFlags(t *testing.T) {
	t.Parallel()
	c, exe, err := benchSuiteConfig(io.Discard, []string{"--toc", "/bin/toc"}, "/src/toc")
	if err != nil || exe != "/bin/toc" {
		t.Fatalf("err %v, --toc %q", err, exe)
	}
	want := suite.Config{
		Exe: "/bin/toc", Root: "/src/toc", Out: "/src/toc/bench/RESULTS.md", Command: "bash bench/run.sh --toc /bin/toc", Stderr: io.Discard,
		CeilingDuration: 3 * time.Second, FireN: 50_000, FireSpread: 5 * time.Second, PullN: 250_000, BurstN: 100_000, HotN: 1_000_000, SingleN: 20_000, SingleHold: 6 * time.Second,
		BatchN: 100_000, BatchHold: 10 * time.Second, PendingN: 1_000_000,
		PeerFireN: 50_000, PeerSingleN: 10_000, PeerBatchN: 50_000, RedisDB: 13, PGURL: "postgres://postgres@127.0.0.1:5432/postgres",
		ClusterNodes: []int{1, 2, 3}, ClusterFireN: 20_000, ClusterFireSpread: 5 * time.Second, ClusterFireLead: 8 * time.Second,
		ClusterSingleN: 20_000, ClusterSingleHold: 8 * time.Second, ClusterBatchN: 100_000, ClusterBatchHold: 10 * time.Second,
		ClusterPendingN: 100_000, ClusterMaxWait: 60 * time.Second,
		ClusterDB: "toc_bench_cluster", ClusterPrefix: "toc-bench-cluster", ClusterRedis: "127.0.0.1:6379",
		RunTimeout: 10 * time.Minute,
	}
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b io.Writer) bool { return a == b })); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	args := []string{"--fire-n", "100000", "--fire-spread", "10s", "--pending-n", "10000000", "--embedded=false", "--peers=false", "--cluster=false",
		"--cluster-nodes", "1, 3", "--cluster-fire-lead", "2s", "--cluster-max-wait", "30s", "--redis-db", "5",
		"--cluster-db", "toc_x", "--cluster-prefix", "toc-x", "--cluster-logs", "/tmp/logs", "--out", "/tmp/r.md", "--run-timeout", "1m", "--toc", "/bin/toc"}
	c, _, err = benchSuiteConfig(io.Discard, args, "")
	if err != nil {
		t.Fatal(err)
	}
	want.Root, want.Out, want.Command = "", "/tmp/r.md", "bash bench/run.sh "+strings.Join(args, " ")
	want.FireN, want.FireSpread, want.PendingN = 100_000, 10*time.Second, 10_000_000
	want.SkipEmbedded, want.SkipPeers, want.SkipCluster = true, true, true
	want.PeerFireN, want.ClusterFireSpread = 100_000, 10*time.Second // follow --fire-n and --fire-spread
	want.ClusterNodes, want.ClusterFireLead, want.ClusterMaxWait, want.RedisDB = []int{1, 3}, 2*time.Second, 30*time.Second, 5
	want.ClusterDB, want.ClusterPrefix, want.ClusterLogs, want.RunTimeout = "toc_x", "toc-x", "/tmp/logs", time.Minute
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b io.Writer) bool { return a == b })); diff != "" {
		t.Errorf("with flags (-want +got):\n%s", diff)
	}
}

func TestBenchSuiteUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		root string
		want string
	}{
		{[]string{"--fire-n", "0"}, "/src", "--fire-n must be at least 1"},
		{[]string{"--redis-db", "0"}, "/src", "--redis-db must be at least 1"},
		{[]string{"--cluster-nodes", "1,x"}, "/src", "--cluster-nodes: want node counts"},
		{[]string{"--cluster-nodes", ""}, "/src", "--cluster-nodes: want node counts"},
		{[]string{"--cluster-nodes", "0"}, "/src", "--cluster-nodes must be node counts from 1 to 16"},
		{[]string{"--cluster-max-wait", "-1s"}, "/src", "--cluster-max-wait must not be negative"},
		{[]string{"--pg", "postgres://postgres@192.0.2.1:5432/postgres"}, "/src", "--pg must be on loopback"},
		{[]string{"--cluster-redis", "192.0.2.1:6379"}, "/src", "--cluster-redis must be a loopback"},
		{[]string{"--cluster-db", "Robert'); DROP"}, "/src", "--cluster-db must be a lower-case SQL name"},
		{[]string{"--peers=false"}, "", "give --out"},
		{[]string{"--out", "/tmp/x.md"}, "", "give --peers=false"},
		{[]string{"--out", "/tmp/x.md", "--peers=false"}, "", "give --toc"},
		{[]string{"extra"}, "/src", `unexpected argument "extra"`},
	} {
		_, _, err := benchSuiteConfig(io.Discard, tc.args, tc.root)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

func TestBenchSuiteHelp(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	if err := runBenchSuite(context.Background(), []string{"-h"}, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: bash bench/run.sh [flags]", "bench/RESULTS.md", "-cluster-nodes", "-peers", "-toc"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, stderr.String())
		}
	}
}

// tinySuite are the sizes of a suite that takes seconds.
var tinySuite = []string{
	"--ceiling-duration", "300ms", "--fire-n", "200", "--fire-spread", "500ms", "--pull-n", "100", "--burst-n", "300", "--hot-n", "2000", "--single-n", "200", "--single-hold", "1s",
	"--batch-n", "1000", "--batch-hold", "1s", "--pending-n", "2000", "--peers=false",
}

func TestMain(m *testing.M) {
	// The suite runs the baselines and the cluster's load generator with
	// this binary again (Config.Bench is os.Executable()): then it is the
	// command.
	if len(os.Args) > 1 && (os.Args[1] == "baseline" || os.Args[1] == "loadgen") {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if tocBuilt.Load() { // else tocBinary would build it now
		if exe, err := tocBinary(); err == nil {
			_ = os.RemoveAll(filepath.Dir(exe))
		}
	}
	os.Exit(code)
}

// tocBuilt says whether a test built toc (tocBinary).
var tocBuilt atomic.Bool

// tocBinary builds toc once for the tests that run the suite.
var tocBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "toc-bench-test-")
	if err != nil {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	tocBuilt.Store(true)
	exe, err := buildToc(context.Background(), suite.FindRoot(wd), dir, 5*time.Minute)
	if err != nil {
		return "", err
	}
	// Run it once, so that its pages are in memory: the suite's first run,
	// the push ceiling's 300 ms, counted a fresh binary's page faults
	// (about 700 POSTs/s instead of thousands, and so lower rates than the
	// test wants). The test binary that ran the suite before was warm.
	if out, err := exec.Command(exe, "version").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s version: %w: %s", exe, err, out)
	}
	return exe, nil
})

// runSuite runs the suite with args and a toc built from the repository,
// writing to a file of the test, and returns the file's text.
func runSuite(t *testing.T, args ...string) string {
	t.Helper()
	exe, err := tocBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	args = append(append([]string{"--toc", exe, "--out", out}, tinySuite...), args...)
	var stderr strings.Builder
	if err := runBenchSuite(context.Background(), args, &stderr); err != nil {
		t.Fatalf("%q: %v\nstderr:\n%s", args, err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tableRows returns the rows of the table under heading, header and
// separator excluded, each split into its cells.
func tableRows(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no %q in\n%s", heading, doc)
	}
	var rows [][]string
	for l := range strings.Lines(rest) {
		if strings.HasPrefix(l, "#") {
			break
		}
		if strings.HasPrefix(l, "| ") {
			cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "| "), " |"), " | ")
			rows = append(rows, cells)
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table", heading)
	}
	return rows[1:] // the header
}

var number = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// checkNumbers fails unless the cells at cols are numbers.
func checkNumbers(t *testing.T, table string, row []string, cols ...int) {
	t.Helper()
	for _, c := range cols {
		if c >= len(row) || !number.MatchString(row[c]) {
			t.Errorf("%s: row %q: column %d is not a number", table, row, c)
		}
	}
}

// TestBenchSuite is a short run of the whole suite without the peers and
// the cluster: every table has its rows, with numbers in them.
func TestBenchSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite for about 15 s; skipped with -short")
	}
	t.Parallel()
	doc := runSuite(t, "--cluster=false")

	fire := tableRows(t, doc, "## Fire and schedule")
	if len(fire) != 13 {
		t.Fatalf("fire and schedule: %d rows, want 13:\n%s", len(fire), doc)
	}
	// The push ceiling first: its n is the POSTs it made.
	if c := fire[0]; c[0] != "baseline" || c[1] != "back-to-back HTTP POSTs" || c[2] != "ceiling" || c[6] != "64" || c[3] != c[7] {
		t.Errorf("fire and schedule row 0: %q, want the push ceiling of 64 senders", c)
	}
	checkNumbers(t, "fire and schedule", fire[0], 3, 12)
	// The push fire runs at R = min(200 over 0.5 s, half the ceiling): on
	// a machine busy enough (CI's, with the other packages' tests beside
	// it, measured 365 POSTs/s) fewer than 200 tasks.
	ceiling, err := strconv.ParseFloat(fire[0][12], 64)
	if err != nil {
		t.Fatalf("the push ceiling's drain/s %q: %v", fire[0][12], err)
	}
	n := max(1, int(report.PushRate(ceiling, 200/0.5)*0.5))
	fireN, atR := strconv.Itoa(n), fmt.Sprintf(" at %d fires/s", 2*n)
	for i, want := range [][]string{
		{"toc", "push, embedded", "fire", fireN, "0.5", "1000", "16", fireN, "0"},
		{"baseline", "timers + HTTP push", "fire", fireN, "0.5", "1000", "16", fireN, "0"},
		{"baseline", "pull, in-memory claims + ack fdatasync, group commit", "fire", "300", "", "1000", "16", "300", "0"},
		{"toc", "pull, embedded", "fire", "300", "", "1000", "16", "300", "0"},
		{"toc", "pull, embedded", "fire", "100", "0.5", "1000", "16", "100", "0"},
		{"toc", "push, embedded", "fire", "300", "", "1000", "16", "300", "0"},
		{"baseline", "timers + HTTP push", "fire", "300", "", "1000", "16", "300", "0"},
		{"toc", "push, embedded", "hot", "2000", "1", "1000", "16", "2000", "0"},
		{"toc", "push, embedded", "schedule", "200", "", "1", "16", "200", "0"},
		{"baseline", "HTTP + log fsync, group commit", "schedule", "200", "", "1", "16", "0", "0"},
		{"toc", "push, embedded", "schedule", "1000", "", "1000", "4", "1000", "0"},
		{"baseline", "HTTP + log fsync, group commit", "schedule", "1000", "", "1000", "4", "0", "0"},
	} {
		i++ // after the ceiling
		if diff := cmp.Diff(want, fire[i][:9]); diff != "" {
			t.Errorf("fire and schedule row %d (-want +got):\n%s", i, diff)
		}
		// The rates, the CPU per task and the lateness.
		checkNumbers(t, "fire and schedule", fire[i], 11, 13, 14, 15, 16, 17, 18, 19)
		if fire[i][4] == "" && fire[i][7] != "0" { // all due at one instant
			checkNumbers(t, "fire and schedule", fire[i], 12) // drained per second
		}
	}
	// issue #25: each toc figure beside its baseline's, with the CPU per
	// operation of the processes and of the machine.
	cost := tableRows(t, doc, "## Cost against the machine")
	if len(cost) != 7 || !strings.HasPrefix(cost[0][0], "push ceiling") || !strings.HasPrefix(cost[1][0], "hot, push, embedded, n 2000") {
		t.Fatalf("cost: %d rows, want the ceiling, the hot instant against it and the 5 toc runs with a baseline:\n%s", len(cost), doc)
	}
	checkNumbers(t, "cost", cost[0], 3, 6, 8)
	for _, row := range cost[1:] {
		checkNumbers(t, "cost", row, 2, 3, 5, 6, 7, 8)
	}
	for _, want := range []string{
		"- #25: push fire p99 <= max(2x the timers baseline's, it + 5 ms), none missing or early" + atR + ": **",
		"- #25: push CPU per fire of the processes <= 1.5x the timers baseline's" + atR + ": **",
		"- #25: a push burst of 300 drained at >= 0.8x the push ceiling: **",
		"- #25: a hot instant of 2000 due within 1s drained at >= 0.8x the push ceiling: **",
		"- #25: GETs by id during a hot instant's drain (50/s) p99 <= 50 ms: **",
		"- #25: a pull burst of 300 drained at >= 0.5x the pull baseline's, each acked once: **",
		"- #25: pull p99 <= 50 ms, none missing, due evenly at min(5 R, 0.3x the pull baseline's drain rate): **",
		"- #25: creates one per request >= 0.7x the create baseline (16 clients): **",
		"- #25: creates in batches of 1000 >= 0.5x the batched create baseline (4 clients): **",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("lacks the target %q:\n%s", want, doc)
		}
	}
	two := tableRows(t, doc, "## Two apps")
	if len(two) != 1 || two[0][0] != "push, embedded" || two[0][1] != "300" || two[0][4] != "51" || two[0][5] != "0" {
		t.Fatalf("two apps: rows %q, want the embedded run of 300 and its 51 quiet tasks (over the 0.5 s spread):\n%s", two, doc)
	}
	checkNumbers(t, "two apps", two[0], 2, 3, 6, 7, 8, 9, 10)
	// toc beside the baselines: the fire's p99 and max, each schedule's
	// rate.
	base := tableRows(t, doc, "## Baseline")
	if len(base) != 8 {
		t.Fatalf("baseline: %d rows, want 8:\n%s", len(base), doc)
	}
	for i, figure := range []string{"p99 ms", "max ms", "drained/s", "max ms", "drained/s", "max ms", "tasks/s", "tasks/s"} {
		if base[i][5] != figure {
			t.Errorf("baseline row %d: %q, want %s", i, base[i], figure)
		}
		checkNumbers(t, "baseline", base[i], 6, 7, 8)
	}
	pending := tableRows(t, doc, "## Pending")
	if len(pending) != 1 || pending[0][1] != "server" || pending[0][2] != "2000" {
		t.Fatalf("pending rows %q, want one of the server with 2000 tasks", pending)
	}
	checkNumbers(t, "pending", pending[0], 3, 4, 5, 6, 12, 13)
	if rows := tableRows(t, doc, "## Cluster"); len(rows) != 0 {
		t.Errorf("cluster rows %q with --cluster=false", rows)
	}
	for _, want := range []string{
		"| CPUs (`nproc`) | ",
		"## Targets",
		"- rss <= 200 B per pending task: ",
		"- #13 goal: fire p99 <= 3x the baseline's" + atR + ": ",
		"- toc pending server n=2000 batch 1000: ",
		"\nbash bench/run.sh baseline --workload fire --n " + fireN + " --spread 500ms\n",
		"```sh\nbash bench/run.sh baseline --workload ceiling --duration 300ms\ntoc bench --embedded --workload fire --n " + fireN + " --spread 500ms\n",
		"\ntoc serve --data DIR --listen 127.0.0.1:0   # pid ",
		" --workload pending --n 2000\n```\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("lacks %q:\n%s", want, doc)
		}
	}
}

// TestBenchSuiteCluster runs the suite's cluster part on one node over the
// test PostgreSQL and Redis (skipped when either is absent), and checks
// that the cluster's database and keys are gone afterwards.
func TestBenchSuiteCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cluster nodes; skipped with -short")
	}
	t.Parallel()
	rc, prefix := testsvc.Redis(t)
	admin := testsvc.PostgresDB(t) // the suite creates its own beside it
	db := "toc_t_" + testsvc.Token()
	doc := runSuite(t, "--embedded=false", "--cluster-nodes", "1", "--pg", admin, "--cluster-db", db, "--cluster-prefix", prefix,
		"--cluster-redis", testsvc.RedisAddr(), "--cluster-fire-n", "200", "--cluster-fire-lead", "1s",
		"--cluster-single-n", "200", "--cluster-single-hold", "1s", "--cluster-batch-n", "200", "--cluster-batch-hold", "1s",
		"--cluster-pending-n", "200", "--cluster-max-wait", "20s")

	rows := tableRows(t, doc, "## Cluster")
	if len(rows) != 1 || rows[0][0] != "1" {
		t.Fatalf("cluster rows %q, want one of 1 node:\n%s", rows, doc)
	}
	checkNumbers(t, "cluster", rows[0], 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16)
	if rows[0][5] != "0" || rows[0][6] != "0" {
		t.Errorf("cluster row %q: want 0 missing, 0 duplicates", rows[0])
	}
	if fire := tableRows(t, doc, "## Fire and schedule"); len(fire) != 3 {
		t.Errorf("fire and schedule: %d rows, want the cluster's 3 (--embedded=false):\n%s", len(fire), doc)
	}
	pending := tableRows(t, doc, "## Pending")
	if len(pending) != 1 || pending[0][1] != "cluster, 1 node" {
		t.Fatalf("pending rows %q, want the cluster's only", pending)
	}
	checkNumbers(t, "pending", pending[0], 3, 4, 7, 8, 9, 11)
	for _, want := range []string{"- #12: SQL transactions per fire <= 0.05, one node: ", "- #12: Redis commands per fire <= 0.5, one node: "} {
		if !strings.Contains(doc, want) {
			t.Errorf("lacks %q:\n%s", want, doc)
		}
	}
	if !strings.Contains(doc, "--sql postgres://postgres@") || !strings.Contains(doc, "# 1 node(s), fresh database and prefix") {
		t.Errorf("commands lack the nodes' toc serve:\n%s", doc)
	}

	// Cleared: no keys under the prefix, no database.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if keys, err := rc.Keys(ctx, prefix+":*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys under %s after the suite: %q, %v", prefix, keys, err)
	}
	if err := suiteDBGone(ctx, admin, db); err != nil {
		t.Error(err)
	}
}

// suiteDBGone fails unless database db is gone from the server of admin.
func suiteDBGone(ctx context.Context, admin, db string) error {
	u, err := url.Parse(admin)
	if err != nil {
		return err
	}
	u.Path = "/" + db
	_, err = storesize.PostgresSize(ctx, []string{u.String()})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("database %s after the suite: %v, want it not to exist", db, err)
	}
	return nil
}
