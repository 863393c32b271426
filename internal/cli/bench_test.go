package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/server"
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

// TestBenchHot: a small hot instant on an embedded server reports the
// drain, the GETs during it and the server's RSS.
func TestBenchHot(t *testing.T) {
	t.Parallel()
	got := runBenchJSON(t, "hot", 2000, "--n", "2000", "--get-rate", "100")
	h, _ := got["hot"].(map[string]any)
	l, _ := h["get_ms"].(map[string]any)
	if got["spread_sec"] != 1.0 || jsonType(got["drain_per_sec"]) != "number" || h["get_rate"] != 100.0 || jsonType(h["gets"]) != "number" ||
		jsonType(l["p99"]) != "number" || jsonType(h["peak_rss_bytes"]) != "number" || jsonType(h["rss_at_due_bytes"]) != "number" {
		t.Errorf("spread %v, drain %v, hot %v: want 1 s, a drain rate, the GETs at 100/s and the RSS", got["spread_sec"], got["drain_per_sec"], got["hot"])
	}
	// The GETs came from the probe's process (this test binary started
	// again: TestMain) and found the tasks.
	if gets, _ := h["gets"].(float64); gets < 1 || h["get_errors"] != 0.0 {
		t.Errorf("gets %v, errors %v (notes %v): want the probe's GETs, none failed", h["gets"], h["get_errors"], got["notes"])
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
		{[]string{"--embedded", "--workload", "nap"}, "--workload must be fire, schedule, pending, twoapp or hot"},
		{[]string{"--embedded", "--workload", "ceiling"}, "--workload must be fire, schedule, pending, twoapp or hot"},
		{[]string{"--baseline", "--workload", "ceiling"}, "the baselines (no toc) are in the bench module now"},
		{[]string{"--embedded", "-baseline=true"}, "the baselines (no toc) are in the bench module now"},
		{[]string{"--embedded", "--workload", "twoapp", "--pull"}, "--workload twoapp is push only"},
		{[]string{"--embedded", "--server", "http://127.0.0.1:1"}, "give --embedded or --server"},
		{[]string{"--embedded", "--n", "-1"}, "--n must be at least 1"},
		{[]string{"--embedded", "--batch", "1001"}, "--batch must be between 1 and 1000"},
		{[]string{"--embedded", "--workload", "pending", "--pull"}, "--pull is for fire and schedule"},
		{[]string{"--embedded", "extra"}, `unexpected argument "extra"`},
		{[]string{"--server", "ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,ftp://x"}, "want http:// or https:// URLs"},
		{[]string{"--server", "http://127.0.0.1:1,http://127.0.0.1:1"}, "is given twice"},
		{[]string{"--server", "http://127.0.0.1:1", "--server-pid", "12,x"}, "--server-pid: want process ids"},
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "pending", "--redis", "127.0.0.1:6379"}, "flag provided but not defined: -redis"},
		{[]string{"--server", "http://127.0.0.1:1", "--sql", "postgres://x/y"}, "flag provided but not defined: -sql"},
		{[]string{"--embedded", "--max-wait", "-1s"}, "must not be negative"},
		{[]string{"--embedded", "--workload", "schedule", "--timeline", "100ms"}, "--timeline is for --workload fire"},
		{[]string{"--embedded", "--timeline", "-1s"}, "--timeline must not be negative"},
		{[]string{"--embedded", "--workload", "hot", "--pull"}, "--workload hot is push only"},
		{[]string{"--embedded", "--get-rate", "10"}, "--get-rate is for --workload hot"},
		{[]string{"--embedded", "--workload", "hot", "--get-rate", "0"}, "--get-rate must be positive"},
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
	rss, err := loadgen.ReadRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The pid twice: the sum is about twice this process's RSS.
	if got.Variant != "push, 2 servers" || got.Nodes != 2 || got.Fired != 100 || got.RSSBytes < rss {
		t.Errorf("got %+v, want push, 2 servers, 2 nodes, 100 fired, rss about twice %d", got, rss)
	}
}
