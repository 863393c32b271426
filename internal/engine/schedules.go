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
// Two types share the work: Schedules (this file, Engine.Schedules) is
// the API that checks and writes schedules; the stepper (stepper.go)
// makes their occurrences, for the API's calls and in the schedule loop,
// and cancels those a schedule no longer names.
//
// # The pending occurrence
//
// A schedule has at most one pending occurrence: the one at NextAt. The
// next is made when it comes due: the schedule's WakeAt is the pending
// one's due time, and the schedule loop acts on it then (stepper.step). In
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
// before this process started (stepper.startedAt) were missed while toc was
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
// none is dropped. An API call marks the schedule it steps (stepping) from
// before its write (stepper.hold), so that the loop does not step it too
// and take its creates twice.
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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/recur"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
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

// Schedules is the API of recurring schedules (Engine.Schedules): create,
// read, change, pause, resume and delete them. It checks and writes; the
// stepper (stepper.go) makes their occurrences, for the calls here (that
// step a schedule they wrote at once) and in its loop.
type Schedules struct {
	p schedulesParams
}

// schedulesParams are what Schedules uses of the engine.
type schedulesParams struct {
	ready       func() error     // ErrNotReady unless the engine takes work
	now         func() time.Time // the engine's clock, to the millisecond
	store       store.Schedules  // nil: the store keeps none (ErrNoSchedules)
	rules       *rules
	allowCreate func(app string, n int, now time.Time) error // the app's creates_per_second
	log         *slog.Logger
	// The stepper's (stepper.go).
	stepNow   func(ctx context.Context, s *task.Schedule, paid int) *task.Schedule
	hold      func(ctx context.Context, id task.ID) (release func()) // from before a write stepNow steps
	retireOld func(ctx context.Context, old, s *task.Schedule, why string)
	kick      func()
}

// store returns the store's schedules, or ErrNoSchedules.
func (sch *Schedules) store() (store.Schedules, error) {
	if sch.p.store == nil {
		return nil, ErrNoSchedules
	}
	return sch.p.store, nil
}

// readyStore is store for the calls that change
// schedules: they also need the engine ready (checkReady, first).
func (sch *Schedules) readyStore() (store.Schedules, error) {
	if err := sch.p.ready(); err != nil {
		return nil, err
	}
	return sch.store()
}

// Create stores a new schedule and creates its first occurrence:
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
func (sch *Schedules) Create(ctx context.Context, s *task.Schedule) (*task.Schedule, bool, error) {
	ss, err := sch.readyStore()
	if err != nil {
		return nil, false, err
	}
	now := sch.p.now()
	sc, err := sch.newSchedule(s, now)
	if err != nil {
		return nil, false, err
	}
	if err := sch.p.allowCreate(sc.App, 1, now); err != nil {
		return nil, false, err
	}
	defer sch.p.hold(ctx, sc.ID)()
	limit := sch.p.rules.policy(sc.App).maxSchedules()
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
	if limit > 0 && sch.overCap(ctx, ss, stored, limit) {
		return nil, false, &ScheduleLimitError{App: sc.App, Max: limit}
	}
	return sch.p.stepNow(ctx, stored, 1), true, nil
}

// overCap counts the app's schedules again after the create of s,
// which the count before it let through: creates racing with it (on this
// node or another) may have passed the cap together. Then s is deleted
// again and it reports true. Racing creates may all be refused so; the
// cap is never passed for longer than the race.
func (sch *Schedules) overCap(ctx context.Context, ss store.Schedules, s *task.Schedule, limit int) bool {
	n, err := ss.CountAppSchedules(ctx, s.App, limit+1)
	if err != nil || n <= limit {
		if err != nil {
			sch.p.log.WarnContext(ctx, "count an app's schedules after a create", slog.String("app", s.App), slog.String("error", err.Error()))
		}
		return false
	}
	if err := sch.remove(ctx, ss, s); err != nil && !errors.Is(err, store.ErrNotFound) {
		sch.p.log.WarnContext(ctx, "delete a schedule past the app's max_schedules", slog.String("schedule", s.ID.String()), slog.String("error", err.Error()))
		return false
	}
	return true
}

// newSchedule validates s and returns the schedule to store.
func (sch *Schedules) newSchedule(in *task.Schedule, now time.Time) (*task.Schedule, error) {
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
	if err := sch.p.rules.checkTemplate(s, true); err != nil {
		return nil, err
	}
	s.ID = sch.p.rules.newID(now, s.App, s.Key) // a keyed store finds it by its key
	s.CreatedAt, s.UpdatedAt = now, now
	s.NextAt, s.LastAt, s.Made, s.WakeAt = nil, nil, nil, time.Time{}
	s.Anchor = anchorOf(s, now)
	s.State = task.ScheduleActive
	if err := planFrom(s, now); err != nil {
		return nil, err
	}
	return s, nil
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

// Get returns a schedule by id.
func (sch *Schedules) Get(ctx context.Context, id task.ID) (*task.Schedule, error) {
	ss, err := sch.store()
	if err != nil {
		return nil, err
	}
	return ss.GetSchedule(ctx, id)
}

// GetByKey returns app's schedule with key.
func (sch *Schedules) GetByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	ss, err := sch.store()
	if err != nil {
		return nil, err
	}
	if task.ValidateApp(app) != nil || key == "" {
		return nil, store.ErrNotFound
	}
	return ss.GetScheduleByKey(ctx, app, key)
}

// List returns a page of app's schedules in id order after the id
// `after` (zero: from the start), and the id to pass as `after` for the
// next page (zero on the last page).
func (sch *Schedules) List(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, task.ID, error) {
	ss, err := sch.store()
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

// Patch changes a schedule. An active (or ended) schedule's next
// occurrence is computed again from now; an every-rule counts from the
// PATCH when the rule or StartAt changes (from StartAt when given). The
// pending occurrence made for the old rule, when not yet due, is
// cancelled and replaced, or updated in place when its due time stays. A
// paused schedule stays paused: resume computes its next occurrence. A
// PATCH takes one of the app's creates_per_second (past it: a
// *RateLimitError, and nothing changes).
func (sch *Schedules) Patch(ctx context.Context, id task.ID, p SchedulePatch) (*task.Schedule, error) {
	ss, err := sch.readyStore()
	if err != nil {
		return nil, err
	}
	if p.Cron != nil && p.Every != nil {
		return nil, &task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}
	}
	now := sch.p.now()
	defer sch.p.hold(ctx, id)()
	var old *task.Schedule
	s, err := ss.UpdateSchedule(ctx, id, func(s *task.Schedule) error {
		old = s.Clone()
		if err := sch.applyPatch(s, p, now); err != nil {
			return err
		}
		return sch.p.allowCreate(s.App, 1, now)
	})
	if err != nil {
		return nil, err
	}
	sch.p.retireOld(ctx, old, s, "changed")
	if s.State != task.ScheduleActive {
		return s, nil
	}
	return sch.p.stepNow(ctx, s, 1), nil
}

// applyPatch changes s as p says, validates it, and plans its next
// occurrence.
func (sch *Schedules) applyPatch(s *task.Schedule, p SchedulePatch, now time.Time) error {
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
	if err := sch.p.rules.checkTemplate(s, false); err != nil {
		return err
	}
	s.UpdatedAt = now
	if s.State == task.SchedulePaused {
		return nil
	}
	return planFrom(s, now)
}

// Pause pauses a schedule: its pending occurrence is cancelled
// (unless already due) and nothing fires until Resume. Pausing a
// paused schedule changes nothing; an ended one is a *ScheduleConflictError.
func (sch *Schedules) Pause(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return sch.setPaused(ctx, id, true)
}

// Resume resumes a paused schedule: its next occurrence is the
// rule's first time after now (no catch-up for the paused time), and an
// every-rule counts from now (from StartAt when given). Resuming an active
// schedule changes nothing; an ended one is a *ScheduleConflictError. A
// resume takes one of the app's creates_per_second (past it: a
// *RateLimitError).
func (sch *Schedules) Resume(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return sch.setPaused(ctx, id, false)
}

func (sch *Schedules) setPaused(ctx context.Context, id task.ID, pause bool) (*task.Schedule, error) {
	ss, err := sch.readyStore()
	if err != nil {
		return nil, err
	}
	op := "resume"
	if pause {
		op = "pause"
	}
	now := sch.p.now()
	if !pause {
		defer sch.p.hold(ctx, id)()
	}
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
			if err := sch.p.allowCreate(s.App, 1, now); err != nil {
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
		sch.p.retireOld(ctx, old, s, "paused")
		sch.p.kick() // the loop drops its copy
		return s, nil
	}
	if s.State != task.ScheduleActive {
		return s, nil
	}
	return sch.p.stepNow(ctx, s, 1), nil
}

// Delete deletes a schedule: its key is free again, and its pending
// occurrence is cancelled unless already due. Occurrences already due
// finish.
func (sch *Schedules) Delete(ctx context.Context, id task.ID) error {
	ss, err := sch.readyStore()
	if err != nil {
		return err
	}
	s, err := ss.GetSchedule(ctx, id)
	if err != nil {
		return err
	}
	return sch.remove(ctx, ss, s)
}

// DeleteByKey deletes app's schedule with key.
func (sch *Schedules) DeleteByKey(ctx context.Context, app, key string) error {
	ss, err := sch.readyStore()
	if err != nil {
		return err
	}
	s, err := sch.GetByKey(ctx, app, key)
	if err != nil {
		return err
	}
	return sch.remove(ctx, ss, s)
}

func (sch *Schedules) remove(ctx context.Context, ss store.Schedules, s *task.Schedule) error {
	if err := ss.DeleteSchedule(ctx, s.ID); err != nil {
		return err
	}
	// A step that read s before the delete finds it gone when it writes,
	// and cancels what it made (stepper.step).
	sch.p.retireOld(ctx, s, nil, "deleted")
	sch.p.kick() // the loop drops its copy
	return nil
}

// NextTimes returns the next n (1 to MaxNextTimes) times of a schedule's
// rule after now (or from its StartAt when later), up to its EndAt, in the
// schedule's zone. It answers by the rule whatever the schedule's state.
func (sch *Schedules) NextTimes(ctx context.Context, id task.ID, n int) ([]time.Time, error) {
	if n < 1 || n > MaxNextTimes {
		return nil, &task.FieldError{Field: "n", Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxNextTimes, n)}
	}
	s, err := sch.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	rule, err := ruleOf(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	times := []time.Time{}
	for t := sch.p.now(); len(times) < n; {
		if t = nextTime(s, rule, t); t.IsZero() {
			break
		}
		times = append(times, t.In(rule.Location()))
	}
	return times, nil
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
