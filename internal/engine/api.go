package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// CreateParams is one task to create. The API layer has turned delay into
// DueAt and the payload forms into bytes. The task made keeps Payload and
// Target as they are (not copies): the caller must not change them after.
type CreateParams struct {
	App      string
	Key      string // optional
	DueAt    time.Time
	Deadline *time.Time
	Payload  []byte
	Target   task.Target
	Retry    task.RetryPolicy
	// TraceParent and TraceState are the W3C trace context the task is
	// created in (task.Task.Trace); empty for none.
	TraceParent, TraceState string
}

// CreateResult is the outcome of one CreateParams: a task (new or the one
// that had the key) or an error naming the bad field.
type CreateResult struct {
	Task    *task.Task
	Created bool
	Err     error
}

// MaxBatch is the most tasks one Create call takes.
const MaxBatch = 1000

// wireEdge makes the services the API's edge uses (the creates batcher,
// the rules of every way in, the schedules' API and stepper, pull
// leases, bulk actions, transfers) over e's task writer: each gets what
// it uses as func fields, never e itself. New calls it once, after the
// apps; nothing runs until Start.
func wireEdge(e *Engine, cfg Config) {
	// The task writer, as the services take it.
	update := func(ctx context.Context, id task.ID, fn func(*task.Task) error) (written, error) {
		return e.writer.update(ctx, id, nil, fn)
	}
	updateMany := func(ctx context.Context, ids []task.ID, fn func([]*task.Task) []error) ([]written, []error) {
		return e.writer.updateMany(ctx, ids, nil, fn)
	}
	e.creates = newCreates(cfg.Store, e.writer.wrote)
	e.rules = &rules{
		policy:     e.apps.of,
		vetTarget:  cfg.CheckTarget,
		maxPayload: cfg.MaxPayload,
		ids:        &e.ids,
		shardFor:   cfg.ShardFor,
	}
	e.steps = newStepper(stepperParams{
		store:       e.schedules,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		rules:       e.rules,
		hooks:       cfg.Hooks,
		owns:        cfg.OwnsSchedule,
		takeCreates: e.apps.takeCreates,
		changed:     e.apps.changed,
		idle:        e.tclock.scheduleIdle,
		create:      e.creates.create,
		getByKey:    cfg.Store.GetByKey,
		update:      update,
		wrote:       e.writer.wrote,
		attemptOf:   e.attempts.attemptOf,
	})
	e.sched = &Schedules{p: schedulesParams{
		ready:       e.checkReady,
		now:         e.msNow,
		store:       e.schedules,
		rules:       e.rules,
		allowCreate: e.apps.allowCreate,
		log:         cfg.Logger,
		stepNow:     e.steps.stepNow,
		hold:        e.steps.hold,
		retireOld:   e.steps.retireOld,
		kick:        e.steps.kick,
	}}
	e.leases = &leases{p: leasesParams{
		ready:   e.checkReady,
		now:     e.msNow,
		clock:   cfg.Clock,
		boot:    e.boot,
		log:     cfg.Logger,
		started: cfg.Hooks.AttemptStarted,
		src: e.index.pullSource(pullSourceParams{
			clock:      cfg.Clock,
			log:        cfg.Logger,
			claimable:  cfg.Store.Claimable,
			waiting:    claimableWaiting(cfg.Store),
			takeQueued: e.held.lease,
			firing:     e.dispatch.firing,
			storeDue:   e.held.storeClaimDue,
			storeScan:  e.held.storeScan,
			notHeld:    e.held.notHeld,
			heldPull:   e.held.has,
		}),
		takeHeld:      e.attempts.takeLeases,
		endHeldLeases: e.held.endLeases,
		update:        update,
		updateMany:    updateMany,
		wrote:         e.writer.wrote,
	}}
	e.bulk = &Bulk{p: bulkParams{
		ready:      e.checkReady,
		now:        e.msNow,
		list:       cfg.Store.List,
		updateMany: updateMany,
		wrote:      e.writer.wrote,
		underway:   e.attempts.underway,
	}}
	e.transfer = newTransfer(cfg.Store, transferParams{
		ready:   e.checkReady,
		now:     e.msNow,
		rules:   e.rules,
		create:  e.creates.create,
		stepNow: e.steps.stepNow,
	})
}

// Bulk returns the engine's bulk actions (RetryAll, CancelAll): changes
// of many tasks a filter selects, beside the one-task API on Engine.
func (e *Engine) Bulk() *Bulk { return e.bulk }

// Schedules returns the API of recurring schedules.
func (e *Engine) Schedules() *Schedules { return e.sched }

// Transfer returns the engine's backup, export and import.
func (e *Engine) Transfer() *Transfer { return e.transfer }

func (e *Engine) checkReady() error {
	if !e.Ready() {
		return ErrNotReady
	}
	return nil
}

// withPolicyRetry fills the zero fields of a task's retry policy from its
// app's.
func withPolicyRetry(r, app task.RetryPolicy) task.RetryPolicy {
	if r.MaxAttempts == 0 {
		r.MaxAttempts = app.MaxAttempts
	}
	if r.MinBackoff == 0 {
		r.MinBackoff = app.MinBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = app.MaxBackoff
	}
	return r
}

func checkDeadline(deadline, due, now time.Time) error {
	if deadline.Before(due) {
		return &task.FieldError{Field: "deadline", Message: "is before the due time"}
	}
	if deadline.Before(now) {
		return &task.FieldError{Field: "deadline", Message: "has already passed"}
	}
	return nil
}

// Create creates tasks in one durable write. Each result says whether its
// task was created or already existed (same app and key), or why it was
// refused. The error is for the whole call (not ready, store failure).
func (e *Engine) Create(ctx context.Context, ps []CreateParams) ([]CreateResult, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	now := e.msNow()
	results := make([]CreateResult, len(ps))
	tasks := make([]*task.Task, 0, len(ps))
	idx := make([]int, 0, len(ps))
	var perApp appCounts // a call's tasks are mostly of one app: no map
	var last checked
	for i, p := range ps {
		t, err := e.rules.newTask(p, now, &last)
		if err != nil {
			results[i].Err = err
			continue
		}
		tasks = append(tasks, t)
		idx = append(idx, i)
		perApp.add(t.App, 1)
	}
	// Creates beyond an app's creates_per_second fail as a whole per app.
	var limited map[string]error
	for _, c := range perApp.list {
		if err := e.apps.allowCreate(c.app, c.n, now); err != nil {
			if limited == nil {
				limited = map[string]error{}
			}
			limited[c.app] = err
		}
	}
	if len(limited) > 0 {
		kt, ki := tasks[:0:0], idx[:0:0]
		for j, t := range tasks {
			if err := limited[t.App]; err != nil {
				results[idx[j]].Err = err
				continue
			}
			kt, ki = append(kt, t), append(ki, idx[j])
		}
		tasks, idx = kt, ki
	}
	if len(tasks) == 0 {
		return results, nil
	}
	rs, err := e.creates.create(ctx, tasks)
	if err != nil {
		return nil, fmt.Errorf("store tasks: %w", err)
	}
	var created appCounts // mirrored and tracked by the create's write
	for j, r := range rs {
		results[idx[j]] = CreateResult{Task: r.Task, Created: r.Created}
		if r.Created {
			created.add(r.Task.App, 1)
		}
	}
	if h := e.cfg.Hooks.Created; h != nil {
		for _, c := range created.list {
			h(c.app, c.n)
		}
	}
	return results, nil
}

// Get returns a task by id.
//
// A task whose push attempt is under way in this process is shown as the
// attempt sees it: delivering, the attempt counted, with its lease. The
// store keeps it scheduled until the outcome (fire.go), which is what
// another node of a cluster shows meanwhile.
func (e *Engine) Get(ctx context.Context, id task.ID) (*task.Task, error) {
	t, err := e.store.Get(ctx, id) // an imported task too: ids survive a move (transfer.go)
	return shown(t, e.attempts.attemptOf), err
}

// shown is t, or the task as its attempt under way here shows it
// (attemptOf's).
func shown(t *task.Task, attemptOf func(task.ID) *task.Task) *task.Task {
	if t == nil {
		return nil
	}
	if a := attemptOf(t.ID); a != nil {
		return a
	}
	return t
}

// GetByKey returns app's task with key.
func (e *Engine) GetByKey(ctx context.Context, app, key string) (*task.Task, error) {
	if err := task.ValidateApp(app); err != nil {
		return nil, store.ErrNotFound
	}
	t, err := e.store.GetByKey(ctx, app, key)
	return shown(t, e.attempts.attemptOf), err
}

// PatchParams changes a scheduled task. Nil fields stay as they are.
type PatchParams struct {
	DueAt         *time.Time
	Deadline      *time.Time
	ClearDeadline bool
	Payload       *[]byte
}

// Patch changes a scheduled task's due time, deadline or payload. Moving the
// due time moves the next attempt with it.
func (e *Engine) Patch(ctx context.Context, id task.ID, p PatchParams) (*task.Task, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	w, err := e.writer.update(ctx, id, nil, func(t *task.Task) error {
		if a := e.attempts.attemptOf(t.ID); a != nil {
			return conflict("change", a, "")
		}
		if t.State != task.Scheduled {
			return conflict("change", t, "")
		}
		if p.Payload != nil {
			if err := e.rules.payload(t.App, len(*p.Payload)); err != nil {
				return err
			}
		}
		now := e.msNow()
		if p.DueAt != nil {
			due := task.Ms(*p.DueAt)
			t.DueAt, t.NextAttemptAt = due, due
		}
		switch {
		case p.ClearDeadline:
			t.Deadline = nil
		case p.Deadline != nil:
			d := task.Ms(*p.Deadline)
			t.Deadline = &d
		}
		if t.Deadline != nil && (p.Deadline != nil || p.DueAt != nil) {
			if err := checkDeadline(*t.Deadline, t.NextAttemptAt, now); err != nil {
				return err
			}
		}
		if p.Payload != nil {
			t.Payload = append([]byte(nil), (*p.Payload)...)
		}
		t.WakeAt = wakeFor(t)
		t.UpdatedAt = now
		t.Record(now, "changed", 0, "")
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.writer.wrote(ctx, w)
	return w.t, nil
}

// Cancel cancels a scheduled task. Cancelling a cancelled task succeeds;
// other states are a *ConflictError.
func (e *Engine) Cancel(ctx context.Context, id task.ID) (*task.Task, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	w, err := e.writer.update(ctx, id, nil, func(t *task.Task) error {
		switch t.State {
		case task.Cancelled:
			return errSkip
		case task.Scheduled:
			if a := e.attempts.attemptOf(t.ID); a != nil {
				return conflict("cancel", a, "")
			}
			finish(t, task.Cancelled, e.msNow())
			return nil
		}
		return conflict("cancel", t, "")
	})
	if errors.Is(err, errSkip) {
		return w.t, nil
	}
	if err != nil {
		return nil, err
	}
	e.writer.wrote(ctx, w)
	e.steps.skipped(ctx, w.t) // skip.go: an occurrence's schedule moves on
	return w.t, nil
}

// CancelByKey cancels app's task with key.
func (e *Engine) CancelByKey(ctx context.Context, app, key string) (*task.Task, error) {
	t, err := e.GetByKey(ctx, app, key)
	if err != nil {
		return nil, err
	}
	return e.Cancel(ctx, t.ID)
}

// MaxList is the largest page List returns.
const MaxList = 1000

// List returns a page of app's tasks in state, in id order, after the id
// `after` (zero: from the start), and the id to pass as `after` for the next
// page (zero on the last page).
func (e *Engine) List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, task.ID, error) {
	if err := task.ValidateApp(app); err != nil {
		return nil, task.ID{}, err
	}
	if !state.Valid() {
		return nil, task.ID{}, &task.FieldError{Field: "state", Message: fmt.Sprintf("must be one of %v", task.States)}
	}
	if limit < 1 || limit > MaxList {
		return nil, task.ID{}, &task.FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxList)}
	}
	ts, err := e.store.List(ctx, app, state, after, limit+1)
	if err != nil {
		return nil, task.ID{}, fmt.Errorf("list tasks: %w", err)
	}
	if len(ts) > limit {
		return ts[:limit], ts[limit-1].ID, nil
	}
	return ts, task.ID{}, nil
}

// Retry schedules a dead or expired task to fire now, with its attempts
// reset and its deadline cleared.
func (e *Engine) Retry(ctx context.Context, id task.ID) (*task.Task, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	w, err := e.writer.update(ctx, id, nil, func(t *task.Task) error {
		if t.State != task.Dead && t.State != task.Expired {
			return conflict("retry", t, "only dead or expired tasks can be retried")
		}
		retry(t, e.msNow())
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.writer.wrote(ctx, w)
	return w.t, nil
}

// LeaseParams bounds a Lease call (the HTTP API's claim).
type LeaseParams struct {
	Max   int           // 1..1000
	Lease time.Duration // 1s..1h
	Wait  time.Duration // 0..30s
}

// Limits of LeaseParams.
const (
	MaxClaim = 1000
	MinLease = time.Second
	MaxLease = time.Hour
	MaxWait  = 30 * time.Second
)

// Lease takes up to Max due pull tasks of app, each now delivering under a
// lease of its own (the HTTP API's POST …/claim). With Wait it waits up
// to that long for at least one.
func (e *Engine) Lease(ctx context.Context, app string, p LeaseParams) ([]*task.Task, error) {
	if err := task.ValidateApp(app); err != nil {
		return nil, err
	}
	switch {
	case p.Max < 1 || p.Max > MaxClaim:
		return nil, &task.FieldError{Field: "max", Message: fmt.Sprintf("must be between 1 and %d", MaxClaim)}
	case p.Lease < MinLease || p.Lease > MaxLease:
		return nil, &task.FieldError{Field: "lease", Message: fmt.Sprintf("must be between %s and %s", MinLease, MaxLease)}
	case p.Wait < 0 || p.Wait > MaxWait:
		return nil, &task.FieldError{Field: "wait", Message: fmt.Sprintf("must be between 0s and %s", MaxWait)}
	}
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if p.Wait > 0 {
		t := time.NewTimer(p.Wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		// Take the waiter before looking, so a task that becomes due
		// between the look and the wait still wakes us.
		wake := e.waiters.wait(app)
		got, err := e.leases.once(ctx, app, p)
		if err != nil || len(got) > 0 || timeout == nil {
			return got, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-timeout:
			return nil, nil
		case <-wake:
		}
	}
}

// Ack ends a lease: it marks the leased task delivered. The lease must be
// the task's current one; otherwise it is a *ConflictError.
func (e *Engine) Ack(ctx context.Context, id task.ID, lease string) error {
	return e.leases.end(ctx, "ack", pullAck{id: id, lease: lease}, acked)
}

// acked is what an ack does to a task whose lease it holds.
func acked(t *task.Task, now time.Time) {
	finish(t, task.Delivered, now)
	t.LastError = ""
}

// AckParams is one task of AckMany: its id and the lease Lease gave.
type AckParams struct {
	ID    task.ID
	Lease string
}

// AckMany acks up to MaxClaim leased tasks of app, as Ack does each, in one
// durable write. The errors are in the order of acks, nil for a task acked;
// else a *task.FieldError naming acks.N.lease (empty) or acks.N.id (given
// twice: only its first ack counts), a *ConflictError when the lease is no
// longer current, an error matching store.ErrNotFound when app has no task
// with the id (a task of another app is answered so too), or the store's
// error. The error returned is for the whole call: not ready, a bad app, a
// count outside 1..MaxClaim, or a store that failed every task it was
// given.
func (e *Engine) AckMany(ctx context.Context, app string, acks []AckParams) ([]error, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	if err := task.ValidateApp(app); err != nil {
		return nil, err
	}
	if len(acks) < 1 || len(acks) > MaxClaim {
		return nil, &task.FieldError{Field: "acks", Message: fmt.Sprintf("must hold 1 to %d acks, got %d", MaxClaim, len(acks))}
	}
	errs := make([]error, len(acks))
	ids := make([]task.ID, 0, len(acks))
	idx := make([]int, 0, len(acks)) // the index in acks of each of ids
	seen := make(map[task.ID]bool, len(acks))
	for i, a := range acks {
		if a.Lease == "" {
			errs[i] = &task.FieldError{Field: fmt.Sprintf("acks.%d.lease", i), Message: leaseRequired}
			continue
		}
		// The store takes each id once (Store.UpdateMany).
		if seen[a.ID] {
			errs[i] = &task.FieldError{Field: fmt.Sprintf("acks.%d.id", i), Message: "appears twice: only the first ack of a task is tried"}
			continue
		}
		seen[a.ID] = true
		ids, idx = append(ids, a.ID), append(idx, i)
	}
	if len(ids) == 0 {
		return errs, nil
	}
	return e.leases.ackMany(ctx, app, acks, ids, idx, errs)
}

// errNoTask is AckMany's answer for a task that is absent or of another
// app.
func errNoTask(id task.ID) error { return fmt.Errorf("%w: %s", store.ErrNotFound, id) }

// leaseRequired is the message of an ack or nack without a lease.
const leaseRequired = "is required: send the lease token the claim returned"

// leaseHeld refuses op (ack, nack) on t unless t is delivering under lease.
func leaseHeld(op string, t *task.Task, lease string) error {
	if t.State != task.Delivering || t.Lease != lease {
		return conflict(op, t, "the lease is no longer current (it ran out, or the task was claimed again)")
	}
	return nil
}

// Nack ends a lease with a failed attempt: it is retried after
// retryIn (nil: its backoff), or is dead when no attempt is left.
func (e *Engine) Nack(ctx context.Context, id task.ID, lease, msg string, retryIn *time.Duration) error {
	if msg == "" {
		msg = "nacked by the consumer"
	}
	return e.leases.end(ctx, "nack", pullAck{id: id, lease: lease, err: errors.New(msg), retryIn: retryIn}, func(t *task.Task, now time.Time) {
		failAttempt(t, now, msg, retryIn)
	})
}
