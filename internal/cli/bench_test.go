package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/bench"
	"github.com/toc-dev/toc/internal/bench/storesize"
	"github.com/toc-dev/toc/internal/bench/suite"
	"github.com/toc-dev/toc/internal/server"
	"github.com/toc-dev/toc/internal/testsvc"
)

// `toc bench suite` runs the binary it is (os.Executable): in its tests,
// this test binary. Started with a toc command instead of -test flags, it
// is toc, as cmd/toc's main.
func init() {
	if len(os.Args) < 2 || (os.Args[1] != "bench" && os.Args[1] != "serve") {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "toc:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// benchKeys are the keys `toc bench --json` promises, each with the JSON
// type it has after decoding into any.
var benchKeys = map[string]string{
	"workload":         "string",
	"n":                "number",
	"fired":            "number",
	"missing":          "number",
	"duplicates":       "number",
	"schedule_per_sec": "number",
	"lateness_ms":      "object",
	"rss_bytes":        "number",
	"disk_bytes":       "number",
}

var latenessKeys = []string{"p50", "p90", "p99", "p999", "max"}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case map[string]any:
		return "object"
	}
	return "other"
}

// runBenchJSON runs toc bench --embedded with --json and checks the result's
// shape and that every task fired once: loose, as the machine may be busy.
func runBenchJSON(t *testing.T, workload string, n int, args ...string) map[string]any {
	t.Helper()
	return runBenchJSONAt(t, "", workload, n, args...)
}

// runBenchJSONAt is runBenchJSON against --server servers, or --embedded
// when servers is "" (rss_bytes and disk_bytes are then known).
func runBenchJSONAt(t *testing.T, servers, workload string, n int, args ...string) map[string]any {
	t.Helper()
	where := []string{"--embedded"}
	if servers != "" {
		where = []string{"--server", servers}
	}
	args = append(append([]string{"bench", "--json", "--workload", workload}, where...), args...)
	stdout, stderr, err := runCLI(t, nil, args...)
	if err != nil {
		t.Fatalf("%q: %v\nstderr: %s", args, err, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	for k, typ := range benchKeys {
		if v, ok := got[k]; !ok || jsonType(v) != typ {
			t.Errorf("key %q = %v, want a %s", k, v, typ)
		}
	}
	if l, ok := got["lateness_ms"].(map[string]any); ok {
		for _, k := range latenessKeys {
			if jsonType(l[k]) != "number" {
				t.Errorf("lateness_ms.%s = %v, want a number", k, l[k])
			}
		}
	}
	if got["workload"] != workload || got["n"] != float64(n) {
		t.Errorf("workload %v n %v, want %s %d", got["workload"], got["n"], workload, n)
	}
	if got["fired"] != float64(n) || got["missing"] != 0.0 || got["duplicates"] != 0.0 {
		t.Errorf("fired %v missing %v duplicates %v, want %d 0 0; notes: %v", got["fired"], got["missing"], got["duplicates"], n, got["notes"])
	}
	if r, _ := got["schedule_per_sec"].(float64); r <= 0 {
		t.Errorf("schedule_per_sec = %v, want > 0", got["schedule_per_sec"])
	}
	if servers != "" {
		return got
	}
	if r, _ := got["rss_bytes"].(float64); r <= 0 {
		t.Errorf("rss_bytes = %v, want > 0 (the embedded server is this process)", got["rss_bytes"])
	}
	if r, _ := got["disk_bytes"].(float64); r <= 0 {
		t.Errorf("disk_bytes = %v, want > 0 (the embedded data directory is known)", got["disk_bytes"])
	}
	if got["nodes"] != 1.0 {
		t.Errorf("nodes = %v, want 1", got["nodes"])
	}
	return got
}

func TestBenchFire(t *testing.T) {
	t.Parallel()
	got := runBenchJSON(t, "fire", 200, "--n", "200", "--spread", "1s")
	if got["spread_sec"] != 1.0 {
		t.Errorf("spread_sec = %v, want 1", got["spread_sec"])
	}
	// Embedded: the cost per fire of this process.
	cost, _ := got["cost"].(map[string]any)
	cpu, _ := cost["cpu_us_per_fire"].(map[string]any)
	if cost["fires"] != 200.0 || jsonType(cpu["total"]) != "number" || jsonType(cpu["toc"]) != "number" || cpu["sql"] != nil || cost["sql_xacts_per_fire"] != nil {
		t.Errorf("cost %v, want 200 fires, the CPU of toc only", got["cost"])
	}
}

// TestBenchTwoApp: a small twoapp run on an embedded server reports the
// burst and the quiet app.
func TestBenchTwoApp(t *testing.T) {
	t.Parallel()
	got := runBenchJSON(t, "twoapp", 300, "--n", "300", "--spread", "500ms")
	q, _ := got["quiet"].(map[string]any)
	l, _ := q["lateness_ms"].(map[string]any)
	if q["n"] != 51.0 || q["fired"] != 51.0 || jsonType(l["p99"]) != "number" || jsonType(q["during_drain_n"]) != "number" {
		t.Errorf("quiet %v, want 51 fired with their lateness", got["quiet"])
	}
}

// TestBenchBaseline: the fire and schedule workloads with no toc.
func TestBenchBaseline(t *testing.T) {
	t.Parallel()
	type result struct {
		System   string               `json:"system"`
		Variant  string               `json:"variant"`
		Workload string               `json:"workload"`
		N        int                  `json:"n"`
		Fired    int                  `json:"fired"`
		Missing  int                  `json:"missing"`
		Early    int                  `json:"early"`
		Rate     float64              `json:"schedule_per_sec"`
		Drain    float64              `json:"drain_per_sec"`
		Clients  int                  `json:"concurrency"`
		Dup      int                  `json:"duplicates"`
		Cost     *struct{ Fires int } `json:"cost"`
		Notes    []string             `json:"notes"`
	}
	run := func(args ...string) result {
		t.Helper()
		stdout, stderr, err := runCLI(t, nil, append([]string{"bench", "--baseline", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%q: %v\nstderr: %s", args, err, stderr)
		}
		var r result
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
		}
		return r
	}
	fire := run("--workload", "fire", "--n", "200", "--spread", "500ms", "--lead", "500ms")
	if fire.System != "baseline" || fire.Variant != "timers + HTTP push" || fire.Fired != 200 || fire.Missing != 0 || fire.Early != 0 ||
		fire.Cost == nil || fire.Cost.Fires != 200 {
		t.Errorf("fire baseline %+v, want all 200 fired by the timers, none early, with the cost", fire)
	}
	for _, batch := range []string{"1", "100"} {
		r := run("--workload", "schedule", "--n", "300", "--batch", batch)
		if r.System != "baseline" || r.Variant != "HTTP + log fsync, group commit" || r.N != 300 || r.Rate <= 0 ||
			!slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "requests made durable by") }) {
			t.Errorf("schedule baseline, batch %s: %+v, want 300 accepted and the fsyncs in the notes", batch, r)
		}
	}
	ceil := run("--workload", "ceiling", "--duration", "200ms", "--concurrency", "4")
	if ceil.System != "baseline" || ceil.Workload != "ceiling" || ceil.Clients != 4 || ceil.N < 1 || ceil.Fired != ceil.N || ceil.Drain <= 0 ||
		ceil.Cost == nil || ceil.Cost.Fires != ceil.N {
		t.Errorf("push ceiling %+v, want POSTs from 4 senders, their rate and their cost", ceil)
	}
	pull := run("--pull", "--workload", "fire", "--n", "500", "--spread", "0s", "--lead", "500ms", "--consumers", "2")
	if pull.System != "baseline" || !strings.HasPrefix(pull.Variant, "pull, ") || pull.Fired != 500 || pull.Missing != 0 || pull.Dup != 0 ||
		pull.Drain <= 0 || pull.Cost == nil || pull.Cost.Fires != 500 ||
		!slices.ContainsFunc(pull.Notes, func(n string) bool { return strings.Contains(n, "500 tasks claimed, 500 acked") }) {
		t.Errorf("pull baseline %+v, want 500 claimed and acked once each, the drain rate and the cost", pull)
	}
}

// TestBenchTimeline: --timeline gives the lateness per bucket of due
// time, in the JSON and one line a bucket in the table.
func TestBenchTimeline(t *testing.T) {
	t.Parallel()
	got := runBenchJSON(t, "fire", 200, "--n", "200", "--spread", "400ms", "--timeline", "100ms")
	tl, _ := got["timeline"].([]any)
	if got["timeline_ms"] != 100.0 || len(tl) != 4 {
		t.Fatalf("timeline_ms %v, timeline %v: want 4 buckets of 100 ms", got["timeline_ms"], got["timeline"])
	}
	n := 0.0
	for i, b := range tl {
		b, _ := b.(map[string]any)
		for _, k := range []string{"from_ms", "n", "p50", "p99", "max"} {
			if jsonType(b[k]) != "number" {
				t.Errorf("timeline[%d].%s = %v, want a number", i, k, b[k])
			}
		}
		if b["from_ms"] != float64(100*i) {
			t.Errorf("timeline[%d].from_ms = %v, want %d", i, b["from_ms"], 100*i)
		}
		c, _ := b["n"].(float64)
		n += c
	}
	if n != 200 {
		t.Errorf("the buckets hold %v jobs, want 200", n)
	}
	if _, ok := runBenchJSON(t, "fire", 50, "--n", "50", "--spread", "100ms")["timeline"]; ok {
		t.Error("timeline in the JSON without --timeline")
	}

	stdout, stderr, err := runCLI(t, nil, "bench", "--embedded", "--workload", "fire", "--n", "50", "--spread", "200ms", "--timeline", "100ms")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	for _, want := range []string{"timeline     lateness ms per 100 ms of due time", "+0.000s    n 25 ", "+0.100s    n 25 "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBenchFirePull(t *testing.T) {
	t.Parallel()
	runBenchJSON(t, "fire", 100, "--n", "100", "--spread", "500ms", "--pull")
}

func TestBenchSchedule(t *testing.T) {
	t.Parallel()
	got := runBenchJSON(t, "schedule", 500, "--n", "500")
	if got["batch"] != 1.0 || got["concurrency"] != 16.0 {
		t.Errorf("batch %v concurrency %v, want 1 16", got["batch"], got["concurrency"])
	}
}

func TestBenchPending(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runCLI(t, nil, "bench", "--embedded", "--workload", "pending", "--n", "2000", "--json")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	var got struct {
		Workload    string  `json:"workload"`
		N           int     `json:"n"`
		RSSBytes    int64   `json:"rss_bytes"`
		DiskBytes   int64   `json:"disk_bytes"`
		DiskPerTask float64 `json:"disk_bytes_per_task"`
		Rate        float64 `json:"schedule_per_sec"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if got.Workload != "pending" || got.N != 2000 || got.RSSBytes <= 0 || got.DiskBytes <= 0 || got.Rate <= 0 {
		t.Errorf("got %+v, want pending, n 2000 and positive rss, disk and rate", got)
	}
}

func TestBenchTable(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runCLI(t, nil, "bench", "--embedded", "--workload", "fire", "--n", "50", "--spread", "100ms", "--lead", "1s")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	for _, want := range []string{"toc fire (push, embedded): n=50", "fired        50", "missing      0", "lateness ms  p50 ", "cpu µs/fire  total "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\r") {
		t.Errorf("progress written to a non-terminal:\n%q", stdout)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--embedded", "--workload", "nap"}, "--workload must be fire, schedule, pending, twoapp or ceiling"},
		{[]string{"--embedded", "--workload", "ceiling"}, "--workload ceiling needs --baseline"},
		{[]string{"--baseline", "--workload", "ceiling", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"--baseline", "--duration", "1s"}, "--duration is for --workload ceiling"},
		{[]string{"--baseline", "--pull", "--workload", "schedule"}, "--baseline --pull is for --workload fire"},
		{[]string{"--embedded", "--workload", "twoapp", "--pull"}, "--workload twoapp is push only"},
		{[]string{"--baseline", "--workload", "twoapp"}, "--baseline is for fire and schedule"},
		{[]string{"--embedded", "--server", "http://127.0.0.1:1"}, "give --embedded or --server"},
		{[]string{"--embedded", "--n", "-1"}, "--n must be at least 1"},
		{[]string{"--embedded", "--batch", "1001"}, "--batch must be between 1 and 1000"},
		{[]string{"--embedded", "--workload", "pending", "--pull"}, "--pull is for fire and schedule"},
		{[]string{"--embedded", "extra"}, `unexpected argument "extra"`},
		{[]string{"--server", "ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,http://127.0.0.1:1"}, "is given twice"},
		{[]string{"--server", "http://127.0.0.1:1", "--server-pid", "12,x"}, "--server-pid: want process ids"},
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "schedule", "--redis", "127.0.0.1:6379"}, "are for --workload pending and fire"},
		{[]string{"--server", "http://127.0.0.1:1", "--redis", "127.0.0.1:6379", "--redis-prefix", "p"}, "--redis-prefix is for --workload pending"},
		{[]string{"--server", "http://127.0.0.1:1", "--sql-stats-wait", "1s"}, "--sql-stats-wait needs --sql"},
		{[]string{"--baseline", "--embedded"}, "--baseline runs no toc"},
		{[]string{"--baseline", "--server", "http://127.0.0.1:1"}, "--baseline runs no toc"},
		{[]string{"--baseline", "--workload", "pending"}, "--baseline is for fire and schedule"},
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "pending", "--redis-prefix", "p"}, "--redis-prefix needs --redis"},
		{[]string{"--embedded", "--workload", "pending", "--sql", "postgres://x/y"}, "give --embedded or --server"},
		{[]string{"--embedded", "--max-wait", "-1s"}, "must not be negative"},
		{[]string{"--embedded", "--workload", "schedule", "--timeline", "100ms"}, "--timeline is for --workload fire"},
		{[]string{"--embedded", "--timeline", "-1s"}, "--timeline must not be negative"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"bench"}, tc.args...)...)
		checkUsageError(t, err, tc.want)
	}
}

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	stdout, _, err := runCLI(t, nil, "help", "bench")
	if err != nil || !strings.HasPrefix(stdout, "usage: toc bench ") || !strings.Contains(stdout, "-workload") {
		t.Errorf("help bench: err %v, stdout %q", err, stdout)
	}
}

// startNodes starts n servers in this process with the options set changes, stopped when
// the test ends, and returns their URLs separated by commas.
func startNodes(t *testing.T, n int, set func(*server.Options)) string {
	t.Helper()
	var urls []string
	for range n {
		srv, err := startEmbedded(context.Background(), io.Discard, set)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := srv.stop(); err != nil {
				t.Errorf("stop server: %v", err)
			}
		})
		urls = append(urls, srv.url)
	}
	return strings.Join(urls, ",")
}

// TestBenchServers: two servers behind one --server; the results say so.
func TestBenchServers(t *testing.T) {
	t.Parallel()
	urls := startNodes(t, 2, nil)
	self := strconv.Itoa(os.Getpid())
	stdout, stderr, err := runCLI(t, nil, "bench", "--server", urls, "--server-pid", self+","+self,
		"--workload", "fire", "--n", "100", "--spread", "200ms", "--json")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	var got struct {
		Variant  string `json:"variant"`
		Nodes    int    `json:"nodes"`
		Fired    int    `json:"fired"`
		RSSBytes int64  `json:"rss_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	rss, err := bench.ReadRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The pid twice: the sum is about twice this process's RSS.
	if got.Variant != "push, 2 servers" || got.Nodes != 2 || got.Fired != 100 || got.RSSBytes < rss {
		t.Errorf("got %+v, want push, 2 servers, 2 nodes, 100 fired, rss about twice %d", got, rss)
	}
}

// TestBenchCluster runs the fire and pending workloads against a cluster of
// two nodes over PostgreSQL and Redis (skipped when either is absent).
func TestBenchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2-node cluster; skipped with -short")
	}
	t.Parallel()
	_, prefix := testsvc.Redis(t)
	dsn := testsvc.PostgresDB(t)
	urls := startNodes(t, 2, func(o *server.Options) {
		o.SQL, o.SQLTables, o.Redis, o.RedisPrefix, o.Slots = []string{dsn}, 2, []string{testsvc.RedisAddr()}, prefix, 8
	})

	// With the nodes' pid (this process's), the Redis and the database: the
	// cost per fire.
	self := strconv.Itoa(os.Getpid())
	got := runBenchJSONAt(t, urls, "fire", 200, "--n", "200", "--spread", "500ms", "--server-pid", self+","+self,
		"--redis", testsvc.RedisAddr(), "--sql", dsn, "--sql-stats-wait", "2s")
	if got["nodes"] != 2.0 {
		t.Errorf("nodes = %v, want 2", got["nodes"])
	}
	cost, _ := got["cost"].(map[string]any)
	cpu, _ := cost["cpu_us_per_fire"].(map[string]any)
	for k, v := range map[string]any{"fires": cost["fires"], "sql_xacts_per_fire": cost["sql_xacts_per_fire"],
		"redis_commands_per_fire": cost["redis_commands_per_fire"], "cpu_us_per_fire.toc": cpu["toc"]} {
		if jsonType(v) != "number" {
			t.Errorf("cost.%s = %v, want a number; cost %v, notes %v", k, v, got["cost"], got["notes"])
		}
	}
	// Every fire writes its outcome and moves its task in Redis.
	if x, _ := cost["sql_xacts"].(float64); x < 1 {
		t.Errorf("cost.sql_xacts = %v, want some", cost["sql_xacts"])
	}
	if c, _ := cost["redis_commands"].(float64); c < 200 {
		t.Errorf("cost.redis_commands = %v, want at least one per fire", cost["redis_commands"])
	}
	if cpu["sql"] == nil || cpu["redis"] == nil {
		t.Logf("cost %v: PostgreSQL's or Redis's processes not found here (another PID namespace?)", got["cost"])
	}

	stdout, stderr, err := runCLI(t, nil, "bench", "--server", urls, "--workload", "pending", "--n", "1000", "--json",
		"--redis", testsvc.RedisAddr(), "--redis-prefix", prefix, "--sql", dsn)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	var pending struct {
		Nodes            int      `json:"nodes"`
		RedisBytes       *int64   `json:"redis_bytes"`
		RedisPerTask     *float64 `json:"redis_bytes_per_task"`
		RedisPrefixBytes *int64   `json:"redis_prefix_bytes"`
		SQLBytes         *int64   `json:"sql_bytes"`
		SQLPerTask       *float64 `json:"sql_bytes_per_task"`
		Notes            []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(stdout), &pending); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if pending.Nodes != 2 || pending.RedisBytes == nil || pending.RedisPerTask == nil || pending.RedisPrefixBytes == nil ||
		pending.SQLBytes == nil || pending.SQLPerTask == nil {
		t.Fatalf("pending on a cluster: %s\nwant nodes 2 and the redis and sql figures", stdout)
	}
	// Far-future tasks are SQL rows only: the cluster's keys in Redis do
	// not grow with them.
	if *pending.SQLBytes <= 0 || *pending.RedisPrefixBytes > 1000 {
		t.Errorf("sql grew %d bytes, the cluster's Redis keys %d: want sql > 0 and Redis about flat; notes %q",
			*pending.SQLBytes, *pending.RedisPrefixBytes, pending.Notes)
	}
}

// TestBenchSuiteFlags: the flags of `toc bench suite` and their defaults,
// which are run.sh's.
func TestBenchSuiteFlags(t *testing.T) {
	t.Parallel()
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	c, err := benchSuiteConfig(e, nil, "/bin/toc", "/src/toc")
	if err != nil {
		t.Fatal(err)
	}
	want := suite.Config{
		Exe: "/bin/toc", Root: "/src/toc", Out: "/src/toc/bench/RESULTS.md", Command: "toc bench suite", Stderr: io.Discard,
		CeilingDuration: 3 * time.Second, FireN: 50_000, FireSpread: 5 * time.Second, PullN: 250_000, BurstN: 100_000, SingleN: 20_000, SingleHold: 6 * time.Second,
		BatchN: 100_000, BatchHold: 10 * time.Second, PendingN: 1_000_000,
		PeerFireN: 50_000, PeerSingleN: 10_000, PeerBatchN: 50_000, RedisDB: 13, PGURL: "postgres://postgres@127.0.0.1:5432/postgres",
		ClusterNodes: []int{1, 2, 3}, ClusterFireN: 20_000, ClusterFireSpread: 5 * time.Second, ClusterFireLead: 8 * time.Second,
		ClusterSingleN: 5000, ClusterSingleHold: 5 * time.Second, ClusterBatchN: 10_000, ClusterBatchHold: 5 * time.Second,
		ClusterPendingN: 100_000, ClusterMaxWait: 60 * time.Second,
		ClusterDB: "toc_bench_cluster", ClusterPrefix: "toc-bench-cluster", ClusterRedis: "127.0.0.1:6379",
		RunTimeout: 10 * time.Minute,
	}
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b io.Writer) bool { return a == b })); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	args := []string{"--fire-n", "100000", "--fire-spread", "10s", "--pending-n", "10000000", "--embedded=false", "--peers=false", "--cluster=false",
		"--cluster-nodes", "1, 3", "--cluster-fire-lead", "2s", "--cluster-max-wait", "30s", "--redis-db", "5",
		"--cluster-db", "toc_x", "--cluster-prefix", "toc-x", "--cluster-logs", "/tmp/logs", "--out", "/tmp/r.md", "--run-timeout", "1m"}
	c, err = benchSuiteConfig(e, args, "/bin/toc", "")
	if err != nil {
		t.Fatal(err)
	}
	want.Root, want.Out, want.Command = "", "/tmp/r.md", "toc bench suite "+strings.Join(args, " ")
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
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
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
		{[]string{"extra"}, "/src", `unexpected argument "extra"`},
	} {
		_, err := benchSuiteConfig(e, tc.args, "/bin/toc", tc.root)
		checkUsageError(t, err, tc.want)
	}
}

func TestBenchSuiteHelp(t *testing.T) {
	t.Parallel()
	_, stderr, err := runCLI(t, nil, "bench", "suite", "-h")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: toc bench suite [flags]", "bench/RESULTS.md", "-cluster-nodes", "-peers"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("bench suite -h lacks %q:\n%s", want, stderr)
		}
	}
	stdout, _, err := runCLI(t, nil, "help", "bench")
	if err != nil || !strings.Contains(stdout, `"toc bench suite" runs the whole suite`) {
		t.Errorf("help bench: err %v, does not mention the suite:\n%s", err, stdout)
	}
}

// tinySuite are the sizes of a suite that takes seconds.
var tinySuite = []string{
	"--ceiling-duration", "300ms", "--fire-n", "200", "--fire-spread", "500ms", "--pull-n", "100", "--burst-n", "300", "--single-n", "200", "--single-hold", "1s",
	"--batch-n", "1000", "--batch-hold", "1s", "--pending-n", "2000", "--peers=false",
}

// runSuite runs `toc bench suite` with args, writing to a file of the test,
// and returns the file's text.
func runSuite(t *testing.T, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	args = append(append([]string{"bench", "suite", "--out", out}, tinySuite...), args...)
	_, stderr, err := runCLI(t, nil, args...)
	if err != nil {
		t.Fatalf("%q: %v\nstderr:\n%s", args, err, stderr)
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
	if len(fire) != 12 {
		t.Fatalf("fire and schedule: %d rows, want 12:\n%s", len(fire), doc)
	}
	// The push ceiling first: its n is the POSTs it made.
	if c := fire[0]; c[0] != "baseline" || c[1] != "back-to-back HTTP POSTs" || c[2] != "ceiling" || c[6] != "64" || c[3] != c[7] {
		t.Errorf("fire and schedule row 0: %q, want the push ceiling of 64 senders", c)
	}
	checkNumbers(t, "fire and schedule", fire[0], 3, 12)
	for i, want := range [][]string{
		{"toc", "push, embedded", "fire", "200", "0.5", "1000", "16", "200", "0"},
		{"baseline", "timers + HTTP push", "fire", "200", "0.5", "1000", "16", "200", "0"},
		{"baseline", "pull, in-memory claims + ack fdatasync, group commit", "fire", "300", "", "1000", "16", "300", "0"},
		{"toc", "pull, embedded", "fire", "300", "", "1000", "16", "300", "0"},
		{"toc", "pull, embedded", "fire", "100", "0.5", "1000", "16", "100", "0"},
		{"toc", "push, embedded", "fire", "300", "", "1000", "16", "300", "0"},
		{"baseline", "timers + HTTP push", "fire", "300", "", "1000", "16", "300", "0"},
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
	if len(cost) != 6 || !strings.HasPrefix(cost[0][0], "push ceiling") {
		t.Fatalf("cost: %d rows, want the ceiling and the 5 toc runs with a baseline:\n%s", len(cost), doc)
	}
	checkNumbers(t, "cost", cost[0], 3, 6, 8)
	for _, row := range cost[1:] {
		checkNumbers(t, "cost", row, 2, 3, 5, 6, 7, 8)
	}
	for _, want := range []string{
		"- #25: push fire p99 <= max(2x the timers baseline's, it + 5 ms), none missing or early at 400 fires/s: **",
		"- #25: push CPU per fire of the processes <= 1.5x the timers baseline's at 400 fires/s: **",
		"- #25: a push burst of 300 drained at >= 0.8x the push ceiling: **",
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
		"- #13 goal: fire p99 <= 3x the baseline's at 400 fires/s: ",
		"- toc pending server n=2000 batch 1000: ",
		"\ntoc bench --baseline --workload fire --n 200 --spread 500ms\n",
		"```sh\ntoc bench --baseline --workload ceiling --duration 300ms\ntoc bench --embedded --workload fire --n 200 --spread 500ms\n",
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
