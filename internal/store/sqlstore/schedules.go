package sqlstore

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

// Schedules ([store.Schedules]) live in one toc_schedules table per
// database (migration 0002): id, app, schedule_key (unique with app),
// state, wake_at (NULL when zero) and the record (record.EncodeSchedule).
// A schedule is in the database of the shard its id names, and its id must
// name the shard of its (app, key) ([Store.ShardFor]), as a keyed task's
// must: GetScheduleByKey then reads one database, and two CreateSchedules
// of one key meet on its unique index. The table part of the shard plays no
// part: a database's schedules share its one table.
//
// GetSchedule, GetScheduleByKey, CreateSchedule, UpdateSchedule and
// DeleteSchedule read or write one row of one database; UpdateSchedule is
// one transaction (SELECT … FOR UPDATE, fn, UPDATE, COMMIT), so updates and
// deletes of one schedule wait for each other. ListSchedules, DueSchedules
// and CountSchedules read every database, concurrently, and merge.

var _ store.Schedules = (*Store)(nil)

// scheduleQueries are a database's schedule queries (queries/<dialect>.sql).
type scheduleQueries struct {
	get, getByKey, getForUpdate, insert, keyHolder, update, del, list, due, counts, appCount query
}

// prepareSchedules renders db's schedule queries.
func (s *Store) prepareSchedules(db *database) error {
	q := &db.schedules
	for _, p := range []struct {
		name string
		dst  *query
	}{
		{"schedule_get", &q.get}, {"schedule_get_by_key", &q.getByKey},
		{"schedule_get_for_update", &q.getForUpdate}, {"schedule_insert", &q.insert},
		{"schedule_key_holder", &q.keyHolder}, {"schedule_update", &q.update},
		{"schedule_delete", &q.del}, {"schedule_list", &q.list}, {"schedule_due", &q.due},
		{"schedule_counts", &q.counts}, {"schedule_app_count", &q.appCount},
	} {
		r, err := s.dialect.render(p.name, tmplData{})
		if err != nil {
			return err
		}
		*p.dst = r
	}
	return nil
}

// Schedule state codes, as stored in the state column. On disk: never
// renumber them.
var scheduleStateCodes = map[task.ScheduleState]int16{
	task.ScheduleActive: 1,
	task.SchedulePaused: 2,
	task.ScheduleEnded:  3,
}

func scheduleStateCode(st task.ScheduleState) (int16, error) {
	c, ok := scheduleStateCodes[st]
	if !ok {
		return 0, fmt.Errorf("sqlstore: unknown schedule state %q", st)
	}
	return c, nil
}

func parseScheduleStateCode(c int64) (task.ScheduleState, error) {
	for st, v := range scheduleStateCodes {
		if int64(v) == c {
			return st, nil
		}
	}
	return "", fmt.Errorf("sqlstore: unknown schedule state code %d", c)
}

func scheduleNotFound(what string) error {
	return fmt.Errorf("sqlstore: schedule %s: %w", what, store.ErrNotFound)
}

// scheduleRow is a schedule on its way to its row: the schedule as stored
// (what its record decodes to) and the values of its columns.
type scheduleRow struct {
	sc     *task.Schedule
	state  int64
	wakeAt any // NULL when zero
	record []byte
}

// newScheduleRow checks sc and makes its row.
func newScheduleRow(sc *task.Schedule) (scheduleRow, error) {
	if err := record.CheckSchedule(sc); err != nil {
		return scheduleRow{}, fmt.Errorf("sqlstore: %w", err)
	}
	code, err := scheduleStateCode(sc.State)
	if err != nil {
		return scheduleRow{}, err
	}
	rec, err := record.EncodeSchedule(sc)
	if err != nil {
		return scheduleRow{}, fmt.Errorf("sqlstore: %w", err)
	}
	stored, err := record.DecodeSchedule(rec)
	if err != nil {
		return scheduleRow{}, fmt.Errorf("sqlstore: %w", err)
	}
	r := scheduleRow{sc: stored, state: int64(code), record: rec}
	if !stored.WakeAt.IsZero() {
		r.wakeAt = stored.WakeAt.UnixMilli()
	}
	return r, nil
}

// inScheduleDBs runs fn with the database of id's home shard (claim.go)
// and, while fn answers ErrNotFound, with the others in turn: a schedule
// lives in the database of its key's shard (CreateSchedule), which is its
// home's for every id the engine makes, but may be another for one
// imported with an id made elsewhere. Schedules are few and read by id
// rarely (API calls, a step's write), so such a schedule costs a read of
// each database before its own.
func (s *Store) inScheduleDBs(id task.ID, fn func(db *database) error) error {
	home, _, _ := s.route(s.home(id))
	err := fn(home)
	for _, db := range s.dbs {
		if !errors.Is(err, store.ErrNotFound) {
			break
		}
		if db != home {
			err = fn(db)
		}
	}
	return err
}

// CreateSchedule implements [store.Schedules]. sc is stored in the
// database of its (app, key)'s shard ([Store.ShardFor]), which is the one
// its id names when the engine made it.
func (s *Store) CreateSchedule(ctx context.Context, sc *task.Schedule) (*task.Schedule, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	row, err := newScheduleRow(sc)
	if err != nil {
		return nil, false, err
	}
	c := row.sc
	db, _, _ := s.route(s.ShardFor(c.App, c.Key, c.ID))
	var (
		res     *task.Schedule
		created bool
	)
	err = s.inTx(ctx, db, "create schedule", func(tx *sql.Tx) error {
		for try := 0; ; try++ {
			if try > maxKeyRetries {
				return fmt.Errorf("its key %q of app %q is taken, yet no schedule has it (or its id is already stored)", c.Key, c.App)
			}
			r, err := tx.ExecContext(ctx, db.schedules.insert.sql, db.schedules.insert.args(map[string]any{
				"id": c.ID[:], "app": c.App, "key": []byte(c.Key), "state": row.state, "wake_at": row.wakeAt, "record": row.record,
			})...)
			if err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			if n == 1 {
				res, created = c, true
				return nil
			}
			// The key is taken: by whom?
			idb, rec, held, err := readKeyHolder(ctx, tx, db.schedules.keyHolder, c.App, c.Key)
			switch {
			case err != nil:
				return err
			case !held:
				continue // deleted meanwhile: insert again
			case bytes.Equal(idb, c.ID[:]):
				// Its own row: MySQL counts an insert that changed
				// nothing as 0 rows, but this one did insert it.
				res, created = c, true
				return nil
			}
			holder, err := record.DecodeSchedule(rec)
			if err != nil {
				return fmt.Errorf("schedule %x: %w", idb, err)
			}
			res, created = holder, false
			return nil
		}
	})
	if err != nil {
		return nil, false, fmt.Errorf("sqlstore: create schedule %s in database %d: %w", c.ID, db.index, err)
	}
	return res, created, nil
}

// readSchedule runs qr, which selects one record, and decodes it.
func readSchedule(ctx context.Context, q querier, qr query, params map[string]any, what string) (*task.Schedule, error) {
	var rec []byte
	err := q.QueryRowContext(ctx, qr.sql, qr.args(params)...).Scan(&rec)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, scheduleNotFound(what)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read schedule %s: %w", what, err)
	}
	sc, err := record.DecodeSchedule(rec)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: schedule %s: %w", what, err)
	}
	return sc, nil
}

// GetSchedule implements [store.Schedules].
func (s *Store) GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var sc *task.Schedule
	err := s.inScheduleDBs(id, func(db *database) (err error) {
		sc, err = readSchedule(ctx, db.db, db.schedules.get, map[string]any{"id": id[:]}, id.String())
		return err
	})
	return sc, err
}

// GetScheduleByKey implements [store.Schedules]. It reads the database of
// the key's shard.
func (s *Store) GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	what := fmt.Sprintf("with key %q of app %q", key, app)
	if key == "" {
		return nil, scheduleNotFound(what)
	}
	db, _, _ := s.route(s.ShardFor(app, key, task.ID{}))
	return readSchedule(ctx, db.db, db.schedules.getByKey, map[string]any{"app": app, "key": []byte(key)}, what)
}

// UpdateSchedule implements [store.Schedules]: SELECT … FOR UPDATE, fn,
// UPDATE and COMMIT in one transaction. fn runs with the row locked.
func (s *Store) UpdateSchedule(ctx context.Context, id task.ID, fn func(*task.Schedule) error) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var got *task.Schedule
	err := s.inScheduleDBs(id, func(db *database) (err error) {
		got, err = s.updateSchedule(ctx, db, id, fn)
		return err
	})
	return got, err
}

// updateSchedule is UpdateSchedule in db.
func (s *Store) updateSchedule(ctx context.Context, db *database, id task.ID, fn func(*task.Schedule) error) (*task.Schedule, error) {
	tx, err := db.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: update schedule %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	old, err := readSchedule(ctx, tx, db.schedules.getForUpdate, map[string]any{"id": id[:]}, id.String())
	if err != nil {
		return nil, err
	}
	c, err := record.ApplySchedule(old, fn)
	if err != nil {
		return nil, err
	}
	row, err := newScheduleRow(c)
	if err != nil {
		return nil, err
	}
	q := db.schedules.update
	_, err = tx.ExecContext(ctx, q.sql, q.args(map[string]any{
		"id": id[:], "state": row.state, "wake_at": row.wakeAt, "record": row.record,
	})...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: update schedule %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlstore: update schedule %s: commit: %w", id, err)
	}
	return row.sc, nil
}

// DeleteSchedule implements [store.Schedules]. It waits for an update of
// the schedule in flight (its row lock) and frees the key when it commits.
func (s *Store) DeleteSchedule(ctx context.Context, id task.ID) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return s.inScheduleDBs(id, func(db *database) error {
		q := db.schedules.del
		r, err := db.db.ExecContext(ctx, q.sql, q.args(map[string]any{"id": id[:]})...)
		if err != nil {
			return fmt.Errorf("sqlstore: delete schedule %s: %w", id, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlstore: delete schedule %s: %w", id, err)
		}
		if n == 0 {
			return scheduleNotFound(id.String())
		}
		return nil
	})
}

// readScheduleRow reads a row of a query that selects a record.
func readScheduleRow(rows *sql.Rows) (*task.Schedule, error) {
	var rec []byte
	if err := rows.Scan(&rec); err != nil {
		return nil, err
	}
	return record.DecodeSchedule(rec)
}

// ListSchedules implements [store.Schedules]: each database's first limit
// of app's schedules after the cursor, merged.
func (s *Store) ListSchedules(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	return scanAll(ctx, s, "list schedules", func(db *database) query { return db.schedules.list },
		map[string]any{"app": app, "after_id": after[:], "limit": int64(limit)},
		readScheduleRow,
		func(a, b *task.Schedule) int { return compareIDs(a.ID, b.ID) },
		limit)
}

// DueSchedules implements [store.Schedules]: each database's first limit
// due schedules, merged. Times are compared at millisecond precision.
func (s *Store) DueSchedules(ctx context.Context, until time.Time, limit int) ([]*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	return scanAll(ctx, s, "due schedules", func(db *database) query { return db.schedules.due },
		map[string]any{"until_ms": until.UnixMilli(), "limit": int64(limit)},
		readScheduleRow,
		func(a, b *task.Schedule) int {
			return cmp.Or(cmp.Compare(a.WakeAt.UnixMilli(), b.WakeAt.UnixMilli()), compareIDs(a.ID, b.ID))
		},
		limit)
}

// CountSchedules implements [store.Schedules]: one grouped scan per
// database.
func (s *Store) CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	return countAll(ctx, s, "count schedules", func(db *database) query { return db.schedules.counts }, parseScheduleStateCode)
}

// CountAppSchedules implements [store.Schedules]: each database counts the
// app's schedules up to limit (on the index of ListSchedules), and the
// counts add up.
func (s *Store) CountAppSchedules(ctx context.Context, app string, limit int) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if limit <= 0 {
		return 0, nil
	}
	counts, err := scanAll(ctx, s, "count an app's schedules", func(db *database) query { return db.schedules.appCount },
		map[string]any{"app": app, "limit": int64(limit)},
		func(r *sql.Rows) (int64, error) {
			var n int64
			err := r.Scan(&n)
			return n, err
		},
		func(a, b int64) int { return 0 }, math.MaxInt)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range counts {
		n += int(c)
	}
	return min(n, limit), nil
}
