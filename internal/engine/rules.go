package engine

import (
	"cmp"
	"fmt"
	"time"

	"github.com/toc-dev/toc/task"
)

// rules are the checks every way a task or a schedule comes in shares (a
// create, a schedule's create or PATCH, an import), and the making of new
// ids. A plain value over the apps' policies and the Config: no state,
// no lock.
type rules struct {
	policy     func(app string) AppPolicy
	vetTarget  func(app string, t task.Target) error // Config.CheckTarget; nil accepts every valid target
	maxPayload int                                   // Config.MaxPayload, when the app sets none
	ids        *task.IDGenerator
	shardFor   func(app, key string, id task.ID) uint16 // Config.ShardFor; nil: shard 0
}

// newID returns a new id made at now, in the shard of app's key.
func (r *rules) newID(now time.Time, app, key string) task.ID {
	id := r.ids.New(now, 0)
	if f := r.shardFor; f != nil {
		id = id.WithShard(f(app, key, id))
	}
	return id
}

// target checks t, a target of app's (filled from its default when it
// was to be): valid, and allowed by Config.CheckTarget.
func (r *rules) target(app string, t task.Target) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if check := r.vetTarget; check != nil {
		return check(app, t)
	}
	return nil
}

// payload checks a payload of n bytes against app's limit.
func (r *rules) payload(app string, n int) error { return r.payloadOf(r.policy(app), n) }

// payloadOf checks a payload of n bytes against the limit of an app whose
// policy is pol.
func (r *rules) payloadOf(pol AppPolicy, n int) error {
	if limit := cmp.Or(pol.MaxPayload, r.maxPayload); n > limit {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, n, limit)
	}
	return nil
}

// checked is what newTask found of the task before, for the next one of
// the same call: a batch's tasks are mostly of one app with one target,
// whose policy is then read, and whose target parsed and vetted, once.
type checked struct {
	app    string
	pol    AppPolicy
	target task.Target // valid and allowed for app; zero for none yet
}

// sameTarget reports whether a and b are the same plain target: a
// webhook with a URL and a timeout alone, or a pull target. Others are
// checked each time.
func sameTarget(a, b task.Target) bool {
	switch {
	case a.AMQP != nil || a.NATS != nil || b.AMQP != nil || b.NATS != nil:
		return false
	case a.Pull != nil || b.Pull != nil:
		return a.Pull != nil && b.Pull != nil && a.HTTP == nil && b.HTTP == nil
	}
	x, y := a.HTTP, b.HTTP
	return x != nil && y != nil && x.Headers == nil && y.Headers == nil && x.URL == y.URL && x.Timeout == y.Timeout
}

// noTarget is the error of a task or template without a target whose
// app has no default one.
func noTarget() error {
	return &task.FieldError{Field: "target", Message: `is required (the app has no default target): {"http":{"url":"..."}} or {"pull":{}}`}
}

// checkTemplate validates s's task template as a create validates a task,
// filling the app's default target (fill) and retry policy.
func (r *rules) checkTemplate(s *task.Schedule, fill bool) error {
	pol := r.policy(s.App)
	if fill && s.Target.Kind() == "" && pol.Target != nil {
		s.Target = pol.Target.Clone()
	}
	if s.Target.Kind() == "" {
		return noTarget()
	}
	if err := r.target(s.App, s.Target); err != nil {
		return err
	}
	if err := s.Retry.Validate(); err != nil {
		return err
	}
	s.Retry = withPolicyRetry(s.Retry, pol.Retry).WithDefaults()
	return r.payload(s.App, len(s.Payload))
}

// newTask checks p as a create does and returns the task to store. last,
// when not nil, carries what the call's task before found (see checked).
func (r *rules) newTask(p CreateParams, now time.Time, last *checked) (*task.Task, error) {
	if err := task.ValidateApp(p.App); err != nil {
		return nil, err
	}
	if p.Key != "" {
		if err := task.ValidateKey(p.Key); err != nil {
			return nil, err
		}
	}
	if p.DueAt.IsZero() {
		return nil, &task.FieldError{Field: "due_at", Message: `one of "due_at" or "delay" is required`}
	}
	if last == nil {
		last = new(checked)
	}
	if last.app != p.App || last.target.Kind() == "" {
		*last = checked{app: p.App, pol: r.policy(p.App)}
	}
	pol := last.pol
	if p.Target.Kind() == "" && pol.Target != nil {
		p.Target = pol.Target.Clone() // the task's own: the policy's is shared
	}
	if p.Target.Kind() == "" {
		return nil, noTarget()
	}
	if !sameTarget(p.Target, last.target) {
		last.target = task.Target{}
		if err := r.target(p.App, p.Target); err != nil {
			return nil, err
		}
		last.target = p.Target
	}
	if err := p.Retry.Validate(); err != nil {
		return nil, err
	}
	p.Retry = withPolicyRetry(p.Retry, pol.Retry)
	if err := r.payloadOf(pol, len(p.Payload)); err != nil {
		return nil, err
	}
	due := task.Ms(p.DueAt)
	now = now.UTC().Truncate(time.Millisecond)
	a := new(newTaskAlloc)
	t := &a.t
	*t = task.Task{
		ID:            r.newID(now, p.App, p.Key),
		App:           p.App,
		Key:           p.Key,
		DueAt:         due,
		NextAttemptAt: due,
		Payload:       p.Payload,
		Target:        p.Target, // the caller's (CreateParams), or the policy's copied above
		Retry:         p.Retry.WithDefaults(),
		State:         task.Scheduled,
		CreatedAt:     now,
		UpdatedAt:     now,
		History:       a.history[:0:1],
	}
	if p.TraceParent != "" {
		t.Trace = &task.TraceContext{Parent: p.TraceParent, State: p.TraceState}
	}
	if p.Deadline != nil {
		d := task.Ms(*p.Deadline)
		if err := checkDeadline(d, due, now); err != nil {
			return nil, err
		}
		t.Deadline = &d
	}
	t.WakeAt = wakeFor(t)
	t.Record(now, "created", 0, "")
	return t, nil
}

// newTaskAlloc is a new task with room for its first event: one
// allocation for the two (a later event grows the history out of it).
type newTaskAlloc struct {
	t       task.Task
	history [1]task.Event
}
