package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

var _ store.Schedules = (*Store)(nil)

// enterLocked checks ctx and that the store is open; s.mu must be held.
func (s *Store) enterLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.mu.closed {
		return store.ErrClosed
	}
	return nil
}

// canonical returns what a backend that stores sc's record reads back: sc
// encoded and decoded (times rounded up to the millisecond, empty payload
// and headers nil). It refuses what record.CheckSchedule and the record
// refuse.
func canonical(sc *task.Schedule) (*task.Schedule, error) {
	if err := record.CheckSchedule(sc); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	rec, err := record.EncodeSchedule(sc)
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	return record.DecodeSchedule(rec)
}

func scheduleNotFound(what string) error {
	return fmt.Errorf("memstore: schedule %s: %w", what, store.ErrNotFound)
}

// CreateSchedule implements [store.Schedules].
func (s *Store) CreateSchedule(ctx context.Context, sc *task.Schedule) (*task.Schedule, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, false, err
	}
	c, err := canonical(sc)
	if err != nil {
		return nil, false, err
	}
	k := appKey{c.App, c.Key}
	if id, ok := s.mu.scheduleKeys[k]; ok {
		return s.mu.schedules[id].Clone(), false, nil
	}
	if _, ok := s.mu.schedules[c.ID]; ok {
		return nil, false, fmt.Errorf("memstore: schedule %s: the id is already stored", c.ID)
	}
	s.mu.schedules[c.ID] = c
	s.mu.scheduleKeys[k] = c.ID
	return c.Clone(), true, nil
}

// GetSchedule implements [store.Schedules].
func (s *Store) GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	sc, ok := s.mu.schedules[id]
	if !ok {
		return nil, scheduleNotFound(id.String())
	}
	return sc.Clone(), nil
}

// GetScheduleByKey implements [store.Schedules].
func (s *Store) GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	id, ok := s.mu.scheduleKeys[appKey{app, key}]
	if !ok {
		return nil, scheduleNotFound(fmt.Sprintf("with key %q of app %q", key, app))
	}
	return s.mu.schedules[id].Clone(), nil
}

// ListSchedules implements [store.Schedules].
func (s *Store) ListSchedules(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	var out []*task.Schedule
	for _, sc := range s.mu.schedules {
		if sc.App == app && compareIDs(sc.ID, after) > 0 {
			out = append(out, sc)
		}
	}
	slices.SortFunc(out, func(a, b *task.Schedule) int { return compareIDs(a.ID, b.ID) })
	return cloneAll(truncate(out, limit)), nil
}

// UpdateSchedule implements [store.Schedules]. fn runs with the store's
// mutex held, so it must not call the store.
func (s *Store) UpdateSchedule(ctx context.Context, id task.ID, fn func(*task.Schedule) error) (*task.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	old, ok := s.mu.schedules[id]
	if !ok {
		return nil, scheduleNotFound(id.String())
	}
	c, err := record.ApplySchedule(old, fn)
	if err != nil {
		return nil, err
	}
	if c, err = canonical(c); err != nil {
		return nil, err
	}
	s.mu.schedules[id] = c
	return c.Clone(), nil
}

// DeleteSchedule implements [store.Schedules].
func (s *Store) DeleteSchedule(ctx context.Context, id task.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return err
	}
	sc, ok := s.mu.schedules[id]
	if !ok {
		return scheduleNotFound(id.String())
	}
	delete(s.mu.schedules, id)
	delete(s.mu.scheduleKeys, appKey{sc.App, sc.Key})
	return nil
}

// DueSchedules implements [store.Schedules]. Times are compared at
// millisecond precision.
func (s *Store) DueSchedules(ctx context.Context, until time.Time, limit int) ([]*task.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	var out []*task.Schedule
	for _, sc := range s.mu.schedules {
		if !sc.WakeAt.IsZero() && sc.WakeAt.UnixMilli() <= until.UnixMilli() {
			out = append(out, sc)
		}
	}
	slices.SortFunc(out, func(a, b *task.Schedule) int {
		return cmp.Or(cmp.Compare(a.WakeAt.UnixMilli(), b.WakeAt.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	return cloneAll(truncate(out, limit)), nil
}

// CountAppSchedules implements [store.Schedules].
func (s *Store) CountAppSchedules(ctx context.Context, app string, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, sc := range s.mu.schedules {
		if sc.App == app && n < limit {
			n++
		}
	}
	return n, nil
}

// CountSchedules implements [store.Schedules].
func (s *Store) CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	out := map[string]map[task.ScheduleState]int64{}
	for _, sc := range s.mu.schedules {
		if out[sc.App] == nil {
			out[sc.App] = map[task.ScheduleState]int64{}
		}
		out[sc.App][sc.State]++
	}
	return out, nil
}
