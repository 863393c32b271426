package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// # Pull tasks are held in memory from their due time to their ack
//
// On a single node (no cluster index) a pull task that falls due is not
// written: the fire job's look reads it (one read, with the batch it fires
// in) and puts the task as read in its app's ready queue in this process
// (e.out.pull). A claim takes from that queue, without a store read, and
// leases in memory, like a push attempt (fire.go): the attempt lives in
// e.out.attempts, Get shows the task delivering from there, the attempt log
// counts it (attemptlog.go), and a wheel entry at the lease's end rolls it
// back as a failed attempt (pullLeasesDue) when no ack came. An ack or a
// nack is the attempt's outcome, written once over the task as stored, in
// the outcome group commit (settleOutcome), synced, and answered once it is
// stored. One durable write per pull task delivered.
//
// The store keeps the task scheduled and due meanwhile, so a process that
// dies leaves it due: the next one loads it, fires it into the ready queue
// again, and it is claimed again (at least once).
//
// What the queue does not hold is claimed from the store as before
// (leases.take): pull tasks an older version stored as waiting for a claim,
// and those that came due while this process held pullHoldMax pull tasks
// already (the queue is a bounded cache: past it, a pull task due is
// written waiting, as before). A claim that the queue does not fill looks
// there at most once every storeClaimEvery per app, or at once when one
// was written waiting since, and only while the fire path has no due task
// left to look at (firing).
//
// In a cluster (Config.Index) every pull task takes the store path: it is
// written waiting when due, claimed and acked in synced writes.

// pullHeld is the pull tasks this process holds (under e.out).
type pullHeld struct {
	// queues holds, per app, the due pull tasks as read by the fire job,
	// in the order they came due. An entry whose id is no longer in queued
	// with that task is stale, and the claim skips it.
	queues map[string][]*task.Task
	// queued is the tasks in queues, by id.
	queued map[task.ID]*task.Task
	// holding is the tasks that a fire job's look decided to queue and
	// that settleFiring has not queued yet: it keeps a store claim from
	// leasing them meanwhile.
	holding map[task.ID]*pullHold
	leased  int             // pull attempts in e.out.attempts
	perApp  map[string]int  // held (holding, queued and leased), per app
	store   map[string]pass // per app: when the store was last looked at for claims
}

// pullHold is a task of pullHeld.holding: its app, and how many fire jobs'
// looks hold it (two jobs that fired it at once: the first to settle
// queues it; one that failed lets go of its hold only).
type pullHold struct {
	app string
	n   int
}

// pass is what a claim knows of an app's pull tasks waiting in the store.
type pass struct {
	at     time.Time // the last look (zero: none yet, or one is due at once)
	passed bool      // at is set
}

func (p *pullHeld) init() {
	p.queues = map[string][]*task.Task{}
	p.queued = map[task.ID]*task.Task{}
	p.holding = map[task.ID]*pullHold{}
	p.perApp = map[string]int{}
	p.store = map[string]pass{}
}

// held is how many pull tasks the process holds.
func (p *pullHeld) held() int { return len(p.queued) + len(p.holding) + p.leased }

// pullHoldMax bounds the pull tasks held in memory (due and queued, or
// leased): a quarter of MaxLoaded, at least 16.
func (e *Engine) pullHoldMax() int { return max(e.cfg.MaxLoaded/4, 16) }

// storeClaimEvery is how often at most a claim the ready queue does not
// fill looks for pull tasks waiting in the store (see the file comment).
const storeClaimEvery = time.Second

// memPull reports whether pull tasks are held in memory: on a single node.
func (e *Engine) memPull() bool { return e.cfg.Index == nil }

// holdPull is the look's decision on a due pull task t, under its row lock:
// true when it goes to the ready queue (a placeholder marks it until
// settleFiring queues it); false when it is queued or leased already
// (leave: nothing to write), or when the process holds pullHoldMax pull
// tasks (over says so: it is written waiting, as in a cluster).
func (e *Engine) holdPull(t *task.Task) (hold, over bool) {
	e.out.Lock()
	defer e.out.Unlock()
	p := &e.out.pull
	if h, ok := p.holding[t.ID]; ok {
		h.n++ // another fire job's look, or this one run again: queued once
		return true, false
	}
	if _, ok := p.queued[t.ID]; ok {
		return false, false
	}
	if _, ok := e.out.attempts[t.ID]; ok {
		return false, false
	}
	if p.held() >= e.pullHoldMax() {
		// Written waiting in the store: the next claim looks there.
		p.store[t.App] = pass{}
		return false, true
	}
	p.holding[t.ID] = &pullHold{app: t.App, n: 1}
	p.perApp[t.App]++
	return true, false
}

// queuePull puts t, a due pull task as the fire job read it, in its app's
// ready queue, unless its placeholder was dropped meanwhile (a write of the
// task: dropQueued) or it is queued already.
func (e *Engine) queuePull(t *task.Task) {
	e.out.Lock()
	p := &e.out.pull
	_, ok := p.holding[t.ID]
	if ok {
		delete(p.holding, t.ID)
		p.queued[t.ID] = t
		p.queues[t.App] = append(p.queues[t.App], t)
	}
	e.out.Unlock()
	if d := t.Deadline; d != nil && ok {
		// The store has it due: only the wheel wakes for its deadline.
		e.deferTo(t.ID, d.Add(time.Millisecond), t.App)
	}
}

// unholdPull drops the placeholder of a look whose fire job failed.
func (e *Engine) unholdPull(id task.ID) {
	e.out.Lock()
	defer e.out.Unlock()
	if h, ok := e.out.pull.holding[id]; ok {
		if h.n--; h.n == 0 {
			delete(e.out.pull.holding, id)
			e.out.pull.unref(h.app)
		}
	}
}

// dropQueued drops id from the ready queue (its entry there goes stale):
// the task was written, so the copy queued is out of date. If it is still
// due, the write tracked it into the wheel, which fires it into the queue
// again, read afresh.
func (e *Engine) dropQueued(id task.ID) {
	e.out.Lock()
	defer e.out.Unlock()
	p := &e.out.pull
	if q, ok := p.queued[id]; ok {
		delete(p.queued, id)
		p.unref(q.App)
	}
	if h, ok := p.holding[id]; ok {
		delete(p.holding, id)
		p.unref(h.app)
	}
}

// unref counts one pull task of app held less.
func (p *pullHeld) unref(app string) {
	if p.perApp[app]--; p.perApp[app] <= 0 {
		delete(p.perApp, app)
	}
}

// queuedPull reports whether id is in the ready queue (or about to be).
func (e *Engine) queuedPull(id task.ID) bool {
	e.out.Lock()
	defer e.out.Unlock()
	_, ok := e.out.pull.queued[id]
	_, holding := e.out.pull.holding[id]
	return ok || holding
}

// heldPull reports whether id is queued or leased in this process.
func (e *Engine) heldPull(id task.ID) bool {
	e.out.Lock()
	defer e.out.Unlock()
	if _, ok := e.out.pull.queued[id]; ok {
		return true
	}
	if _, ok := e.out.pull.holding[id]; ok {
		return true
	}
	_, ok := e.out.attempts[id]
	return ok
}

// notHeld returns the ids that this process does not hold (queued or
// leased): those a store claim may find waiting in the store. It reuses
// ids.
func (e *Engine) notHeld(ids []task.ID) []task.ID {
	out := ids[:0]
	e.out.Lock()
	defer e.out.Unlock()
	for _, id := range ids {
		_, q := e.out.pull.queued[id]
		_, h := e.out.pull.holding[id]
		_, a := e.out.attempts[id]
		if !q && !h && !a {
			out = append(out, id)
		}
	}
	return out
}

// claimQueued takes up to p.Max tasks from app's ready queue and leases
// them in memory, each until now+p.Lease.
func (e *Engine) claimQueued(ctx context.Context, app string, p LeaseParams) []*task.Task {
	now := e.msNow()
	var got []*task.Task
	e.out.Lock()
	h := &e.out.pull
	q := h.queues[app]
	i := 0
	for ; i < len(q) && len(got) < p.Max; i++ {
		base := q[i]
		q[i] = nil
		if h.queued[base.ID] != base {
			continue // dropped: written since it was read
		}
		delete(h.queued, base.ID)
		if pastDeadline(base, now) {
			// Its deadline's wheel entry expires it.
			h.unref(app)
			continue
		}
		t := new(task.Task)
		*t = *base
		t.History = append(make([]task.Event, 0, len(base.History)+1), base.History...)
		startAttempt(t, now, p.Lease, e.boot)
		e.out.attempts[t.ID] = &attempt{base: base, t: t, pull: true}
		h.leased++
		got = append(got, t)
	}
	if i == len(q) {
		delete(h.queues, app)
	} else {
		h.queues[app] = q[i:]
	}
	e.out.Unlock()
	if len(got) == 0 {
		return nil
	}
	e.pullLeases.Add(int64(len(got)))
	e.mu.Lock()
	kick := false
	if e.mu.core != nil {
		for _, t := range got {
			kick = e.mu.core.Defer(t.ID, *t.LeaseExpiresAt, t.App) || kick
		}
	}
	e.mu.Unlock()
	if kick {
		signal(e.kick)
	}
	e.noteAttempts(ctx, got...)
	if h := e.cfg.Hooks.AttemptStarted; h != nil {
		for _, t := range got {
			h(t.App, "pull", t.UpdatedAt.Sub(t.NextAttemptAt))
		}
	}
	return got
}

// firing reports whether the fire path has due tasks it has not looked at
// yet: a store claim waits until it has none, since most of the claimable
// tasks the store lists are then on their way to the ready queue, and
// reading them would only find that out.
func (e *Engine) firing() bool {
	return e.Stats().Ready > 0 || len(e.writing) > 0
}

// storeClaimDue reports whether a claim of app that the ready queue did
// not fill looks in the store now, and marks the look.
func (e *Engine) storeClaimDue(app string, now time.Time) bool {
	e.out.Lock()
	defer e.out.Unlock()
	s, ok := e.out.pull.store[app]
	if ok && s.passed && now.Sub(s.at) < storeClaimEvery {
		return false
	}
	e.out.pull.store[app] = pass{at: now, passed: true}
	return true
}

// storeScan is how many of app's claimable entries a store claim reads to
// find want tasks not held here: the ones held come first in due order.
func (e *Engine) storeScan(app string, want int) int {
	e.out.Lock()
	defer e.out.Unlock()
	return want + min(e.out.pull.perApp[app], 4*MaxClaim)
}

// errLeaseExpired is the outcome of a claim whose lease ran out.
var errLeaseExpired = errors.New("lease expired without an ack")

// pullLeasesDue takes out of taken the pull tasks leased here (their wheel
// entry is the lease's end), and returns the outcomes of the leases that
// ran out: each a failed attempt, as if nacked.
func (e *Engine) pullLeasesDue(taken []sched.Taken) ([]sched.Taken, []outcome) {
	if e.pullLeases.Load() == 0 {
		return taken, nil
	}
	now := e.msNow()
	type later struct {
		id  task.ID
		at  time.Time
		app string
	}
	var ends []outcome
	var again []later
	keep := taken[:0:0]
	e.out.Lock()
	for _, tk := range taken {
		a := e.out.attempts[tk.ID]
		switch {
		case a == nil || !a.pull:
			keep = append(keep, tk)
		case a.ending:
			// An ack's outcome is being written: it tracks the task.
		case a.t.LeaseExpiresAt.After(now):
			again = append(again, later{tk.ID, *a.t.LeaseExpiresAt, a.t.App})
		default:
			a.ending = true
			ends = append(ends, outcome{id: tk.ID, app: a.t.App, lease: a.t.Lease, err: errLeaseExpired})
		}
	}
	e.out.Unlock()
	for _, l := range again {
		e.deferTo(l.id, l.at, l.app)
	}
	return keep, ends
}

// pullAck is one ack or nack of a claim's lease held in memory.
type pullAck struct {
	i       int            // its index in the caller's list
	id      task.ID        //
	lease   string         //
	err     error          // a nack's message (nil: an ack)
	retryIn *time.Duration // a nack's
}

// takeLeases finds which of acks (op: ack, nack) name a lease held in
// memory: those it marks as ending and returns; errs[a.i] is set for those
// it answers at once (a lease not current, a task of another app); the rest
// (not held here) go to the store path.
func (e *Engine) takeLeases(op, app string, acks []pullAck, errs []error) (mine, rest []pullAck) {
	e.out.Lock()
	defer e.out.Unlock()
	for _, k := range acks {
		a := e.out.attempts[k.id]
		switch {
		case a == nil || !a.pull:
			rest = append(rest, k)
		case app != "" && a.t.App != app:
			errs[k.i] = errNoTask(k.id) // another app's task looks absent
		case a.ending || a.t.Lease != k.lease:
			errs[k.i] = conflict(op, a.t.Clone(), "the lease is no longer current (it ran out, or the task was claimed again)")
		default:
			a.ending = true
			mine = append(mine, k)
		}
	}
	return mine, rest
}

// settlePulls stores the outcomes of the acks and nacks in mine (their
// leases taken by takeLeases) in the outcome group commit, synced, and
// waits for them: errs[k.i] is nil for one stored, a *ConflictError when
// the task moved on meanwhile, or the store's error (the lease is then
// still held: the consumer may send it again).
func (e *Engine) settlePulls(op, app string, mine []pullAck, errs []error) {
	if len(mine) == 0 {
		return
	}
	w := &outcomeWait{res: make([]outcomeResult, len(mine))}
	os := make([]outcome, len(mine))
	for j, k := range mine {
		os[j] = outcome{id: k.id, app: app, lease: k.lease, err: k.err, retryIn: k.retryIn, wait: w, slot: j}
	}
	w.wg.Add(len(os))
	// The engine's context, not the request's: the settler that writes
	// this batch may write other attempts' outcomes too.
	e.settleOutcome(e.workCtx, os...)
	w.wg.Wait()
	for j, k := range mine {
		r := w.res[j]
		switch {
		case r.err != nil:
			errs[k.i] = fmt.Errorf("%s task %s: %w", op, k.id, r.err)
		case !r.landed:
			errs[k.i] = conflict(op, cmp.Or(r.t, &task.Task{ID: k.id}), "the task moved on during the claim (it was changed or retried)")
		}
	}
}

// storeError reports whether err is a store's failure (not an answer about
// the task: not found, a conflict, a refused field).
func storeError(err error) bool {
	var ce *ConflictError
	var fe *task.FieldError
	return err != nil && !errors.Is(err, store.ErrNotFound) && !errors.As(err, &ce) && !errors.As(err, &fe)
}
