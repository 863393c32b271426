package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/cli"
	"github.com/toc-dev/toc/internal/server"
	"github.com/toc-dev/toc/internal/testsvc"
)

// runLoadgenCmd runs the loadgen command with args and returns its stdout
// and stderr.
func runLoadgenCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	err = runLoadgen(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func isNumber(v any) bool {
	_, ok := v.(float64)
	return ok
}

// startNodes starts n toc servers in this process, each on its own
// temporary directory, with the options set changes, and returns their
// URLs separated by commas; they stop when the test ends.
func startNodes(t *testing.T, n int, set func(*server.Options)) string {
	t.Helper()
	var urls []string
	for range n {
		o := server.DefaultOptions()
		o.Data, o.Listen = t.TempDir(), "127.0.0.1:0"
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		set(&o)
		srv, err := server.New(o)
		if err == nil {
			err = srv.Start(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("stop server: %v", err)
			}
		})
		urls = append(urls, srv.URL())
	}
	return strings.Join(urls, ",")
}

// TestLoadgenFlags: the loadgen command has the stores' flags that toc
// bench lacks, and its usage errors are toc bench's.
func TestLoadgenFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "schedule", "--redis", "127.0.0.1:6379"}, "are for --workload pending and fire"},
		{[]string{"--server", "http://127.0.0.1:1", "--redis", "127.0.0.1:6379", "--redis-prefix", "p"}, "--redis-prefix is for --workload pending"},
		{[]string{"--server", "http://127.0.0.1:1", "--sql-stats-wait", "1s"}, "--sql-stats-wait needs --sql"},
		{[]string{"--server", "http://127.0.0.1:1", "--workload", "pending", "--redis-prefix", "p"}, "--redis-prefix needs --redis"},
		{[]string{"--embedded", "--workload", "pending", "--sql", "postgres://x/y"}, "give --embedded or --server"},
	} {
		_, _, err := runLoadgenCmd(t, tc.args...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	_, stderr, err := runLoadgenCmd(t, "-h")
	if err != nil && !errors.Is(err, cli.ErrUsage) {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: bash bench/run.sh loadgen", "-redis-prefix", "-sql-stats-wait"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("-h lacks %q:\n%s", want, stderr)
		}
	}
}

// TestLoadgenCluster runs the load generator with the stores' flags: the fire
// and pending workloads against a cluster of two nodes over PostgreSQL and Redis (skipped when either is absent).
func TestLoadgenCluster(t *testing.T) {
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
	stdout, stderr, err := runLoadgenCmd(t, "--server", urls, "--workload", "fire", "--n", "200", "--spread", "500ms", "--server-pid", self+","+self,
		"--redis", testsvc.RedisAddr(), "--sql", dsn, "--sql-stats-wait", "2s", "--json")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if got["fired"] != 200.0 || got["missing"] != 0.0 {
		t.Errorf("fired %v missing %v, want 200 0; notes %v", got["fired"], got["missing"], got["notes"])
	}
	if got["nodes"] != 2.0 {
		t.Errorf("nodes = %v, want 2", got["nodes"])
	}
	cost, _ := got["cost"].(map[string]any)
	cpu, _ := cost["cpu_us_per_fire"].(map[string]any)
	for k, v := range map[string]any{"fires": cost["fires"], "sql_xacts_per_fire": cost["sql_xacts_per_fire"],
		"redis_commands_per_fire": cost["redis_commands_per_fire"], "cpu_us_per_fire.toc": cpu["toc"]} {
		if !isNumber(v) {
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

	stdout, stderr, err = runLoadgenCmd(t, "--server", urls, "--workload", "pending", "--n", "1000", "--json",
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
