package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// # Pull tasks are held in memory from their due time to their ack
//
// On a single node (no cluster index) a pull task that falls due is not
// written: the fire job's look reads it (one read, with the batch it fires
// in) and puts the task as read in its app's ready queue in this process
// (held). A claim takes from that queue, without a store read, and
// leases in memory, like a push attempt (fire.go): the attempt lives in
// the attempts under way (attempts.go), Get shows the task delivering from there, the attempt log
// counts it (attemptlog.go), and a wheel entry at the lease's end rolls it
// back as a failed attempt (attempts.leasesDue) when no ack came. An ack or a
// nack is the attempt's outcome, written once over the task as stored, in
// the outcome group commit (outcomes.go), synced, and answered once it is
// stored. One durable write per pull task delivered.
//
// That write reads the task only when its copy held is out of date: the
// lease's base is the task as the look read it, and on a store that can
// (store.KnownUpdater: pebblestore) the outcome is written over it without
// a read (one store read per pull task, at its due time). The fence:
// every write of a task goes through the writer, whose callback, under the
// task's row lock, tells the held service before the write commits
// (touch): a copy queued is dropped, so no lease takes it, and a lease's
// base is marked stale (attempts.touch). The outcome's callback, under the
// same row lock, writes over the base only while its lease is current and
// not stale (attempts.current); otherwise it reads the task as before
// (landsOn decides on the task as stored). A write before the lease was
// taken dropped the copy it would have been taken from; one after it
// marked the lease. On one node no other process writes the store.
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
// In a cluster (Config.Index) every pull task takes the store path for
// its lease and its ack (synced writes), found in Redis, not written when
// it falls due (leases.go).

// held is the pull tasks this process holds, a service of its own: due
// and in their apps' ready queues, or leased (their attempts are among the
// attempts under way). It takes part in the fire path (hold, queue,
// unhold), in the writes (drop) and in leases and their ends (lease,
// endLeases, leasesEnded).
//
// Its mu guards the queues and their counts. The attempts' lock is taken
// under it (a task moves from its queue to a lease, and is looked for in
// both, atomically): the one lock order of the engine, held.mu before
// attempts.mu.
type held struct {
	attempts *attempts
	tk       *timekeeper
	outcomes *outcomes
	clock    clock.Clock
	boot     string
	max      int                                            // pullHoldMax; 0 in a cluster, which holds none
	started  func(app, kind string, lateness time.Duration) // Hooks.AttemptStarted; nil: none
	alog     *attemptLog                                    // the index's
	workCtx  func() context.Context                         // the workers' (the dispatcher's)

	mu struct {
		sync.Mutex
		heldState
	}
}

// heldState is held's state, guarded by held.mu.
type heldState struct {
	// queues holds, per app, the due pull tasks as read by the fire job,
	// in the order they came due. An entry whose id is no longer in tasks
	// with that task is stale, and the claim skips it.
	queues map[string][]*task.Task
	// tasks is the pull tasks held and not leased, by id: those in queues
	// (queued), and those that a fire job's look decided to queue and that
	// afterFire has not queued yet (holding: it keeps a store claim from
	// leasing them meanwhile). One map for both, so that a task's way
	// through them costs a lookup less at each step: with a burst's
	// hundred thousand held, each lookup is a cache miss or two
	// (BenchmarkHeldCycle).
	tasks  map[task.ID]heldTask // by value: no allocation per task due
	perApp map[string]int       // held (holding, queued and leased), per app
	store  map[string]pass      // per app: when the store was last looked at for leases
}

// heldTask is a task of heldState.tasks: queued (t, as the fire job read
// it, in its app's queue), or holding (t nil), with how many fire jobs'
// looks hold it (two jobs that fired it at once: the first to finish
// queues it; one that failed lets go of its hold only).
type heldTask struct {
	t   *task.Task
	app string
	n   int // while holding
}

// holding reports whether x is a look's hold, not yet queued.
func (x heldTask) holding() bool { return x.t == nil }

// pass is what a claim knows of an app's pull tasks waiting in the store.
type pass struct {
	at     time.Time // the last look (zero: none yet, or one is due at once)
	passed bool      // at is set
}

func (p *heldState) init() {
	p.queues = map[string][]*task.Task{}
	p.tasks = map[task.ID]heldTask{}
	p.perApp = map[string]int{}
	p.store = map[string]pass{}
}

// pullHoldMax bounds the pull tasks held in memory (due and queued, or
// leased): a quarter of MaxLoaded, at least 16.
func pullHoldMax(maxLoaded int) int { return max(maxLoaded/4, 16) }

// storeClaimEvery is how often at most a claim the ready queue does not
// fill looks for pull tasks waiting in the store (see the file comment).
const storeClaimEvery = time.Second

// hold is the look's decision on a due pull task t, under its row lock:
// true when it goes to the ready queue (a placeholder marks it until
// afterFire queues it); false when it is queued or leased already
// (leave: nothing to write), or when the process holds pullHoldMax pull
// tasks (over says so: it is written waiting, as in a cluster).
func (h *held) hold(t *task.Task) (hold, over bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &h.mu.heldState
	if x, ok := p.tasks[t.ID]; ok {
		if !x.holding() {
			return false, false // queued
		}
		x.n++ // another fire job's look, or this one run again: queued once
		p.tasks[t.ID] = x
		return true, false
	}
	if h.attempts.underway(t.ID) {
		return false, false
	}
	if len(p.tasks)+int(h.attempts.pulls.Load()) >= h.max {
		// Written waiting in the store: the next claim looks there.
		p.store[t.App] = pass{}
		return false, true
	}
	p.tasks[t.ID] = heldTask{app: t.App, n: 1}
	p.perApp[t.App]++
	return true, false
}

// queue puts t, a due pull task as the fire job read it, in its app's
// ready queue, unless its placeholder was dropped meanwhile (a write of the
// task: drop) or it is queued already.
func (h *held) queue(t *task.Task) {
	h.mu.Lock()
	p := &h.mu.heldState
	x, ok := p.tasks[t.ID]
	ok = ok && x.holding()
	if ok {
		p.tasks[t.ID] = heldTask{t: t, app: t.App}
		p.queues[t.App] = append(p.queues[t.App], t)
	}
	h.mu.Unlock()
	if d := t.Deadline; d != nil && ok {
		// The store has it due: only the wheel wakes for its deadline.
		h.tk.deferTo(t.ID, d.Add(time.Millisecond), t.App)
	}
}

// unhold drops the placeholder of a look whose fire job failed.
func (h *held) unhold(id task.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x, ok := h.mu.tasks[id]; ok && x.holding() {
		if x.n--; x.n == 0 {
			delete(h.mu.tasks, id)
			h.mu.unref(x.app)
		} else {
			h.mu.tasks[id] = x
		}
	}
}

// drop drops id from the ready queue (its entry there goes stale):
// the task was written, so the copy queued is out of date. If it is still
// due, the write tracked it into the wheel, which fires it into the queue
// again, read afresh.
func (h *held) drop(id task.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.heldState.drop(id)
}

// drop forgets the copy of id queued or on its way to the queue.
func (p *heldState) drop(id task.ID) {
	if x, ok := p.tasks[id]; ok {
		delete(p.tasks, id)
		p.unref(x.app)
	}
}

// unref counts one pull task of app held less.
// touch is the writer's word that the task id is being written, under its
// row lock, before the write commits: a copy of it held here is out of date
// (dropped, as drop does, so no lease hands it out), and so is the base of
// its lease, if any (attempts.touch: its ack's outcome reads the task
// again). held.mu before attempts.mu, the one lock order.
func (h *held) touch(id task.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.heldState.drop(id)
	h.attempts.touch(id)
}

func (p *heldState) unref(app string) {
	if p.perApp[app]--; p.perApp[app] <= 0 {
		delete(p.perApp, app)
	}
}

// queued reports whether id is in the ready queue (or about to be).
func (h *held) queued(id task.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.mu.tasks[id]
	return ok
}

// has reports whether id is queued or leased in this process.
func (h *held) has(id task.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.mu.tasks[id]; ok {
		return true
	}
	return h.attempts.underway(id)
}

// notHeld returns the ids that this process does not hold (queued or
// leased): those a store claim may find waiting in the store. It reuses
// ids.
func (h *held) notHeld(ids []task.ID) []task.ID {
	out := ids[:0]
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if _, ok := h.mu.tasks[id]; !ok && !h.attempts.underway(id) {
			out = append(out, id)
		}
	}
	return out
}

// lease takes up to p.Max tasks from app's ready queue and leases
// them in memory, each until now+p.Lease.
func (x *held) lease(ctx context.Context, app string, p LeaseParams) []*task.Task {
	now := msNowOf(x.clock)
	x.mu.Lock()
	h := &x.mu.heldState
	q := h.queues[app]
	got := make([]*task.Task, 0, min(p.Max, len(q)))
	i := 0
	for ; i < len(q) && len(got) < p.Max; i++ {
		base := q[i]
		q[i] = nil
		if x, ok := h.tasks[base.ID]; !ok || x.t != base {
			continue // dropped: written since it was read
		}
		delete(h.tasks, base.ID)
		if pastDeadline(base, now) {
			// Its deadline's wheel entry expires it.
			h.unref(app)
			continue
		}
		t, exp := attemptCopy(base) // one allocation for a first attempt
		startAttempt(t, now, p.Lease, x.boot, exp)
		x.attempts.put(t.ID, &attempt{base: base, t: t, pull: true})
		got = append(got, t)
	}
	if i == len(q) {
		delete(h.queues, app)
	} else {
		h.queues[app] = q[i:]
	}
	x.mu.Unlock()
	if len(got) == 0 {
		return nil
	}
	ends := make([]later, len(got))
	for i, t := range got {
		ends[i] = later{t.ID, *t.LeaseExpiresAt, t.App}
	}
	x.tk.deferAll(ends...)
	x.alog.note(ctx, got...)
	if h := x.started; h != nil {
		for _, t := range got {
			h(t.App, "pull", t.UpdatedAt.Sub(t.NextAttemptAt))
		}
	}
	return got
}

// storeClaimDue reports whether a claim of app that the ready queue did
// not fill looks in the store now, and marks the look.
func (h *held) storeClaimDue(app string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.mu.store[app]
	if ok && s.passed && now.Sub(s.at) < storeClaimEvery {
		return false
	}
	h.mu.store[app] = pass{at: now, passed: true}
	return true
}

// storeScan is how many of app's claimable entries a store claim reads to
// find want tasks not held here: the ones held come first in due order.
func (h *held) storeScan(app string, want int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return want + min(h.mu.perApp[app], 4*MaxClaim)
}

// errLeaseExpired is the outcome of a claim whose lease ran out.
var errLeaseExpired = errors.New("lease expired without an ack")

// leasesEnded counts the pull leases of apps ended (their outcomes
// written, their attempts ended). perApp counts them a moment after the
// attempts do: it only sizes the store's reads (storeScan).
func (h *held) leasesEnded(apps []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, app := range apps {
		h.mu.unref(app)
	}
}

// pullAck is one ack or nack of a claim's lease held in memory.
type pullAck struct {
	i       int            // its index in the caller's list
	id      task.ID        //
	lease   string         //
	err     error          // a nack's message (nil: an ack)
	retryIn *time.Duration // a nack's
}

// endLeases stores the outcomes of the acks and nacks in mine (their
// leases taken by takeLeases) in the outcome group commit, synced, and
// waits for them: errs[k.i] is nil for one stored, a *ConflictError when
// the task moved on meanwhile, or the store's error (the lease is then
// still held: the consumer may send it again).
func (h *held) endLeases(op, app string, mine []pullAck, errs []error) {
	if len(mine) == 0 {
		return
	}
	w := &outcomeWait{res: make([]outcomeResult, len(mine))}
	os := make([]outcome, len(mine))
	for j, k := range mine {
		os[j] = outcome{id: k.id, app: app, lease: k.lease, err: k.err, retryIn: k.retryIn, wait: w, slot: j}
	}
	w.wg.Add(len(os))
	// The workers' context, not the request's: the writer of this batch
	// may write other attempts' outcomes too.
	h.outcomes.add(h.workCtx(), os...)
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
	if err == nil {
		// Before the targets of errors.As, which escape: an ack answered
		// nil (each of a claim's thousand) allocated them all the same.
		return false
	}
	var ce *ConflictError
	var fe *task.FieldError
	return !errors.Is(err, store.ErrNotFound) && !errors.As(err, &ce) && !errors.As(err, &fe)
}
