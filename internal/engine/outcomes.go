package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// outcomes is the group-commit batcher of the attempts' outcomes: an
// attempt that ends (a push delivery, an ack or a nack, a lease that ran
// out) hands its outcome to add, and one write stores the outcomes that
// end about then, fenced by each attempt's number (write). Then the
// attempts end, the index is told (Index.Ended) and the tasks are
// tracked again.
//
// Its mu guards the outcomes waiting to be written and the writers' state;
// nothing else is taken under it (it reads the attempts' count without
// their lock).
type outcomes struct {
	attempts    *attempts
	writer      *writer
	index       engIdx
	tk          *timekeeper
	clock       clock.Clock
	log         *slog.Logger
	leasesEnded func(apps []string) // pull leases ended: the pull service counts them

	mu struct {
		sync.Mutex
		pending []outcome
		// spare is the array of a written batch, for pending to grow
		// into again once a write took all of it (as creates' spare): an
		// outcome is queued and handed to its write without allocating.
		spare     []outcome
		writers   int  // goroutines writing outcomes
		gathering bool // one of them waits for more (add)
		waits     int  // pending outcomes a caller waits for: written at once
	}
	full chan struct{} // capacity 1: a batch is full, the gathering one writes now
}

// busy reports whether outcomes wait to be written or are being written.
func (o *outcomes) busy() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.mu.pending) > 0 || o.mu.writers > 0
}

// outcome is the end of one push attempt, to be stored.
type outcome struct {
	id       task.ID
	app      string
	lease    string // the attempt's lease, which names it
	err      error  // the sink's; nil when delivered
	released bool   // cut short by Stop: not the receiver's fault
	spent    bool   // not made: the attempts before it used up max_attempts

	retryIn *time.Duration // a nack's retry_in (nil: the backoff)
	wait    *outcomeWait   // an ack or nack waiting for its write (nil: nobody waits)
	slot    int            // its result's index in wait.res
}

// outcomeWait is a caller waiting for the outcomes it handed to the
// outcomes batcher to be stored: an ack or a nack, answered after the
// (synced) write.
type outcomeWait struct {
	wg  sync.WaitGroup // one per outcome
	res []outcomeResult
}

// outcomeResult is what became of one outcome of an outcomeWait.
type outcomeResult struct {
	landed bool       // written over the task
	t      *task.Task // the task as stored (or as read when it did not land)
	err    error      // the store's: not written
}

// maxOutcomeWriters bounds the goroutines storing outcomes at once.
const maxOutcomeWriters = 4

// maxConflictRounds bounds how often an outcome is written again after
// store.ErrConflict before it is given up (and the task delivered again).
const maxConflictRounds = 5

// add stores os with the outcomes of other attempts that end about
// then, in one store write per batch (a group commit). The first goroutine
// to find no one gathering gathers: while other attempts are still under
// way it waits for their outcomes, up to outcomeGather or until a batch is
// full or every attempt has ended, then writes the batch, and goes on while
// outcomes are left; the others leave theirs to it and return at once. A
// lone outcome is written at once. At most maxOutcomeWriters write at a time. The
// attempt's in-flight slot was released when its delivery ended (deliver).
//
// The wait costs nothing that matters (a delivery has already been made;
// only the store's record and the in-flight slot wait for it) and saves
// much: at a few thousand fires a second, the outcomes of a few
// milliseconds share one SQL transaction and one Redis round trip instead
// of a handful each.
func (o *outcomes) add(ctx context.Context, os ...outcome) {
	o.mu.Lock()
	o.mu.pending = append(o.mu.pending, os...)
	for _, x := range os {
		if x.wait != nil {
			o.mu.waits++
		}
	}
	if o.mu.gathering || o.mu.writers >= maxOutcomeWriters {
		if !o.moreLocked() {
			signal(o.full)
		}
		o.mu.Unlock()
		return
	}
	o.mu.writers++
	for len(o.mu.pending) > 0 {
		if o.moreLocked() {
			o.mu.gathering = true
			o.mu.Unlock()
			o.gather()
			o.mu.Lock()
			o.mu.gathering = false
		}
		batch := o.takeLocked()
		o.mu.Unlock()
		o.write(ctx, batch)
		o.mu.Lock()
		if o.mu.spare == nil {
			clear(batch)
			o.mu.spare = batch[:0]
		}
	}
	o.mu.writers--
	o.mu.Unlock()
}

// takeLocked takes the next batch of the pending outcomes (batchLocked),
// oldest first. The batch is pending's array up to its length: the
// outcomes added meanwhile go after it, or, once all are taken, into the
// spare array. o.mu is held.
func (o *outcomes) takeLocked() []outcome {
	n := o.batchLocked()
	batch := o.mu.pending[:n:n]
	for _, x := range batch {
		if x.wait != nil {
			o.mu.waits--
		}
	}
	o.mu.pending = o.mu.pending[n:]
	if len(o.mu.pending) == 0 {
		o.mu.pending, o.mu.spare = o.mu.spare, nil
	}
	return batch
}

// moreLocked reports whether a batch of outcomes should wait for more: it
// is not full, and push attempts are under way whose outcomes are not in
// it yet. o.mu is held.
func (o *outcomes) moreLocked() bool {
	return o.mu.waits == 0 && len(o.mu.pending) < fireBatchMax && int(o.attempts.pushes.Load()) > len(o.mu.pending)
}

// batchLocked is how many of the pending outcomes the next write takes:
// up to fireBatchMax of push attempts and lease ends, and up to MaxClaim in
// all, so that a batch ack (AckMany) is one write. o.mu is held.
func (o *outcomes) batchLocked() int {
	n, other := 0, 0
	for n < len(o.mu.pending) && n < MaxClaim {
		if o.mu.pending[n].wait == nil {
			if other == fireBatchMax {
				break
			}
			other++
		}
		n++
	}
	return n
}

// gather waits outcomeGather, or less when a batch fills up or every
// attempt under way has ended.
func (o *outcomes) gather() {
	t := time.NewTimer(outcomeGather)
	defer t.Stop()
	select {
	case <-t.C:
	case <-o.full:
	}
}

// outcomeGather is how long the first outcome of a batch waits for others
// (outcomes.add).
const outcomeGather = 5 * time.Millisecond

// write writes a batch of outcomes over the tasks their attempts
// started from, then ends the attempts.
//
// The write is fenced by the attempt's number (landsOn): an outcome lands
// only on a task still scheduled, with fewer attempts recorded than its
// number, and not moved since the attempt started (or moved only by the
// outcome of an earlier attempt, another node's whose lease ran out before
// this one began). A task cancelled, moved or retried meanwhile, or on
// which a later attempt's outcome landed first, keeps its state; the
// attempt is only added to its history, since it reached the receiver. An
// attempt cut short by Stop writes nothing: the task is still due in the
// store, and is delivered again (with the next number: attemptlog.go).
func (x *outcomes) write(ctx context.Context, os []outcome) {
	as := x.attempts.of(os)
	var ids []task.ID
	var which []int
	var released []*task.Task
	for i, o := range os {
		switch {
		case as[i] == nil:
		case o.released:
			released = append(released, as[i].base)
		default:
			ids = append(ids, o.id)
			which = append(which, i)
		}
	}
	opts := fireWrite
	keep := make([]bool, len(os)) // an ack's attempt whose write failed: its lease stays
	for _, o := range os {
		if o.wait != nil {
			opts = ackWrite // a client waits for it: synced
		}
	}
	result := func(i int, r outcomeResult) {
		if w := os[i].wait; w != nil {
			w.res[os[i].slot] = r
		}
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	var stored, moved []written
	// A task another writer changed between the optimistic read and the
	// write (store.ErrConflict) is written again, from a fresh read; an
	// outcome the store refused for lack of disk space
	// (store.ErrDiskFull) is written again after a pause, until the engine
	// stops: the attempt stays under way meanwhile, so the task is not
	// delivered again while its outcome waits.
	fullWait := diskFullWait
	rounds, tries := 0, 0 // of writes again after a conflict, after an unavailable store
	// Pull leases held in memory and push attempts go first, written over
	// their base (the task as held, or as the fire job's look read it)
	// without a read, where no write touched the task since (knownRound);
	// the rest, and those, read the task.
	knownRound := false
	var later []task.ID
	var laterWhich []int
	if x.writer.known != nil {
		var kids []task.ID
		var kwhich []int
		for k, id := range ids {
			if a := as[which[k]]; a.pull || a.gen != 0 {
				kids, kwhich = append(kids, id), append(kwhich, which[k])
			} else {
				later, laterWhich = append(later, id), append(laterWhich, which[k])
			}
		}
		if len(kids) > 0 {
			ids, which, knownRound = kids, kwhich, true
		}
	}
	for len(ids) > 0 {
		landed := make([]bool, len(ids))
		// The tasks come shared (outcomeOpts): each one written is a
		// copy of its own, put in ts in its place.
		fn := func(ts []*task.Task) []error {
			now := msNowOf(x.clock)
			errs := make([]error, len(ts))
			for k, t := range ts {
				a, o := as[which[k]], os[which[k]]
				if knownRound && (t == nil || !x.current(ids[k], a)) {
					errs[k] = errStale // written since it was read: read it
					continue
				}
				landed[k] = t != nil && landsOn(t, a)
				switch {
				case t == nil:
					errs[k] = errSkip
				case landed[k]:
					t, at := outcomeCopy(t)
					ts[k] = t
					recordOutcome(t, a, o, now, at)
				case o.spent || t.Attempts == 0 && a.base.Attempts > 0 || inHistory(t, a):
					// The task moved on (or was retried), or has this
					// attempt already (a write tried again after its
					// answer was lost): it keeps what it has.
					errs[k] = errSkip
				default:
					// The task moved on, but the attempt reached the
					// receiver: its history says so.
					t = t.Clone()
					ts[k] = t
					n := a.t.Attempts
					t.Record(a.t.UpdatedAt, "attempt", n, "")
					if o.err == nil {
						t.Record(now, "delivered", n, "")
					} else {
						t.Record(now, "failed", n, o.err.Error())
					}
				}
			}
			return errs
		}
		var ws []written
		var errs []error
		if knownRound {
			bases := make([]*task.Task, len(ids))
			for k := range ids {
				bases[k] = as[which[k]].base
			}
			ws, errs = x.writer.updateKnown(wctx, bases, outcomeOpts(opts), fn)
		} else {
			ws, errs = x.writer.updateMany(wctx, ids, outcomeOpts(opts), fn)
		}
		var again []task.ID
		var againWhich []int
		conflict, unavailable := false, false
		ff := firstFull(errs)
		for k, err := range errs {
			switch {
			case err == nil && landed[k]:
				stored = append(stored, ws[k])
				result(which[k], outcomeResult{landed: true, t: ws[k].t})
			case err == nil:
				moved = append(moved, ws[k])
				result(which[k], outcomeResult{t: ws[k].t})
			case errors.Is(err, errSkip):
				moved = append(moved, ws[k])
				result(which[k], outcomeResult{t: ws[k].t})
			case knownRound && (errors.Is(err, errStale) || errors.Is(err, store.ErrConflict)):
				// Not the version stored: the next round reads it.
				again, againWhich = append(again, ids[k]), append(againWhich, which[k])
			case errors.Is(err, store.ErrNotFound):
				result(which[k], outcomeResult{err: err})
			case os[which[k]].wait != nil && !errors.Is(err, store.ErrConflict):
				// A client waits: it gets the error now, and may send
				// its ack again under the lease, which stays.
				result(which[k], outcomeResult{err: err})
				keep[which[k]] = true
			case errors.Is(err, store.ErrConflict) && rounds < maxConflictRounds:
				again, againWhich = append(again, ids[k]), append(againWhich, which[k])
				conflict = true
			case errors.Is(err, store.ErrUnavailable) && tries < maxUnavailableTries:
				// The connection or the database was lost (a restart):
				// write again on a new connection, after a pause.
				again, againWhich = append(again, ids[k]), append(againWhich, which[k])
				unavailable = true
			case errors.Is(err, store.ErrDiskFull) && waitDiskFull(ctx, &fullWait, k == ff):
				again, againWhich = append(again, ids[k]), append(againWhich, which[k])
			default:
				// The task is still due in the store: deliver it again.
				x.log.ErrorContext(ctx, "record delivery outcome; the task will be delivered again", slog.String("task", ids[k].String()), slog.String("error", err.Error()))
				x.tk.retryLater(ids[k])
			}
		}
		ids, which = again, againWhich
		if knownRound {
			ids, which = append(ids, later...), append(which, laterWhich...)
			knownRound, later, laterWhich = false, nil, nil
		}
		if conflict {
			rounds++
		}
		if unavailable {
			d := min(unavailableBackoff<<tries, unavailableBackoffMax)
			tries++
			x.log.WarnContext(ctx, "record delivery outcomes: database unavailable; trying again", slog.Int("tasks", len(ids)), slog.Duration("in", d))
			if !sleepCtx(ctx, d) {
				for _, id := range ids { // stopping: deliver them again
					x.tk.retryLater(id)
				}
				break
			}
		}
	}
	if pulls, apps := x.attempts.end(os, as, keep); len(pulls) > 0 {
		x.leasesEnded(apps)
		// The wheel entries at the leases' ends go: the tasks are
		// tracked again as stored (a deferred entry would outlive a
		// finished task's track).
		x.tk.untrack(pulls...)
	}
	x.mirror(ctx, stored, moved, released)
	for _, o := range os {
		if o.wait != nil {
			o.wait.wg.Done()
		}
	}
}

// current reports, under id's row lock, whether a's base is still the
// task as stored: no write of it came since it was read (a pull lease:
// not touched; a push attempt: its slot's write count unchanged).
func (x *outcomes) current(id task.ID, a *attempt) bool {
	if a.pull {
		return x.attempts.current(id, a)
	}
	return x.attempts.currentGen(id, a, x.writer.genOf(id))
}

// errStale refuses, in the outcomes' write over a lease's base, a task
// written since the base was read: it is written from a fresh read.
var errStale = errors.New("engine: the task was written since it was leased")

// ackWrite is for the outcomes of acks and nacks: synced, since the
// client is answered after it; otherwise as fireWrite.
var ackWrite = &store.UpdateOpts{Optimistic: true}

// Their shared forms (store.UpdateOpts.Shared), for the outcomes' write:
// its fn copies only the tasks it changes, and what it gets back (tracked,
// mirrored, a conflict's copy made for the client) is only read.
var ackWriteShared = &store.UpdateOpts{Optimistic: true, Shared: true}

// outcomeOpts is the shared form of opts (fireWrite: fireLook, or
// ackWrite).
func outcomeOpts(opts *store.UpdateOpts) *store.UpdateOpts {
	if opts == ackWrite {
		return ackWriteShared
	}
	return fireLook
}

// Outcome writes that meet an unavailable store (store.ErrUnavailable: a
// database restart, a lost connection) are tried again up to
// maxUnavailableTries times, after unavailableBackoff doubling up to
// unavailableBackoffMax (about 9 s in all), before the outcome is given up
// and the task delivered again.
const (
	maxUnavailableTries   = 8
	unavailableBackoff    = 100 * time.Millisecond
	unavailableBackoffMax = 2 * time.Second
)

// sleepCtx waits d, or less when ctx ends first; it reports whether d
// passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// inHistory reports whether t's history has the start of attempt a.
func inHistory(t *task.Task, a *attempt) bool {
	for _, ev := range t.History {
		if ev.What == "attempt" && ev.Attempt == a.t.Attempts && ev.At.Equal(a.t.UpdatedAt) {
			return true
		}
	}
	return false
}

// landsOn reports whether the outcome of attempt a may be written over t,
// the task as stored now: t is still scheduled, no outcome of a (from the
// number on) has landed, and t has not moved since a started, or only by
// the outcome of an earlier attempt (whose number is below a's: another
// node's, late; a's own started when its lease ran out).
func landsOn(t *task.Task, a *attempt) bool {
	if t.State != task.Scheduled || t.Attempts >= a.t.Attempts {
		return false
	}
	if t.Attempts == a.base.Attempts {
		return t.NextAttemptAt.Equal(a.base.NextAttemptAt)
	}
	return t.Attempts > a.base.Attempts
}

// outcomeCopy is the copy of t, shared and never changed, that an outcome
// is recorded on (recordOutcome): the task's fields and a history of its
// own, with room for the events the outcome adds. recordOutcome only sets
// fields and appends to the history, so the rest (payload, target, times
// pointed to) is shared with t, as a lease's copy shares its base's; a
// full Clone copied all of it and then grew the history again, per task
// acked. at is room for the finish time (taskWithRoom).
func outcomeCopy(t *task.Task) (c *task.Task, at *time.Time) {
	if len(t.History) <= 1 {
		// A first attempt's outcome, in one allocation with its history
		// (the attempt and its end; another event, "interrupted", grows
		// it) and its finish time.
		b := new(struct {
			t      task.Task
			at     time.Time
			events [3]task.Event
		})
		b.t = *t
		b.t.History = append(b.events[:0], t.History...)
		return &b.t, &b.at
	}
	c = new(task.Task)
	*c = *t
	c.History = append(make([]task.Event, 0, len(t.History)+3), t.History...)
	return c, new(time.Time)
}

// recordOutcome writes the outcome o of attempt a over t, on which it lands
// (landsOn); at is room for the finish time (outcomeCopy).
func recordOutcome(t *task.Task, a *attempt, o outcome, now time.Time, at *time.Time) {
	n := a.t.Attempts
	if o.spent {
		// The attempts up to n-1 were started by processes that
		// stopped during them (the index counted them), and they were
		// the last.
		t.Attempts = n - 1
		t.LastError = interruptedMsg
		t.Record(now, "interrupted", t.Attempts, interruptedMsg)
		finishIn(t, task.Dead, now, at)
		return
	}
	if t.Attempts < n-1 {
		// Attempts between were started and have no outcome: their
		// process stopped during them, or their outcome is late.
		t.Record(a.t.UpdatedAt, "interrupted", n-1, "no outcome recorded for this attempt: its process stopped during it, or its outcome comes late")
	}
	t.Attempts = n
	t.Record(a.t.UpdatedAt, "attempt", n, "")
	if o.err == nil {
		finishIn(t, task.Delivered, now, at)
		t.LastError = ""
	} else {
		failAttempt(t, now, o.err.Error(), o.retryIn)
	}
}

// diskFullWait is the first pause before an outcome refused for lack of
// disk space is written again; it doubles up to diskFullWaitMax.
const (
	diskFullWait    = 100 * time.Millisecond
	diskFullWaitMax = 5 * time.Second
)

// waitDiskFull reports whether an outcome refused for lack of disk space
// is to be written again: yes until ctx (the engine's) ends. The first
// such outcome of a round (first) waits *wait, which then doubles; the
// others of the round go with it.
func waitDiskFull(ctx context.Context, wait *time.Duration, first bool) bool {
	if !first {
		return ctx.Err() == nil
	}
	d := *wait
	*wait = min(2*d, diskFullWaitMax)
	return sleepCtx(ctx, d)
}

// firstFull is the index of the first store.ErrDiskFull in errs, or -1.
func firstFull(errs []error) int {
	for k, err := range errs {
		if errors.Is(err, store.ErrDiskFull) {
			return k
		}
	}
	return -1
}

// mirror mirrors the outcomes of attempts into the index and tracks the
// tasks again: stored, the outcomes written; moved, the tasks whose
// outcome was not written because they moved on (as read); released, the
// tasks of attempts cut short (as stored: due). A cluster's index holds
// the members of all three in their PrepareQueue, where the claim put them.
func (x *outcomes) mirror(ctx context.Context, stored, moved []written, released []*task.Task) {
	if err := x.index.mirrorEnded(ctx, stored, moved, released); err != nil {
		n := len(stored) + len(moved) + len(released)
		x.log.WarnContext(ctx, "mirror delivery outcomes to the index; the repair scan will", slog.Int("tasks", n), slog.String("error", err.Error()))
	}
	for _, w := range stored {
		x.writer.track(w)
	}
	for _, w := range moved {
		x.writer.track(w)
	}
}
