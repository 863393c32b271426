package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// skipped moves t's schedule past t, an occurrence a user just cancelled
// (how one occurrence is skipped), when t was its pending occurrence: the
// occurrence after it is made now and becomes the schedule's NextAt, so
// that the schedule shows what will fire next rather than the cancelled
// time. LastAt stays: the cancelled occurrence never came due. A schedule
// that changed meanwhile (a step, a PATCH, a pause) is left to what changed
// it; an occurrence made for it here that it no longer names is cancelled.
// Failures are logged: the schedule's own step still comes at the
// cancelled time and moves it on then.
func (sp *stepper) skipped(ctx context.Context, t *task.Task) {
	if t.ScheduleID.IsZero() || sp.p.store == nil {
		return
	}
	warn := func(what string, err error) {
		sp.p.log.WarnContext(ctx, what, slog.String("schedule", t.ScheduleID.String()),
			slog.String("task", t.ID.String()), slog.String("error", err.Error()))
	}
	ss := sp.p.store
	s, err := ss.GetSchedule(ctx, t.ScheduleID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			warn("read the schedule of a cancelled occurrence", err)
		}
		return
	}
	if s.State != task.ScheduleActive || s.NextAt == nil || !s.NextAt.Equal(t.DueAt) || s.WakeAt.Before(*s.NextAt) {
		return // not its pending occurrence, or a step is owed first
	}
	rule, err := ruleOf(s)
	if err != nil {
		warn("move a schedule past a cancelled occurrence", err)
		return
	}
	now := sp.now()
	next := nextTime(s, rule, t.DueAt)
	var made []store.CreateResult
	if !next.IsZero() {
		if made, err = sp.makeOccurrences(ctx, s, []time.Time{next}, now); err != nil {
			warn("move a schedule past a cancelled occurrence", err)
			return
		}
	}
	_, err = ss.UpdateSchedule(ctx, s.ID, func(c *task.Schedule) error {
		if c.State != task.ScheduleActive || !c.WakeAt.Equal(s.WakeAt) || !equalTimes(c.NextAt, s.NextAt) {
			return errSkip
		}
		if next.IsZero() {
			c.State, c.NextAt, c.WakeAt = task.ScheduleEnded, nil, time.Time{}
			return nil
		}
		c.NextAt, c.WakeAt, c.Made = &next, next, &next
		return nil
	})
	switch {
	case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
		cur, gerr := ss.GetSchedule(ctx, s.ID)
		if gerr != nil {
			cur = nil
		}
		sp.dropStray(ctx, s, cur, made, false, now)
	case err != nil:
		warn("move a schedule past a cancelled occurrence", err)
	}
	sp.kick()
}

// madeOf is s's last occurrence made. A schedule a release before Made
// wrote has none, and its LastAt was that occurrence (the pending one);
// LastAt is never in the future otherwise, and the callers look only at a
// time after now.
func madeOf(s *task.Schedule) *time.Time {
	if s.Made != nil {
		return s.Made
	}
	return s.LastAt
}
