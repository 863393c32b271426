package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Bulk actions retry or cancel every task of an app that a filter matches
// (an endpoint was down for an hour: its thousands of dead tasks go again
// with one call). They walk the app's tasks in the filter's state in id
// order, a page (BulkPage) at a time from a cursor, as List does, and
// change each page's matches with one UpdateMany: one durable write per
// page, and nothing held between pages. A call stops once it has changed
// Limit tasks (MaxBulk by default) and says so with More; its context
// ending stops it between pages. What a page wrote stays written either way, and a
// repeat only finds what is left: retried or cancelled tasks have left the
// state the filter names.

// Bulk does the bulk actions, over a task writer: the engine's
// updateMany and wrote. Reached by Engine.Bulk; no state of its own.
type Bulk struct {
	p bulkParams
}

// bulkParams are what Bulk uses of the engine.
type bulkParams struct {
	ready      func() error // ErrNotReady unless the engine takes work
	now        func() time.Time
	list       func(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error) // Store.List
	updateMany func(ctx context.Context, ids []task.ID, fn func([]*task.Task) []error) ([]written, []error)
	wrote      func(ctx context.Context, ws ...written)
	underway   func(id task.ID) bool // an attempt of id is reserved or under way in this process
}

// Limits of bulk actions.
const (
	// BulkPage is how many tasks one page of a bulk action reads, and at
	// most changes in one store write.
	BulkPage = 500
	// MaxBulk is the most tasks one bulk call changes, and its default.
	MaxBulk = 100_000
)

// BulkFilter selects the tasks of a bulk action.
type BulkFilter struct {
	// App is the app whose tasks are changed. Required.
	App string
	// State is the state the tasks are in. Required: dead or expired for
	// RetryAll, scheduled for CancelAll.
	State task.State
	// KeyPrefix, when set, keeps the tasks whose key starts with it
	// (tasks without a key never match one). At most task.MaxKeyLen bytes
	// of UTF-8.
	KeyPrefix string
	// DueAfter, when set, keeps the tasks due at or after it (DueAt, the
	// task's original due time).
	DueAfter time.Time
	// DueBefore, when set, keeps the tasks due before it.
	DueBefore time.Time
	// Limit is the most tasks the call changes: 1 to MaxBulk; 0 means
	// MaxBulk.
	Limit int
}

// BulkResult is what a bulk call did.
type BulkResult struct {
	// Count is the number of tasks changed.
	Count int
	// More says the call stopped at its limit while the listing went on:
	// repeat it to go on (a repeat may find nothing left).
	More bool
}

// validate checks f for op ("retry" or "cancel"), whose tasks are in one
// of states, and fills the default limit.
func (f *BulkFilter) validate(op string, states ...task.State) error {
	if err := task.ValidateApp(f.App); err != nil {
		return err
	}
	switch {
	case f.State == "":
		return &task.FieldError{Field: "state", Message: fmt.Sprintf("is required: %s", statesText(states))}
	case !slices.Contains(states, f.State):
		return &task.FieldError{Field: "state", Message: fmt.Sprintf("must be %s to %s, got %q", statesText(states), op, f.State)}
	case len(f.KeyPrefix) > task.MaxKeyLen:
		return &task.FieldError{Field: "key_prefix", Message: fmt.Sprintf("is %d bytes, more than %d", len(f.KeyPrefix), task.MaxKeyLen)}
	case !utf8.ValidString(f.KeyPrefix):
		return &task.FieldError{Field: "key_prefix", Message: "is not valid UTF-8"}
	case !f.DueAfter.IsZero() && !f.DueBefore.IsZero() && !f.DueBefore.After(f.DueAfter):
		return &task.FieldError{Field: "due_before", Message: "must be after due_after"}
	case f.Limit < 0 || f.Limit > MaxBulk:
		return &task.FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxBulk)}
	}
	if f.Limit == 0 {
		f.Limit = MaxBulk
	}
	return nil
}

func statesText(states []task.State) string {
	q := make([]string, len(states))
	for i, s := range states {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " or ")
}

// matches reports whether t is one of the filter's tasks.
func (f *BulkFilter) matches(t *task.Task) bool {
	return t != nil && t.App == f.App && t.State == f.State &&
		strings.HasPrefix(t.Key, f.KeyPrefix) &&
		(f.DueAfter.IsZero() || !t.DueAt.Before(f.DueAfter)) &&
		(f.DueBefore.IsZero() || t.DueAt.Before(f.DueBefore))
}

// RetryAll retries every dead or expired task of f.App that f matches, as
// Retry does each one: due now, attempts reset, deadline cleared. See
// [BulkResult] for what it returns; on an error (ctx ended, store
// failure) the result counts what was changed before it.
func (b *Bulk) RetryAll(ctx context.Context, f BulkFilter) (BulkResult, error) {
	if err := f.validate("retry", task.Dead, task.Expired); err != nil {
		return BulkResult{}, err
	}
	return b.run(ctx, f, retry)
}

// CancelAll cancels every scheduled task of f.App that f matches, as
// Cancel does each one. It returns as RetryAll does.
func (b *Bulk) CancelAll(ctx context.Context, f BulkFilter) (BulkResult, error) {
	if err := f.validate("cancel", task.Scheduled); err != nil {
		return BulkResult{}, err
	}
	return b.run(ctx, f, func(t *task.Task, now time.Time) {
		finish(t, task.Cancelled, now)
	})
}

// run applies change to the tasks f matches, a page at a time (see the
// top of this file). f is valid.
func (b *Bulk) run(ctx context.Context, f BulkFilter, change func(t *task.Task, now time.Time)) (BulkResult, error) {
	var res BulkResult
	var after task.ID
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := b.p.ready(); err != nil {
			return res, err
		}
		page, err := b.p.list(ctx, f.App, f.State, after, BulkPage)
		if err != nil {
			return res, fmt.Errorf("list %s tasks of app %s: %w", f.State, f.App, err)
		}
		var ids []task.ID
		for _, t := range page {
			if !f.matches(t) {
				continue
			}
			if len(ids) == f.Limit-res.Count {
				res.More = true // the limit is reached with matches left in the page
				break
			}
			ids = append(ids, t.ID)
		}
		n, err := b.write(ctx, f, ids, change)
		res.Count += n
		if err != nil {
			return res, err
		}
		if res.More || len(page) < BulkPage {
			return res, nil
		}
		if res.Count == f.Limit {
			res.More = true // the listing goes on; it may hold no more matches
			return res, nil
		}
		after = page[len(page)-1].ID
	}
}

// write changes the tasks ids in one store write, each only if it still
// matches f (another write may have moved it since the listing), and
// returns how many it changed. The write runs to its end once started:
// a context ending stops a bulk action between pages, not in a write.
func (b *Bulk) write(ctx context.Context, f BulkFilter, ids []task.ID, change func(t *task.Task, now time.Time)) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	ws, errs := b.p.updateMany(wctx, ids, func(ts []*task.Task) []error {
		now := b.p.now()
		errs := make([]error, len(ts))
		for i, t := range ts {
			if !f.matches(t) || b.p.underway(t.ID) {
				errs[i] = errSkip // moved, or its attempt is under way here (as Cancel)
				continue
			}
			change(t, now)
		}
		return errs
	})
	var stored []written
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			stored = append(stored, ws[i])
		case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
		case failed == nil:
			failed = fmt.Errorf("update task %s: %w", ids[i], err)
		}
	}
	b.p.wrote(ctx, stored...)
	return len(stored), failed
}
