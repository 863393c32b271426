package suite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func validConfig() Config {
	c := Config{Exe: "/bin/toc", Out: "/tmp/RESULTS.md", Root: "/src/toc"}
	c.EnsureDefaults()
	return c
}

func TestEnsureDefaults(t *testing.T) {
	t.Parallel()
	c := Config{FireN: 7, FireSpread: 3 * time.Second}
	c.EnsureDefaults()
	if c.PeerFireN != 7 || c.ClusterFireSpread != 3*time.Second {
		t.Errorf("PeerFireN %d ClusterFireSpread %s, want 7 and 3s (FireN's and FireSpread's)", c.PeerFireN, c.ClusterFireSpread)
	}
	if c.PendingN != PendingNDefault || c.RedisDB != RedisDBDefault || !cmp.Equal(c.ClusterNodes, []int{1, 2, 3}) ||
		c.ClusterMaxWait != time.Minute || c.ClusterDB != "toc_bench_cluster" || c.RunTimeout != RunTimeoutDefault {
		t.Errorf("defaults not filled: %+v", c)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := func() error { c := validConfig(); return c.Validate() }(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"Exe", func(c *Config) { c.Exe = "" }},
		{"Out", func(c *Config) { c.Out = "" }},
		{"Root", func(c *Config) { c.Root = "" }},
		{"PendingN", func(c *Config) { c.PendingN = -1 }},
		{"ClusterMaxWait", func(c *Config) { c.ClusterMaxWait = -time.Second }},
		{"ClusterNodes", func(c *Config) { c.ClusterNodes = []int{1, 0} }},
		{"PGURL", func(c *Config) { c.PGURL = "postgres://postgres@10.0.0.5:5432/postgres" }},
		{"PGURL", func(c *Config) { c.PGURL = "mysql://root@127.0.0.1/x" }},
		{"ClusterRedis", func(c *Config) { c.ClusterRedis = "redis.example.com:6379" }},
		{"ClusterDB", func(c *Config) { c.ClusterDB = "toc; DROP DATABASE postgres" }},
		{"ClusterPrefix", func(c *Config) { c.ClusterPrefix = "toc*" }},
	} {
		c := validConfig()
		tc.set(&c)
		var ce *ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: Validate = %v, want a ConfigError naming it", tc.field, err)
		}
	}
	c := validConfig()
	c.Root, c.SkipPeers = "", true
	if err := c.Validate(); err != nil {
		t.Errorf("no Root with SkipPeers: %v", err)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:6379": true, "localhost:5432": true, "[::1]:6379": true, "127.0.0.2": true,
		"10.1.2.3:6379": false, "example.com:6379": false, "": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestClusterDSN(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.PGURL, c.ClusterDB = "postgres://postgres@127.0.0.1:5432/toc_t_1?sslmode=disable", "toc_t_2"
	if got, want := c.clusterDSN(), "postgres://postgres@127.0.0.1:5432/toc_t_2?sslmode=disable"; got != want {
		t.Errorf("clusterDSN = %q, want %q", got, want)
	}
}

func TestServerVariant(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"push, server":    "push, cluster, 1 node",
		"push, 2 servers": "push, cluster, 1 node",
		"server":          "cluster, 1 node",
		"pull, embedded":  "pull, embedded",
	} {
		if got := serverVariant.ReplaceAllLiteralString(in, "cluster, 1 node"); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestDur(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", time.Minute: "1m", 90 * time.Second: "1m30s", time.Hour: "1h",
		500 * time.Millisecond: "500ms", 0: "0s",
	} {
		if got := dur(d); got != want {
			t.Errorf("dur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestLogSummary(t *testing.T) {
	t.Parallel()
	log := `time=2026-11-23T18:00:00Z level=WARN msg="lease lost" task=1
time=2026-11-23T18:00:01Z level=WARN msg="lease lost" task=2
time=2026-11-23T18:00:02Z level=ERROR msg=deliver error="connection refused"

time=2026-11-23T18:00:03Z level=WARN msg=slow
time=2026-11-23T18:00:04Z level=WARN msg=deliver
toc: serve: context canceled
`
	if got, want := countLines(log), 6; got != want {
		t.Errorf("countLines = %d, want %d", got, want)
	}
	if got, want := logSummary(log), "deliver (x2); lease lost (x2); slow (x1)"; got != want {
		t.Errorf("logSummary = %q, want %q", got, want)
	}
	if got := logSummary(""); got != "" {
		t.Errorf("logSummary of nothing = %q", got)
	}
}

func TestURLWatcher(t *testing.T) {
	t.Parallel()
	w := newURLWatcher()
	for _, p := range []string{"starting\ntoc listen", "ing on http://127.0.0.1:4", "1234\nmore\n", "toc listening on http://x\n"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	select {
	case got := <-w.found:
		if got != "http://127.0.0.1:41234" {
			t.Errorf("found %q", got)
		}
	default:
		t.Fatal("no address found")
	}
	select {
	case got := <-w.found:
		t.Errorf("a second address: %q", got)
	default:
	}
}

func TestFindRootAndPeerVersions(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	deep := filepath.Join(root, "internal", "cli")
	peers := filepath.Join(root, "bench", "peers")
	for _, d := range []string{deep, peers} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "module "+Module+"\n\ngo 1.26\n")
	write(filepath.Join(peers, "go.mod"), `module github.com/toc-dev/toc/bench/peers

require (
	github.com/jackc/puddle/v2 v2.2.3 // indirect
)

require (
	github.com/hibiken/asynq v0.26.0
	github.com/jackc/pgx/v5 v5.12.0
)

require github.com/riverqueue/river v0.51.1
`)
	if got := FindRoot(deep); got != root {
		t.Errorf("FindRoot(%s) = %q, want %q", deep, got, root)
	}
	if got := FindRoot(peers); got != root { // bench/peers's go.mod is another module
		t.Errorf("FindRoot(%s) = %q, want %q", peers, got, root)
	}
	got := peerVersions(root, "github.com/hibiken/asynq", "github.com/jackc/pgx/v5", "github.com/riverqueue/river", "github.com/absent")
	want := map[string]string{"github.com/hibiken/asynq": "v0.26.0", "github.com/jackc/pgx/v5": "v5.12.0", "github.com/riverqueue/river": "v0.51.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("peerVersions (-want +got):\n%s", diff)
	}
	if strings.TrimSpace(FindRoot(t.TempDir())) != "" {
		t.Error("FindRoot outside a module found one")
	}
}
