package storesize_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/bench/storesize"
	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/testsvc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRedis(t *testing.T) {
	t.Parallel()
	c, prefix := testsvc.Redis(t) // skips without Redis; deletes the prefix's keys
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := storesize.OpenRedis([]string{testsvc.RedisAddr()}, prefix)
	defer r.Close()

	used, err := r.UsedMemory(ctx)
	if err != nil || used <= 0 {
		t.Fatalf("UsedMemory = %d, %v; want > 0", used, err)
	}
	keys, bytes, err := r.Prefix(ctx)
	if err != nil || keys != 0 || bytes != 0 {
		t.Fatalf("Prefix of an empty prefix = %d keys, %d bytes, %v; want 0, 0", keys, bytes, err)
	}
	members := make([]any, 0, 200)
	for i := range 100 {
		members = append(members, i, fmt.Sprintf("member-%020d", i))
	}
	if err := c.Do(ctx, append([]any{"ZADD", prefix + ":{x}:store"}, members...)...).Err(); err != nil {
		t.Fatal(err)
	}
	// Not under "prefix:", so not counted (the cleanup deletes it: it
	// starts with prefix).
	if err := c.Set(ctx, prefix+"-other", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	keys, bytes, err = r.Prefix(ctx)
	if err != nil || keys != 1 || bytes < 100*20 {
		t.Errorf("Prefix = %d keys, %d bytes, %v; want 1 key of at least 2000 bytes", keys, bytes, err)
	}
}

func TestPostgresSize(t *testing.T) {
	t.Parallel()
	dsn := testsvc.PostgresDB(t) // skips without PostgreSQL; drops the database
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, err := storesize.PostgresSize(ctx, []string{dsn})
	if err != nil || one <= 0 {
		t.Fatalf("PostgresSize = %d, %v; want > 0", one, err)
	}
	two, err := storesize.PostgresSize(ctx, []string{dsn, dsn})
	if err != nil || two != 2*one {
		t.Errorf("PostgresSize of the database twice = %d, %v; want %d", two, err, 2*one)
	}
	for _, bad := range []string{"mysql://root@tcp(127.0.0.1:3306)/toc", "::"} {
		if _, err := storesize.PostgresSize(ctx, []string{bad}); err == nil || !strings.Contains(err.Error(), "only postgres://") {
			t.Errorf("PostgresSize(%q) = %v, want an error saying only postgres:// is measured", bad, err)
		}
	}
}

// TestRedisActivity measures the test Redis doing a known number of
// commands, some of them inside a Lua script (skipped without Redis,
// failed under CI=true). Other tests may share the Redis: ECHO, which
// toc does not use, is counted exactly, all commands at least.
func TestRedisActivity(t *testing.T) {
	t.Parallel()
	c, prefix := testsvc.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := storesize.OpenRedis([]string{testsvc.RedisAddr()}, prefix)
	defer r.Close()

	statsBefore, err := r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := r.Activity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		if err := c.Echo(ctx, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// EVAL and the two ECHOs it calls: three commands.
	if err := c.Eval(ctx, "redis.call('echo', 'a'); return redis.call('echo', 'b')", []string{prefix + ":k"}).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := r.Activity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	statsAfter, err := r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if echo := statsAfter["echo"] - statsBefore["echo"]; echo != 9 {
		t.Errorf("echo calls grew by %d, want 9 (7, and 2 in the script)", echo)
	}
	if got := after.Calls - before.Calls - before.Own; got < 10 {
		t.Errorf("commands grew by %d without the reading's own, want at least 10", got)
	}
	if before.Own != 2 || len(before.PIDs) != 1 || before.PIDs[0] < 1 {
		t.Fatalf("activity %+v: want own 2 and the server's pid", before)
	}
	if s, err := loadgen.ReadProcStat(before.PIDs[0]); err == nil && s.Comm != "redis-server" {
		t.Errorf("process_id %d is %q, want redis-server", before.PIDs[0], s.Comm)
	}
}

// TestSQLActivity counts the transactions of a fresh PostgreSQL database
// exactly (skipped without PostgreSQL), and finds its postmaster.
func TestSQLActivity(t *testing.T) {
	t.Parallel()
	dsn := testsvc.PostgresDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, err := storesize.ReadSQLActivity(ctx, []string{dsn, dsn}) // the same database twice counts once
	if err != nil {
		t.Fatal(err)
	}
	if before.MySQL || len(before.Servers) != 1 || len(before.Servers[0]) == 0 || before.OwnXacts < 1 {
		t.Fatalf("activity %+v: want PostgreSQL, one server with its processes, own transactions", before)
	}
	// Seven transactions: the connection's start, a CREATE TABLE and five
	// INSERTs (in the simple protocol: the extended one adds one per
	// statement it prepares). Closing the connection flushes its
	// statistics.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE t (x int)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)",
		"INSERT INTO t VALUES (3)", "INSERT INTO t VALUES (4)", "INSERT INTO t VALUES (5)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	// The backend flushes as it exits, a moment after the close.
	var grown int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		after, err := storesize.ReadSQLActivity(ctx, []string{dsn})
		if err != nil {
			t.Fatal(err)
		}
		// The readings between before and this one are its own too.
		if grown = after.Xacts - before.Xacts - before.OwnXacts; grown >= 7 {
			break
		}
		before.OwnXacts += after.OwnXacts
	}
	// An autovacuum worker visiting the new database may add a few.
	if grown < 7 || grown > 9 {
		t.Errorf("transactions grew by %d, want 7", grown)
	} else if grown > 7 {
		t.Logf("transactions grew by %d: 7 and an autovacuum worker's, probably", grown)
	}
	if pm := loadgen.ParentNamed(before.Servers[0], "postgres"); pm == 0 {
		t.Logf("no postmaster found among the parents of %v (PostgreSQL in another PID namespace?)", before.Servers[0])
	}
}

// TestSQLActivityMySQL: the whole server's counters grow by at least what
// the test did (skipped without MariaDB).
func TestSQLActivityMySQL(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MySQLDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, err := storesize.ReadSQLActivity(ctx, []string{dsn})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 3 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := storesize.ReadSQLActivity(ctx, []string{dsn})
	if err != nil {
		t.Fatal(err)
	}
	if !after.MySQL || after.Xacts-before.Xacts < 3 || after.Statements-before.Statements-before.OwnStatements < 3 {
		t.Errorf("before %+v, after %+v: want MySQL, at least 3 more commits and statements", before, after)
	}
}
