package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

// Schedules ([store.Schedules]) are kept beside tasks, in key families of
// their own (keys.go): a schedule's record under its id, and an entry for
// its key, for its app's list and, while its WakeAt is set, for the due
// order. Each write of a schedule is one batch, committed as the store's
// task writes are (synced unless Options.NoSync), so a schedule and its
// entries change together.
//
// Locks, in the package's order: UpdateSchedule locks the stripe of the
// schedule's id (idLocks, as Update does for a task) across its read, fn
// and commit; CreateSchedule and DeleteSchedule lock it too, then the
// stripe of the schedule's (app, key) (keyLocks), across the check of the
// key and the commit. A schedule's id never names a task, so a stripe
// shared with tasks costs at most a wait.

var _ store.Schedules = (*Store)(nil)

func scheduleNotFound(what string) error {
	return fmt.Errorf("pebblestore: schedule %s: %w", what, store.ErrNotFound)
}

// encodeSchedule checks sc and returns its record and what the record
// decodes to: the schedule as stored, and as returned.
func encodeSchedule(sc *task.Schedule) ([]byte, *task.Schedule, error) {
	if err := record.CheckSchedule(sc); err != nil {
		return nil, nil, fmt.Errorf("pebblestore: %w", err)
	}
	rec, err := record.EncodeSchedule(sc)
	if err != nil {
		return nil, nil, fmt.Errorf("pebblestore: %w", err)
	}
	stored, err := record.DecodeSchedule(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("pebblestore: %w", err)
	}
	return rec, stored, nil
}

// CreateSchedule implements [store.Schedules].
func (s *Store) CreateSchedule(ctx context.Context, sc *task.Schedule) (*task.Schedule, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	rec, c, err := encodeSchedule(sc)
	if err != nil {
		return nil, false, err
	}
	defer s.lockID(c.ID)()
	defer s.lockKey(c.App, c.Key)()

	owner, err := getScheduleByKey(s.db, schedKeyKey(c.App, c.Key))
	switch {
	case err == nil:
		return owner, false, nil
	case !errors.Is(err, store.ErrNotFound):
		return nil, false, err
	}
	switch _, err := getSchedule(s.db, c.ID); {
	case err == nil:
		return nil, false, fmt.Errorf("pebblestore: create schedule %s: the id is already stored", c.ID)
	case !errors.Is(err, store.ErrNotFound):
		return nil, false, err
	}
	if err := s.commitSchedule("create", c.ID, nil, c, rec); err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// GetSchedule implements [store.Schedules].
func (s *Store) GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	return getSchedule(s.db, id)
}

// GetScheduleByKey implements [store.Schedules].
func (s *Store) GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	// A snapshot, so that a delete between the two reads can't make the
	// key entry point at nothing.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return getScheduleByKey(snap, schedKeyKey(app, key))
}

// ListSchedules implements [store.Schedules].
func (s *Store) ListSchedules(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	prefix := schedListPrefix(app)
	lower := prefix
	if !after.IsZero() {
		lower = successor(schedListKey(app, after))
	}
	// A snapshot, so that the schedules read are those the list holds.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	ids, err := scanIDs(snap, lower, prefixEnd(prefix), limit, func(k []byte) (task.ID, error) {
		return parseSchedListKey(k, len(prefix))
	})
	if err != nil {
		return nil, err
	}
	return getSchedules(snap, ids, "list")
}

// CountAppSchedules implements [store.Schedules]: it counts the app's list
// entries, up to limit.
func (s *Store) CountAppSchedules(ctx context.Context, app string, limit int) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if limit <= 0 {
		return 0, nil
	}
	prefix := schedListPrefix(app)
	ids, err := scanIDs(s.db, prefix, prefixEnd(prefix), limit, func(k []byte) (task.ID, error) {
		return parseSchedListKey(k, len(prefix))
	})
	return len(ids), err
}

// UpdateSchedule implements [store.Schedules]. fn runs with the schedule's
// stripe locked, so it must not call the store.
func (s *Store) UpdateSchedule(ctx context.Context, id task.ID, fn func(*task.Schedule) error) (*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	defer s.lockID(id)()

	old, err := getSchedule(s.db, id)
	if err != nil {
		return nil, err
	}
	c, err := record.ApplySchedule(old, fn)
	if err != nil {
		return nil, err
	}
	rec, c, err := encodeSchedule(c)
	if err != nil {
		return nil, err
	}
	if err := s.commitSchedule("update", id, old, c, rec); err != nil {
		return nil, err
	}
	return c, nil
}

// DeleteSchedule implements [store.Schedules].
func (s *Store) DeleteSchedule(ctx context.Context, id task.ID) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	defer s.lockID(id)()
	old, err := getSchedule(s.db, id)
	if err != nil {
		return err
	}
	defer s.lockKey(old.App, old.Key)()
	return s.commitSchedule("delete", id, old, nil, nil)
}

// DueSchedules implements [store.Schedules]. Times are compared at
// millisecond precision.
func (s *Store) DueSchedules(ctx context.Context, until time.Time, limit int) ([]*task.Schedule, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	upper := prefixEnd([]byte{prefixScheduleWake})
	if ms := until.UnixMilli(); ms < math.MaxInt64 {
		upper = schedWakeBound(ms + 1)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	ids, err := scanIDs(snap, []byte{prefixScheduleWake}, upper, limit, func(k []byte) (task.ID, error) {
		_, id, err := parseSchedWakeKey(k)
		return id, err
	})
	if err != nil {
		return nil, err
	}
	return getSchedules(snap, ids, "wake")
}

// CountSchedules implements [store.Schedules]. It reads the list entries
// (A <app> 0x00 <id> → state byte) from one consistent view: one entry per
// schedule.
func (s *Store) CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	out := map[string]map[task.ScheduleState]int64{}
	err := scan(s.db, []byte{prefixScheduleApp}, []byte{prefixScheduleApp + 1}, func(k, v []byte) (bool, error) {
		end := bytes.IndexByte(k[1:], 0) + 1 // the separator after the app
		if end < 1 || len(k) != end+1+idLen || len(v) != 1 {
			return false, fmt.Errorf("pebblestore: malformed schedule list entry %x → %x", k, v)
		}
		st, err := parseScheduleStateByte(v[0])
		if err != nil {
			return false, err
		}
		app := string(k[1:end])
		if out[app] == nil {
			out[app] = map[task.ScheduleState]int64{}
		}
		out[app][st]++
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// getSchedule reads the schedule with id.
func getSchedule(r reader, id task.ID) (*task.Schedule, error) {
	v, closer, err := r.Get(schedRecordKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, scheduleNotFound(id.String())
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get schedule %s: %w", id, err)
	}
	defer closer.Close()
	sc, err := record.DecodeSchedule(v)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", id, err)
	}
	return sc, nil
}

// getScheduleByKey reads the schedule that has the key entry kk.
func getScheduleByKey(r reader, kk []byte) (*task.Schedule, error) {
	id, ok, err := keyEntry(r, kk, "schedule key")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, scheduleNotFound(fmt.Sprintf("with key entry %q", kk))
	}
	sc, err := getSchedule(r, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("pebblestore: schedule key entry %q points to missing schedule %s", kk, id)
	}
	return sc, err
}

// getSchedules reads the schedules with ids, which an index (what) lists.
func getSchedules(r reader, ids []task.ID, what string) ([]*task.Schedule, error) {
	out := make([]*task.Schedule, 0, len(ids))
	for _, id := range ids {
		sc, err := getSchedule(r, id)
		if err != nil {
			return nil, fmt.Errorf("pebblestore: %s entry of schedule %s: %w", what, id, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// scheduleEntries returns the index entries of sc (none when sc is nil).
func scheduleEntries(sc *task.Schedule) ([]entry, error) {
	if sc == nil {
		return nil, nil
	}
	sb, err := scheduleStateByte(sc.State)
	if err != nil {
		return nil, err
	}
	es := []entry{
		{schedListKey(sc.App, sc.ID), []byte{sb}},
		{schedKeyKey(sc.App, sc.Key), sc.ID[:]},
	}
	if !sc.WakeAt.IsZero() {
		es = append(es, entry{key: schedWakeKey(sc.WakeAt.UnixMilli(), sc.ID)})
	}
	return es, nil
}

// commitSchedule writes the change from old to new (whose record is rec)
// in one batch, committed as the store's task writes are; op ("create",
// "update", "delete") names it in errors.
func (s *Store) commitSchedule(op string, id task.ID, old, new *task.Schedule, rec []byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := writeSchedule(b, old, new, rec); err != nil {
		return err
	}
	if op == "create" {
		if err := s.refuseNew(); err != nil {
			return fmt.Errorf("pebblestore: create schedule %s: %w", id, err)
		}
	}
	if err := s.commit(b, s.wo); err != nil {
		return fmt.Errorf("pebblestore: %s schedule %s: %w", op, id, err)
	}
	return nil
}

// writeSchedule adds to b the change from old to new, whose record is rec:
// the record and the index entries that differ. old nil creates new; new
// nil deletes old.
func writeSchedule(b *pebble.Batch, old, new *task.Schedule, rec []byte) error {
	olds, err := scheduleEntries(old)
	if err != nil {
		return err
	}
	news, err := scheduleEntries(new)
	if err != nil {
		return err
	}
	if new != nil {
		if err := b.Set(schedRecordKey(new.ID), rec, nil); err != nil {
			return err
		}
	} else if err := b.Delete(schedRecordKey(old.ID), nil); err != nil {
		return err
	}
	return writeEntries(b, olds, news)
}
