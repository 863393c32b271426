package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// firer runs fire jobs: the dispatcher hands it the tasks the timekeeper
// found due (fire), and it decides each one and starts the push attempts,
// which it hands back to the dispatcher's workers (deliverAll), each
// delivered by deliver. It has no state of its own: the attempts under way
// are the attempts service's, the pull tasks held the held service's,
// and the apps' limits admission's (admission.go).
type firer struct {
	admit      admission
	tk         *timekeeper
	attempts   *attempts
	outcomes   *outcomes
	held       *held
	waiters    *waiters
	writer     *writer
	index      engIdx
	sinks      map[string]sink.Sink
	hooks      Hooks
	clock      clock.Clock
	log        *slog.Logger
	boot       string
	leaseGrace time.Duration
	deliverAll func(ctx context.Context, ts []*task.Task) // the dispatcher's
	alog       *attemptLog                                // the index's (a direct call: no variadic slice per delivery)
	fired      *atomic.Int64                              // push attempts started and pull tasks fallen due (testclock.go)
}

// A fire job is a pipeline over the tasks the wheel says are due:
//
//	pace     rated apps' tasks wait for their app's limits before the store is read
//	look     one store call for the batch reads each task (under its row lock,
//	         or optimistically: fireWrite) and decides it: a push attempt to start, an expiry, a lease that ran out,
//	         a pull task due. It writes only what needs no claim (an expiry, a
//	         pull task due, a wake for a deadline); a push attempt is not
//	         written at all
//	claim    outside every lock: this process reserves each push attempt (one
//	         attempt of a task at a time), and in a cluster the index gives the
//	         attempts and the rollbacks of leases that ran out to this node, in
//	         one round trip (Index.Claim, one Lua call per slot)
//	rollback the claimed rollbacks are written (rare: a pull lease that ran out)
//	after    the wheel, the limits and the index follow what was decided (afterFire)
//	deliver  the push attempts go to their sinks (deliverAll)
//
// Each task's part in it is a firing, whose verdict says what look decided.
//
// # Push attempts are not stored until they end
//
// A push attempt lives in this process only (attempts.go): the store
// keeps the task as it was when the attempt started (scheduled, due), and
// the attempt's outcome is written once, over it, in a group commit
// (outcomes.go) fenced by the attempt's number, given when it started
// (attemptlog.go): it lands only if the task is still scheduled with fewer
// attempts recorded (not cancelled, moved or finished by a newer attempt
// meanwhile; landsOn). One write per push fire instead of two. A crash
// during the attempt leaves the task due in the store, and it is delivered
// again: at least once, as with a stored lease. In a cluster
// the index's PrepareQueue holds the claim until the lease's end, so no
// other node starts the attempt again before then; a node that dies leaves
// the member to run out there, and the slot's next owner delivers it.

// verdict is what look decided for one task.
type verdict uint8

const (
	vLeave    verdict = iota // nothing to store: a stale entry, a lease still running
	vWrite                   // store the change: an expiry, a rollback, a wake for the deadline, a pull task due
	vPush                    // a push attempt starts, in memory: deliver, then store the outcome
	vLater                   // the app's rate holds it back until firing.at
	vPark                    // it waits for one of the app's in-flight slots
	vGate                    // it waits behind the app's cluster gate
	vLost                    // another node has it
	vRollback                // a lease ran out: roll it back once the index gives it to this node
	vPull                    // a pull task due: nothing to store, it goes to its app's ready queue (pull.go)
	vPullWait                // a pull task due in a cluster: nothing to store, leases take it from the index (leases.go); the wheel keeps its deadline (firing.at)
)

// firing is one task of a fire job.
type firing struct {
	id       task.ID
	knownApp string // the app of the ready queue it came from ("": unknown)
	app      string // the app of the task as read
	v        verdict
	pullDue  bool      // a pull task became due: wake the claims waiting
	at       time.Time // vLater: admitted only then

	claim   claimFor      // what the cluster index must give this node first
	until   time.Time     // the claim's hold
	timeout time.Duration // of the push attempt
	n       int           // vPush: the attempt's number, from the claim
	gen     uint64        // vPush: its slot's write count when read, plus one (writer.genOf)
}

// claimFor says why a task needs the cluster index's claim.
type claimFor uint8

const (
	noClaim      claimFor = iota // decided without the index
	claimAttempt                 // a push attempt
	claimExpired                 // rolling back a lease that ran out
)

// fireBatchMax bounds the tasks a fire job writes in one store call.
const fireBatchMax = 128

// fire runs the fire pipeline over taken. The pump took a write slot for
// the job; fire gives it back (done) once its store call
// returned, so that the tasks falling due meanwhile gather into the next
// batch.
func (r *firer) fire(ctx context.Context, taken []sched.Taken, done func()) {
	wrote := sync.OnceFunc(done)
	defer wrote()
	counted := countByApp(taken)
	defer func() { r.doneWith(counted) }() // on the returns before deliverAll
	taken, ends, again := r.attempts.leasesDue(taken, msNowOf(r.clock))
	r.tk.deferAll(again...)
	if len(ends) > 0 {
		defer func() { wrote(); r.outcomes.add(ctx, ends...) }()
	}
	fs := r.pace(taken)
	if len(fs) == 0 {
		return
	}
	ids := make([]task.ID, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}
	now := msNowOf(r.clock)
	wctx, cancel := detached(ctx)
	defer cancel()
	ws, errs := r.writer.updateMany(wctx, ids, fireLook, func(ts []*task.Task) []error {
		return r.look(fs, ts, now)
	})
	wrote()
	r.claimAll(wctx, fs, ws, errs, now)
	r.writeRollbacks(wctx, fs, ws, errs, now)
	var mirror []written
	var push, spent []*task.Task
	for i := range fs {
		w, m := r.afterFire(ctx, &fs[i], ws[i], errs[i])
		if m {
			mirror = append(mirror, w)
		}
		if fs[i].v == vPush {
			t := r.startAttempt(&fs[i], w.t, now)
			if t.Attempts > t.Retry.WithDefaults().MaxAttempts && t.Attempts > w.t.Attempts+1 {
				// The index counted attempts that nodes started and
				// stopped during, and they were the last.
				spent = append(spent, t)
				continue
			}
			push = append(push, t)
		}
	}
	r.writer.wrote(ctx, mirror...)
	for _, t := range spent {
		r.admit.release(t.App, t.ID)
		r.outcomes.add(ctx, outcome{id: t.ID, app: t.App, lease: t.Lease, spent: true})
	}
	r.doneWith(counted) // decided: before the deliveries, which may take long
	counted = appCounts{}
	r.deliverAll(ctx, push)
}

// doneWith counts a fire job's tasks out of the ones taken (timekeeper.take)
// when it ends: the admitted ones hold in-flight slots by then, and the
// others need no room.
func (r *firer) doneWith(taken appCounts) {
	for _, c := range taken.list {
		r.admit.taking(c.app, -c.n)
	}
}

// pace turns taken into firings, once each, leaving out the rated apps'
// tasks that must wait: in a cluster they queue at their app's gate, which
// sends them back when the cluster's limits allow; on one node they go back
// into the wheel at the time their app's rate allows.
func (r *firer) pace(taken []sched.Taken) []firing {
	fs := make([]firing, 0, len(taken))
	var seen map[task.ID]bool // for a large batch; a small one is searched
	if len(taken) > paceLinear {
		seen = make(map[task.ID]bool, len(taken))
	}
	for i, tk := range taken {
		if seen != nil && seen[tk.ID] || seen == nil && takenBefore(taken[:i], tk.ID) {
			continue // fired twice at once: the first look decides for both
		}
		if seen != nil {
			seen[tk.ID] = true
		}
		if r.admit.isRated(tk.App) {
			switch gated, at := r.admit.pace(tk.App, tk.ID, msNowOf(r.clock)); {
			case gated:
				continue
			case !at.IsZero():
				r.tk.deferTo(tk.ID, at, tk.App)
				continue
			}
		}
		fs = append(fs, firing{id: tk.ID, knownApp: tk.App})
	}
	return fs
}

// paceLinear is the size of a fire job up to which pace finds an id taken
// twice by comparing it with those before, rather than with a map made
// per job: at 10 000 fires a second most jobs are a few tasks.
const paceLinear = 16

// takenBefore reports whether id is in ts.
func takenBefore(ts []sched.Taken, id task.ID) bool {
	for _, t := range ts {
		if t.ID == id {
			return true
		}
	}
	return false
}

// look is the store call of a fire job: it decides each task of ts (the
// rows of fs) and returns, per task, nil to store the change decide
// made or errSkip to leave the row as it is: a push attempt and a rollback
// waiting for the index's claim are not written here.
//
// ts are the store's copies, shared (fireLook): decide reads them and
// changes only a copy of its own, which it puts in ts in the task's place
// (mut). Most verdicts (a push attempt, a pull task due) change nothing,
// and copy nothing.
func (r *firer) look(fs []firing, ts []*task.Task, now time.Time) []error {
	errs := make([]error, len(ts))
	for i, t := range ts {
		f := &fs[i]
		*f = firing{id: f.id, knownApp: f.knownApp} // the store may run this again
		if t != nil {
			f.app = t.App
			r.decide(f, t, func() *task.Task {
				if ts[i] == t {
					ts[i] = t.Clone()
				}
				return ts[i]
			}, now)
		}
		if t == nil || f.v != vWrite {
			errs[i] = errSkip
		}
	}
	return errs
}

// decide is look's verdict on one task t, due at now, as look read it: it
// sets f.v, and f.claim when the cluster index must give the task to this
// node before the change is made. t is the store's copy, which it must not
// change: mut gives the copy to change (f.v = vWrite), made on first use.
func (r *firer) decide(f *firing, t *task.Task, mut func() *task.Task, now time.Time) {
	switch t.State {
	case task.Scheduled:
		switch {
		case t.WakeAt.IsZero() || t.WakeAt.After(now):
			return // a stale wheel entry: the task moved
		case r.attempts.underway(t.ID):
			return // its attempt is under way here; the outcome tracks it again
		case pastDeadline(t, now):
			expire(mut(), now)
			f.v = vWrite
		case t.NextAttemptAt.After(now):
			mut().WakeAt = wakeFor(t) // woke for a deadline that has not passed
			f.v = vWrite
		case t.Target.Pull != nil:
			f.pullDue = true
			switch hold, over := r.held.hold(t); {
			case hold:
				f.v = vPull // to the ready queue as read (afterFire)
				return
			case !over:
				f.pullDue = false
				return // queued or leased here already
			}
			// Due and waiting to be claimed: only the deadline is left to
			// wake for.
			var w time.Time
			if t.Deadline != nil {
				w = t.Deadline.Add(time.Millisecond)
			}
			if r.index.pullWaits(t, now) {
				// A cluster's leases take it from the index, where it is
				// due since its create or promotion: nothing to store
				// (unless it still waits when it is fired again,
				// pullWaitGrace or more after its due time).
				f.v, f.at = vPullWait, w
				return
			}
			if !w.Equal(t.WakeAt) {
				mut().WakeAt = w
				f.v = vWrite
			}
		default:
			r.decidePush(f, t, now)
		}
	case task.Delivering:
		switch {
		case t.Target.Pull == nil && leaseBoot(t.Lease) != r.boot && !r.index.Live(leaseBoot(t.Lease)):
			// A push attempt of a process that is gone: deliver again now.
			c := mut()
			c.LastError = "interrupted: toc stopped during the delivery"
			c.Record(now, "interrupted", c.Attempts, c.LastError)
			requeue(c, now, now)
			f.v = vWrite
		case t.LeaseExpiresAt != nil && !t.LeaseExpiresAt.After(now):
			f.v, f.claim, f.until = vRollback, claimExpired, now.Add(time.Minute)
		}
	}
}

// decidePush admits a due push task against its app's limits, before the
// claim: a task held back must stay claimable by whichever node gets to it.
func (r *firer) decidePush(f *firing, t *task.Task, now time.Time) {
	f.timeout = task.DefaultHTTPTimeout
	if h := t.Target.HTTP; h != nil && h.Timeout > 0 {
		f.timeout = h.Timeout.Std()
	}
	switch adm, at := r.admit.admit(t.App, t.ID, now); adm {
	case admitLater:
		f.v, f.at = vLater, at
	case admitPark:
		f.v = vPark
	case admitGate:
		f.v = vGate
	default:
		f.v, f.claim, f.until = vPush, claimAttempt, now.Add(f.timeout+r.leaseGrace)
		f.gen = r.writer.genOf(t.ID) + 1 // under its row lock: the outcome's fence (outcomes.write)
	}
}

// rollBack gives up a lease that ran out without an ack.
func rollBack(t *task.Task, now time.Time) {
	failAttempt(t, now, "lease expired without an ack", nil)
}

// claimAll is the claim step of a fire job, after the store call and
// outside every lock: each push attempt is reserved in this process (one
// attempt of a task at a time, see attempts.go), then the cluster index
// is asked, in one round trip, for the reserved attempts and the rollbacks.
// A firing that is not given to this node becomes vLost (another node has
// it) or, when the attempt is under way here already, vLeave.
func (r *firer) claimAll(ctx context.Context, fs []firing, ws []written, errs []error, now time.Time) {
	var which []int
	for i := range fs {
		f := &fs[i]
		switch {
		case errs[i] != nil && !errors.Is(errs[i], errSkip):
			continue // afterFire sees the error
		case f.v == vPush:
			if !r.attempts.reserve(f.id) {
				r.admit.release(f.app, f.id) // admitted for an attempt it will not make
				f.v = vLeave
				continue
			}
		case f.v != vRollback:
			continue
		}
		which = append(which, i)
	}
	if len(which) == 0 {
		return
	}
	held := r.claim(ctx, ws, which, fs, now)
	for k, i := range which {
		if held[k] > 0 {
			fs[i].n = held[k]
			continue
		}
		if fs[i].v == vPush {
			r.attempts.unreserve(fs[i].id)
		}
		fs[i].v = vLost
	}
}

// writeRollbacks writes the rollbacks the index gave to this node, each
// only if its lease is still the one that ran out.
func (r *firer) writeRollbacks(ctx context.Context, fs []firing, ws []written, errs []error, now time.Time) {
	var which []int
	for i := range fs {
		if fs[i].v == vRollback {
			which = append(which, i)
		}
	}
	if len(which) == 0 {
		return
	}
	ids := make([]task.ID, len(which))
	lease := make([]string, len(which))
	for k, i := range which {
		ids[k], lease[k] = fs[i].id, ws[i].t.Lease
	}
	rws, rerrs := r.writer.updateMany(ctx, ids, fireWrite, func(ts []*task.Task) []error {
		errs := make([]error, len(ts))
		for k, t := range ts {
			if t == nil || t.State != task.Delivering || t.Lease != lease[k] {
				errs[k] = errSkip // acked, nacked or rolled back meanwhile
				continue
			}
			rollBack(t, now)
		}
		return errs
	})
	for k, i := range which {
		ws[i], errs[i] = rws[k], rerrs[k]
		fs[i].v = vWrite
		if errors.Is(rerrs[k], errSkip) {
			fs[i].v = vLeave
		}
	}
}

// afterFire brings the wheel, the limits and the gate in line with what
// the store write did for one firing (err: its result). It returns the task as
// stored (none when there is nothing to go on with), and whether to mirror
// it to the index.
func (r *firer) afterFire(ctx context.Context, f *firing, w written, err error) (_ written, mirror bool) {
	id, app := f.id, f.app
	if f.v == vPull && !errors.Is(err, errSkip) {
		r.held.unhold(id) // the look's batch failed: not queued
		f.v = vLeave
	}
	if f.v == vPush && err != nil && !errors.Is(err, errSkip) {
		r.admit.release(app, id) // admitted, but the task could not be read
		r.attempts.unreserve(id)
		f.v = vLeave
	}
	if f.v == vLost && f.claim == claimAttempt {
		r.admit.release(app, id) // admitted, but another node has the task
	}
	if f.v != vPush {
		r.admit.dropGrant(cmp.Or(app, f.knownApp), id)
	}
	if f.v != vPush && f.v != vPark && f.v != vGate && app != "" {
		defer r.admit.kickParked(app) // took no slot: let a parked task try
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		r.tk.untrack(id)
		return written{}, false
	case errors.Is(err, store.ErrConflict):
		r.tk.deferTo(id, r.clock.Now(), cmp.Or(app, f.knownApp)) // changed under the look: look again, in its app's turn
		return written{}, false
	case err != nil && !errors.Is(err, errSkip):
		r.log.ErrorContext(ctx, "fire task", slog.String("task", id.String()), slog.String("error", err.Error()))
		r.tk.retryLater(id)
		return written{}, false
	}
	switch f.v {
	case vLater:
		r.tk.deferTo(id, f.at, app)
		return written{}, false
	case vPark:
		return written{}, false // release enqueues it when a slot frees
	case vGate:
		r.admit.enterGate(app, id)
		return written{}, false
	case vLost:
		// Another node has it; what it writes comes back through the index.
		r.tk.untrack(id)
		return written{}, false
	}
	t := w.t
	if t == nil {
		return written{}, false
	}
	if f.pullDue {
		r.fired.Add(1)
		defer r.waiters.due(t.App)
	}
	switch {
	case f.v == vPush:
		// Nothing was written: the attempt is under way in this process
		// (startAttempt), and its outcome tracks the task again.
		return w, false
	case f.v == vPull:
		// Nothing was written: the task waits in its app's ready queue
		// as read, and the wheel keeps only its deadline (pull.go).
		r.held.queue(t)
		return written{}, false
	case f.v == vPullWait:
		// Nothing was written: the task waits in the index for a lease
		// (leases.go), and the wheel keeps only its deadline.
		if f.at.IsZero() {
			r.tk.untrack(id)
		} else {
			r.tk.deferTo(id, f.at, t.App)
		}
		return written{}, false
	case f.v == vWrite:
		return w, true
	case t.State.Final():
		// A cluster index entry of a finished task (it can outlive the
		// task when a promotion scan read the row just before the task
		// finished): correct the index, or the entry stays for good (on
		// one node: it leaves the wheel).
		return w, true
	case r.attempts.underway(id) || r.held.queued(id):
		// Its attempt is under way here, and its outcome tracks it again;
		// or it waits in a ready queue for a claim (pull.go).
		// Tracked now, the row (still due: the attempt is not stored)
		// would be ready at once and fire again, and again, until the
		// attempt ends: a stale wheel entry of a task whose webhook hung
		// spun a core reading it (found as a hang of
		// TestHangingAppDoesNotDelayOthers on fake time).
		return written{}, false
	default:
		r.writer.track(w)
		return written{}, false
	}
}

// fireWrite is for the writes of the delivery path: fire's look (expiries,
// pull tasks due, deadline wakes), rollbacks and the outcomes of pushes.
//
// NoSync: if a machine crash loses one, the task is found scheduled on
// restart and is delivered again: a duplicate after a crash, which
// at-least-once allows. Skipping the fsync keeps disk latency out of the
// fire path. Every write that answers a client (create, patch, cancel,
// retry, claim, ack, nack) stays synced.
//
// Optimistic: a store over the network (sqlstore on PostgreSQL) reads the
// batch without row locks and writes each task only if it is unchanged
// since the read, so the fire path takes no lock another writer waits on.
// A task that changed in between (store.ErrConflict: an API write that
// came at the same instant) is looked at again at once.
var fireWrite = &store.UpdateOpts{NoSync: true, Optimistic: true}

// fireLook is fireWrite for a fire job's look, which changes few of the
// tasks it reads: they come shared (store.UpdateOpts.Shared), uncopied,
// and so do the tasks the look returns (a push attempt's base, a pull
// task held: attempt and held never change them either).
var fireLook = &store.UpdateOpts{NoSync: true, Optimistic: true, Shared: true}

// claim asks the cluster index for the tasks ws[i].t of the indexes in
// which, in one round trip, and reports which this node holds (always all
// on a single node): 0 where it does not; for a push attempt, the
// attempt's number. A failing index does not stop delivery: the fenced
// outcome write keeps a stale attempt from overwriting a newer one, and the
// index only spares nodes duplicate work.
func (r *firer) claim(ctx context.Context, ws []written, which []int, fs []firing, now time.Time) []int {
	got, err := r.index.claimBatch(ctx, ws, which, fs, now)
	if err == nil {
		return got
	}
	r.log.WarnContext(ctx, "claim in the index; going by the store", slog.Int("tasks", len(which)), slog.String("error", err.Error()))
	return byStore(ws, which)
}

// byStore numbers the attempts of the tasks ws[i].t of the indexes in which
// as the store has them: one more than the attempts stored (one attempt of
// a task at a time: attempts.reserve).
func byStore(ws []written, which []int) []int {
	held := make([]int, len(which))
	for k, i := range which {
		held[k] = ws[i].t.Attempts + 1
	}
	return held
}

// startAttempt starts the push attempt f reserved, on base, the task as
// stored, in memory only, and returns the task to deliver.
//
// The task delivered is a copy of base that shares with it what neither
// changes (the payload, the target, the deadline): base is the store's
// copy as read, kept unchanged until the outcome (attempt), and the
// attempt's task is never changed either, so a deep copy per fire would
// only copy bytes. Its history is its own, with room for the attempt
// (attemptCopy).
func (r *firer) startAttempt(f *firing, base *task.Task, now time.Time) *task.Task {
	t, exp := attemptCopy(base)
	t.Attempts = max(f.n, base.Attempts+1) - 1 // startAttempt counts this one
	startAttempt(t, now, f.timeout+r.leaseGrace, r.boot, exp)
	r.attempts.put(f.id, &attempt{base: base, t: t, gen: f.gen})
	r.fired.Add(1)
	return t
}

// deliver runs one push attempt of t, which holds a fresh lease, and has
// the outcome recorded under that lease (outcomes.add).
func (r *firer) deliver(ctx context.Context, t *task.Task) {
	kind := t.Target.Kind()
	start := time.Now() // the wall clock: took is a duration for metrics
	if h := r.hooks.AttemptStarted; h != nil {
		h(t.App, kind, r.clock.Now().Sub(t.NextAttemptAt))
	}
	s := r.sinks[kind]
	if ctx.Err() == nil {
		r.alog.note(ctx, t) // counted from here on, even if toc dies during it
	}
	dctx, span := telemetry.StartDeliver(ctx, t, start) // the attempt's span: ctx and nil when tracing is off
	var derr error
	if s == nil {
		derr = fmt.Errorf("no sink for target kind %q on this server", kind)
	} else {
		derr = s.Deliver(dctx, t)
	}
	if h := r.hooks.AttemptEnded; h != nil {
		h(t.App, kind, time.Since(start), derr)
	}
	released := derr != nil && ctx.Err() != nil // shutting down: not the receiver's fault
	telemetry.EndDeliver(span, t, derr, released)
	// The delivery is over: its in-flight slot goes to the next one now,
	// not once the outcome is stored (which waits for a batch). The task
	// itself stays under way until then (attempts.go).
	r.admit.release(t.App, t.ID)
	r.outcomes.add(ctx, outcome{id: t.ID, app: t.App, lease: t.Lease, err: derr, released: released})
}
