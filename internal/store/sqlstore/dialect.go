package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"text/template"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/toc-dev/toc/internal/store"
)

// dialect is what differs between PostgreSQL and MySQL: how to connect,
// the SQL (in .sql files), placeholders, and which errors are worth a retry.
type dialect struct {
	name       string // "postgres" or "mysql"
	ph         placeholders
	queries    map[string]*template.Template
	migrations []migration

	// connector returns the driver connector for a DSN of the dialect
	// (see dsn.go). Its error may quote the password: see parseDSN.
	connector func(dsn string) (driver.Connector, error)

	// transactionalDDL: migrations run in one transaction (PostgreSQL).
	// Otherwise DDL commits implicitly and migrations run on one connection
	// under a named lock (MySQL).
	transactionalDDL bool

	// retryable reports a transaction that lost a deadlock and may run
	// again.
	retryable func(error) bool

	// unavailable reports a server error that a new connection may not
	// meet (the server shut down or is starting); lostConnection covers
	// what every driver shares.
	unavailable func(error) bool

	// taken reports a unique_violation: insert_tables_new met a key (or
	// id) already stored. Only with insert_tables_new.
	taken func(error) bool

	// copyFrom: large creates whose keys are free go by COPY (copyNew;
	// pgx connections). Only with insert_tables_new.
	copyFrom bool
}

var (
	postgresDialect = mustDialect(&dialect{
		name:             "postgres",
		ph:               placeholders{numbered: true},
		connector:        postgresConnector,
		transactionalDDL: true,
		copyFrom:         true,
		retryable: func(err error) bool {
			var pe *pgconn.PgError
			// deadlock_detected, serialization_failure
			return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
		},
		taken: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
		unavailable: func(err error) bool {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				// connection_exception (class 08), admin_shutdown,
				// crash_shutdown, cannot_connect_now, too_many_connections
				return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
			}
			var ce *pgconn.ConnectError
			return errors.As(err, &ce) || pgconn.SafeToRetry(err)
		},
	})
	mysqlDialect = mustDialect(&dialect{
		name:      "mysql",
		connector: mysqlConnector,
		retryable: func(err error) bool {
			var me *mysql.MySQLError
			return errors.As(err, &me) && me.Number == 1213 // ER_LOCK_DEADLOCK
		},
		unavailable: func(err error) bool {
			var me *mysql.MySQLError
			if errors.As(err, &me) {
				// ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, CR_SERVER_GONE_ERROR, CR_SERVER_LOST
				return me.Number == 1040 || me.Number == 1053 || me.Number == 2006 || me.Number == 2013
			}
			return errors.Is(err, mysql.ErrInvalidConn)
		},
	})
)

// requiredQueries are the queries every dialect's file must have.
// get_for_update_no_sync, get_many_for_update_no_sync and migrate_unlock are
// optional.
var requiredQueries = []string{
	"get", "get_by_key", "get_for_update", "get_many_for_update", "insert", "key_holder", "update", "update_many", "sweep",
	"wakeups", "claimable", "list", "sweepable", "shard_wakeups", "counts",
	"migrate_lock", "create_migrations", "create_meta", "meta_get", "meta_put", "versions", "version_put",
	"schedule_get", "schedule_get_by_key", "schedule_get_for_update", "schedule_insert", "schedule_key_holder",
	"schedule_update", "schedule_delete", "schedule_list", "schedule_due", "schedule_counts",
	"schedule_app_count",
}

// mustDialect reads d's .sql files. They are embedded, so an error is a bug.
func mustDialect(d *dialect) *dialect {
	var err error
	d.queries, err = parseQueries("queries/" + d.name + ".sql")
	if err != nil {
		panic(err)
	}
	for _, name := range requiredQueries {
		if d.queries[name] == nil {
			panic(fmt.Sprintf("sqlstore: queries/%s.sql has no query %q", d.name, name))
		}
	}
	d.migrations, err = parseMigrations("migrations/" + d.name)
	if err != nil {
		panic(err)
	}
	return d
}

// render renders the query name of d.
func (d *dialect) render(name string, data tmplData) (query, error) {
	t := d.queries[name]
	if t == nil {
		return query{}, fmt.Errorf("sqlstore: no query %q for %s", name, d.name)
	}
	return d.ph.render(t, data)
}

func postgresConnector(dsn string) (driver.Connector, error) {
	scheme, rest, _ := cutScheme(dsn)
	cfg, err := pgx.ParseConfig(scheme + "://" + rest)
	if err != nil {
		return nil, err
	}
	return stdlib.GetConnector(*cfg, stdlib.OptionAfterConnect(presizeParams)), nil
}

// mysqlConnector reads a MySQL DSN in any of its forms (see mysqlConfig)
// and sets what the store relies on:
//
//   - clientFoundRows off: an insert whose key is taken counts 0 rows;
//   - interpolateParams on: a query with arguments is one round trip, not a
//     prepare, an execute and a close (safe: the store passes only integers,
//     strings and bytes, and the driver refuses charsets where it is not);
//   - strict mode, unless the DSN sets sql_mode: a value too long for its
//     column is an error, never silently cut.
func mysqlConnector(dsn string) (driver.Connector, error) {
	cfg, err := mysqlConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ClientFoundRows = false
	cfg.InterpolateParams = true
	if _, ok := cfg.Params["sql_mode"]; !ok {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["sql_mode"] = "CONCAT_WS(',', NULLIF(@@sql_mode, ''), 'STRICT_ALL_TABLES')"
	}
	return mysql.NewConnector(cfg)
}

// querier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// markUnavailable wraps err with store.ErrUnavailable when it says the
// connection or the server was lost (see store.ErrUnavailable), so that
// callers may try again.
func (d *dialect) markUnavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if lostConnection(err) || d.unavailable(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// lostConnection reports an error of the connection itself, whatever the
// driver.
func lostConnection(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
