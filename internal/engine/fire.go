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

// A fire job is a pipeline over the tasks the wheel says are due:
//
//	pace     rated apps' tasks wait for their app's limits before the store is read
//	lease    one store write for the batch decides each task, under its row lock:
//	         start a push attempt, expire it, roll back a lease that ran out, or
//	         mark a pull task due; the cluster index must give an attempt or a
//	         rollback to this node first
//	settle   the wheel, the limits and the index follow what was stored (settleFiring)
//	deliver  the push attempts go to their sinks (deliverAll)
//
// Each task's part in it is a firing, whose verdict says what lease decided.

// verdict is what lease decided for one task.
type verdict uint8

const (
	vLeave verdict = iota // nothing to store: a stale entry, a lease still running
	vWrite                // store the change: an expiry, a rollback, a wake for the deadline, a pull task due
	vPush                 // a push attempt starts: store its lease, then deliver
	vLater                // the app's rate holds it back until firing.at
	vPark                 // it waits for one of the app's in-flight slots
	vGate                 // it waits behind the app's cluster gate
	vLost                 // another node has it
)

// firing is one task of a fire job.
type firing struct {
	id       task.ID
	knownApp string // the app the wheel entry named (rated apps)
	app      string // the app of the task as read
	v        verdict
	pullDue  bool      // a pull task became due: wake the claims waiting
	at       time.Time // vLater: admitted only then

	claim   claimFor      // what the cluster index must give this node first
	until   time.Time     // the claim's hold
	timeout time.Duration // of the push attempt
	inIndex bool          // the claim put the lease in the index already
}

// claimFor says why a task needs the cluster index's claim.
type claimFor uint8

const (
	noClaim      claimFor = iota // decided without the index
	claimAttempt                 // a push attempt
	claimExpired                 // rolling back a lease that ran out
)

// fireBatchMax bounds the tasks fireMany writes in one store call.
const fireBatchMax = 128

// fireMany runs the fire pipeline over taken. The pump took a write slot
// (e.writing) for the job; fireMany gives it back once its store write
// returned, so that the tasks falling due meanwhile gather into the next
// batch.
func (e *Engine) fireMany(ctx context.Context, taken []sched.Taken) {
	wrote := sync.OnceFunc(func() { <-e.writing })
	defer wrote()
	fs := e.pace(taken)
	if len(fs) == 0 {
		return
	}
	ids := make([]task.ID, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	ws, errs := e.updateMany(wctx, ids, noSync, func(ts []*task.Task) []error {
		return e.lease(wctx, fs, ts)
	})
	wrote()
	var mirror []written
	var push []*task.Task
	for i := range fs {
		w, m := e.settleFiring(ctx, &fs[i], ws[i], errs[i])
		if m {
			mirror = append(mirror, w)
		}
		if w.t != nil && fs[i].v == vPush {
			push = append(push, w.t)
		}
	}
	e.wrote(ctx, mirror...)
	e.deliverAll(ctx, push)
}

// pace turns taken into firings, once each, leaving out the rated apps'
// tasks that must wait: in a cluster they queue at their app's gate, which
// sends them back when the cluster's limits allow; on one node they go back
// into the wheel at the time their app's rate allows.
func (e *Engine) pace(taken []sched.Taken) []firing {
	fs := make([]firing, 0, len(taken))
	seen := make(map[task.ID]bool, len(taken))
	for _, tk := range taken {
		if seen[tk.ID] {
			continue // fired twice at once: the first look decides for both
		}
		seen[tk.ID] = true
		switch {
		case tk.App != "" && e.cfg.Limiter != nil:
			if e.apps.enterGate(tk.App, tk.ID) {
				continue
			}
		case tk.App != "":
			if at := e.apps.preAdmit(tk.App, tk.ID, msNow()); !at.IsZero() {
				e.deferTo(tk.ID, at, tk.App)
				continue
			}
		}
		fs = append(fs, firing{id: tk.ID, knownApp: tk.App})
	}
	return fs
}

// lease is the store write of a fire job: it decides each task of ts (the
// rows of fs, held) and asks the cluster index for those that need its
// claim, in one round trip. It returns, per task, nil to store the change
// or errSkip to leave the row as it is.
func (e *Engine) lease(ctx context.Context, fs []firing, ts []*task.Task) []error {
	now := msNow()
	var claims []int
	for i, t := range ts {
		f := &fs[i]
		*f = firing{id: f.id, knownApp: f.knownApp} // the store may run this again
		if t == nil {
			continue
		}
		f.app = t.App
		e.decide(f, t, now)
		if f.claim != noClaim {
			claims = append(claims, i)
		}
	}
	if len(claims) > 0 {
		held := e.claim(ctx, ts, claims, fs, now)
		for k, i := range claims {
			claimed(&fs[i], ts[i], now, held[k], e.cfg.LeaseGrace, e.boot)
		}
	}
	errs := make([]error, len(ts))
	for i := range ts {
		if v := fs[i].v; ts[i] == nil || v != vWrite && v != vPush {
			errs[i] = errSkip
		}
	}
	return errs
}

// decide is lease's look at one task t, due at now, with its row held: it
// sets f.v, and f.claim when the cluster index must give the task to this
// node before the change is made (claimed makes it).
func (e *Engine) decide(f *firing, t *task.Task, now time.Time) {
	switch t.State {
	case task.Scheduled:
		switch {
		case t.WakeAt.IsZero() || t.WakeAt.After(now):
			return // a stale wheel entry: the task moved
		case pastDeadline(t, now):
			expire(t, now)
			f.v = vWrite
		case t.NextAttemptAt.After(now):
			t.WakeAt = wakeFor(t) // woke for a deadline that has not passed
			f.v = vWrite
		case t.Target.Pull != nil:
			f.pullDue = true
			// Due and waiting to be claimed: only the deadline is left to
			// wake for.
			var w time.Time
			if t.Deadline != nil {
				w = t.Deadline.Add(time.Millisecond)
			}
			if !w.Equal(t.WakeAt) {
				t.WakeAt = w
				f.v = vWrite
			}
		default:
			e.decidePush(f, t, now)
		}
	case task.Delivering:
		switch {
		case t.Target.Pull == nil && leaseBoot(t.Lease) != e.boot && !e.live(leaseBoot(t.Lease)):
			// A push attempt of a process that is gone: deliver again now.
			t.LastError = "interrupted: toc stopped during the delivery"
			t.Record(now, "interrupted", t.Attempts, t.LastError)
			schedule(t, now, now)
			f.v = vWrite
		case t.LeaseExpiresAt != nil && !t.LeaseExpiresAt.After(now):
			f.v, f.claim, f.until = vWrite, claimExpired, now.Add(time.Minute)
		}
	}
}

// decidePush admits a due push task against its app's limits, before the
// claim: a task held back must stay claimable by whichever node gets to it.
func (e *Engine) decidePush(f *firing, t *task.Task, now time.Time) {
	f.timeout = task.DefaultHTTPTimeout
	if h := t.Target.HTTP; h != nil && h.Timeout > 0 {
		f.timeout = h.Timeout.Std()
	}
	switch adm, at := e.apps.admit(t.App, t.ID, now); adm {
	case admitLater:
		f.v, f.at = vLater, at
	case admitPark:
		f.v = vPark
	case admitGate:
		f.v = vGate
	default:
		f.v, f.claim, f.until = vPush, claimAttempt, now.Add(f.timeout+e.cfg.LeaseGrace)
	}
}

// claimed makes the change decide planned for t, now that the index said
// whether this node holds it: the attempt starts, or the lease that ran out
// is rolled back; or the task is lost to another node.
func claimed(f *firing, t *task.Task, now time.Time, held bool, grace time.Duration, boot string) {
	switch {
	case !held:
		f.v = vLost
	case f.claim == claimAttempt:
		startAttempt(t, now, f.timeout+grace, boot)
	default:
		failAttempt(t, now, "lease expired without an ack", nil)
	}
}

// settleFiring brings the wheel, the limits and the gate in line with what
// the store write did for one firing (err: its result). It returns the task as
// stored (none when there is nothing to go on with), and whether to mirror
// it to the index.
func (e *Engine) settleFiring(ctx context.Context, f *firing, w written, err error) (_ written, mirror bool) {
	id, app := f.id, f.app
	if f.v == vPush && err != nil {
		e.apps.release(app, id) // admitted, but the lease was not written
		f.v = vLeave
	}
	if f.v == vLost && f.claim == claimAttempt {
		e.apps.release(app, id) // admitted, but another node has the task
	}
	if f.v != vPush && e.cfg.Limiter != nil {
		e.apps.dropGrant(cmp.Or(app, f.knownApp), id)
	}
	if f.v != vPush && f.v != vPark && f.v != vGate && app != "" {
		defer e.apps.kickParked(app) // took no slot: let a parked task try
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.untrack(id)
		return written{}, false
	case err != nil && !errors.Is(err, errSkip):
		e.log.ErrorContext(ctx, "fire task", slog.String("task", id.String()), slog.String("error", err.Error()))
		e.retryLater(id)
		return written{}, false
	}
	switch f.v {
	case vLater:
		e.deferTo(id, f.at, app)
		return written{}, false
	case vPark:
		return written{}, false // release enqueues it when a slot frees
	case vGate:
		e.apps.enterGate(app, id)
		return written{}, false
	case vLost:
		// Another node has it; what it writes comes back through the index.
		e.untrack(id)
		return written{}, false
	}
	t := w.t
	if t == nil {
		return written{}, false
	}
	if f.pullDue {
		defer e.notifyPull(t.App)
	}
	switch {
	case f.v == vPush && f.inIndex:
		// The claim already put the lease in the index, until the lease's
		// end: mirroring the write again would cost a round trip and a
		// wake notice to every node, for nothing.
		e.track(w)
		return w, false
	case f.v == vWrite || f.v == vPush:
		return w, true
	case t.State.Final() && e.cfg.Index != nil:
		// A cluster index entry of a finished task (it can outlive the
		// task when a promotion scan read the row just before the task
		// finished): correct the index, or the entry stays for good.
		return w, true
	default:
		e.track(w)
		return written{}, false
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
	got, err := e.cfg.Index.Claim(ctx, claim, until, now)
	if err != nil {
		e.log.WarnContext(ctx, "claim in the index; going by the store", slog.Int("tasks", len(claim)), slog.String("error", err.Error()))
		for k := range held {
			held[k] = true
		}
		return held
	}
	for k, i := range which {
		fs[i].inIndex = got[k]
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
	wctx, cancel := detached(ctx)
	defer cancel()
	ts, errs := e.updateMany(wctx, ids, noSync, func(ts []*task.Task) []error {
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
	stored := make([]written, 0, len(ts))
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
		e.apps.release(o.app, o.id)
	}
	e.wrote(ctx, stored...)
}

// notifyPull wakes the claims waiting on app, on every node.
func (e *Engine) notifyPull(app string) {
	e.notifyLocal(app)
	if e.cfg.Index != nil {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		e.cfg.Index.PullDue(ctx, app)
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
