package sqlstore_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/task"
)

// TestMigrateTwice opens a store twice on the same databases: the second
// Open applies nothing and finds what the first stored.
func TestMigrateTwice(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			s := open(t, dsns)
			var gen task.IDGenerator
			tk := newTask(s, &gen, "app", "k", epoch)
			if _, err := s.Create(context.Background(), []*task.Task{tk}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, dsns)
			defer s.Close()
			if _, err := s.GetByKey(context.Background(), "app", "k"); err != nil {
				t.Errorf("GetByKey after reopening: %v", err)
			}
			for _, dsn := range dsns {
				if n, want := sv.queryInt(t, dsn, "SELECT COUNT(*) FROM toc_schema_migrations"), sqlstore.Migrations(sv.name); n != want {
					t.Errorf("toc_schema_migrations has %d rows, want %d", n, want)
				}
				if n := sv.queryInt(t, dsn, "SELECT COUNT(*) FROM toc_meta"); n != 3 {
					t.Errorf("toc_meta has %d rows, want 3", n)
				}
			}
		})
	}
}

// TestMigrateConcurrently opens stores on the same fresh databases at once,
// as nodes starting together do: every Open succeeds and the schema is
// applied once.
func TestMigrateConcurrently(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			const n = 6
			stores := make([]*sqlstore.Store, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					s, err := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: dsns, Tables: testTables, MaxConns: 2})
					if err != nil {
						t.Errorf("Open %d: %v", i, err)
						return
					}
					stores[i] = s
				})
			}
			wg.Wait()
			for _, s := range stores {
				if s != nil {
					if err := s.Close(); err != nil {
						t.Error(err)
					}
				}
			}
			for _, dsn := range dsns {
				if n, want := sv.queryInt(t, dsn, "SELECT COUNT(*) FROM toc_schema_migrations"), sqlstore.Migrations(sv.name); n != want {
					t.Errorf("toc_schema_migrations has %d rows, want %d", n, want)
				}
			}
		})
	}
}

// TestOpenRefusesResharding checks that a database set up for one sharding
// refuses another: other Tables, other DSNs order, another number of DSNs.
func TestOpenRefusesResharding(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			if err := open(t, dsns).Close(); err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				name   string
				dsns   []string
				tables int
			}{
				{"tables", dsns, 2 * testTables},
				{"order", []string{dsns[1], dsns[0]}, testTables},
				{"fewer", dsns[:1], testTables},
			} {
				s, err := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: tt.dsns, Tables: tt.tables})
				if err == nil {
					s.Close()
					t.Errorf("%s: Open succeeded", tt.name)
					continue
				}
				if !strings.Contains(err.Error(), "resharding is not supported") {
					t.Errorf("%s: Open error = %v, want one saying resharding is not supported", tt.name, err)
				}
			}
			// And the right options still open it.
			if err := open(t, dsns).Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMigrationsAreIdempotent runs every statement of every migration a
// second time on a migrated database, as a MySQL Open that failed midway
// is finished by the next (its DDL is not transactional).
func TestMigrationsAreIdempotent(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 1)
			if err := open(t, dsns).Close(); err != nil {
				t.Fatal(err)
			}
			stmts, err := sqlstore.MigrationStatements(sv.name, testTables)
			if err != nil {
				t.Fatal(err)
			}
			if len(stmts) == 0 {
				t.Fatal("no migration statements")
			}
			// Forget the migrations were applied, and open again.
			if got := sv.queryInt(t, dsns[0], "SELECT COUNT(*) FROM toc_schema_migrations"); got != sqlstore.Migrations(sv.name) {
				t.Fatalf("toc_schema_migrations has %d rows", got)
			}
			if err := sv.execOn(t, dsns[0], "DELETE FROM toc_schema_migrations"); err != nil {
				t.Fatal(err)
			}
			if err := open(t, dsns).Close(); err != nil {
				t.Fatalf("Open after forgetting the migrations: %v", err)
			}
			if !slices.ContainsFunc(stmts, func(s string) bool { return strings.Contains(s, "toc_tasks_0003") }) {
				t.Errorf("the migrations do not reach table 3 of 4: %q", stmts)
			}
			// The schedule table is one per database: created once.
			if n := len(slices.DeleteFunc(slices.Clone(stmts), func(s string) bool {
				return !strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS toc_schedules")
			})); n != 1 {
				t.Errorf("the migrations create toc_schedules %d times, want once", n)
			}
		})
	}
}

// TestValidate checks that Options are checked before anything connects.
func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		opts sqlstore.Options
		want string
	}{
		{sqlstore.Options{}, "Options.DSNs is required"},
		{sqlstore.Options{DSNs: []string{"host=x dbname=y"}}, `Options.DSNs[0] "host=x dbname=y": not a PostgreSQL or MySQL DSN; use postgres://`},
		{sqlstore.Options{DSNs: []string{"postgres://x/y", "mysql://u@tcp(x)/y"}}, "mixes postgres (DSNs[0]) and mysql (DSNs[1])"},
		{sqlstore.Options{DSNs: []string{"mariadb://u@x/y", "postgresql://x/y"}}, "mixes mysql (DSNs[0]) and postgres (DSNs[1])"},
		{sqlstore.Options{DSNs: []string{"postgres://x/y"}, Tables: -1}, "Options.Tables is negative"},
		{sqlstore.Options{DSNs: []string{"postgres://x/y", "postgres://x/z"}, Tables: 1<<15 + 1}, "more than the 65536"},
		{sqlstore.Options{DSNs: []string{"postgres://x/y"}, MaxConns: -1}, "Options.MaxConns is negative"},
	} {
		_, err := sqlstore.Open(context.Background(), tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%+v) error = %v, want one containing %q", tt.opts, err, tt.want)
		}
	}
	if err := (sqlstore.Options{DSNs: []string{"mysql://u@tcp(x)/db", "mysql://u@tcp(y)/db"}, Tables: 1 << 15}).Validate(); err != nil {
		t.Errorf("Validate(65536 shards) = %v", err)
	}
	// A MySQL DSN must name its database; it is not echoed (passwords).
	_, err := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: []string{"mysql://u:secret@tcp(127.0.0.1:1)/"}})
	if err == nil || !strings.Contains(err.Error(), "names no database") || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open(mysql DSN without a database) error = %v", err)
	}
}
