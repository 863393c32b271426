package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var _ store.Store = (*Store)(nil)

// Options configure [Open].
type Options struct {
	// DSNs are the databases, all PostgreSQL or all MySQL/MariaDB:
	//
	//	postgres://user:pass@host:5432/database?sslmode=disable   (or postgresql://)
	//	mysql://user:pass@host:3306/database?tls=true             (or mariadb://)
	//	mysql://user:pass@tcp(host:3306)/database?tls=true
	//
	// A MySQL URL's user and password are percent-decoded, its port
	// defaults to 3306, an IPv6 host is in brackets, and its parameters are
	// go-sql-driver/mysql's. The last form is that driver's own, with or
	// without the scheme; a unix socket needs it
	// (mysql://user@unix(/path/to/mysqld.sock)/database). [CheckDSN]
	// checks a DSN; [RedactDSN] masks its password.
	// Required. Their order is part of the sharding: keep it, and keep their
	// number (each database records its place and refuses another).
	DSNs []string

	// Tables is the number of task tables (shards) per database. Default
	// [TablesDefault]. Fixed when a database is first set up: Open refuses a
	// database that has another number. len(DSNs) × Tables must not exceed
	// [MaxShards].
	//
	// More tables spread promotion work over more nodes (each shard has one
	// owner), but cost the fire path: an UpdateMany costs about two
	// statements per table its batch touches, so a batch spread over many
	// tables costs many statements.
	Tables int

	// MaxConns bounds the connections to each database. Default
	// [MaxConnsDefault].
	MaxConns int

	// MinConns is how many connections to each database Open sets up
	// front (at most MaxConns; default none). The pool then need not
	// grow in the middle of the first burst of due tasks, where setting up
	// connections (tens of milliseconds each, more when many start at
	// once) holds fires up. Open does not fail when the database refuses
	// some of them (max_connections); it logs that and goes on with what
	// it has.
	MinConns int

	// Logger receives the schema migrations, at Info. Default
	// slog.Default().
	Logger *slog.Logger
}

// Defaults and limits of [Options].
const (
	TablesDefault   = 4
	MaxConnsDefault = 32
	// MaxShards is the number of shards a task id can name (16 bits).
	MaxShards = 1 << 16
)

// Validate reports what is wrong with o, naming the field. It does not
// connect.
func (o Options) Validate() error {
	if len(o.DSNs) == 0 {
		return errors.New("sqlstore: Options.DSNs is required")
	}
	first, _, err := parseDSN(o.DSNs[0])
	if err != nil {
		return fmt.Errorf("sqlstore: Options.DSNs[0] %w", err)
	}
	for i, dsn := range o.DSNs[1:] {
		d, _, err := parseDSN(dsn)
		if err != nil {
			return fmt.Errorf("sqlstore: Options.DSNs[%d] %w", i+1, err)
		}
		if d != first {
			return fmt.Errorf("sqlstore: Options.DSNs mixes %s (DSNs[0]) and %s (DSNs[%d]): all must be the same kind", first.name, d.name, i+1)
		}
	}
	if o.Tables < 0 {
		return fmt.Errorf("sqlstore: Options.Tables is negative (%d)", o.Tables)
	}
	if n := len(o.DSNs) * cmp.Or(o.Tables, TablesDefault); n > MaxShards {
		return fmt.Errorf("sqlstore: Options.Tables × len(Options.DSNs) is %d shards, more than the %d a task id can name", n, MaxShards)
	}
	if o.MinConns < 0 {
		return fmt.Errorf("sqlstore: Options.MinConns is negative (%d)", o.MinConns)
	}
	if o.MaxConns < 0 {
		return fmt.Errorf("sqlstore: Options.MaxConns is negative (%d)", o.MaxConns)
	}
	return nil
}

// Store is the SQL-backed [store.Store]. Open one with [Open].
type Store struct {
	dialect *dialect
	tables  int         // per database
	dbs     []*database // Options.DSNs, in order
	logger  *slog.Logger

	mu struct {
		// Held for reading by every call for its duration, for writing by
		// Close: Close waits for calls in flight, and no call reaches a
		// database once it is closed.
		sync.RWMutex
		closed bool
	}
}

// database is one of Options.DSNs: shards index*tables to
// (index+1)*tables-1.
type database struct {
	index  int
	db     *sql.DB
	tables []string // toc_tasks_0000, …

	// Per table (indexed like tables).
	get, getByKey, getForUpdate, keyHolder, update, sweep, shardWakeups []query
	// Over every table at once.
	wakeups, claimable, list, sweepable, counts query
	// Optional: nil when the dialect has none (get_for_update is used).
	getForUpdateNoSync []query
	// Optional, the multi-table statements (a batch's rows of every table
	// in one statement): nil when the dialect has none (the per-table
	// multi-row ones are used).
	insertTables, insertTablesNew, readTablesNoSync, updateTablesFenced *query
	// Of the database's one schedule table (schedules.go).
	schedules scheduleQueries

	sized sync.Map // sizedKey → query: the multi-row ones, rendered on first use
}

// fencedTables reports whether the fire path's optimistic read and fenced
// update go over every table at once (readMany, writeMany).
func (db *database) fencedTables() bool {
	return db.readTablesNoSync != nil && db.updateTablesFenced != nil
}

// sizedKey names a query of a number of rows in a table.
type sizedKey struct {
	name        string
	table, rows int
}

// tableName is the name of task table i of a database.
func tableName(i int) string { return fmt.Sprintf("toc_tasks_%04d", i) }

// Open connects to every database of opts.DSNs, brings each one's schema up
// to date (see the package doc), and returns the store. ctx bounds the
// connecting and the migrations, not the store.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d, _ := dialectOf(opts.DSNs[0])
	s := &Store{
		dialect: d,
		tables:  cmp.Or(opts.Tables, TablesDefault),
		logger:  cmp.Or(opts.Logger, slog.Default()),
	}
	maxConns := cmp.Or(opts.MaxConns, MaxConnsDefault)
	for i, dsn := range opts.DSNs {
		_, conn, err := parseDSN(dsn)
		if err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("sqlstore: Options.DSNs[%d] %w", i, err) // the password masked
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		// Kept for as long as pgxpool keeps an idle connection: setting
		// one up again costs the fire path tens of milliseconds.
		db.SetConnMaxIdleTime(30 * time.Minute)
		s.dbs = append(s.dbs, &database{index: i, db: db})
	}
	err := s.each(func(db *database) error {
		if err := s.migrate(ctx, db, len(opts.DSNs)); err != nil {
			return fmt.Errorf("sqlstore: database %d of Options.DSNs: %w", db.index, err)
		}
		if err := s.prepare(db); err != nil {
			return err
		}
		s.warm(ctx, db, min(opts.MinConns, maxConns))
		return nil
	})
	if err != nil {
		s.closeDBs()
		return nil, err
	}
	return s, nil
}

// warm sets up n connections to db at once and leaves them idle in its
// pool (Options.MinConns).
func (s *Store) warm(ctx context.Context, db *database, n int) {
	if n <= 0 {
		return
	}
	conns := make([]*sql.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := db.db.Conn(ctx)
			if err == nil {
				err = c.PingContext(ctx)
			}
			conns[i], errs[i] = c, err
		})
	}
	wg.Wait()
	ok := 0
	for i, c := range conns {
		if c != nil {
			c.Close() // back to the idle pool
		}
		if errs[i] == nil {
			ok++
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.logger.Warn("sqlstore: set up fewer connections ahead than asked; the pool grows when it needs to",
			slog.Int("database", db.index), slog.Int("asked", n), slog.Int("ready", ok), slog.String("error", err.Error()))
	}
}

// prepare renders db's queries.
func (s *Store) prepare(db *database) error {
	db.tables = make([]string, s.tables)
	for i := range db.tables {
		db.tables[i] = tableName(i)
	}
	perTable := []struct {
		name string
		dst  *[]query
	}{
		{"get", &db.get}, {"get_by_key", &db.getByKey}, {"get_for_update", &db.getForUpdate},
		{"key_holder", &db.keyHolder}, {"update", &db.update}, {"sweep", &db.sweep},
		{"shard_wakeups", &db.shardWakeups},
	}
	for _, p := range perTable {
		*p.dst = make([]query, s.tables)
		for i, t := range db.tables {
			q, err := s.dialect.render(p.name, tmplData{Table: t, Index: i})
			if err != nil {
				return err
			}
			(*p.dst)[i] = q
		}
	}
	all := []struct {
		name string
		dst  *query
	}{
		{"wakeups", &db.wakeups}, {"claimable", &db.claimable}, {"list", &db.list}, {"sweepable", &db.sweepable},
		{"counts", &db.counts},
	}
	for _, a := range all {
		q, err := s.dialect.render(a.name, tmplData{Tables: db.tables})
		if err != nil {
			return err
		}
		*a.dst = q
	}
	for _, a := range []struct {
		name string
		dst  **query
	}{
		{"insert_tables", &db.insertTables}, {"insert_tables_new", &db.insertTablesNew},
		{"get_many_no_sync_tables", &db.readTablesNoSync},
		{"update_many_fenced_tables", &db.updateTablesFenced},
	} {
		if s.dialect.queries[a.name] == nil {
			continue
		}
		q, err := s.dialect.render(a.name, tmplData{Tables: db.tables})
		if err != nil {
			return err
		}
		*a.dst = &q
	}
	if err := s.prepareSchedules(db); err != nil {
		return err
	}
	if s.dialect.queries["get_for_update_no_sync"] != nil {
		db.getForUpdateNoSync = make([]query, s.tables)
		for i, t := range db.tables {
			q, err := s.dialect.render("get_for_update_no_sync", tmplData{Table: t, Index: i})
			if err != nil {
				return err
			}
			db.getForUpdateNoSync[i] = q
		}
	}
	return nil
}

// sizedQuery returns the query name (insert, update_many,
// get_many_for_update…) of rows rows of table.
func (s *Store) sizedQuery(db *database, name string, table, rows int) (query, error) {
	k := sizedKey{name, table, rows}
	if q, ok := db.sized.Load(k); ok {
		return q.(query), nil
	}
	q, err := s.dialect.render(name, tmplData{Table: db.tables[table], Index: table, Rows: rows})
	if err != nil {
		return q, err
	}
	db.sized.Store(k, q)
	return q, nil
}

// Shards returns the number of shards: len(Options.DSNs) × Options.Tables.
func (s *Store) Shards() int { return len(s.dbs) * s.tables }

// ShardFor returns the shard of a task of app with key and id, for the
// engine to put in the id it makes: IDGenerator.New(now, ShardFor(...)).
//
// A task with a key belongs to the shard of its (app, key): a hash of
// app + "\x00" + key, whatever the id. That is how GetByKey finds it with
// one query and how two Creates of one key meet in one table, so [Create]
// refuses a keyed task whose id names another shard. The engine must
// therefore call ShardFor for every keyed task.
//
// A task without a key may live in any shard; it is found by its id alone.
// ShardFor spreads them by a hash of id's last 8 bytes (its random part;
// the shard field is ignored), so an engine that must pick the shard before
// it has the id can make the id with shard 0, ask ShardFor, and write the
// shard into bytes 6–7 (big-endian), or spread keyless tasks any other way.
//
// The hash is FNV-1a 64 modulo Shards: stable across processes and
// versions, as it must be.
func (s *Store) ShardFor(app, key string, id task.ID) uint16 {
	h := fnv.New64a()
	if key != "" {
		h.Write([]byte(app))
		h.Write([]byte{0})
		h.Write([]byte(key))
	} else {
		h.Write(id[8:])
	}
	return uint16(h.Sum64() % uint64(s.Shards()))
}

// route returns the database and table of a shard, false if there is no
// such shard.
func (s *Store) route(shard uint16) (*database, int, bool) {
	if int(shard) >= s.Shards() {
		return nil, 0, false
	}
	return s.dbs[int(shard)/s.tables], int(shard) % s.tables, true
}

// each runs fn for every database, concurrently when there are several,
// and returns their errors joined. Each goroutine ends before each returns.
func (s *Store) each(fn func(db *database) error) error {
	if len(s.dbs) == 1 {
		return fn(s.dbs[0])
	}
	errs := make([]error, len(s.dbs))
	var wg sync.WaitGroup
	for i, db := range s.dbs {
		wg.Go(func() { errs[i] = fn(db) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// enter starts a call: it fails once the store is closed and otherwise
// holds s.mu shared until leave.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	return nil
}

func (s *Store) leave() { s.mu.RUnlock() }

// Close implements [store.Store]. It waits for calls in flight to return,
// then closes the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return store.ErrClosed
	}
	s.mu.closed = true
	if err := s.closeDBs(); err != nil {
		return fmt.Errorf("sqlstore: close: %w", err)
	}
	return nil
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, db := range s.dbs {
		errs = append(errs, db.db.Close())
	}
	return errors.Join(errs...)
}
