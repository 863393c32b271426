package sqlstore

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

// Multi-row statements (the inserts of Create, the reads and updates of
// UpdateMany) hold at most maxRows rows and, past the first row, maxBytes of
// records (MySQL's max_allowed_packet is 16 MiB by default).
// A multi-table statement (PostgreSQL's, whose rows are arrays: one
// parameter per column) holds up to maxRowsTables; a create of tasks whose
// keys are free (insert_tables_new, a transaction on its own) up to
// maxRowsNew, so that the creates of several requests the engine gathers
// into one write (up to 4 × 1000 tasks) are one plain INSERT (from
// copyMinRows, COPY), not a transaction of several INSERT ... ON CONFLICT,
// which costs PostgreSQL a third more per row (each row's key is looked up
// before it is inserted).
const (
	maxRows       = 100
	maxRowsTables = 1000
	maxRowsNew    = 8000
	maxBytes      = 4 << 20
)

// copyMinRows is the least number of tasks whose create (keys free) goes by
// COPY on PostgreSQL (copyNew) rather than one insert_tables_new. COPY
// inserts a page's rows in one WAL record (heap_multi_insert) and skips
// the statement's unnest: in batches of 1 000 keyed tasks over 4 tables,
// PostgreSQL's backend spent about 18 µs per row where the INSERT took 22,
// and wrote 945 B of WAL per row where it wrote 1 035. It costs a round
// trip per table and two for its transaction, though, and in batches of
// 100 it cost more (about 47 µs per row against 39).
const copyMinRows = 1000

// maxTxAttempts bounds the runs of a Create or Sweep transaction that loses
// a deadlock. Update and UpdateMany are never re-run: they call the
// engine's fn. Update locks a single row, so it cannot deadlock with the
// store's other writes. UpdateMany locks its rows in the one order every
// UpdateMany does, so it cannot deadlock with another; a Sweep, which locks
// finished rows in another order, may still make it lose one, and then the
// tasks of that database fail.
const maxTxAttempts = 5

// maxKeyRetries bounds how often Create inserts a task again after finding
// its key taken by a task that was gone when it looked (swept meanwhile).
const maxKeyRetries = 3

// notFound wraps store.ErrNotFound with what was looked for.
func notFound(what string) error { return fmt.Errorf("sqlstore: task %s: %w", what, store.ErrNotFound) }

// checkTask refuses a task the schema can't hold.
func checkTask(t *task.Task) error {
	if t.ID.IsZero() {
		return errors.New("sqlstore: task without an id")
	}
	if strings.IndexByte(t.App, 0) >= 0 {
		return fmt.Errorf("sqlstore: task %s: app %q contains a NUL byte", t.ID, t.App)
	}
	if _, err := stateCode(t.State); err != nil {
		return fmt.Errorf("task %s: %w", t.ID, err)
	}
	if k := t.Target.Kind(); !kinds[k] {
		return fmt.Errorf("sqlstore: task %s: unknown target kind %q", t.ID, k)
	}
	return nil
}

// columns returns the values of t's columns, in the insert's order: id, app,
// task_key, state, target_kind, wake_at, next_attempt_at, finished_at,
// record. t must have passed checkTask and be normalized.
func columns(t *task.Task) ([]any, error) {
	rec, err := encodeRecord(t)
	if err != nil {
		return nil, err
	}
	state, _ := stateCode(t.State)
	var key, wake, finished any // NULL unless set
	if t.Key != "" {
		key = []byte(t.Key)
	}
	if !t.WakeAt.IsZero() {
		wake = t.WakeAt.UnixMilli()
	}
	if t.State.Final() && t.FinishedAt != nil {
		finished = t.FinishedAt.UnixMilli()
	}
	return []any{t.ID[:], t.App, key, int64(state), t.Target.Kind(), wake, t.NextAttemptAt.UnixMilli(), finished, rec}, nil
}

// An item is one task of a batch on its way to a table: of a Create, to be
// inserted; of an UpdateMany, to be read (t and cols nil) or updated.
type item struct {
	i     int        // its index in the batch
	t     *task.Task // a normalized copy
	table int
	cols  []any // columns(t)
}

// size is what it adds to a statement: its record.
func (it item) size() int {
	if it.cols == nil {
		return 0
	}
	return len(it.cols[8].([]byte))
}

// Create implements [store.Store].
//
// Each database's tasks are inserted in one transaction, so a batch is
// atomic per database, not across databases: if Create fails, the tasks of
// some databases may be stored. Retrying is safe for keyed tasks (the retry
// finds them), not for keyless ones: the engine should batch across
// databases only when a partly stored batch is acceptable.
//
// A task is stored in its home shard, the one its id names (modulo Shards).
// The engine makes a keyed task's id with [Store.ShardFor]; a keyed task
// whose id names another shard (imported) also gets a key claim in its
// key's shard (claim.go), written first, in a transaction of its own.
func (s *Store) Create(ctx context.Context, tasks []*task.Task) ([]store.CreateResult, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()

	// Check and route everything before writing anything.
	res := make([]store.CreateResult, len(tasks))
	byDB := make([][]item, len(s.dbs))
	first := map[[2]string]int{} // (app, key) → index of the first task with it
	var dups [][2]int            // {later, first}
	var claims []claimed         // keyed tasks whose home is not their key's shard
	for i, t := range tasks {
		if err := checkTask(t); err != nil {
			return nil, err
		}
		shard := s.home(t.ID)
		db, table, _ := s.route(shard)
		if t.Key != "" {
			k := [2]string{t.App, t.Key}
			if j, ok := first[k]; ok {
				dups = append(dups, [2]int{i, j})
				continue
			}
			first[k] = i
			if s.ShardFor(t.App, t.Key, t.ID) != shard { // imported: claim.go
				claims = append(claims, claimed{i: i, t: normalize(t.Clone())})
				continue
			}
		}
		c := normalize(t.Clone())
		cols, err := columns(c)
		if err != nil {
			return nil, err
		}
		byDB[db.index] = append(byDB[db.index], item{i: i, t: c, table: table, cols: cols})
	}

	err := s.each(func(db *database) error {
		if len(byDB[db.index]) == 0 {
			return nil
		}
		// Each goroutine writes the results of its own tasks only.
		if err := s.createIn(ctx, db, byDB[db.index], res); err != nil {
			return fmt.Errorf("sqlstore: create in database %d: %w", db.index, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		r, err := s.createClaimed(ctx, c.t)
		if err != nil {
			return nil, err
		}
		res[c.i] = r
	}
	for _, d := range dups {
		res[d[0]] = store.CreateResult{Task: res[d[1]].Task.Clone()} // each result its own copy
	}
	return res, nil
}

// createIn inserts ins into db in one transaction and fills their results.
//
// Idempotency: the insert skips a row whose (app, task_key) is taken (ON
// CONFLICT DO NOTHING; MySQL: ON DUPLICATE KEY UPDATE id = id, which changes
// nothing). When a chunk inserts fewer rows than it has, each keyed task of
// it is looked up by key: the holder is either the task itself (inserted)
// or the task that had the key. A key whose holder is gone by then (swept)
// is inserted again.
func (s *Store) createIn(ctx context.Context, db *database, ins []item, res []store.CreateResult) error {
	// One order for every Create, so that concurrent ones take their key
	// locks in the same order.
	slices.SortFunc(ins, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(a.t.App, b.t.App),
			cmp.Compare(a.t.Key, b.t.Key), bytes.Compare(a.t.ID[:], b.t.ID[:]))
	})
	if done, err := s.createNew(ctx, db, ins, res); done || err != nil {
		return err
	}
	return s.inTx(ctx, db, "create", func(tx *sql.Tx) error {
		pending := ins
		for try := 0; len(pending) > 0; try++ {
			if try > maxKeyRetries {
				it := pending[0]
				return fmt.Errorf("task %s: its key %q of app %q is taken, yet no task has it (or its id is already stored)", it.t.ID, it.t.Key, it.t.App)
			}
			var again []item
			insert := s.insertChunk
			if db.insertTables != nil {
				insert = s.insertTablesChunk
			}
			for chunk := range chunks(pending, db.insertTables != nil) {
				a, err := insert(ctx, tx, db, chunk, res)
				if err != nil {
					return err
				}
				again = append(again, a...)
			}
			pending = again
		}
		return nil
	})
}

// createNew tries the create of ins with the dialect's insert_tables_new,
// in one statement outside a transaction: done says it stored them all. A
// key taken (or a deadlock lost) fails the statement as a whole; then
// createIn runs the create in a transaction, which finds the keys' holders.
func (s *Store) createNew(ctx context.Context, db *database, ins []item, res []store.CreateResult) (done bool, err error) {
	q := db.insertTablesNew
	if q == nil {
		return false, nil
	}
	if !fitsNew(ins) {
		return false, nil // more than a statement: in a transaction
	}
	if s.byCopy(len(ins)) {
		err := s.copyNew(ctx, db, ins)
		switch {
		case err != nil && (s.dialect.taken(err) || s.dialect.retryable(err)):
			return false, nil
		case err != nil:
			return false, err
		}
	} else {
		args, err := q.bindRows(rowsWithTables(ins))
		if err != nil {
			return false, err
		}
		inserted, err := queryIDs(ctx, db.db, q.sql, args)
		switch {
		case err != nil && (s.dialect.taken(err) || s.dialect.retryable(err)):
			return false, nil
		case err != nil:
			return false, err
		case len(inserted) != len(ins):
			return false, fmt.Errorf("insert into the tables of database %d stored %d of %d tasks", db.index, len(inserted), len(ins))
		}
	}
	for _, it := range ins {
		res[it.i] = store.CreateResult{Task: it.t, Created: true}
	}
	return true, nil
}

// byCopy reports whether a create of n tasks whose keys are free, in one
// database, goes by copyNew.
func (s *Store) byCopy(n int) bool { return s.dialect.copyFrom && n >= copyMinRows }

// copyColumns are the columns of a task row, in columns' order.
var copyColumns = []string{"id", "app", "task_key", "state", "target_kind", "wake_at", "next_attempt_at", "finished_at", "record"}

// copyNew stores ins (sorted by table, as createIn sorts them) with a COPY
// per table, in one transaction on one of db's connections: insert_tables_new
// by COPY (see copyMinRows). A key taken fails it whole, as it fails
// insert_tables_new.
func (s *Store) copyNew(ctx context.Context, db *database, ins []item) error {
	conn, err := db.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("sqlstore: COPY needs a pgx connection, not a %T", dc)
		}
		tx, err := sc.Conn().Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		// After Commit a no-op. On an error it ends the transaction, or,
		// ctx done, closes the connection, which the pool then drops.
		defer tx.Rollback(ctx)
		for start := 0; start < len(ins); {
			end := start + 1
			for end < len(ins) && ins[end].table == ins[start].table {
				end++
			}
			run := ins[start:end]
			table := tableName(run[0].table)
			n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, copyColumns,
				pgx.CopyFromSlice(len(run), func(i int) ([]any, error) { return run[i].cols, nil }))
			if err != nil {
				return fmt.Errorf("copy into %s: %w", table, err)
			}
			if n != int64(len(run)) {
				return fmt.Errorf("copy into %s stored %d of %d tasks", table, n, len(run))
			}
			start = end
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
}

// fitsNew reports whether ins fit one insert_tables_new: up to maxRowsNew
// rows, and the bytes of any statement.
func fitsNew(ins []item) bool { return single(chunksOf(ins, true, maxRowsNew)) }

// oneChunk reports whether ins fit one statement (chunks yields at most
// one run).
func oneChunk(ins []item, anyTable bool) bool { return single(chunks(ins, anyTable)) }

// single reports whether runs yields at most one run.
func single(runs iter.Seq[[]item]) bool {
	n := 0
	for range runs {
		if n++; n > 1 {
			return false
		}
	}
	return true
}

// rowsWithTables is the rows of a multi-table insert: each item's columns,
// then its table.
func rowsWithTables(ins []item) [][]any {
	rows := make([][]any, len(ins))
	for k, it := range ins {
		rows[k] = append(it.cols[:len(it.cols):len(it.cols)], int64(it.table))
	}
	return rows
}

// chunks yields runs of ins that go to one table (to any, with anyTable:
// for a multi-table statement) and fit one statement.
func chunks(ins []item, anyTable bool) iter.Seq[[]item] {
	if anyTable {
		return chunksOf(ins, true, maxRowsTables)
	}
	return chunksOf(ins, false, maxRows)
}

// chunksOf is chunks with runs of up to rows items.
func chunksOf(ins []item, anyTable bool, rows int) iter.Seq[[]item] {
	return func(yield func([]item) bool) {
		start, size := 0, 0
		for i, it := range ins {
			n := it.size()
			if i > start && (!anyTable && it.table != ins[start].table || i-start == rows || size+n > maxBytes) {
				if !yield(ins[start:i]) {
					return
				}
				start, size = i, 0
			}
			size += n
		}
		if start < len(ins) {
			yield(ins[start:])
		}
	}
}

// insertChunk inserts the tasks of one table, fills the results of those
// it stored or found a holder for, and returns those to insert again.
func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, db *database, chunk []item, res []store.CreateResult) ([]item, error) {
	table := chunk[0].table
	q, err := s.sizedQuery(db, "insert", table, len(chunk))
	if err != nil {
		return nil, err
	}
	rows := make([][]any, len(chunk))
	for k, it := range chunk {
		rows[k] = it.cols
	}
	args, err := q.bindRows(rows)
	if err != nil {
		return nil, err
	}
	r, err := tx.ExecContext(ctx, q.sql, args...)
	if err != nil {
		return nil, fmt.Errorf("insert into %s: %w", db.tables[table], err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("insert into %s: %w", db.tables[table], err)
	}
	if int(n) == len(chunk) {
		for _, it := range chunk {
			res[it.i] = store.CreateResult{Task: it.t, Created: true}
		}
		return nil, nil
	}

	// Some keys were taken: find out whose.
	var again []item
	created := 0
	for _, it := range chunk {
		if it.t.Key == "" {
			res[it.i] = store.CreateResult{Task: it.t, Created: true}
			created++
			continue
		}
		a, c, err := s.keyTaken(ctx, tx, db, it, res)
		if err != nil {
			return nil, err
		}
		if a {
			again = append(again, it)
		}
		if c {
			created++
		}
	}
	if created != int(n) {
		// MySQL skips a row whose id is taken as it skips one whose key is.
		return nil, fmt.Errorf("insert into %s stored %d rows, but %d tasks are new: an id is already stored", db.tables[table], n, created)
	}
	return again, nil
}

// insertTablesChunk is insertChunk with the dialect's multi-table insert:
// the tasks of chunk may go to any table of db, and the ids of those
// inserted come back, so only the others are looked up by key.
func (s *Store) insertTablesChunk(ctx context.Context, tx *sql.Tx, db *database, chunk []item, res []store.CreateResult) ([]item, error) {
	args, err := db.insertTables.bindRows(rowsWithTables(chunk))
	if err != nil {
		return nil, err
	}
	inserted, err := queryIDs(ctx, tx, db.insertTables.sql, args)
	if err != nil {
		return nil, fmt.Errorf("insert into the tables of database %d: %w", db.index, err)
	}
	var again []item
	for _, it := range chunk {
		switch {
		case inserted[it.t.ID]:
			res[it.i] = store.CreateResult{Task: it.t, Created: true}
		case it.t.Key == "":
			return nil, fmt.Errorf("insert into %s skipped task %s: its id is already stored", db.tables[it.table], it.t.ID)
		default:
			a, _, err := s.keyTaken(ctx, tx, db, it, res)
			if err != nil {
				return nil, err
			}
			if a {
				again = append(again, it)
			}
		}
	}
	return again, nil
}

// keyTaken resolves the create of it, a keyed task an insert skipped or
// may have (its key was taken): it reads the key's holder and fills it's
// result, or reports again (the holder is gone: insert it again). created
// says the holder is it itself.
func (s *Store) keyTaken(ctx context.Context, tx *sql.Tx, db *database, it item, res []store.CreateResult) (again, created bool, err error) {
	id, rec, held, err := readKeyHolder(ctx, tx, db.keyHolder[it.table], it.t.App, it.t.Key)
	switch {
	case err != nil:
		return false, false, err
	case !held:
		return true, false, nil
	case bytes.Equal(id, it.t.ID[:]):
		res[it.i] = store.CreateResult{Task: it.t, Created: true}
		return false, true, nil
	}
	holder, claimGone, err := s.resolveHolder(ctx, tx, db, it.table, rec) // a key claim: claim.go
	switch {
	case err != nil:
		return false, false, fmt.Errorf("task %x: %w", id, err)
	case claimGone:
		return true, false, nil
	}
	res[it.i] = store.CreateResult{Task: holder}
	return false, false, nil
}

// readKeyHolder runs hq, which selects the id and record of the row that
// holds (app, key), in tx: held is false when no row does (its holder is
// gone since the insert found the key taken).
func readKeyHolder(ctx context.Context, tx *sql.Tx, hq query, app, key string) (id, rec []byte, held bool, err error) {
	err = tx.QueryRowContext(ctx, hq.sql, hq.args(map[string]any{"app": app, "key": []byte(key)})...).Scan(&id, &rec)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil, false, nil
	case err != nil:
		return nil, nil, false, fmt.Errorf("read the holder of key %q of app %q: %w", key, app, err)
	}
	return id, rec, true, nil
}

// inTx runs fn in a transaction of db and commits, running it again (up to
// maxTxAttempts in all) when it loses a deadlock.
func (s *Store) inTx(ctx context.Context, db *database, what string, fn func(tx *sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := func() error {
			tx, err := db.db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			defer tx.Rollback()
			if err := fn(tx); err != nil {
				return err
			}
			if err := tx.Commit(); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			return nil
		}()
		if err == nil || attempt == maxTxAttempts || !s.dialect.retryable(err) || ctx.Err() != nil {
			return err
		}
		s.logger.DebugContext(ctx, "sqlstore: transaction lost a deadlock; running it again",
			slog.String("op", what), slog.Int("database", db.index), slog.Int("attempt", attempt),
			slog.String("error", err.Error()))
	}
}

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, id task.ID) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	return s.get(ctx, id)
}

// GetByKey implements [store.Store]. It reads the one table of the key's
// shard.
func (s *Store) GetByKey(ctx context.Context, app, key string) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	what := fmt.Sprintf("with key %q of app %q", key, app)
	if key == "" {
		return nil, notFound(what)
	}
	db, table, _ := s.route(s.ShardFor(app, key, task.ID{}))
	t, err := readTask(ctx, db.db, db.getByKey[table], map[string]any{"app": app, "key": []byte(key)}, what)
	var claim *claimError
	if errors.As(err, &claim) {
		return s.get(ctx, claim.id) // claim.go: a task imported with an id of another shard
	}
	return t, err
}

// claimError is readTask's answer to a key claim (claim.go).
type claimError struct{ id task.ID }

func (e *claimError) Error() string { return "sqlstore: a key claim of task " + e.id.String() }

// readTask runs q, which selects one record, and decodes it.
func readTask(ctx context.Context, q querier, qr query, params map[string]any, what string) (*task.Task, error) {
	var rec []byte
	err := q.QueryRowContext(ctx, qr.sql, qr.args(params)...).Scan(&rec)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(what)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read task %s: %w", what, err)
	}
	if id, ok := claimOf(rec); ok {
		return nil, &claimError{id}
	}
	t, err := decodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", what, err)
	}
	return t, nil
}

// Update implements [store.Store]: SELECT … FOR UPDATE, fn, UPDATE and
// COMMIT in one transaction, so Updates of one task wait for each other and
// Updates of others do not. fn runs with the row locked.
//
// opts.NoSync: on PostgreSQL the transaction commits with
// synchronous_commit off (the write survives a crash of toc, not one of the
// database server or machine). On MySQL it changes nothing: InnoDB's
// flushing is a server-wide setting.
func (s *Store) Update(ctx context.Context, id task.ID, opts *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	db, table, _ := s.route(s.home(id))
	tx, err := db.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: update %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	read := db.getForUpdate[table]
	if opts != nil && opts.NoSync && db.getForUpdateNoSync != nil {
		read = db.getForUpdateNoSync[table]
	}
	old, err := readTask(ctx, tx, read, map[string]any{"id": id[:]}, id.String())
	if err != nil {
		return nil, err
	}
	c, err := record.Apply(old, fn)
	if err != nil {
		return old, err
	}
	if err := checkTask(c); err != nil {
		return old, err
	}
	cols, err := columns(c)
	if err != nil {
		return old, err
	}
	uq := db.update[table]
	_, err = tx.ExecContext(ctx, uq.sql, uq.args(map[string]any{
		"id": id[:], "state": cols[3], "kind": cols[4], "wake_at": cols[5],
		"next_attempt_at": cols[6], "finished_at": cols[7], "record": cols[8],
	})...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: update %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlstore: update %s: commit: %w", id, err)
	}
	return c.Clone(), nil
}

// UpdateMany implements [store.Store]: Update for many tasks, with one
// transaction per database they are in and, per table, one SELECT … FOR
// UPDATE of its tasks and one UPDATE of those fn changed (per maxRows
// tasks). A batch costs two round trips per table it touches, plus a BEGIN
// and a COMMIT per database, whatever its size. On PostgreSQL an optimistic
// batch (UpdateOpts.Optimistic, the fire path) costs two per database: one
// read of every table, without a transaction or locks, and one fenced
// update of every table, a transaction of its own (up to maxRowsTables
// tasks; past that the updates share one).
//
// Every UpdateMany locks its rows in one order: database after database in
// index order, table after table, each table's rows in id order. So two
// cannot deadlock, across databases included (where no server would see
// it), and neither can an UpdateMany and Updates, which lock one row each.
// fn runs with every row read locked; then the databases write and commit
// concurrently. A failure in one database is the error of its tasks only;
// a task its database could not read is passed to fn as nil and returns
// that error rather than ErrNotFound. Like Update, UpdateMany is never run
// again after losing a deadlock: it calls fn once.
//
// opts.NoSync is honoured as by Update.
func (s *Store) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	res := make([]*task.Task, len(ids))
	if err := s.enter(ctx); err != nil {
		return res, slices.Repeat([]error{err}, len(ids))
	}
	defer s.leave()
	readErrs := make([]error, len(ids))
	reads := make([][]item, len(s.dbs))
	for i, id := range ids {
		db, table, _ := s.route(s.home(id))
		reads[db.index] = append(reads[db.index], item{i: i, table: table})
	}

	olds := make([]*task.Task, len(ids))
	raws := make([][]byte, len(ids)) // the records read, for an optimistic write's fence
	txs := make([]*sql.Tx, len(s.dbs))
	defer func() {
		for _, tx := range txs {
			if tx != nil {
				tx.Rollback() // after a commit: sql.ErrTxDone
			}
		}
	}()
	noSync := opts != nil && opts.NoSync
	// Optimistic (the fire path's writes, PostgreSQL): read without row
	// locks, write each row only if its record is still the one read.
	optimistic := noSync && opts.Optimistic && s.dialect.queries["get_many_no_sync"] != nil && s.dialect.queries["update_many_fenced"] != nil
	for _, db := range s.dbs { // one after another: see the lock order above
		its := reads[db.index]
		if len(its) == 0 {
			continue
		}
		slices.SortFunc(its, func(a, b item) int {
			return cmp.Or(cmp.Compare(a.table, b.table), compareIDs(ids[a.i], ids[b.i]))
		})
		tx, err := s.readMany(ctx, db, noSync, optimistic, ids, its, olds, raws, readErrs)
		if err != nil {
			err = fmt.Errorf("sqlstore: update many in database %d: %w", db.index, s.dialect.markUnavailable(err))
			for _, it := range its {
				olds[it.i], readErrs[it.i] = nil, err
			}
			continue
		}
		txs[db.index] = tx
	}

	return s.applyWrite(ctx, olds, raws, readErrs, txs, optimistic, opts, fn)
}

var _ store.KnownUpdater = (*Store)(nil)

// UpdateKnown implements [store.KnownUpdater]: UpdateMany (with Shared)
// over olds, the tasks as the caller read them, without reading them
// again. It spares the fire path's outcome write the read of its batch:
// one statement per database instead of two.
//
// The store fences each write itself, so it needs no caller through which
// every write goes (a cluster has many): on PostgreSQL an optimistic
// no-sync write (UpdateOpts.NoSync and Optimistic, the fire path's) is the
// fenced update of UpdateMany, with the record of olds[i] as the one read,
// so a row written since (by any node) is left as it is and its task
// comes back with ErrConflict, for the caller to read and write again. A
// record is encoded the same way every time (package record), so olds[i]
// encodes to the bytes stored unless the row changed (or holds a record of
// an older format: then it too comes back with ErrConflict). Other writes,
// and MySQL's, are UpdateMany's: they read the rows (locked) again, and fn
// gets the tasks as read.
func (s *Store) UpdateKnown(ctx context.Context, olds []*task.Task, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	optimistic := opts != nil && opts.NoSync && opts.Optimistic && s.KnownFenced()
	if !optimistic {
		ids := make([]task.ID, len(olds))
		for i, t := range olds {
			ids[i] = t.ID
		}
		return s.UpdateMany(ctx, ids, opts, fn)
	}
	if err := s.enter(ctx); err != nil {
		return make([]*task.Task, len(olds)), slices.Repeat([]error{err}, len(olds))
	}
	defer s.leave()
	raws := make([][]byte, len(olds))
	readErrs := make([]error, len(olds))
	for i, t := range olds {
		if raws[i], readErrs[i] = encodeRecord(t); readErrs[i] != nil {
			readErrs[i] = fmt.Errorf("sqlstore: task %s: %w", t.ID, readErrs[i])
		}
	}
	return s.applyWrite(ctx, olds, raws, readErrs, make([]*sql.Tx, len(s.dbs)), true, opts, fn)
}

// KnownFenced reports whether UpdateKnown fences the fire path's writes
// itself (PostgreSQL): then a cluster's nodes, none of which sees every
// write, may use it (engine: the outcomes of push attempts are written
// over the tasks their fire job read).
func (s *Store) KnownFenced() bool { return s.dialect.queries["update_many_fenced_tables"] != nil }

// applyWrite is the rest of UpdateMany and UpdateKnown once the tasks are
// read (olds; readErrs those that could not be): fn, then the writes of
// each database, in txs[db] when it holds one (the rows locked by the
// read), fenced by raws (the records read) when optimistic.
func (s *Store) applyWrite(ctx context.Context, olds []*task.Task, raws [][]byte, readErrs []error, txs []*sql.Tx,
	optimistic bool, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	res := make([]*task.Task, len(olds))
	cs, errs := record.ApplyManyWith(olds, opts.SharedTasks(), fn)
	writes := make([][]item, len(s.dbs))
	for i, c := range cs {
		if readErrs[i] != nil {
			errs[i] = readErrs[i]
			continue
		}
		if errs[i] == nil {
			errs[i] = checkTask(c)
		}
		var cols []any
		if errs[i] == nil {
			cols, errs[i] = columns(c)
		}
		if errs[i] != nil {
			res[i] = olds[i]
			continue
		}
		db, table, _ := s.route(s.home(c.ID))
		writes[db.index] = append(writes[db.index], item{i: i, t: c, table: table, cols: cols})
	}
	s.each(func(db *database) error {
		// Each goroutine sets the results of its own tasks only.
		tx, ws := txs[db.index], writes[db.index]
		if len(ws) == 0 {
			if tx != nil {
				tx.Rollback() // nothing to write: free the rows now
			}
			return nil
		}
		fence := raws
		if !optimistic {
			fence = nil
		}
		changed, err := s.writeMany(ctx, tx, db, ws, fence)
		if err != nil {
			err = fmt.Errorf("sqlstore: update many in database %d: %w", db.index, s.dialect.markUnavailable(err))
			for _, w := range ws {
				res[w.i], errs[w.i] = olds[w.i], err
			}
			return nil
		}
		for _, w := range ws {
			if changed[w.i] {
				res[w.i], errs[w.i] = olds[w.i], fmt.Errorf("sqlstore: task %s: %w", w.t.ID, store.ErrConflict)
				continue
			}
			res[w.i] = w.t
		}
		return nil
	})
	return res, errs
}

// readMany begins db's transaction of an UpdateMany and reads the tasks
// its, sorted by table and id, into olds, with a get_many_for_update (or
// its no-sync twin) per table; it sets the readErrs of those it can't read.
// It returns the transaction, for the caller to end, or an error after
// rolling it back.
//
// An optimistic read with the dialect's multi-table statements takes no
// transaction (it returns nil): it locks nothing, and each fenced write is
// a statement of its own (writeMany).
func (s *Store) readMany(ctx context.Context, db *database, noSync, optimistic bool, ids []task.ID, its []item, olds []*task.Task, raws [][]byte, readErrs []error) (*sql.Tx, error) {
	tables := optimistic && db.fencedTables()
	if tables {
		for chunk := range chunks(its, true) {
			if err := readChunk(ctx, db.db, *db.readTablesNoSync, ids, chunk, olds, raws, readErrs); err != nil {
				return nil, fmt.Errorf("read from the tables: %w", err)
			}
		}
		return nil, nil
	}
	tx, err := db.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	read := "get_many_for_update"
	switch {
	case optimistic:
		read = "get_many_no_sync"
	case noSync && s.dialect.queries["get_many_for_update_no_sync"] != nil:
		read = "get_many_for_update_no_sync"
	}
	for chunk := range chunks(its, false) {
		table := chunk[0].table
		q, err := s.sizedQuery(db, read, table, len(chunk))
		if err == nil {
			err = readChunk(ctx, tx, q, ids, chunk, olds, raws, readErrs)
		}
		if err != nil {
			tx.Rollback()
			return nil, fmt.Errorf("read from %s: %w", db.tables[table], err)
		}
	}
	return tx, nil
}

// readChunk runs q, the read of the tasks chunk of one table, and fills
// their olds and readErrs: a task not stored gets ErrNotFound, one whose
// record can't be decoded that error.
func readChunk(ctx context.Context, tx querier, q query, ids []task.ID, chunk []item, olds []*task.Task, raws [][]byte, readErrs []error) error {
	idRows := make([][]any, len(chunk))
	for k, it := range chunk {
		idRows[k] = []any{ids[it.i][:], int64(it.table)} // the table for a multi-table read
	}
	args, err := q.bindRows(idRows)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, q.sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := make(map[task.ID]*task.Task, len(chunk))
	raw := make(map[task.ID][]byte, len(chunk))
	var bad map[task.ID]error
	for rows.Next() {
		var idb, rec []byte
		if err := rows.Scan(&idb, &rec); err != nil {
			return err
		}
		id, err := readID(idb)
		if err != nil {
			return err
		}
		t, err := decodeRecord(rec)
		if err != nil {
			if bad == nil {
				bad = map[task.ID]error{}
			}
			bad[id] = fmt.Errorf("task %s: %w", id, err)
			continue
		}
		got[id], raw[id] = t, rec
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, it := range chunk {
		id := ids[it.i]
		olds[it.i], raws[it.i] = got[id], raw[id]
		switch {
		case bad[id] != nil:
			readErrs[it.i] = bad[id]
		case got[id] == nil:
			readErrs[it.i] = notFound(id.String())
		}
	}
	return nil
}

// writeMany stores ws, the tasks of an UpdateMany to write in db, in tx
// (one update_many per table and maxRows tasks), and commits tx. It sorts
// ws.
//
// With raws (UpdateOpts.Optimistic) each row is written only if its record
// is still raws[i], the one read (update_many_fenced, which returns the ids
// it wrote), and writeMany returns the indexes of the tasks not written
// because their row changed meanwhile.
//
// Without tx (readMany's optimistic read with the multi-table statements)
// the writes fit in one statement, its own transaction, or writeMany
// begins one for them.
func (s *Store) writeMany(ctx context.Context, tx *sql.Tx, db *database, ws []item, raws [][]byte) (changed map[int]bool, err error) {
	slices.SortFunc(ws, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.table, b.table), compareIDs(a.t.ID, b.t.ID))
	})
	name := "update_many"
	if raws != nil {
		name = "update_many_fenced"
	}
	tables := raws != nil && db.fencedTables()
	var on querier = db.db
	if tx == nil && !oneChunk(ws, tables) {
		if tx, err = db.db.BeginTx(ctx, nil); err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		defer tx.Rollback() // after the commit: sql.ErrTxDone
	}
	if tx != nil {
		on = tx
	}
	for chunk := range chunks(ws, tables) {
		table := chunk[0].table
		var q query
		var err error
		if tables {
			q = *db.updateTablesFenced
		} else if q, err = s.sizedQuery(db, name, table, len(chunk)); err != nil {
			return nil, err
		}
		// The columns of update_many's rows: id, then all but app and key;
		// fenced, the record read after them.
		rows := make([][]any, len(chunk))
		for k, w := range chunk {
			row := make([]any, 0, 10)
			row = append(append(row, w.cols[0]), w.cols[3:]...)
			if raws != nil {
				row = append(row, raws[w.i])
			}
			if tables {
				row = append(row, int64(w.table))
			}
			rows[k] = row
		}
		args, err := q.bindRows(rows)
		if err != nil {
			return nil, err
		}
		if raws == nil {
			if _, err := on.ExecContext(ctx, q.sql, args...); err != nil {
				return nil, fmt.Errorf("update %s: %w", db.tables[table], err)
			}
			continue
		}
		wrote, err := queryIDs(ctx, on, q.sql, args)
		if err != nil {
			return nil, fmt.Errorf("update %s: %w", db.tables[table], err)
		}
		for _, w := range chunk {
			if !wrote[w.t.ID] {
				if changed == nil {
					changed = map[int]bool{}
				}
				changed[w.i] = true
			}
		}
	}
	if tx == nil {
		return changed, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return changed, nil
}

// queryIDs runs a statement that returns task ids, and returns them.
func queryIDs(ctx context.Context, tx querier, query string, args []any) (map[task.ID]bool, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := map[task.ID]bool{}
	for rows.Next() {
		var idb []byte
		if err := rows.Scan(&idb); err != nil {
			return nil, err
		}
		id, err := readID(idb)
		if err != nil {
			return nil, err
		}
		ids[id] = true
	}
	return ids, rows.Err()
}

// The scans (Wakeups, Claimable, List, Sweep) read every shard: one UNION
// ALL query per database, over all its tables, each branch ordered and cut
// to limit by its index and the whole cut to limit again by the database;
// the databases run concurrently and their answers are merged here. A scan
// costs a round trip per database (concurrently) and up to Tables index
// range scans in each, of which only what is due is read.

// scanAll runs the query pick(db) of every database with params, reads each
// row with read, and returns the first limit rows of all in compare's order.
func scanAll[T any](ctx context.Context, s *Store, what string, pick func(*database) query, params map[string]any,
	read func(*sql.Rows) (T, error), compare func(a, b T) int, limit int) ([]T, error) {
	parts := make([][]T, len(s.dbs))
	err := s.each(func(db *database) error {
		q := pick(db)
		rows, err := db.db.QueryContext(ctx, q.sql, q.args(params)...)
		if err != nil {
			return fmt.Errorf("sqlstore: %s in database %d: %w", what, db.index, err)
		}
		defer rows.Close()
		for rows.Next() {
			v, err := read(rows)
			if err != nil {
				return fmt.Errorf("sqlstore: %s in database %d: %w", what, db.index, err)
			}
			parts[db.index] = append(parts[db.index], v)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlstore: %s in database %d: %w", what, db.index, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := slices.Concat(parts...)
	if len(parts) > 1 {
		slices.SortFunc(out, compare)
	}
	return out[:min(limit, len(out))], nil
}

// readID reads an id column.
func readID(b []byte) (task.ID, error) {
	var id task.ID
	if len(b) != len(id) {
		return id, fmt.Errorf("malformed task id %x", b)
	}
	copy(id[:], b)
	return id, nil
}

func compareIDs(a, b task.ID) int { return bytes.Compare(a[:], b[:]) }

// Wakeups implements [store.Store]. Times are compared at millisecond
// precision.
func (s *Store) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	afterMs, afterID := int64(math.MinInt64), task.ID{}
	if !after.At.IsZero() {
		afterMs, afterID = after.At.UnixMilli(), after.ID
	}
	type wakeup struct {
		ms int64
		w  store.Wakeup
	}
	ws, err := scanAll(ctx, s, "wakeups", func(db *database) query { return db.wakeups },
		map[string]any{"after_ms": afterMs, "after_id": afterID[:], "until_ms": until.UnixMilli(), "limit": int64(limit)},
		func(rows *sql.Rows) (wakeup, error) {
			var (
				idb   []byte
				ms    int64
				state int64
				kind  string
			)
			if err := rows.Scan(&idb, &ms, &state, &kind); err != nil {
				return wakeup{}, err
			}
			id, err := readID(idb)
			if err != nil {
				return wakeup{}, err
			}
			st, err := parseStateCode(state)
			if err != nil {
				return wakeup{}, err
			}
			return wakeup{ms, store.Wakeup{ID: id, At: time.UnixMilli(ms).UTC(), State: st, Kind: kind}}, nil
		},
		func(a, b wakeup) int { return cmp.Or(cmp.Compare(a.ms, b.ms), compareIDs(a.w.ID, b.w.ID)) },
		limit)
	if err != nil {
		return nil, err
	}
	out := make([]store.Wakeup, len(ws))
	for i, w := range ws {
		out[i] = w.w
	}
	return out, nil
}

// Claimable implements [store.Store]. Times are compared at millisecond
// precision.
func (s *Store) Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	type claimable struct {
		ms int64
		id task.ID
	}
	cs, err := scanAll(ctx, s, "claimable", func(db *database) query { return db.claimable },
		map[string]any{"app": app, "now_ms": now.UnixMilli(), "limit": int64(limit)},
		func(rows *sql.Rows) (claimable, error) {
			var idb []byte
			var ms int64
			if err := rows.Scan(&idb, &ms); err != nil {
				return claimable{}, err
			}
			id, err := readID(idb)
			return claimable{ms, id}, err
		},
		func(a, b claimable) int { return cmp.Or(cmp.Compare(a.ms, b.ms), compareIDs(a.id, b.id)) },
		limit)
	if err != nil {
		return nil, err
	}
	var out []task.ID
	for _, c := range cs {
		out = append(out, c.id)
	}
	return out, nil
}

// List implements [store.Store].
func (s *Store) List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	code, err := stateCode(state)
	if limit <= 0 || err != nil {
		return nil, nil // no task is in an unknown state
	}
	return scanAll(ctx, s, "list", func(db *database) query { return db.list },
		map[string]any{"app": app, "state": int64(code), "after_id": after[:], "limit": int64(limit)},
		func(rows *sql.Rows) (*task.Task, error) {
			var idb, rec []byte
			if err := rows.Scan(&idb, &rec); err != nil {
				return nil, err
			}
			t, err := decodeRecord(rec)
			if err != nil {
				return nil, fmt.Errorf("task %x: %w", idb, err)
			}
			return t, nil
		},
		func(a, b *task.Task) int { return compareIDs(a.ID, b.ID) },
		limit)
}

// Sweep implements [store.Store]. FinishedAt and cutoff are compared at
// millisecond precision; the oldest finished tasks go first.
//
// It finds the limit oldest candidates of all shards, then deletes, in
// each table, as many of its oldest finished tasks before cutoff as it had
// candidates: one DELETE per table, one transaction per database. A
// DELETE re-checks the row it deletes, so a task an Update took out of its
// final state meanwhile stays.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if limit <= 0 {
		return 0, nil
	}
	cutoffMs := cutoff.UnixMilli()
	type candidate struct {
		ms int64
		id task.ID
	}
	cs, err := scanAll(ctx, s, "sweep", func(db *database) query { return db.sweepable },
		map[string]any{"cutoff": cutoffMs, "limit": int64(limit)},
		func(rows *sql.Rows) (candidate, error) {
			var idb []byte
			var ms int64
			if err := rows.Scan(&idb, &ms); err != nil {
				return candidate{}, err
			}
			id, err := readID(idb)
			return candidate{ms, id}, err
		},
		func(a, b candidate) int { return cmp.Or(cmp.Compare(a.ms, b.ms), compareIDs(a.id, b.id)) },
		limit)
	if err != nil || len(cs) == 0 {
		return 0, err
	}
	perTable := make([][]int64, len(s.dbs)) // database → table → candidates
	for i := range perTable {
		perTable[i] = make([]int64, s.tables)
	}
	for _, c := range cs {
		db, table, _ := s.route(s.home(c.id))
		perTable[db.index][table]++
	}
	var deleted atomic.Int64
	err = s.each(func(db *database) error {
		counts := perTable[db.index]
		if !slices.ContainsFunc(counts, func(n int64) bool { return n > 0 }) {
			return nil
		}
		var n int64
		err := s.inTx(ctx, db, "sweep", func(tx *sql.Tx) error {
			n = 0
			for table, c := range counts {
				if c == 0 {
					continue
				}
				q := db.sweep[table]
				r, err := tx.ExecContext(ctx, q.sql, q.args(map[string]any{"cutoff": cutoffMs, "limit": c})...)
				if err != nil {
					return fmt.Errorf("delete from %s: %w", db.tables[table], err)
				}
				m, err := r.RowsAffected()
				if err != nil {
					return fmt.Errorf("delete from %s: %w", db.tables[table], err)
				}
				n += m
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("sqlstore: sweep database %d: %w", db.index, err)
		}
		deleted.Add(n)
		return nil
	})
	return int(deleted.Load()), err
}

// ShardWakeups is Wakeups over one shard, with App and Key filled: the
// cluster's promotion and repair scans read the shards a node owns with it.
func (s *Store) ShardWakeups(ctx context.Context, shard int, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	if shard < 0 || shard > math.MaxUint16 {
		return nil, fmt.Errorf("sqlstore: no shard %d", shard)
	}
	db, table, ok := s.route(uint16(shard))
	if !ok {
		return nil, fmt.Errorf("sqlstore: no shard %d (the store has %d)", shard, s.Shards())
	}
	afterMs, afterID := int64(math.MinInt64), task.ID{}
	if !after.At.IsZero() {
		afterMs, afterID = after.At.UnixMilli(), after.ID
	}
	q := db.shardWakeups[table]
	rows, err := db.db.QueryContext(ctx, q.sql, q.args(map[string]any{
		"after_ms": afterMs, "after_id": afterID[:], "until_ms": until.UnixMilli(), "limit": int64(limit)})...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: wakeups of shard %d: %w", shard, err)
	}
	defer rows.Close()
	var out []store.Wakeup
	for rows.Next() {
		var (
			idb, key []byte
			ms, st   int64
			kind     string
			app      string
		)
		if err := rows.Scan(&idb, &ms, &st, &kind, &app, &key); err != nil {
			return nil, fmt.Errorf("sqlstore: wakeups of shard %d: %w", shard, err)
		}
		id, err := readID(idb)
		if err != nil {
			return nil, err
		}
		state, err := parseStateCode(st)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Wakeup{ID: id, At: time.UnixMilli(ms).UTC(), State: state, Kind: kind, App: app, Key: string(key)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: wakeups of shard %d: %w", shard, err)
	}
	return out, nil
}

var _ store.Counter = (*Store)(nil)

// Counts implements [store.Counter]: tasks by app and state, one grouped
// scan per table. It reads every row's index entry; cache what it returns.
func (s *Store) Counts(ctx context.Context) (map[string]map[task.State]int64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	counts, err := countAll(ctx, s, "counts", func(db *database) query { return db.counts }, func(c int64) (task.State, error) {
		if c == claimState {
			return "", nil // key claims (claim.go): no task
		}
		return parseStateCode(c)
	})
	for app, m := range counts {
		if delete(m, ""); len(m) == 0 {
			delete(counts, app)
		}
	}
	return counts, err
}

// countAll runs the query pick(db) of every database, which selects (app,
// state code, count) rows, and sums the counts by app and by state (S, the
// state parse reads from a code): Counts and CountSchedules.
func countAll[S comparable](ctx context.Context, s *Store, what string, pick func(*database) query,
	parse func(code int64) (S, error)) (map[string]map[S]int64, error) {
	type row struct {
		app   string
		state S
		n     int64
	}
	rows, err := scanAll(ctx, s, what, pick, map[string]any{},
		func(r *sql.Rows) (row, error) {
			var x row
			var code int64
			if err := r.Scan(&x.app, &code, &x.n); err != nil {
				return x, err
			}
			st, err := parse(code)
			x.state = st
			return x, err
		},
		func(a, b row) int { return 0 }, math.MaxInt)
	if err != nil {
		return nil, err
	}
	out := map[string]map[S]int64{}
	for _, r := range rows {
		if out[r.app] == nil {
			out[r.app] = map[S]int64{}
		}
		out[r.app][r.state] += r.n
	}
	return out, nil
}
