package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// fire handles one task the wheel says needs a look: it starts a push
// attempt, expires it, rolls back a lease that ran out, or wakes pull
// consumers. Whatever it writes, it ends by tracking the stored task so the
// wheel holds its next wake.
func (e *Engine) fire(ctx context.Context, id task.ID) {
	e.mu.Lock()
	knownApp, known := e.mu.appOf[id]
	delete(e.mu.appOf, id)
	e.mu.Unlock()
	if known {
		if at := e.preAdmit(knownApp, id, msNow()); !at.IsZero() {
			e.mu.Lock()
			e.mu.appOf[id] = knownApp
			e.mu.Unlock()
			e.deferTo(id, at)
			return
		}
	}
	var push, pullDue, parked, lost bool
	var later time.Time
	var app string
	t, err := e.update(context.WithoutCancel(ctx), id, noSync, func(t *task.Task) error {
		push, pullDue, parked, lost, later, app = false, false, false, false, time.Time{}, t.App
		now := msNow()
		switch t.State {
		case task.Scheduled:
			if t.WakeAt.IsZero() || t.WakeAt.After(now) {
				return errSkip // a stale wheel entry: the task moved
			}
			if pastDeadline(t, now) {
				expire(t, now)
				return nil
			}
			if t.NextAttemptAt.After(now) {
				t.WakeAt = wakeFor(t) // woke for a deadline that has not passed
				return nil
			}
			if t.Target.Pull != nil {
				pullDue = true
				// Due and waiting to be claimed: only the deadline is left to
				// wake for.
				var w time.Time
				if t.Deadline != nil {
					w = t.Deadline.Add(time.Millisecond)
				}
				if w.Equal(t.WakeAt) {
					return errSkip
				}
				t.WakeAt = w
				return nil
			}
			timeout := task.DefaultHTTPTimeout
			if h := t.Target.HTTP; h != nil && h.Timeout > 0 {
				timeout = h.Timeout.Std()
			}
			// Admit before claiming: a task held back by its app's limits
			// must stay claimable by whichever node gets to it.
			switch adm, at := e.admit(t.App, t.ID, now); adm {
			case admitLater:
				later = at
				return errSkip
			case admitPark:
				parked = true
				return errSkip
			}
			if !e.claim(ctx, t, now, now.Add(timeout+e.cfg.LeaseGrace)) {
				e.release(t.App)
				lost = true
				return errSkip // another node has it
			}
			startAttempt(t, now, timeout+e.cfg.LeaseGrace, e.boot)
			push = true
			return nil
		case task.Delivering:
			if t.Target.Pull == nil && leaseBoot(t.Lease) != e.boot && !e.live(leaseBoot(t.Lease)) {
				// A push attempt of a process that is gone: deliver again now.
				t.LastError = "interrupted: toc stopped during the delivery"
				t.Record(now, "interrupted", t.Attempts, t.LastError)
				schedule(t, now, now)
				return nil
			}
			if t.LeaseExpiresAt == nil || t.LeaseExpiresAt.After(now) {
				return errSkip
			}
			if !e.claim(ctx, t, now, now.Add(time.Minute)) {
				lost = true
				return errSkip // another node is rolling it back
			}
			failAttempt(t, now, "lease expired without an ack", nil)
			return nil
		}
		return errSkip
	})
	if err != nil && push {
		e.release(app) // admitted, but the lease was not written
		push = false
	}
	if !push && !parked && app != "" {
		defer e.kickParked(app) // took no slot: let a parked task try
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.untrack(id)
		return
	case errors.Is(err, errSkip) && !later.IsZero():
		if e.isRated(app) {
			e.mu.Lock()
			e.mu.appOf[id] = app
			e.mu.Unlock()
		}
		e.deferTo(id, later)
		return
	case errors.Is(err, errSkip) && parked:
		return // release will enqueue it when a slot frees
	case errors.Is(err, errSkip) && lost:
		// Another node has it; what it writes comes back through the index.
		e.untrack(id)
		return
	case errors.Is(err, errSkip):
	case err != nil:
		e.log.ErrorContext(ctx, "fire task", slog.String("task", id.String()), slog.String("error", err.Error()))
		e.retryLater(id)
		return
	}
	if t == nil {
		return
	}
	if err == nil {
		e.wrote(ctx, t)
	} else {
		e.track(t)
	}
	if pullDue {
		e.notifyPull(t.App)
	}
	if push {
		e.deliver(ctx, t)
	}
}

// noSync is for the writes of the delivery path: fire's lease, expiry and
// rollback writes and the outcome of a push. If a machine crash loses one,
// the task is found scheduled (or leased by a dead boot) on restart and is
// delivered again: a duplicate after a crash, which at-least-once allows.
// Skipping the fsync there keeps disk latency out of the fire path. Every
// write that answers a client (create, patch, cancel, retry, claim, ack,
// nack) stays synced.
var noSync = &store.UpdateOpts{NoSync: true}

// claim asks the cluster index for the task (always true on a single node).
// A failing index does not stop delivery: the store row, locked by this
// Update, is what decides; the index only spares nodes duplicate work.
func (e *Engine) claim(ctx context.Context, t *task.Task, now, until time.Time) bool {
	if e.cfg.Index == nil {
		return true
	}
	ok, err := e.cfg.Index.Claim(context.WithoutCancel(ctx), t, now, until)
	if err != nil {
		e.log.WarnContext(ctx, "claim in the index; going by the store", slog.String("task", t.ID.String()), slog.String("error", err.Error()))
		return true
	}
	return ok
}

// live reports whether a lease's process is alive: on a single node only
// this process is.
func (e *Engine) live(boot string) bool {
	if e.cfg.Index == nil {
		return boot == e.boot
	}
	return e.cfg.Index.Live(boot)
}

// retryLater puts a task whose store write failed back into the wheel a
// second from now, so a store hiccup delays it instead of losing it from
// memory until the next restart.
func (e *Engine) retryLater(id task.ID) {
	e.mu.Lock()
	if e.mu.wheel != nil {
		e.mu.wheel.Add(id, time.Now().Add(time.Second).UnixMilli())
	}
	e.mu.Unlock()
	signal(e.kick)
}

func (e *Engine) untrack(id task.ID) {
	e.mu.Lock()
	if e.mu.wheel != nil {
		e.mu.wheel.Remove(id)
	}
	delete(e.mu.appOf, id)
	e.mu.Unlock()
}

// deliver runs one push attempt of t, which holds a fresh lease, and records
// the outcome under that lease.
func (e *Engine) deliver(ctx context.Context, t *task.Task) {
	defer e.release(t.App)
	kind := t.Target.Kind()
	start := time.Now()
	if h := e.cfg.Hooks.AttemptStarted; h != nil {
		h(t.App, kind, start.Sub(t.NextAttemptAt))
	}
	s := e.cfg.Sinks[kind]
	var derr error
	if s == nil {
		derr = fmt.Errorf("no sink for target kind %q on this server", kind)
	} else {
		derr = s.Deliver(ctx, t)
	}
	if h := e.cfg.Hooks.AttemptEnded; h != nil {
		h(t.App, kind, time.Since(start), derr)
	}
	released := derr != nil && ctx.Err() != nil // shutting down: not the receiver's fault
	lease := t.Lease
	out, err := e.update(context.WithoutCancel(ctx), t.ID, noSync, func(t *task.Task) error {
		if t.State != task.Delivering || t.Lease != lease {
			return errSkip // the lease ran out and moved on
		}
		now := msNow()
		switch {
		case derr == nil:
			finish(t, task.Delivered, now)
			t.LastError = ""
		case released:
			t.Record(now, "released", t.Attempts, "toc is shutting down")
			t.Attempts--
			schedule(t, now, now)
		default:
			failAttempt(t, now, derr.Error(), nil)
		}
		return nil
	})
	if errors.Is(err, errSkip) || errors.Is(err, store.ErrNotFound) {
		return
	}
	if err != nil {
		// The lease stays in the store and runs out; the wheel holds its
		// expiry, so the task is tried again then.
		e.log.ErrorContext(ctx, "record delivery outcome", slog.String("task", t.ID.String()), slog.String("error", err.Error()))
		return
	}
	e.wrote(ctx, out)
}

// notifyPull wakes the claims waiting on app, on every node.
func (e *Engine) notifyPull(app string) {
	e.notifyLocal(app)
	if e.cfg.Index != nil {
		e.cfg.Index.PullDue(context.Background(), app)
	}
}

// notifyLocal wakes this process's claims waiting on app.
func (e *Engine) notifyLocal(app string) {
	e.mu.Lock()
	ch, ok := e.mu.waiters[app]
	if ok {
		delete(e.mu.waiters, app)
	}
	e.mu.Unlock()
	if ok {
		close(ch)
	}
}

// pullWaiter returns a channel closed at the next notifyPull(app).
func (e *Engine) pullWaiter(app string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.mu.waiters[app]
	if !ok {
		ch = make(chan struct{})
		e.mu.waiters[app] = ch
	}
	return ch
}
