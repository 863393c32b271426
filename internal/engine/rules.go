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
func (r *rules) payload(app string, n int) error {
	if limit := cmp.Or(r.policy(app).MaxPayload, r.maxPayload); n > limit {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, n, limit)
	}
	return nil
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
