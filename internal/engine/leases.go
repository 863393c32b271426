package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// leases take and end the leases of pull tasks behind Engine.Lease, Ack,
// AckMany and Nack. Two paths: the pull tasks held in memory on a single
// node (pull.go: leased from the app's ready queue, ended in the outcomes'
// group commit), and the leases written to the store: of the pull tasks
// waiting in the store on a single node (stored so by an older version,
// or past pullHoldMax), and of every pull task in a cluster, taken in one
// synced write for the whole call and ended (ack, nack) in one too.
//
// In a cluster the pull tasks due are found in the index (pullIndex: the
// slots' PullQueues in Redis, where the mirror of each one's create or
// last write, or its promotion, put it), not by a SQL scan per call, and
// a pull task falling due is not written (pullWaitGrace); the store is scanned
// as well, at most once every storeClaimEvery per app, only when the index
// did not fill a call (what Redis lost before a repair, tasks an older
// version left due). Where a lease finds its pull tasks is the source's
// (leasesource.go), which the index adapter gives: leases has no mode.
type leases struct {
	p leasesParams
}

// leasesParams are what leases uses of the engine and the store.
type leasesParams struct {
	ready func() error     // ErrNotReady unless the engine takes work
	now   func() time.Time // the engine's clock, to the millisecond
	clock clock.Clock
	boot  string // this process's part of lease tokens
	log   *slog.Logger
	// started is Hooks.AttemptStarted (nil: none).
	started func(app, kind string, lateness time.Duration)
	// src is where leases find the pull tasks due (leasesource.go): one
	// node's held ones, or a cluster index's.
	src pullSource
	// takeHeld takes the leases held here of acks, and endHeldLeases ends
	// them (op: ack, nack) in the outcomes' commit (pull.go).
	takeHeld      func(op, app string, acks []pullAck, errs []error) (mine, rest []pullAck)
	endHeldLeases func(op, app string, mine []pullAck, errs []error)
	// The task writer.
	update     func(ctx context.Context, id task.ID, fn func(*task.Task) error) (written, error)
	updateMany func(ctx context.Context, ids []task.ID, fn func([]*task.Task) []error) ([]written, []error)
	wrote      func(ctx context.Context, ws ...written)
}

// once leases what is due now: what this process holds first (one node's
// ready queue, pull.go), then, when that did not fill the call, from the
// index or the store (take).
func (l *leases) once(ctx context.Context, app string, p LeaseParams) ([]*task.Task, error) {
	got, more, scan := l.p.src.first(ctx, app, p)
	if !more {
		return got, nil
	}
	rest, err := l.take(ctx, app, LeaseParams{Max: p.Max - len(got), Lease: p.Lease}, scan)
	switch {
	case err != nil && len(got) == 0:
		return nil, err
	case err != nil:
		l.p.log.ErrorContext(ctx, "claim pull tasks waiting in the store", slog.String("app", app), slog.String("error", err.Error()))
	}
	return append(got, rest...), nil
}

// take finds up to p.Max of the pull tasks the store has due for app,
// reading up to scan of them, and leases them in one synced write.
// On a single node it takes only the tasks waiting in the store (written
// so by an older version, or past pullHoldMax: pull.go), not those the
// wheel fires into the ready queue (stored with their due time as WakeAt)
// nor those held here. In a cluster it takes them from the index first
// (find).
func (l *leases) take(ctx context.Context, app string, p LeaseParams, scan int) ([]*task.Task, error) {
	ids, taken, err := l.p.src.find(ctx, app, p.Max, scan)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// One synced write for the whole call: a write (and an fsync) per
	// task made a lease of 100 tasks cost 100 fsyncs one after another.
	leased := make([]bool, len(ids))
	ts, errs := l.p.updateMany(ctx, ids, func(ts []*task.Task) []error {
		now := l.p.now()
		errs := make([]error, len(ts))
		n := 0
		for i, t := range ts {
			leased[i] = false
			switch {
			case t == nil || t.State != task.Scheduled || t.Target.Pull == nil || t.NextAttemptAt.After(now):
				errs[i] = errSkip // leased by someone else meanwhile, or moved
			case !l.p.src.leasable(t):
				errs[i] = errSkip // the wheel's: it comes to the ready queue
			case pastDeadline(t, now):
				expire(t, now)
			case n == p.Max:
				errs[i] = errSkip
			default:
				startAttempt(t, now, p.Lease, l.p.boot, nil)
				leased[i] = true
				n++
			}
		}
		return errs
	})
	var got []*task.Task
	var stored []written
	var failed error
	for i, err := range errs {
		switch {
		case errors.Is(err, errSkip) || errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			failed = cmp.Or(failed, fmt.Errorf("claim task %s: %w", ids[i], err))
			continue
		}
		t := ts[i].t
		stored = append(stored, ts[i])
		if leased[i] {
			got = append(got, t)
			if h := l.p.started; h != nil {
				h(t.App, "pull", t.UpdatedAt.Sub(t.NextAttemptAt))
			}
		}
	}
	if len(stored) > 0 {
		l.p.wrote(ctx, stored...)
	}
	l.p.src.untake(ctx, app, ids[:taken], ts[:taken], errs[:taken], l.p.now())
	switch {
	case failed != nil && len(got) == 0:
		return nil, failed
	case failed != nil:
		// The tasks leased are handed out: their leases are stored, and
		// a call that answered an error would leave them to run out
		// unseen. The others stay due for the next call.
		l.p.log.ErrorContext(ctx, "claim pull tasks", slog.String("app", app), slog.String("error", failed.Error()))
	}
	return got, nil
}

// pullWaitGrace is how long a cluster's pull task due waits for a lease
// without a store write: its slot owner's fire job reads it when it falls
// due and writes nothing (leases take it from the index: fire.go's
// vPullWait); the wheel keeps only its deadline. Fired again this much
// later or more (the next repair scan promotes and announces it again, a
// rescan of the owner's slots reads it again), it is written as waiting,
// with its deadline as its wake time (as before), so that a backlog of
// tasks nobody leases leaves the wake order instead of being read again
// and again. A task leased meanwhile costs no second look.
const pullWaitGrace = 5 * time.Second

// pullTakeHold is how long a lease call holds the pull tasks it took from
// the cluster index (pullIndex.TakePull) until it leases them in the store
// and mirrors them: a call whose node dies meanwhile leaves them to be
// taken again after it.
const pullTakeHold = 10 * time.Second

// ackStored acks, as stored, the tasks ids of app (AckMany's acks[idx[j]]
// is ids[j]'s), each in errs[idx[j]] as AckMany answers it, in one write.
// It returns the first store failure and how many there were.
func (l *leases) ackStored(ctx context.Context, app string, acks []AckParams, ids []task.ID, idx []int, errs []error) (failed error, failures int) {
	ws, werrs := l.p.updateMany(ctx, ids, func(ts []*task.Task) []error {
		now := l.p.now()
		errs := make([]error, len(ts))
		for j, t := range ts {
			switch {
			case t == nil: // not stored: the store answers its own error
			case t.App != app:
				errs[j] = errNoTask(t.ID) // another app's task looks absent
			default:
				if errs[j] = leaseHeld("ack", t, acks[idx[j]].Lease); errs[j] == nil {
					acked(t, now)
				}
			}
		}
		return errs
	})
	var stored []written
	for j, err := range werrs {
		i := idx[j]
		switch {
		case err == nil:
			stored = append(stored, ws[j])
		case errors.Is(err, store.ErrNotFound):
			// One answer however the store said it, the same as for
			// another app's task.
			errs[i] = errNoTask(ids[j])
		case errors.As(err, new(*ConflictError)):
			errs[i] = err
		default:
			errs[i] = fmt.Errorf("ack task %s: %w", ids[j], err)
			failed = cmp.Or(failed, errs[i])
			failures++
		}
	}
	l.p.wrote(ctx, stored...)
	return failed, failures
}

// endStored acks or nacks (op) the task id as stored, when its lease is
// lease: apply changes it under its row lock.
func (l *leases) endStored(ctx context.Context, op string, id task.ID, lease string, apply func(*task.Task, time.Time)) error {
	if err := l.p.ready(); err != nil {
		return err
	}
	if lease == "" {
		return &task.FieldError{Field: "lease", Message: leaseRequired}
	}
	w, err := l.p.update(ctx, id, func(t *task.Task) error {
		if err := leaseHeld(op, t, lease); err != nil {
			return err
		}
		apply(t, l.p.now())
		return nil
	})
	if err != nil {
		return err
	}
	l.p.wrote(ctx, w)
	return nil
}

// end acks or nacks (op) k: a lease held here in memory, else as stored.
func (l *leases) end(ctx context.Context, op string, k pullAck, apply func(*task.Task, time.Time)) error {
	if held, err := l.endHeld(op, k); held {
		return err
	}
	return l.endStored(ctx, op, k.id, k.lease, apply)
}

// endHeld acks or nacks (op) k when its lease is held in memory
// (pull.go), and reports whether it was.
func (l *leases) endHeld(op string, k pullAck) (bool, error) {
	if k.lease == "" || l.p.ready() != nil {
		return false, nil // endStored answers
	}
	errs := make([]error, 1)
	mine, _ := l.p.takeHeld(op, "", []pullAck{k}, errs)
	if len(mine) == 0 && errs[0] == nil {
		return false, nil // not held here: as stored
	}
	l.p.endHeldLeases(op, "", mine, errs)
	return true, errs[0]
}

// ackMany acks ids (distinct, each with a lease), AckMany's acks[idx[j]]
// being ids[j]'s, and answers as AckMany does, errs holding the answers
// of the acks refused before: the leases held in memory (pull.go) end in
// the outcomes' group commit, the others as stored, in one write.
func (l *leases) ackMany(ctx context.Context, app string, acks []AckParams, ids []task.ID, idx []int, errs []error) ([]error, error) {
	var failed error // the first store failure
	failures, total := 0, len(ids)
	{
		// The leases held in memory (pull.go; none in a cluster): their
		// outcomes in one group-committed write; the others as stored.
		ks := make([]pullAck, len(ids))
		for j, id := range ids {
			ks[j] = pullAck{i: idx[j], id: id, lease: acks[idx[j]].Lease}
		}
		mine, rest := l.p.takeHeld("ack", app, ks, errs)
		l.p.endHeldLeases("ack", app, mine, errs)
		for _, k := range mine {
			switch err := errs[k.i]; {
			case errors.Is(err, store.ErrNotFound):
				errs[k.i] = errNoTask(k.id)
			case storeError(err):
				failed = cmp.Or(failed, err)
				failures++
			}
		}
		ids, idx = ids[:0], idx[:0]
		for _, k := range rest {
			ids, idx = append(ids, k.id), append(idx, k.i)
		}
		if len(ids) == 0 {
			if failures == total {
				return nil, failed
			}
			return errs, nil
		}
	}
	f, n := l.ackStored(ctx, app, acks, ids, idx, errs)
	failed, failures = cmp.Or(failed, f), failures+n
	if failures == total {
		return nil, failed
	}
	return errs, nil
}
