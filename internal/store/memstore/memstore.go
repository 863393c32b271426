// Package memstore is a [store.Store] kept in maps, guarded by one mutex.
//
// It is meant to be obviously correct rather than fast: every ordered read
// collects the matching tasks and sorts them. Engine unit tests use it under
// testing/synctest (it starts no goroutines and does no I/O), and the
// metamorphic tests use it as the model the real backends are compared to.
//
// Nothing is durable: Create and Update return once the maps are changed.
// Tasks go in and come out as deep copies, so callers never share memory
// with the store. It keeps schedules too ([store.Schedules]), each as what
// its record decodes to, so that it returns what the other backends do.
package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

var _ store.Store = (*Store)(nil)

// Store is a map-based [store.Store]. The zero value is not usable; call
// [New].
type Store struct {
	mu struct {
		sync.Mutex
		closed bool
		tasks  map[task.ID]*task.Task
		keys   map[appKey]task.ID // (app, key) → id, until the task is swept

		schedules    map[task.ID]*task.Schedule // schedules.go
		scheduleKeys map[appKey]task.ID         // (app, key) → id of a schedule
	}
}

type appKey struct{ app, key string }

// New returns an empty store.
func New() *Store {
	s := &Store{}
	s.mu.tasks = make(map[task.ID]*task.Task)
	s.mu.keys = make(map[appKey]task.ID)
	s.mu.schedules = make(map[task.ID]*task.Schedule)
	s.mu.scheduleKeys = make(map[appKey]task.ID)
	return s
}

// Create implements [store.Store].
func (s *Store) Create(ctx context.Context, tasks []*task.Task) ([]store.CreateResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	for _, t := range tasks {
		if err := checkTask(t); err != nil {
			return nil, err
		}
	}
	res := make([]store.CreateResult, len(tasks))
	for i, t := range tasks {
		if t.Key != "" {
			if id, ok := s.mu.keys[appKey{t.App, t.Key}]; ok {
				res[i] = store.CreateResult{Task: s.mu.tasks[id].Clone()}
				continue
			}
			s.mu.keys[appKey{t.App, t.Key}] = t.ID
		}
		c := normalize(t.Clone())
		s.mu.tasks[t.ID] = c
		res[i] = store.CreateResult{Task: c.Clone(), Created: true}
	}
	return res, nil
}

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, id task.ID) (*task.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	t, ok := s.mu.tasks[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return t.Clone(), nil
}

// GetByKey implements [store.Store].
func (s *Store) GetByKey(ctx context.Context, app, key string) (*task.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	id, ok := s.mu.keys[appKey{app, key}]
	if !ok {
		return nil, store.ErrNotFound
	}
	return s.mu.tasks[id].Clone(), nil
}

// Update implements [store.Store]. fn runs with the store's mutex held, so
// it must not call the store.
func (s *Store) Update(ctx context.Context, id task.ID, _ *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	old, ok := s.mu.tasks[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	c, err := record.Apply(old, fn)
	if err != nil {
		return old.Clone(), err
	}
	if err := checkTask(c); err != nil {
		return old.Clone(), err
	}
	s.mu.tasks[id] = c
	return c.Clone(), nil
}

// UpdateMany implements [store.Store]. fn runs with the store's mutex held,
// so it must not call the store.
func (s *Store) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	res := make([]*task.Task, len(ids))
	if err := ctx.Err(); err != nil {
		return res, slices.Repeat([]error{err}, len(ids))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return res, slices.Repeat([]error{store.ErrClosed}, len(ids))
	}
	olds := make([]*task.Task, len(ids))
	for i, id := range ids {
		olds[i] = s.mu.tasks[id]
	}
	cs, errs := record.ApplyManyWith(olds, opts.SharedTasks(), fn)
	for i, c := range cs {
		if olds[i] == nil {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("memstore: task %s: %w", ids[i], store.ErrNotFound)
			}
			continue
		}
		if errs[i] == nil {
			errs[i] = checkTask(c)
		}
		if errs[i] != nil {
			res[i] = olds[i].Clone()
			continue
		}
		s.mu.tasks[c.ID] = c
		res[i] = c.Clone()
	}
	return res, errs
}

// Wakeups implements [store.Store].
func (s *Store) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	var out []store.Wakeup
	for _, t := range s.mu.tasks {
		if t.WakeAt.IsZero() || t.WakeAt.UnixMilli() > until.UnixMilli() {
			continue
		}
		if !after.Less(store.Cursor{At: t.WakeAt, ID: t.ID}) {
			continue
		}
		out = append(out, store.Wakeup{
			ID:    t.ID,
			At:    time.UnixMilli(t.WakeAt.UnixMilli()).UTC(),
			State: t.State,
			Kind:  t.Target.Kind(),
			App:   t.App,
		})
	}
	slices.SortFunc(out, func(a, b store.Wakeup) int {
		return cmp.Or(cmp.Compare(a.At.UnixMilli(), b.At.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	return truncate(out, limit), nil
}

// Claimable implements [store.Store].
func (s *Store) Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	var ts []*task.Task
	for _, t := range s.mu.tasks {
		if t.App == app && t.State == task.Scheduled && t.Target.Kind() == "pull" &&
			t.NextAttemptAt.UnixMilli() <= now.UnixMilli() {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b *task.Task) int {
		return cmp.Or(cmp.Compare(a.NextAttemptAt.UnixMilli(), b.NextAttemptAt.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	ts = truncate(ts, limit)
	ids := make([]task.ID, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids, nil
}

// List implements [store.Store].
func (s *Store) List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	var out []*task.Task
	for _, t := range s.mu.tasks {
		if t.App == app && t.State == state && compareIDs(t.ID, after) > 0 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *task.Task) int { return compareIDs(a.ID, b.ID) })
	return cloneAll(truncate(out, limit)), nil
}

// Sweep implements [store.Store]. FinishedAt and cutoff are compared at
// millisecond precision; the oldest finished tasks go first.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, store.ErrClosed
	}
	var old []*task.Task
	for _, t := range s.mu.tasks {
		if t.State.Final() && t.FinishedAt != nil && t.FinishedAt.UnixMilli() < cutoff.UnixMilli() {
			old = append(old, t)
		}
	}
	slices.SortFunc(old, func(a, b *task.Task) int {
		return cmp.Or(cmp.Compare(a.FinishedAt.UnixMilli(), b.FinishedAt.UnixMilli()), compareIDs(a.ID, b.ID))
	})
	old = truncate(old, limit)
	for _, t := range old {
		delete(s.mu.tasks, t.ID)
		if t.Key != "" {
			delete(s.mu.keys, appKey{t.App, t.Key})
		}
	}
	return len(old), nil
}

// Close implements [store.Store]. It drops every task and schedule.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return store.ErrClosed
	}
	s.mu.closed = true
	s.mu.tasks, s.mu.keys = nil, nil
	s.mu.schedules, s.mu.scheduleKeys = nil, nil
	return nil
}

// checkTask refuses what pebblestore can't store either, so that the two
// agree in metamorphic tests.
func checkTask(t *task.Task) error {
	if t.ID.IsZero() {
		return errors.New("memstore: task without an id")
	}
	if !t.State.Valid() {
		return fmt.Errorf("memstore: task %s: unknown state %q", t.ID, t.State)
	}
	return nil
}

func compareIDs(a, b task.ID) int { return slices.Compare(a[:], b[:]) }

// truncate returns the first limit elements of s (none when limit <= 0).
func truncate[S ~[]E, E any](s S, limit int) S {
	if limit <= 0 {
		return nil
	}
	if len(s) > limit {
		s = s[:limit]
	}
	return s
}

// cloneAll replaces each task or schedule of s, a slice of the caller's,
// by a copy, and returns s.
func cloneAll[T interface{ Clone() T }](s []T) []T {
	for i, v := range s {
		s[i] = v.Clone()
	}
	return s
}

// normalize puts t's times in UTC without a monotonic reading, as a store
// that encodes them would return them.
var normalize = record.Normalize
