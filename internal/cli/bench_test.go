package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/bench"
	"github.com/toc-dev/toc/internal/testsvc"
)

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
	for _, want := range []string{"toc fire (push, embedded): n=50", "fired        50", "missing      0", "lateness ms  p50 "} {
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
		{[]string{"--embedded", "--workload", "nap"}, "--workload must be fire, schedule or pending"},
		{[]string{"--embedded", "--server", "http://127.0.0.1:1"}, "give --embedded or --server"},
		{[]string{"--embedded", "--n", "-1"}, "--n must be at least 1"},
		{[]string{"--embedded", "--batch", "1001"}, "--batch must be between 1 and 1000"},
		{[]string{"--embedded", "--workload", "pending", "--pull"}, "--pull is for fire and schedule"},
		{[]string{"--embedded", "extra"}, `unexpected argument "extra"`},
		{[]string{"--server", "ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,http://127.0.0.1:1"}, "is given twice"},
		{[]string{"--server", "http://127.0.0.1:1", "--server-pid", "12,x"}, "--server-pid: want process ids"},
		{[]string{"--server", "http://127.0.0.1:1", "--redis", "127.0.0.1:6379"}, "are for --workload pending"},
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "pending", "--redis-prefix", "p"}, "--redis-prefix needs --redis"},
		{[]string{"--embedded", "--workload", "pending", "--sql", "postgres://x/y"}, "give --embedded or --server"},
		{[]string{"--embedded", "--max-wait", "-1s"}, "must not be negative"},
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

// startNodes starts n servers in this process with the flags, stopped when
// the test ends, and returns their URLs separated by commas.
func startNodes(t *testing.T, n int, flags ...string) string {
	t.Helper()
	var urls []string
	for range n {
		srv, err := startEmbedded(context.Background(), io.Discard, flags...)
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
	urls := startNodes(t, 2)
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
	urls := startNodes(t, 2, "--sql", dsn, "--sql-tables", "2", "--redis", testsvc.RedisAddr(), "--redis-prefix", prefix, "--slots", "8")

	got := runBenchJSONAt(t, urls, "fire", 200, "--n", "200", "--spread", "500ms")
	if got["nodes"] != 2.0 {
		t.Errorf("nodes = %v, want 2", got["nodes"])
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
