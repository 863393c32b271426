package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// firing is what fireMany learns of one task while it decides what to do
// with it, and what it does after the write.
type firing struct {
	id       task.ID
	knownApp string // the app the wheel entry named (rate-limited apps)
	app      string // the app of the task as read

	push, pullDue, parked, gated, lost, leasedInIndex bool
	later                                             time.Time // admitted only then

	claim   claimFor      // what the cluster index must give this node first
	until   time.Time     // the claim's hold
	timeout time.Duration // of the push attempt
}

// claimFor says why a task needs the cluster index's claim.
type claimFor uint8

const (
	noClaim      claimFor = iota // decide settled it without the index
	claimAttempt                 // a push attempt
	claimExpired                 // rolling back a lease that ran out
)

// errClaim is decide's answer for a task that goes on only once the
// cluster index has given it to this node.
var errClaim = errors.New("engine: needs the index's claim")

// fireBatchMax bounds the tasks fireMany writes in one store call.
const fireBatchMax = 128

// fireMany handles tasks the wheel says need a look, with one store write
// for them all: it starts push attempts, expires tasks, rolls back leases
// that ran out, or wakes pull consumers. Whatever it writes, it ends by
// tracking the stored tasks so the wheel holds their next wakes. The push
// attempts it starts are delivered by deliverAll.
//
// The pump took a write slot (e.writing) for the job; fireMany gives it
// back once its store write returned.
func (e *Engine) fireMany(ctx context.Context, taken []sched.Taken) {
	wrote := sync.OnceFunc(func() { <-e.writing })
	defer wrote()
	fs := make([]firing, 0, len(taken))
	seen := make(map[task.ID]bool, len(taken))
	for _, tk := range taken {
		if seen[tk.ID] {
			continue // fired twice at once: the first look decides for both
		}
		seen[tk.ID] = true
		fs = append(fs, firing{id: tk.ID, knownApp: tk.App})
	}
	// Paced apps go through their gate or their local pacing first, before
	// the store read.
	kept := fs[:0]
	for _, f := range fs {
		if f.knownApp != "" && e.cfg.Limiter != nil {
			if e.enterGate(f.knownApp, f.id) {
				continue // the gate sends it back when the cluster's limits allow
			}
		} else if f.knownApp != "" {
			if at := e.preAdmit(f.knownApp, f.id, msNow()); !at.IsZero() {
				e.deferTo(f.id, at, f.knownApp)
				continue
			}
		}
		kept = append(kept, f)
	}
	fs = kept
	if len(fs) == 0 {
		return
	}
	ids := make([]task.ID, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}

	ts, errs := e.updateMany(context.WithoutCancel(ctx), ids, noSync, func(ts []*task.Task) []error {
		now := msNow()
		errs := make([]error, len(ts))
		var claims []int
		for i, t := range ts {
			f := &fs[i]
			*f = firing{id: f.id, knownApp: f.knownApp}
			if t == nil {
				errs[i] = errSkip
				continue
			}
			f.app = t.App
			errs[i] = e.decide(f, t, now)
			if errs[i] == errClaim {
				claims = append(claims, i)
			}
		}
		if len(claims) > 0 {
			held := e.claim(ctx, ts, claims, fs, now)
			for k, i := range claims {
				errs[i] = e.claimed(&fs[i], ts[i], now, held[k])
			}
		}
		return errs
	})
	wrote()

	var mirror []*task.Task
	var push []*task.Task
	for i := range fs {
		t, m := e.fired(ctx, &fs[i], ts[i], errs[i])
		if m {
			mirror = append(mirror, t)
		}
		if t != nil && fs[i].push {
			push = append(push, t)
		}
	}
	if len(mirror) > 0 {
		e.wrote(ctx, mirror...)
	}
	e.deliverAll(ctx, push)
}

// decide is fireMany's look at one task t, due at now, with t's row held:
// nil to store what it changed, errSkip to leave it, or errClaim when the
// cluster index must give the task to this node first (then claimed goes
// on).
func (e *Engine) decide(f *firing, t *task.Task, now time.Time) error {
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
			f.pullDue = true
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
		f.timeout = task.DefaultHTTPTimeout
		if h := t.Target.HTTP; h != nil && h.Timeout > 0 {
			f.timeout = h.Timeout.Std()
		}
		// Admit before claiming: a task held back by its app's limits
		// must stay claimable by whichever node gets to it.
		switch adm, at := e.admit(t.App, t.ID, now); adm {
		case admitLater:
			f.later = at
			return errSkip
		case admitPark:
			f.parked = true
			return errSkip
		case admitGate:
			f.gated = true
			return errSkip
		}
		f.claim, f.until = claimAttempt, now.Add(f.timeout+e.cfg.LeaseGrace)
		return errClaim
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
		f.claim, f.until = claimExpired, now.Add(time.Minute)
		return errClaim
	}
	return errSkip
}

// claimed goes on with a task decide sent to the index, now that the index
// said whether this node holds it.
func (e *Engine) claimed(f *firing, t *task.Task, now time.Time, held bool) error {
	switch {
	case f.claim == claimAttempt && !held:
		e.release(t.App, t.ID)
		f.lost = true
		return errSkip // another node has it
	case f.claim == claimAttempt:
		startAttempt(t, now, f.timeout+e.cfg.LeaseGrace, e.boot)
		f.push = true
		return nil
	case !held:
		f.lost = true
		return errSkip // another node is rolling it back
	default:
		failAttempt(t, now, "lease expired without an ack", nil)
		return nil
	}
}

// fired settles the wheel, the limits and the gate after the write of one
// task of fireMany. It returns the task as stored (nil when there is none to
// go on with), and whether to mirror it to the index.
func (e *Engine) fired(ctx context.Context, f *firing, t *task.Task, err error) (_ *task.Task, mirror bool) {
	id, app := f.id, f.app
	if err != nil && f.push {
		e.release(app, id) // admitted, but the lease was not written
		f.push = false
	}
	if !f.push && e.cfg.Limiter != nil {
		e.dropGrant(cmp.Or(app, f.knownApp), id)
	}
	if !f.push && !f.parked && !f.gated && app != "" {
		defer e.kickParked(app) // took no slot: let a parked task try
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.untrack(id)
		return nil, false
	case errors.Is(err, errSkip) && !f.later.IsZero():
		e.deferTo(id, f.later, app)
		return nil, false
	case errors.Is(err, errSkip) && f.parked:
		return nil, false // release will enqueue it when a slot frees
	case errors.Is(err, errSkip) && f.gated:
		e.enterGate(app, id)
		return nil, false
	case errors.Is(err, errSkip) && f.lost:
		// Another node has it; what it writes comes back through the index.
		e.untrack(id)
		return nil, false
	case errors.Is(err, errSkip):
	case err != nil:
		e.log.ErrorContext(ctx, "fire task", slog.String("task", id.String()), slog.String("error", err.Error()))
		e.retryLater(id)
		return nil, false
	}
	if t == nil {
		return nil, false
	}
	if f.pullDue {
		defer e.notifyPull(t.App)
	}
	switch {
	case err == nil && f.push && f.leasedInIndex:
		// The claim already put the lease in the index, until the lease's
		// end: mirroring the write again would cost a Redis round trip and
		// a wake notice to every node per attempt, for nothing.
		e.track(t)
		return t, false
	case err == nil:
		return t, true
	case t.State.Final() && e.cfg.Index != nil:
		// A cluster index entry of a finished task (it can outlive the
		// task when a promotion scan read the row just before the task
		// finished): correct the index, or the entry stays for good.
		return t, true
	default:
		e.track(t)
		return nil, false
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

// claim asks the cluster index for the tasks ts[i] of the indexes in which,
// in one round trip, and reports which this node holds (always all on a
// single node). A failing index does not stop delivery: the store rows,
// locked by this write, are what decides; the index only spares nodes
// duplicate work. It marks the firings whose lease the index now holds.
func (e *Engine) claim(ctx context.Context, ts []*task.Task, which []int, fs []firing, now time.Time) []bool {
	held := make([]bool, len(which))
	if e.cfg.Index == nil {
		for k := range held {
			held[k] = true
		}
		return held
	}
	claim := make([]*task.Task, len(which))
	until := make([]time.Time, len(which))
	for k, i := range which {
		claim[k], until[k] = ts[i], fs[i].until
	}
	got, err := e.cfg.Index.Claim(context.WithoutCancel(ctx), claim, until, now)
	if err != nil {
		e.log.WarnContext(ctx, "claim in the index; going by the store", slog.Int("tasks", len(claim)), slog.String("error", err.Error()))
		for k := range held {
			held[k] = true
		}
		return held
	}
	for k, i := range which {
		fs[i].leasedInIndex = got[k]
	}
	return got
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
	e.deferTo(id, time.Now().Add(time.Second), "")
}

// untrack drops id from the wheel (the task is gone, or another node has
// it).
func (e *Engine) untrack(id task.ID) {
	e.mu.Lock()
	if e.mu.core != nil {
		e.mu.core.Untrack(id)
	}
	e.mu.Unlock()
}

// deliver runs one push attempt of t, which holds a fresh lease, and has
// the outcome recorded under that lease (settleOutcome).
func (e *Engine) deliver(ctx context.Context, t *task.Task) {
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
	e.settleOutcome(ctx, outcome{id: t.ID, app: t.App, lease: t.Lease, err: derr, released: released})
}

// outcome is the end of one push attempt, to be stored.
type outcome struct {
	id       task.ID
	app      string
	lease    string // the attempt's lease: a task that moved on is left alone
	err      error  // the sink's; nil when delivered
	released bool   // cut short by Stop: not the receiver's fault
}

// maxSettlers bounds the goroutines storing outcomes at once.
const maxSettlers = 4

// settleOutcome stores o with the outcomes of other attempts that ended meanwhile,
// in one store write per batch (a group commit): the goroutine that finds
// fewer than maxSettlers at it stays to write batches until none is left;
// the others leave their outcome to it. The attempt's in-flight slot is
// released once its outcome is stored.
func (e *Engine) settleOutcome(ctx context.Context, o outcome) {
	e.out.Lock()
	e.out.pending = append(e.out.pending, o)
	if e.out.settlers >= maxSettlers {
		e.out.Unlock()
		return
	}
	e.out.settlers++
	for len(e.out.pending) > 0 {
		n := min(len(e.out.pending), fireBatchMax)
		batch := slices.Clone(e.out.pending[:n])
		clear(e.out.pending[:n])
		e.out.pending = e.out.pending[n:]
		e.out.Unlock()
		e.storeOutcomes(ctx, batch)
		e.out.Lock()
	}
	e.out.settlers--
	e.out.Unlock()
}

// storeOutcomes writes a batch of outcomes, then releases their slots.
func (e *Engine) storeOutcomes(ctx context.Context, os []outcome) {
	ids := make([]task.ID, len(os))
	for i, o := range os {
		ids[i] = o.id
	}
	ts, errs := e.updateMany(context.WithoutCancel(ctx), ids, noSync, func(ts []*task.Task) []error {
		now := msNow()
		errs := make([]error, len(ts))
		for i, t := range ts {
			o := os[i]
			if t == nil || t.State != task.Delivering || t.Lease != o.lease {
				errs[i] = errSkip // the lease ran out and moved on
				continue
			}
			switch {
			case o.err == nil:
				finish(t, task.Delivered, now)
				t.LastError = ""
			case o.released:
				t.Record(now, "released", t.Attempts, "toc is shutting down")
				t.Attempts--
				schedule(t, now, now)
			default:
				failAttempt(t, now, o.err.Error(), nil)
			}
		}
		return errs
	})
	stored := make([]*task.Task, 0, len(ts))
	for i, err := range errs {
		switch {
		case err == nil:
			stored = append(stored, ts[i])
		case errors.Is(err, errSkip) || errors.Is(err, store.ErrNotFound):
		default:
			// The lease stays in the store and runs out; the wheel holds
			// its expiry, so the task is tried again then.
			e.log.ErrorContext(ctx, "record delivery outcome", slog.String("task", ids[i].String()), slog.String("error", err.Error()))
		}
	}
	for _, o := range os {
		e.release(o.app, o.id)
	}
	if len(stored) > 0 {
		e.wrote(ctx, stored...)
	}
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
