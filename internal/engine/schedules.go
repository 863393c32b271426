package engine

// Schedules: recurring timers (issue 14).
//
// A schedule (task.Schedule) is a rule and a task template; each time of
// the rule becomes an ordinary task, an occurrence, with the key
// task.OccurrenceKey(schedule key, due) and ScheduleID set. An occurrence
// is created through the engine's create path (durable, in the wheel), so
// it fires, retries and dies as any task does. Because its key is
// idempotent, an occurrence is created once however many nodes, retries or
// restarts try.
//
// # The pending occurrence
//
// A schedule has at most one pending occurrence: the one at NextAt. The
// next is made when it comes due: the schedule's WakeAt is the pending
// one's due time, and the schedule loop acts on it then (stepSchedule). In
// the steady state WakeAt == NextAt == Made (the last occurrence made);
// LastAt is the last one that came due.
//
// A WakeAt before NextAt means "the occurrence at NextAt may not exist
// yet, or may carry an older template": create, PATCH and resume store the
// schedule that way (WakeAt = now), then step it at once themselves. If
// that step fails (or the process dies first), the loop finds the WakeAt in
// the past and does it within a second. The step's write sets WakeAt to
// NextAt only after the occurrences are stored, so a crash between the two
// repeats the step, and the keys make the repeat harmless.
//
// # Catch-up
//
// When the pending occurrence comes due, the times of the rule between it
// and now are occurrences the engine did not make in time. Those due
// before this process started (Engine.startedAt) were missed while toc was
// down, and the schedule's CatchUp decides what becomes of them (skip:
// none; one: the latest; all: the most recent task.MaxCatchUp, oldest
// first). Those due since are always made: a loop that ran late, or a node
// that took over a dead node's share, is not downtime. Each keeps its rule
// time as its due time and key, and fires at once.
//
// # Who acts
//
// Every engine runs the loop; Config.OwnsSchedule gives a cluster node its
// share. Two engines acting on one schedule at once (a change of shares,
// an API call on one node while the loop runs on another) make the same
// keys, so one task each, and the schedule's write is conditional on the
// WakeAt and NextAt the step started from (UpdateSchedule is atomic): the
// loser leaves it. A step whose write lost to a PATCH, pause or delete
// cancels the future occurrences it created that the schedule no longer
// names.
//
// # Limits
//
// A schedule is held to its app's limits (issue 21). Create, PATCH and
// resume take one of the app's creates (apps.allowCreate: a
// *RateLimitError past creates_per_second), which pays for the
// occurrence their step makes; a create past the app's MaxSchedules is a
// *ScheduleLimitError. Each occurrence a step makes takes a create
// (apps.takeCreates). Those the limit holds back are not made: the step
// writes the schedule with NextAt at the first of them and WakeAt just
// before it (to be made, as after a PATCH), and returns the time of the
// one create reserved for the schedule, when the loop steps it again
// with that create paid. So occurrences are made late, keeping their due
// times and keys, in the order the schedules asked, at the limit's pace;
// none is dropped. An API call marks the schedule it steps (stepping), so
// that the loop does not step it too and take its creates twice.
//
// # Replacing an occurrence
//
// Only an occurrence not yet due is replaced or cancelled (syncOccurrence,
// retireOccurrence decide it under the task's row lock): one that has
// fallen due is delivered as it was, however the calls that read it
// pending race with it.
//
// An occurrence's key is its due time, and a cancelled task keeps its key
// until the retention sweep. So a PATCH that keeps the next due time
// updates the pending occurrence in place, and a resume whose next time is
// one that the pause cancelled revives that task (only a task the
// schedule itself cancelled: one a user cancelled by key stays cancelled,
// which is how one occurrence is skipped).

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/recur"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// The schedule loop's timing.
const (
	// scheduleHorizon is how far ahead of now the loop reads schedules:
	// it arms its timer at the earliest WakeAt among them.
	scheduleHorizon = 2 * time.Second
	// scheduleRescan is how often the loop reads again at the least, so
	// that schedules written by other nodes, and steps that failed, are
	// acted on within a second.
	scheduleRescan = time.Second
	// schedulePage is the most schedules one read returns.
	schedulePage = 1000
	// scheduleWorkers bounds the schedules stepped at once: their
	// occurrences gather into shared create writes.
	scheduleWorkers = 16
)

// MaxNextTimes is the most times NextTimes returns.
const MaxNextTimes = 100

// ErrNoSchedules: the engine's store does not keep schedules.
var ErrNoSchedules = errors.New("toc: the store keeps no schedules")

// scheduleCancelNote starts the error of the "cancelled" event of an
// occurrence the schedule cancelled (pause, PATCH, delete), as opposed to
// one a user cancelled: only the former may be revived (see above).
const scheduleCancelNote = "by its schedule: "

// SchedulePatch changes a schedule. Nil fields stay as they are; Cron and
// Every replace each other (at most one may be given).
type SchedulePatch struct {
	Cron          *string
	Every         *task.Duration
	Timezone      *string
	StartAt       *time.Time
	ClearStartAt  bool
	EndAt         *time.Time
	ClearEndAt    bool
	CatchUp       *task.CatchUp
	Payload       *[]byte
	Target        *task.Target
	Retry         *task.RetryPolicy
	DeadlineAfter *task.Duration // zero clears it
}

// scheduleStore returns the store's schedules, or ErrNoSchedules.
func (e *Engine) scheduleStore() (store.Schedules, error) {
	if e.schedules == nil {
		return nil, ErrNoSchedules
	}
	return e.schedules, nil
}

// readyScheduleStore is scheduleStore for the calls that change
// schedules: they also need the engine ready (checkReady, first).
func (e *Engine) readyScheduleStore() (store.Schedules, error) {
	if err := e.checkReady(); err != nil {
		return nil, err
	}
	return e.scheduleStore()
}

// CreateSchedule stores a new schedule and creates its first occurrence:
// the rule's first time after now, or from StartAt when that is later. A
// schedule whose rule has no such time (before EndAt) is stored ended.
//
// It fills the defaults (Timezone "UTC", CatchUp "one", the app's default
// target and retry policy) and validates as for a task: a bad field is a
// *task.FieldError, a payload over the app's limit ErrTooLarge. ID, State,
// NextAt, LastAt, times and WakeAt of s are ignored. When (App, Key)
// already names a schedule, that one is returned unchanged and created is
// false.
//
// A create takes one of the app's creates_per_second (it covers the first
// occurrence): past the limit it is a *RateLimitError. An app that has
// its max_schedules schedules gets a *ScheduleLimitError.
func (e *Engine) CreateSchedule(ctx context.Context, s *task.Schedule) (*task.Schedule, bool, error) {
	ss, err := e.readyScheduleStore()
	if err != nil {
		return nil, false, err
	}
	now := e.msNow()
	sc, err := e.newSchedule(s, now)
	if err != nil {
		return nil, false, err
	}
	if err := e.apps.allowCreate(sc.App, 1, now); err != nil {
		return nil, false, err
	}
	limit := e.Policy(sc.App).maxSchedules()
	if limit > 0 {
		n, err := ss.CountAppSchedules(ctx, sc.App, limit)
		if err != nil {
			return nil, false, fmt.Errorf("count the app's schedules: %w", err)
		}
		if n >= limit {
			// At the cap, a create of a key the app has is still the
			// idempotent answer.
			switch got, err := ss.GetScheduleByKey(ctx, sc.App, sc.Key); {
			case err == nil:
				return got, false, nil
			case !errors.Is(err, store.ErrNotFound):
				return nil, false, fmt.Errorf("look up schedule: %w", err)
			}
			return nil, false, &ScheduleLimitError{App: sc.App, Max: limit}
		}
	}
	stored, created, err := ss.CreateSchedule(ctx, sc)
	if err != nil {
		return nil, false, fmt.Errorf("store schedule: %w", err)
	}
	if !created {
		return stored, false, nil
	}
	if limit > 0 && e.overScheduleCap(ctx, ss, stored, limit) {
		return nil, false, &ScheduleLimitError{App: sc.App, Max: limit}
	}
	return e.stepNow(ctx, stored, 1), true, nil
}

// overScheduleCap counts the app's schedules again after the create of s,
// which the count before it let through: creates racing with it (on this
// node or another) may have passed the cap together. Then s is deleted
// again and it reports true. Racing creates may all be refused so; the
// cap is never passed for longer than the race.
func (e *Engine) overScheduleCap(ctx context.Context, ss store.Schedules, s *task.Schedule, limit int) bool {
	n, err := ss.CountAppSchedules(ctx, s.App, limit+1)
	if err != nil || n <= limit {
		if err != nil {
			e.log.WarnContext(ctx, "count an app's schedules after a create", slog.String("app", s.App), slog.String("error", err.Error()))
		}
		return false
	}
	if err := e.deleteSchedule(ctx, ss, s); err != nil && !errors.Is(err, store.ErrNotFound) {
		e.log.WarnContext(ctx, "delete a schedule past the app's max_schedules", slog.String("schedule", s.ID.String()), slog.String("error", err.Error()))
		return false
	}
	return true
}

// newSchedule validates s and returns the schedule to store.
func (e *Engine) newSchedule(in *task.Schedule, now time.Time) (*task.Schedule, error) {
	s := in.Clone()
	if err := task.ValidateApp(s.App); err != nil {
		return nil, err
	}
	s.Timezone = cmp.Or(s.Timezone, "UTC")
	s.CatchUp = cmp.Or(s.CatchUp, task.CatchUpOne)
	s.StartAt, s.EndAt = msPtr(s.StartAt), msPtr(s.EndAt)
	if err := recur.Check(s); err != nil {
		return nil, err
	}
	if err := e.checkTemplate(s, true); err != nil {
		return nil, err
	}
	id := e.ids.New(now, 0)
	if f := e.cfg.ShardFor; f != nil {
		id = id.WithShard(f(s.App, s.Key, id)) // a keyed store finds it by its key
	}
	s.ID = id
	s.CreatedAt, s.UpdatedAt = now, now
	s.NextAt, s.LastAt, s.Made, s.WakeAt = nil, nil, nil, time.Time{}
	s.Anchor = anchorOf(s, now)
	s.State = task.ScheduleActive
	if err := planFrom(s, now); err != nil {
		return nil, err
	}
	return s, nil
}

// checkTemplate is rules.checkTemplate.
func (e *Engine) checkTemplate(s *task.Schedule, fill bool) error {
	return e.rules.checkTemplate(s, fill)
}

// anchorOf is the instant an every-rule counts from: StartAt when given,
// else now (the create, the PATCH that changed the rule, the resume).
func anchorOf(s *task.Schedule, now time.Time) time.Time {
	if s.StartAt != nil {
		return *s.StartAt
	}
	return now
}

// planFrom sets an active schedule's next occurrence to the rule's first
// time after now (or from StartAt), to be made by a step at once (WakeAt =
// now), or ends it when there is none.
func planFrom(s *task.Schedule, now time.Time) error {
	rule, err := ruleOf(s)
	if err != nil {
		return err
	}
	if due := nextTime(s, rule, now); due.IsZero() {
		s.State, s.NextAt, s.WakeAt = task.ScheduleEnded, nil, time.Time{}
	} else {
		s.State, s.NextAt, s.WakeAt = task.ScheduleActive, &due, now
	}
	return nil
}

func ruleOf(s *task.Schedule) (*recur.Rule, error) {
	return recur.New(s.Cron, s.Every.Std(), s.Timezone, s.Anchor)
}

// nextTime is the rule's first time after `after` within the schedule's
// StartAt and EndAt (both included), or zero.
func nextTime(s *task.Schedule, rule *recur.Rule, after time.Time) time.Time {
	if s.StartAt != nil {
		if lo := s.StartAt.Add(-time.Millisecond); after.Before(lo) {
			after = lo
		}
	}
	t := rule.Next(after)
	if t.IsZero() || (s.EndAt != nil && t.After(*s.EndAt)) {
		return time.Time{}
	}
	return t
}

func msPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	m := task.Ms(*t)
	return &m
}

// stepNow steps a schedule an API call just wrote, and wakes the loop so
// that it times the schedule's next step. A failed step is logged: the
// schedule's WakeAt is in the past, and the loop does it within a second.
// paid is the creates the call took for the step's occurrences.
func (e *Engine) stepNow(ctx context.Context, s *task.Schedule, paid int) *task.Schedule {
	defer e.kickSchedules()
	mark := new(byte)
	e.stepping.Store(s.ID, mark)
	defer e.stepping.CompareAndDelete(s.ID, mark)
	got, _, err := e.stepSchedule(ctx, s, paid)
	if err != nil {
		e.log.WarnContext(ctx, "make a schedule's occurrence; the schedule loop will", slog.String("schedule", s.ID.String()), slog.String("error", err.Error()))
		return s
	}
	return got
}

// GetSchedule returns a schedule by id.
func (e *Engine) GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	ss, err := e.scheduleStore()
	if err != nil {
		return nil, err
	}
	return ss.GetSchedule(ctx, id)
}

// GetScheduleByKey returns app's schedule with key.
func (e *Engine) GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	ss, err := e.scheduleStore()
	if err != nil {
		return nil, err
	}
	if task.ValidateApp(app) != nil || key == "" {
		return nil, store.ErrNotFound
	}
	return ss.GetScheduleByKey(ctx, app, key)
}

// ListSchedules returns a page of app's schedules in id order after the id
// `after` (zero: from the start), and the id to pass as `after` for the
// next page (zero on the last page).
func (e *Engine) ListSchedules(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, task.ID, error) {
	ss, err := e.scheduleStore()
	if err != nil {
		return nil, task.ID{}, err
	}
	if err := task.ValidateApp(app); err != nil {
		return nil, task.ID{}, err
	}
	if limit < 1 || limit > MaxList {
		return nil, task.ID{}, &task.FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxList)}
	}
	got, err := ss.ListSchedules(ctx, app, after, limit+1)
	if err != nil {
		return nil, task.ID{}, fmt.Errorf("list schedules: %w", err)
	}
	if len(got) > limit {
		return got[:limit], got[limit-1].ID, nil
	}
	return got, task.ID{}, nil
}

// PatchSchedule changes a schedule. An active (or ended) schedule's next
// occurrence is computed again from now; an every-rule counts from the
// PATCH when the rule or StartAt changes (from StartAt when given). The
// pending occurrence made for the old rule, when not yet due, is
// cancelled and replaced, or updated in place when its due time stays. A
// paused schedule stays paused: resume computes its next occurrence. A
// PATCH takes one of the app's creates_per_second (past it: a
// *RateLimitError, and nothing changes).
func (e *Engine) PatchSchedule(ctx context.Context, id task.ID, p SchedulePatch) (*task.Schedule, error) {
	ss, err := e.readyScheduleStore()
	if err != nil {
		return nil, err
	}
	if p.Cron != nil && p.Every != nil {
		return nil, &task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}
	}
	now := e.msNow()
	var old *task.Schedule
	s, err := ss.UpdateSchedule(ctx, id, func(s *task.Schedule) error {
		old = s.Clone()
		if err := e.applyPatch(s, p, now); err != nil {
			return err
		}
		return e.apps.allowCreate(s.App, 1, now)
	})
	if err != nil {
		return nil, err
	}
	e.retireOld(ctx, old, s, "changed")
	if s.State != task.ScheduleActive {
		return s, nil
	}
	return e.stepNow(ctx, s, 1), nil
}

// applyPatch changes s as p says, validates it, and plans its next
// occurrence.
func (e *Engine) applyPatch(s *task.Schedule, p SchedulePatch, now time.Time) error {
	ruleChanged := false
	if p.Cron != nil {
		ruleChanged = ruleChanged || s.Cron != *p.Cron
		s.Cron, s.Every = *p.Cron, 0
	}
	if p.Every != nil {
		ruleChanged = ruleChanged || s.Every != *p.Every
		s.Cron, s.Every = "", *p.Every
	}
	if p.Timezone != nil {
		s.Timezone = cmp.Or(*p.Timezone, "UTC")
	}
	switch {
	case p.ClearStartAt:
		ruleChanged = ruleChanged || s.StartAt != nil
		s.StartAt = nil
	case p.StartAt != nil:
		t := task.Ms(*p.StartAt)
		ruleChanged = ruleChanged || s.StartAt == nil || !s.StartAt.Equal(t)
		s.StartAt = &t
	}
	switch {
	case p.ClearEndAt:
		s.EndAt = nil
	case p.EndAt != nil:
		s.EndAt = msPtr(p.EndAt)
	}
	if p.CatchUp != nil {
		s.CatchUp = *p.CatchUp
	}
	if p.Payload != nil {
		s.Payload = append([]byte(nil), (*p.Payload)...)
	}
	if p.Target != nil {
		s.Target = p.Target.Clone()
	}
	if p.Retry != nil {
		s.Retry = *p.Retry
	}
	if p.DeadlineAfter != nil {
		s.DeadlineAfter = *p.DeadlineAfter
	}
	if ruleChanged {
		s.Anchor = anchorOf(s, now)
	}
	if err := recur.Check(s); err != nil {
		return err
	}
	if err := e.checkTemplate(s, false); err != nil {
		return err
	}
	s.UpdatedAt = now
	if s.State == task.SchedulePaused {
		return nil
	}
	return planFrom(s, now)
}

// PauseSchedule pauses a schedule: its pending occurrence is cancelled
// (unless already due) and nothing fires until ResumeSchedule. Pausing a
// paused schedule changes nothing; an ended one is a *ScheduleConflictError.
func (e *Engine) PauseSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return e.setPaused(ctx, id, true)
}

// ResumeSchedule resumes a paused schedule: its next occurrence is the
// rule's first time after now (no catch-up for the paused time), and an
// every-rule counts from now (from StartAt when given). Resuming an active
// schedule changes nothing; an ended one is a *ScheduleConflictError. A
// resume takes one of the app's creates_per_second (past it: a
// *RateLimitError).
func (e *Engine) ResumeSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return e.setPaused(ctx, id, false)
}

func (e *Engine) setPaused(ctx context.Context, id task.ID, pause bool) (*task.Schedule, error) {
	ss, err := e.readyScheduleStore()
	if err != nil {
		return nil, err
	}
	op := "resume"
	if pause {
		op = "pause"
	}
	now := e.msNow()
	var old *task.Schedule
	s, err := ss.UpdateSchedule(ctx, id, func(s *task.Schedule) error {
		old = s.Clone()
		switch {
		case s.State == task.ScheduleEnded:
			return scheduleConflict(op, s, "")
		case pause && s.State == task.SchedulePaused, !pause && s.State == task.ScheduleActive:
			return errSkip
		case pause:
			s.State, s.NextAt, s.WakeAt = task.SchedulePaused, nil, time.Time{}
		default:
			s.Anchor = anchorOf(s, now)
			if err := planFrom(s, now); err != nil {
				return err
			}
			if err := e.apps.allowCreate(s.App, 1, now); err != nil {
				return err
			}
		}
		s.UpdatedAt = now
		return nil
	})
	if errors.Is(err, errSkip) {
		return ss.GetSchedule(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if pause {
		e.retireOld(ctx, old, s, "paused")
		e.kickSchedules() // the loop drops its copy
		return s, nil
	}
	if s.State != task.ScheduleActive {
		return s, nil
	}
	return e.stepNow(ctx, s, 1), nil
}

// DeleteSchedule deletes a schedule: its key is free again, and its pending
// occurrence is cancelled unless already due. Occurrences already due
// finish.
func (e *Engine) DeleteSchedule(ctx context.Context, id task.ID) error {
	ss, err := e.readyScheduleStore()
	if err != nil {
		return err
	}
	s, err := ss.GetSchedule(ctx, id)
	if err != nil {
		return err
	}
	return e.deleteSchedule(ctx, ss, s)
}

// DeleteScheduleByKey deletes app's schedule with key.
func (e *Engine) DeleteScheduleByKey(ctx context.Context, app, key string) error {
	ss, err := e.readyScheduleStore()
	if err != nil {
		return err
	}
	s, err := e.GetScheduleByKey(ctx, app, key)
	if err != nil {
		return err
	}
	return e.deleteSchedule(ctx, ss, s)
}

func (e *Engine) deleteSchedule(ctx context.Context, ss store.Schedules, s *task.Schedule) error {
	if err := ss.DeleteSchedule(ctx, s.ID); err != nil {
		return err
	}
	// A step that read s before the delete finds it gone when it writes,
	// and cancels what it made (stepSchedule).
	e.retireOld(ctx, s, nil, "deleted")
	e.kickSchedules() // the loop drops its copy
	return nil
}

// NextTimes returns the next n (1 to MaxNextTimes) times of a schedule's
// rule after now (or from its StartAt when later), up to its EndAt, in the
// schedule's zone. It answers by the rule whatever the schedule's state.
func (e *Engine) NextTimes(ctx context.Context, id task.ID, n int) ([]time.Time, error) {
	if n < 1 || n > MaxNextTimes {
		return nil, &task.FieldError{Field: "n", Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxNextTimes, n)}
	}
	s, err := e.GetSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	rule, err := ruleOf(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	times := []time.Time{}
	for t := e.msNow(); len(times) < n; {
		if t = nextTime(s, rule, t); t.IsZero() {
			break
		}
		times = append(times, t.In(rule.Location()))
	}
	return times, nil
}

// retireOld cancels what was pending for old and is not pending for s (nil:
// the schedule is gone): old's NextAt, and its Made (the pending
// occurrence before an unfinished replacement), when due after now and not
// started.
func (e *Engine) retireOld(ctx context.Context, old, s *task.Schedule, why string) {
	e.awaitLoopStep(ctx, old.ID)
	now := e.msNow()
	var keep *time.Time
	if s != nil && s.State == task.ScheduleActive {
		keep = s.NextAt
	}
	for _, due := range []*time.Time{old.NextAt, madeOf(old)} {
		if due == nil || !due.After(now) || (keep != nil && keep.Equal(*due)) {
			continue
		}
		if err := e.retireOccurrence(ctx, old, *due, why); err != nil {
			e.log.WarnContext(ctx, "cancel a schedule's pending occurrence", slog.String("schedule", old.ID.String()),
				slog.Time("due", *due), slog.String("error", err.Error()))
		}
	}
}

// retireOccurrence cancels s's occurrence due at due, if it exists, is s's
// and has not fallen due (nor started): decided under the task's row
// lock, so an occurrence that falls due while the caller works is kept. The cancel is marked as the schedule's, so that a
// later resume may revive it (see the file comment).
func (e *Engine) retireOccurrence(ctx context.Context, s *task.Schedule, due time.Time, why string) error {
	t, err := e.store.GetByKey(ctx, s.App, task.OccurrenceKey(s.Key, due))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up occurrence: %w", err)
	}
	if t.ScheduleID != s.ID {
		return nil
	}
	w, err := e.update(ctx, t.ID, nil, func(t *task.Task) error {
		if t.State != task.Scheduled || t.Attempts > 0 || e.attemptOf(t.ID) != nil {
			return errSkip // started: it finishes
		}
		now := e.msNow()
		if !t.NextAttemptAt.After(now) {
			// Due: it stays, claimable or on its way, whatever the caller
			// read before (issue 21: a PATCH that read it pending, then
			// cancelled it once due, lost it).
			return errSkip
		}
		finish(t, task.Cancelled, now)
		t.History[len(t.History)-1].Error = scheduleCancelNote + why
		return nil
	})
	switch {
	case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("cancel occurrence %s: %w", t.ID, err)
	}
	e.wrote(ctx, w)
	return nil
}

// cancelledBySchedule reports whether t was cancelled by a schedule
// (retireOccurrence), not by a user.
func cancelledBySchedule(t *task.Task) bool {
	n := len(t.History)
	return t.State == task.Cancelled && n > 0 && t.History[n-1].What == string(task.Cancelled) &&
		strings.HasPrefix(t.History[n-1].Error, scheduleCancelNote)
}

// stepSchedule acts on s, as read, when its WakeAt has come: it makes the
// occurrence at NextAt if the schedule was just written (WakeAt before
// NextAt), and, when that one is due, the occurrences that follow it (see
// the file comment for catch-up), then moves the schedule on to its new
// pending occurrence, or ends it. It returns the schedule as it is after.
//
// Each occurrence takes one of the app's creates_per_second, paid (by
// the caller) or taken here. Those the limit holds back are left for a
// later step, oldest last: the schedule is written with NextAt at the
// first one not made (and WakeAt before it: to be made), and held is the
// time the step is to be done again, holding one create paid for it
// (apps.takeCreates).
func (e *Engine) stepSchedule(ctx context.Context, s *task.Schedule, paid int) (_ *task.Schedule, held time.Time, _ error) {
	now := e.msNow()
	if s.State != task.ScheduleActive || s.WakeAt.IsZero() || s.WakeAt.After(now) || s.NextAt == nil {
		return s, time.Time{}, nil
	}
	rule, err := ruleOf(s)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	pending := *s.NextAt
	var dues []time.Time
	fresh := s.WakeAt.Before(pending)
	if fresh {
		dues = append(dues, pending)
	}
	next := pending
	if !pending.After(now) {
		var more []time.Time
		more, next = e.following(s, rule, pending, now)
		dues = append(dues, more...)
		if !next.IsZero() {
			dues = append(dues, next)
		}
	}

	// The app's creates_per_second: what it holds back waits (see above).
	var unmade []time.Time
	if got, at := e.apps.takeCreates(s.App, max(len(dues)-paid, 0), now); paid+got < len(dues) {
		dues, unmade, held = dues[:paid+got], dues[paid+got:], at
		if h := e.cfg.Hooks.ScheduleHeld; h != nil {
			h(s.App)
		}
		if len(dues) == 0 {
			return s, held, nil // nothing made: the schedule stays as it is
		}
	}

	var made []store.CreateResult
	if len(dues) > 0 {
		if made, err = e.makeOccurrences(ctx, s, dues, now); err != nil {
			return nil, time.Time{}, err
		}
	}
	if fresh {
		// The occurrence at NextAt may be an older one with the same key:
		// bring it to the schedule's template.
		if err := e.syncOccurrence(ctx, s, made[0], now); err != nil {
			return nil, time.Time{}, err
		}
		if made := madeOf(s); made != nil && !made.Equal(pending) && made.After(now) {
			// The pending occurrence of the rule before a PATCH or a
			// resume, if the call that replaced it did not cancel it.
			if err := e.retireOccurrence(ctx, s, *made, "changed"); err != nil {
				return nil, time.Time{}, err
			}
		}
	}

	ss, _ := e.scheduleStore()
	got, err := ss.UpdateSchedule(ctx, s.ID, func(c *task.Schedule) error {
		if c.State != task.ScheduleActive || !c.WakeAt.Equal(s.WakeAt) || !equalTimes(c.NextAt, s.NextAt) {
			return errSkip // another node, a PATCH, a pause did it meanwhile
		}
		if len(dues) > 0 {
			last := dues[len(dues)-1]
			c.Made = &last
		}
		if !pending.After(now) { // came due: LastAt is the last of it and what followed
			c.LastAt = &pending
			for _, due := range dues {
				if !due.After(now) && due.After(*c.LastAt) {
					c.LastAt = &due
				}
			}
		}
		if len(unmade) > 0 {
			// Held back: the first one not made is the next to make.
			first := unmade[0]
			c.NextAt, c.WakeAt = &first, first.Add(-time.Millisecond)
			return nil
		}
		if next.IsZero() {
			c.State, c.NextAt, c.WakeAt = task.ScheduleEnded, nil, time.Time{}
		} else {
			c.NextAt, c.WakeAt = &next, next
		}
		return nil
	})
	switch {
	case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
		cur, gerr := ss.GetSchedule(ctx, s.ID)
		if gerr != nil && !errors.Is(gerr, store.ErrNotFound) {
			return nil, time.Time{}, fmt.Errorf("read schedule %s again: %w", s.ID, gerr)
		}
		e.dropStray(ctx, s, cur, made, fresh, now)
		if cur == nil {
			return nil, time.Time{}, fmt.Errorf("schedule %s: %w", s.ID, store.ErrNotFound)
		}
		return cur, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("advance schedule %s: %w", s.ID, err)
	}
	return got, held, nil
}

// following returns the occurrences to make now that the pending one, at
// pending, is due: those the rule has between it and now (missed while toc
// was down, per the catch-up policy; since this process started, all), and
// the next one after now (zero: none, the schedule ends).
func (e *Engine) following(s *task.Schedule, rule *recur.Rule, pending, now time.Time) ([]time.Time, time.Time) {
	next := func(t time.Time) time.Time { return nextTime(s, rule, t) }
	from := pending
	var out []time.Time
	if started := e.startedAt; from.Before(started) {
		switch s.CatchUp {
		case task.CatchUpOne, "": // the default
			out = lastBefore(next, from, started, 1)
		case task.CatchUpAll:
			out = lastBefore(next, from, started, task.MaxCatchUp)
		}
		from = started.Add(-time.Millisecond) // what follows is at or after started
	}
	out = append(out, lastBefore(next, from, now.Add(time.Millisecond), task.MaxCatchUp)...)
	return out, next(now)
}

// lastBefore returns the last n (at most) times of a rule's sequence in
// (from, until), oldest first. next(t) is the rule's first time after t;
// the sequence is a fixed set, so the times in a window that ends at until
// are the last ones of the whole. The window starts at a second and
// doubles until it holds n times or reaches from, so that a long downtime
// costs a few searches rather than a walk over every time since.
func lastBefore(next func(time.Time) time.Time, from, until time.Time, n int) []time.Time {
	if !from.Before(until) || n < 1 {
		return nil
	}
	span := until.Sub(from)
	ring := make([]time.Time, n)
	for d := time.Second; ; d *= 2 {
		lo := from
		if d < span {
			lo = until.Add(-d)
		}
		count := 0
		for t := next(lo); !t.IsZero() && t.Before(until); t = next(t) {
			ring[count%n] = t
			count++
		}
		if count >= n || lo.Equal(from) {
			k := min(count, n)
			out := make([]time.Time, 0, k)
			for i := count - k; i < count; i++ {
				out = append(out, ring[i%n])
			}
			return out
		}
	}
}

// makeOccurrences creates s's occurrences due at dues through the create
// path (durable, then in the wheel). An existing task with an occurrence's
// key is returned instead (another node, a retry, made it).
func (e *Engine) makeOccurrences(ctx context.Context, s *task.Schedule, dues []time.Time, now time.Time) ([]store.CreateResult, error) {
	ts := make([]*task.Task, len(dues))
	for i, due := range dues {
		ts[i] = e.occurrence(s, due, now)
	}
	rs, err := e.creates.create(ctx, ts)
	if err != nil {
		return nil, fmt.Errorf("create occurrences of schedule %s: %w", s.ID, err)
	}
	var fresh []written
	for _, r := range rs {
		if r.Created {
			fresh = append(fresh, written{t: r.Task})
		}
	}
	e.wrote(ctx, fresh...)
	if len(fresh) > 0 {
		if h := e.cfg.Hooks.Created; h != nil {
			h(s.App, len(fresh))
		}
		if h := e.cfg.Hooks.OccurrencesCreated; h != nil {
			h(s.App, len(fresh))
		}
	}
	return rs, nil
}

// occurrence returns s's occurrence due at due, to create. The template
// was validated when the schedule was written; a broker rule tightened
// since is met at delivery (the sinks check it again).
func (e *Engine) occurrence(s *task.Schedule, due, now time.Time) *task.Task {
	id := e.ids.New(now, 0)
	key := task.OccurrenceKey(s.Key, due)
	if f := e.cfg.ShardFor; f != nil {
		id = id.WithShard(f(s.App, key, id))
	}
	t := &task.Task{
		ID:         id,
		App:        s.App,
		Key:        key,
		ScheduleID: s.ID,
		State:      task.Scheduled,
		CreatedAt:  now,
	}
	e.applyTemplate(t, s, due, now)
	t.Record(now, "created", 0, "")
	return t
}

// applyTemplate gives t, an occurrence due at due, s's template.
func (e *Engine) applyTemplate(t *task.Task, s *task.Schedule, due, now time.Time) {
	t.DueAt, t.NextAttemptAt = due, due
	t.Payload = append([]byte(nil), s.Payload...)
	t.Target = s.Target.Clone()
	t.Retry = withPolicyRetry(s.Retry, e.Policy(s.App).Retry).WithDefaults()
	t.Deadline = nil
	if s.DeadlineAfter > 0 {
		d := task.Ms(due.Add(s.DeadlineAfter.Std())) // may have passed (catch-up): it expires at once
		t.Deadline = &d
	}
	t.Trace = nil
	if s.TraceParent != "" {
		t.Trace = &task.TraceContext{Parent: s.TraceParent, State: s.TraceState}
	}
	t.WakeAt = wakeFor(t)
	t.UpdatedAt = now
}

// syncOccurrence brings the occurrence at s's NextAt, as its create found
// it, to s's template: an existing one of s not yet due is updated in
// place, one a schedule cancelled is revived. Others (due, started,
// finished, cancelled by a user, another task with the key) stay as they
// are.
func (e *Engine) syncOccurrence(ctx context.Context, s *task.Schedule, r store.CreateResult, now time.Time) error {
	if r.Created {
		return nil
	}
	due := *s.NextAt
	w, err := e.update(ctx, r.Task.ID, nil, func(t *task.Task) error {
		if e.attemptOf(t.ID) != nil {
			return errSkip
		}
		switch {
		case t.State == task.Scheduled && t.Attempts == 0 && t.ScheduleID == s.ID:
			if !t.NextAttemptAt.After(e.msNow()) {
				return errSkip // due: it is delivered as it was
			}
			want := t.Clone()
			e.applyTemplate(want, s, due, now)
			if sameTemplate(t, want) {
				return errSkip
			}
			e.applyTemplate(t, s, due, now)
			t.Record(now, "changed", 0, "")
		case cancelledBySchedule(t):
			t.ScheduleID = s.ID
			t.Attempts, t.LastError = 0, ""
			e.applyTemplate(t, s, due, now)
			schedule(t, due, now)
			t.Record(now, "rescheduled", 0, "")
		default:
			return errSkip
		}
		return nil
	})
	switch {
	case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("update occurrence %s: %w", r.Task.ID, err)
	}
	e.wrote(ctx, w)
	return nil
}

func sameTemplate(a, b *task.Task) bool {
	return bytes.Equal(a.Payload, b.Payload) && reflect.DeepEqual(a.Target, b.Target) &&
		a.Retry == b.Retry && equalTimes(a.Deadline, b.Deadline)
}

// dropStray cancels the future occurrences a step created for s, or
// revived for it (synced: made[0], by syncOccurrence), whose write then
// lost to a PATCH, pause or delete: those cur (nil: deleted) does not name
// as pending. Occurrences already due stay: they were due by the rule in
// force when they came due.
//
// The revived one counts too: a step that read s before a delete, and
// synced the occurrence the delete had just cancelled, brought it back for
// a schedule that no longer exists, and it fired (a flaky
// TestScheduleDeleteFreesKey, one run in a few hundred).
func (e *Engine) dropStray(ctx context.Context, s, cur *task.Schedule, made []store.CreateResult, synced bool, now time.Time) {
	for i, r := range made {
		t := r.Task
		if (!r.Created && !(synced && i == 0)) || !t.DueAt.After(now) {
			continue
		}
		if cur != nil && cur.State == task.ScheduleActive && equalTimes(cur.NextAt, &t.DueAt) {
			continue
		}
		if err := e.retireOccurrence(ctx, s, t.DueAt, "changed"); err != nil {
			e.log.WarnContext(ctx, "cancel an occurrence its schedule no longer names", slog.String("task", t.ID.String()), slog.String("error", err.Error()))
		}
	}
}

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// kickSchedules wakes the schedule loop to read the store again.
func (e *Engine) kickSchedules() { signal(e.schedKick) }

// scheduleLoop makes schedules' occurrences as their pending ones come
// due. It reads the schedules that wake within scheduleHorizon, at least
// every scheduleRescan and at once when kicked (this process wrote one),
// keeps them in memory, and sleeps on one timer until the earliest WakeAt
// among them. Schedules another node owns (Config.OwnsSchedule) are left
// to it.
//
// Schedules due together are stepped concurrently (scheduleWorkers), so
// their occurrences share create writes; the loop waits for them before it
// reads again.
//
// A schedule whose step the app's creates_per_second held back is acted
// on again at the time its step returned (held), with the create reserved
// for it paid, not at its WakeAt (which stays in the past: the store says
// it is behind, and another node, or this one after a restart, steps it
// at once).
func (e *Engine) scheduleLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		due    []*task.Schedule // read, not yet acted on, in actAt order
		read   time.Time        // when due was read
		full   bool             // the read was a full page
		reread = true
		held   = map[task.ID]time.Time{} // held back until
	)
	actAt := func(s *task.Schedule) time.Time {
		if at, ok := held[s.ID]; ok && at.After(s.WakeAt) {
			return at
		}
		return s.WakeAt
	}
	for {
		now := e.clock.Now()
		if reread || !now.Before(read.Add(scheduleRescan)) {
			got, f, err := e.dueSchedules(ctx, now.Add(scheduleHorizon))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				e.log.ErrorContext(ctx, "read due schedules", slog.String("error", err.Error()))
			}
			due, read, full, reread = got, now, f, false
			if len(held) > 0 {
				// Holds of schedules not read (gone, paused, stepped
				// elsewhere) are dropped; the rest order the acts.
				keep := make(map[task.ID]time.Time, len(held))
				for _, s := range due {
					if at, ok := held[s.ID]; ok {
						keep[s.ID] = at
					}
				}
				held = keep
				slices.SortStableFunc(due, func(a, b *task.Schedule) int { return actAt(a).Compare(actAt(b)) })
			}
		}
		var act []*task.Schedule
		for len(due) > 0 && !actAt(due[0]).After(now) {
			act = append(act, due[0])
			due = due[1:]
		}
		if len(act) > 0 {
			again := false
			for i, at := range e.stepSchedules(ctx, act, held) {
				if id := act[i].ID; at.IsZero() {
					delete(held, id)
				} else {
					// Held back: due again at its time, read or not.
					held[id] = at
					due, again = append(due, act[i]), true
				}
			}
			if again {
				slices.SortStableFunc(due, func(a, b *task.Schedule) int { return actAt(a).Compare(actAt(b)) })
			}
			if ctx.Err() != nil {
				return
			}
			// A full page done: more may be due beyond it.
			reread = full && len(due) == 0
			continue // time has passed: look again before sleeping
		}
		now = e.clock.Now()
		e.tclock.scheduleIdle(now)
		wait := read.Add(scheduleRescan).Sub(now)
		if len(due) > 0 {
			wait = min(wait, actAt(due[0]).Sub(now))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-e.schedKick:
			reread = true
		case <-e.apps.changed:
			clear(held) // new limits: steps held back by the old ones go at once
			reread = true
		}
	}
}

// dueSchedules reads the schedules this engine acts on that wake by until,
// and whether the read was a full page (more may wake by until).
func (e *Engine) dueSchedules(ctx context.Context, until time.Time) ([]*task.Schedule, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	got, err := e.schedules.DueSchedules(ctx, until, schedulePage)
	if err != nil {
		return nil, false, err
	}
	full := len(got) == schedulePage
	if owns := e.cfg.OwnsSchedule; owns != nil {
		mine := got[:0]
		for _, s := range got {
			if owns(s.ID) {
				mine = append(mine, s)
			}
		}
		got = mine
	}
	return got, full, nil
}

// stepSchedules steps each of ss, up to scheduleWorkers at once, and
// returns when all are done, with the time each was held back until by
// its app's creates_per_second (zero: not held). A schedule in held has a
// create paid for its step. Each is read again first: the loop's copy may
// be up to scheduleRescan old, and a step of a copy that a PATCH or a pause
// has since changed would make an occurrence only to cancel it. A failed
// step is logged; its schedule keeps its WakeAt, and the next read finds
// it again.
func (e *Engine) stepSchedules(ctx context.Context, ss []*task.Schedule, held map[task.ID]time.Time) []time.Time {
	sem := make(chan struct{}, scheduleWorkers)
	holds := make([]time.Time, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		if _, busy := e.stepping.Load(s.ID); busy {
			continue // an API call steps it, and then kicks the loop
		}
		paid := 0
		if _, ok := held[s.ID]; ok {
			paid = 1
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			defer e.beginLoopStep(s.ID)() // before the read: see awaitLoopStep
			cur, err := e.schedules.GetSchedule(sctx, s.ID)
			if err == nil {
				_, holds[i], err = e.stepSchedule(sctx, cur, paid)
			}
			if err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
				e.log.ErrorContext(ctx, "step a schedule", slog.String("schedule", s.ID.String()), slog.String("app", s.App), slog.String("error", err.Error()))
			}
		})
	}
	wg.Wait()
	return holds
}

// beginLoopStep marks s as being stepped by the loop until the returned
// func is called.
func (e *Engine) beginLoopStep(id task.ID) (end func()) {
	done := make(chan struct{})
	e.loopSteps.Store(id, done)
	return func() {
		e.loopSteps.CompareAndDelete(id, done)
		close(done)
	}
}

// awaitLoopStep waits until no step of the loop is under way for the
// schedule id (or ctx ends). A PATCH, pause or delete calls it after its
// write: a step that read the schedule before that write made an
// occurrence the write has made stray, and takes it back when its own
// write fails (dropStray); waiting for it means the call answers with no
// such occurrence pending. A step that starts after the write reads the
// schedule after it (the mark is set before the read), so it makes none.
// Steps of other nodes are not waited for: their strays go a moment later.
func (e *Engine) awaitLoopStep(ctx context.Context, id task.ID) {
	if v, ok := e.loopSteps.Load(id); ok {
		select {
		case <-v.(chan struct{}):
		case <-ctx.Done():
		}
	}
}

// ScheduleConflictError says a schedule is not in a state that allows the
// operation (resuming an ended one). The API answers it with 409.
type ScheduleConflictError struct {
	Op       string
	Schedule *task.Schedule
	Why      string
}

func (e *ScheduleConflictError) Error() string {
	return conflictText(e.Op, "schedule", e.Schedule.ID, string(e.Schedule.State), e.Why)
}

func scheduleConflict(op string, s *task.Schedule, why string) error {
	return &ScheduleConflictError{Op: op, Schedule: s.Clone(), Why: why}
}
