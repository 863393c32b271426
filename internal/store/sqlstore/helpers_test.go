package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/store/sqlstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The test databases' drops run after their tests (see databases).
	drops.Wait()
	if dropFailed.Load() {
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// drops are the DROP DATABASEs in flight; dropFailed is set when one fails.
var (
	drops      sync.WaitGroup
	dropFailed atomic.Bool
)

// A server is a database server the tests make databases in. Every store a
// test opens gets databases of its own, named toc_test_<random>_<n>, and
// drops them when the test ends, so tests run in parallel and again and
// again on one server.
type server struct {
	name  string // "postgres" or "mysql"
	env   string // the variable that overrides dsn
	dsn   string // an admin DSN, scheme included
	start string // how to start the server here

	once sync.Once
	err  error // why the server can't be used
}

var (
	postgres = &server{
		name:  "postgres",
		env:   "TOC_TEST_POSTGRES",
		dsn:   "postgres://postgres@127.0.0.1:5432/postgres",
		start: "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
	}
	mariadb = &server{
		name:  "mysql",
		env:   "TOC_TEST_MYSQL",
		dsn:   "mysql://root@tcp(127.0.0.1:3306)/",
		start: "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
	}
	servers = []*server{postgres, mariadb}
)

// use returns sv, or skips the test when it can't be reached (fails it
// when CI=true).
func (sv *server) use(t testing.TB) *server {
	t.Helper()
	sv.once.Do(func() {
		if v := os.Getenv(sv.env); v != "" {
			sv.dsn = v
			if sv.name == "mysql" && !strings.HasPrefix(v, "mysql://") {
				sv.dsn = "mysql://" + v
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sv.err = sv.exec(ctx, "SELECT 1")
	})
	if sv.err != nil {
		msg := fmt.Sprintf("%s is not reachable (%v): start it with\n\t%s\nor point %s at one", sv.name, sv.err, sv.start, sv.env)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return sv
}

// exec runs statements on the admin connection.
func (sv *server) exec(ctx context.Context, stmts ...string) error {
	switch sv.name {
	case "postgres":
		conn, err := pgx.Connect(ctx, sv.dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	default:
		db, err := sql.Open("mysql", strings.TrimPrefix(sv.dsn, "mysql://"))
		if err != nil {
			return err
		}
		defer db.Close()
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}
}

// dsnOf returns the DSN of database name on sv.
func (sv *server) dsnOf(t testing.TB, name string) string {
	t.Helper()
	if sv.name == "postgres" {
		u, err := url.Parse(sv.dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		return u.String()
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(sv.dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	return "mysql://" + cfg.FormatDSN()
}

// databases creates n fresh databases and returns their DSNs. They are
// created concurrently, and dropped when the test ends, in the background:
// on PostgreSQL each CREATE DATABASE copies template1 and each DROP
// DATABASE forces a checkpoint, which concurrent drops share. TestMain
// waits for the drops.
func (sv *server) databases(t testing.TB, n int) []string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	prefix := "toc_test_" + hex.EncodeToString(b[:])
	var names, dsns []string
	for i := range n {
		names = append(names, fmt.Sprintf("%s_%d", prefix, i))
		dsns = append(dsns, sv.dsnOf(t, names[i]))
	}
	drop := func(name string) string {
		if sv.name == "postgres" {
			return "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"
		}
		return "DROP DATABASE IF EXISTS " + name
	}
	t.Cleanup(func() {
		for _, name := range names {
			drops.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := sv.exec(ctx, drop(name)); err != nil {
					fmt.Fprintf(os.Stderr, "drop the test database %s: %v\n", name, err)
					dropFailed.Store(true)
				}
			})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { errs[i] = sv.exec(ctx, "CREATE DATABASE "+name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("create the test databases: %v", err)
	}
	return dsns
}

// queryInt runs a query that returns one integer on the database of dsn.
func (sv *server) queryInt(t testing.TB, dsn, q string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n int
	if sv.name == "postgres" {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// testTables is the number of tables per database of the tests' stores:
// with two databases, eight shards.
const testTables = 4

// open opens a store on dsns with testTables tables, logging to the test.
func open(t testing.TB, dsns []string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: dsns, Tables: testTables, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// testLogger logs warnings and errors to t (migrations log at Info).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// execOn runs statements on the database of dsn.
func (sv *server) execOn(t testing.TB, dsn string, stmts ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := &server{name: sv.name, dsn: dsn}
	return other.exec(ctx, stmts...)
}
