package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// writer writes tasks to the store and has the rest of the engine follow:
// it numbers each write (written), calls the Finished hook, mirrors what it
// wrote into the index (Index.Sync) and tracks it in the timekeeper. Every
// service that changes a task goes through it. Its only state is the write
// counter (atomic).
type writer struct {
	store    store.Store
	finished func(app string, state task.State) // Hooks.Finished; nil: none
	index    engIdx
	tk       *timekeeper
	clock    clock.Clock
	log      *slog.Logger
	seq      atomic.Uint64 // numbers the writes (see written)

	// dropHeld forgets a pull task held in memory that was just written
	// (its copy is out of date); pullDue wakes the leases waiting for
	// app's pull tasks (the pull service).
	dropHeld func(id task.ID)
	pullDue  func(app string)
	// touch is told, under a task's row lock, that the task is being
	// written (held.touch): a copy of it held, and its lease's base, are
	// out of date from then on.
	touch func(id task.ID)
	// known is the store's write over known versions (nil: it has none).
	known store.KnownUpdater
	// gens count the writes per slot of task ids (genOf), bumped under
	// the task's row lock before the write commits: a push attempt's
	// outcome is written over its base when its slot's count is still the
	// one its look read (outcomes.write). Another task of the slot
	// written meanwhile only costs that outcome a read.
	gens [genSlots]atomic.Uint64
}

// genSlots is how many slots the write counts (gens) have.
const genSlots = 1 << 14

// genOf is the write count of id's slot. Read under id's row lock, it
// changes only when a write of a task of the slot comes after.
func (w *writer) genOf(id task.ID) uint64 {
	return w.gens[genSlot(id)].Load()
}

// genSlot is id's slot of the write counts: from its random part (the
// last bytes; the first are its time).
func genSlot(id task.ID) int {
	return int(uint16(id[len(id)-2])<<8|uint16(id[len(id)-1])) % genSlots
}

// touched tells touch of t, about to be written, and counts the write.
func (w *writer) touched(t *task.Task) {
	w.gens[genSlot(t.ID)].Add(1)
	if w.touch != nil {
		w.touch(t.ID)
	}
}

// update is Store.Update plus the Finished hook. It numbers the write.
func (w *writer) update(ctx context.Context, id task.ID, opts *store.UpdateOpts, fn func(*task.Task) error) (written, error) {
	var before task.State
	var seq uint64
	t, err := w.store.Update(ctx, id, opts, func(t *task.Task) error {
		before = t.State
		if err := fn(t); err != nil {
			return err
		}
		w.touched(t)
		seq = w.seq.Add(1)
		return nil
	})
	if err == nil && t != nil && t.State.Final() && !before.Final() {
		if h := w.finished; h != nil {
			h(t.App, t.State)
		}
	}
	return written{t, seq}, err
}

// updateMany is store.UpdateMany with the Finished hook and the numbering
// of update.
func (w *writer) updateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]written, []error) {
	return w.updateWith(len(ids), fn, func(fn func([]*task.Task) []error) ([]*task.Task, []error) {
		return w.store.UpdateMany(ctx, ids, opts, fn)
	})
}

// updateKnown is store.KnownUpdater's UpdateKnown (w.known: the caller
// checked it is set) with what updateMany adds.
func (w *writer) updateKnown(ctx context.Context, olds []*task.Task, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]written, []error) {
	return w.updateWith(len(olds), fn, func(fn func([]*task.Task) []error) ([]*task.Task, []error) {
		return w.known.UpdateKnown(ctx, olds, opts, fn)
	})
}

// updateWith is updateMany and updateKnown over call, the store's method,
// for n tasks.
func (w *writer) updateWith(n int, fn func([]*task.Task) []error, call func(fn func([]*task.Task) []error) ([]*task.Task, []error)) ([]written, []error) {
	// Each task's state before fn and its write's number, in one array.
	type was struct {
		state task.State
		seq   uint64
	}
	before := make([]was, n)
	ts, errs := call(func(ts []*task.Task) []error {
		for i, t := range ts {
			if t != nil {
				before[i].state = t.State
			}
		}
		errs := fn(ts)
		for i, t := range ts {
			if t != nil && errs[i] == nil {
				w.touched(t)
				before[i].seq = w.seq.Add(1)
			}
		}
		return errs
	})
	if h := w.finished; h != nil {
		for i, t := range ts {
			if errs[i] == nil && t != nil && t.State.Final() && !before[i].state.Final() {
				h(t.App, t.State)
			}
		}
	}
	ws := make([]written, len(ts))
	for i, t := range ts {
		ws[i] = written{t, before[i].seq}
	}
	return ws, errs
}

// wrote mirrors tasks just written to the store into the index, then
// tracks them. A failed mirror is logged: the repair scan restores it.
func (w *writer) wrote(ctx context.Context, ws ...written) {
	if len(ws) == 0 {
		return
	}
	if err := w.index.mirror(ctx, ws); err != nil {
		w.log.WarnContext(ctx, "mirror tasks to the index; the repair scan will", slog.Int("tasks", len(ws)), slog.String("error", err.Error()))
	}
	for _, x := range ws {
		w.track(x)
	}
}

// track brings the wheel in line with a task just written to (or read
// from) the store. A copy older than one tracked already is ignored (see
// package sched).
func (w *writer) track(x written) {
	t := x.t
	wake := t.WakeAt
	if !w.index.Watches(t) {
		wake = time.Time{} // another node times it
	}
	if t.Target.Pull != nil {
		// Written: a lease must not hand out a copy read before. Dropped
		// before the wheel has the task again, which may fire it into
		// the ready queue at once.
		w.dropHeld(t.ID)
	}
	w.tk.track(sched.Entry{ID: t.ID, WakeAt: wake, Seq: x.seq, App: t.App})
	if t.State == task.Scheduled && t.Target.Pull != nil && !t.NextAttemptAt.After(w.clock.Now()) {
		w.pullDue(t.App)
	}
}
