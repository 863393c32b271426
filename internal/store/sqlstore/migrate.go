package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// migrateLockTimeout bounds the wait for another node's migrations (MySQL's
// GET_LOCK needs a bound; PostgreSQL's lock waits on ctx).
const migrateLockTimeout = 5 * time.Minute

// migrate brings db's schema up to date under the dialect's migration lock:
// it creates the bookkeeping tables, checks (or, the first time, records)
// the sharding in toc_meta, and applies the migrations that
// toc_schema_migrations does not list.
func (s *Store) migrate(ctx context.Context, db *database, databases int) error {
	if s.dialect.transactionalDDL {
		// PostgreSQL: everything in one transaction, which holds the
		// advisory lock until it ends. A failure leaves nothing behind.
		tx, err := db.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin migrations: %w", err)
		}
		defer tx.Rollback()
		if err := s.exec(ctx, tx, "migrate_lock", nil); err != nil {
			return err
		}
		if err := s.migrateLocked(ctx, tx, db, databases); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit migrations: %w", err)
		}
		return nil
	}

	// MySQL: DDL commits as it goes, so the migrations run on one
	// connection that holds a named lock. Each statement is safe to run
	// again (IF NOT EXISTS), and a migration is recorded once all its
	// statements ran, so a failure midway is finished by the next Open.
	conn, err := db.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		// End the session rather than return it to the pool: that releases
		// the lock even if RELEASE_LOCK failed.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}()
	q, err := s.dialect.render("migrate_lock", tmplData{})
	if err != nil {
		return err
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, q.sql, q.args(map[string]any{"timeout_s": int64(migrateLockTimeout / time.Second)})...).Scan(&got)
	if err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("take the migration lock: not granted within %s (GET_LOCK returned %v)", migrateLockTimeout, got)
	}
	if err := s.migrateLocked(ctx, conn, db, databases); err != nil {
		return err
	}
	if s.dialect.queries["migrate_unlock"] != nil {
		if err := s.exec(ctx, conn, "migrate_unlock", nil); err != nil {
			return fmt.Errorf("release the migration lock: %w", err)
		}
	}
	return nil
}

// migrateLocked does migrate's work, with the lock held, through q.
func (s *Store) migrateLocked(ctx context.Context, q querier, db *database, databases int) error {
	for _, name := range []string{"create_migrations", "create_meta"} {
		if err := s.exec(ctx, q, name, nil); err != nil {
			return err
		}
	}

	// The sharding: a database holds the shards of its place in the list,
	// so neither its place, nor the number of databases, nor the number of
	// tables can change under it.
	meta := []struct {
		name string
		want int
		hint string
	}{
		{"tables", s.tables, "Options.Tables"},
		{"databases", databases, "len(Options.DSNs)"},
		{"database", db.index, "its index in Options.DSNs"},
	}
	for _, m := range meta {
		r, err := s.dialect.render("meta_get", tmplData{})
		if err != nil {
			return err
		}
		var v string
		err = q.QueryRowContext(ctx, r.sql, r.args(map[string]any{"name": m.name})...).Scan(&v)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if err := s.exec(ctx, q, "meta_put", map[string]any{"name": m.name, "value": strconv.Itoa(m.want)}); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("read toc_meta: %w", err)
		case v != strconv.Itoa(m.want):
			return fmt.Errorf("the database was set up with %s = %s and %s is %d: "+
				"resharding is not supported (open it with the Options.DSNs, in their order, and Options.Tables it was set up with)",
				m.name, v, m.hint, m.want)
		}
	}

	r, err := s.dialect.render("versions", tmplData{})
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, r.sql)
	if err != nil {
		return fmt.Errorf("read toc_schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("read toc_schema_migrations: %w", err)
		}
		applied[v] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("read toc_schema_migrations: %w", err)
	}
	for v := range applied {
		if v > len(s.dialect.migrations) {
			return fmt.Errorf("the schema is at version %d, newer than this toc knows (%d): upgrade toc", v, len(s.dialect.migrations))
		}
	}

	for _, m := range s.dialect.migrations {
		if applied[m.version] {
			continue
		}
		start := time.Now()
		for i := range s.tables {
			r, err := s.dialect.ph.render(m.tmpl, tmplData{Table: tableName(i), Index: i})
			if err != nil {
				return err
			}
			for _, stmt := range statements(r.sql) {
				if _, err := q.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration %s on %s: %w", m.name, tableName(i), err)
				}
			}
		}
		err := s.exec(ctx, q, "version_put", map[string]any{"version": m.version, "now_ms": time.Now().UnixMilli()})
		if err != nil {
			return err
		}
		s.logger.InfoContext(ctx, "sqlstore: applied migration",
			slog.String("migration", m.name), slog.Int("database", db.index),
			slog.Int("tables", s.tables), slog.Duration("took", time.Since(start)))
	}
	return nil
}

// exec renders and runs the query name with params.
func (s *Store) exec(ctx context.Context, q querier, name string, params map[string]any) error {
	r, err := s.dialect.render(name, tmplData{})
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, r.sql, r.args(params)...); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
