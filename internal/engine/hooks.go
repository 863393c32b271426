package engine

import (
	"context"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Hooks are called as tasks move, so that metrics (or tests) can follow
// without the engine knowing about them, after Pebble's EventListener. Any
// field may be nil. Hooks run on the engine's goroutines: they must be quick
// and must not call the engine.
type Hooks struct {
	// Created is called with the number of tasks an app created in one call.
	Created func(app string, n int)
	// Finished is called when a task reaches a final state (delivered,
	// dead, expired, cancelled).
	Finished func(app string, state task.State)
	// AttemptStarted is called when a delivery attempt starts: a push
	// leased by the engine, or a pull task claimed. Lateness is the time
	// from the attempt's due time (NextAttemptAt) to its start.
	AttemptStarted func(app, kind string, lateness time.Duration)
	// AttemptEnded is called when a push attempt ends; err is nil on
	// success.
	AttemptEnded func(app, kind string, took time.Duration, err error)
}

// update is Store.Update plus the Finished hook. It numbers the write
// (task.Task.Seq) for track.
func (e *Engine) update(ctx context.Context, id task.ID, opts *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	var before task.State
	t, err := e.store.Update(ctx, id, opts, func(t *task.Task) error {
		before = t.State
		if err := fn(t); err != nil {
			return err
		}
		t.Seq = e.seq.Add(1)
		return nil
	})
	if err == nil && t != nil && t.State.Final() && !before.Final() {
		if h := e.cfg.Hooks.Finished; h != nil {
			h(t.App, t.State)
		}
	}
	return t, err
}

// updateMany is store.UpdateMany with the Finished hook of update.
func (e *Engine) updateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	before := make([]task.State, len(ids))
	ts, errs := e.store.UpdateMany(ctx, ids, opts, func(ts []*task.Task) []error {
		for i, t := range ts {
			if t != nil {
				before[i] = t.State
			}
		}
		errs := fn(ts)
		for i, t := range ts {
			if t != nil && errs[i] == nil {
				t.Seq = e.seq.Add(1)
			}
		}
		return errs
	})
	if h := e.cfg.Hooks.Finished; h != nil {
		for i, t := range ts {
			if errs[i] == nil && t != nil && t.State.Final() && !before[i].Final() {
				h(t.App, t.State)
			}
		}
	}
	return ts, errs
}
