package engine

// The schedule stepper: makes the occurrences of recurring schedules, for
// the API calls that wrote a schedule (stepNow) and in its loop (run), and
// cancels those a schedule no longer names. What a step does, catch-up,
// limits and who acts are in schedules.go's file comment.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/recur"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// stepper steps schedules: it owns the schedule loop (run, started and
// stopped with the engine's loops) and the marks of the steps under way.
type stepper struct {
	p stepperParams
	// kickCh wakes the loop (capacity 1).
	kickCh chan struct{}
	// startedAt is when the engine started: occurrences due before it
	// were missed while toc was down (following). Set by Engine.Start
	// before the loop starts and the engine is ready, never changed after.
	startedAt time.Time
	// stepping marks the schedules an API call of this process is
	// stepping (stepNow), id → its own mark: the loop leaves them, so
	// that one step, not two, takes the app's creates for them.
	stepping sync.Map
	// loopSteps marks the schedules the loop is stepping, id → a channel
	// closed when the step ends (beginLoopStep): a PATCH, pause or delete
	// waits for it before it answers (awaitLoopStep).
	loopSteps sync.Map
}

// stepperParams are what the stepper uses of the engine: the schedules'
// store, and a task writer for the occurrences.
type stepperParams struct {
	store store.Schedules // nil: the store keeps none, and run is not started
	clock clock.Clock
	log   *slog.Logger
	rules *rules
	hooks Hooks // Created, OccurrencesCreated, ScheduleHeld
	// owns says whether this engine steps the schedule (Config.OwnsSchedule;
	// nil: every one).
	owns func(id task.ID) bool
	// takeCreates takes up to n of app's creates_per_second (apps.go).
	takeCreates func(app string, n int, now time.Time) (got int, at time.Time)
	// changed is signalled when the apps' policies change.
	changed <-chan struct{}
	// idle is called when the loop goes to sleep, having acted on all
	// due at now (the test clock's).
	idle func(now time.Time)

	// The task writer.
	create    func(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error) // the creates batcher: mirrors and tracks what it created
	getByKey  func(ctx context.Context, app, key string) (*task.Task, error)           // Store.GetByKey
	update    func(ctx context.Context, id task.ID, fn func(*task.Task) error) (written, error)
	wrote     func(ctx context.Context, ws ...written)
	attemptOf func(id task.ID) *task.Task // the task as its attempt under way here shows it, or nil
}

func newStepper(p stepperParams) *stepper {
	return &stepper{p: p, kickCh: make(chan struct{}, 1)}
}

// now is the engine's clock's time to the millisecond.
func (sp *stepper) now() time.Time { return sp.p.clock.Now().UTC().Truncate(time.Millisecond) }

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

// stepNow steps a schedule an API call just wrote, and wakes the loop so
// that it times the schedule's next step. A failed step is logged: the
// schedule's WakeAt is in the past, and the loop does it within a second.
// paid is the creates the call took for the step's occurrences.
func (sp *stepper) stepNow(ctx context.Context, s *task.Schedule, paid int) *task.Schedule {
	defer sp.kick()
	defer sp.hold(ctx, s.ID)()
	got, _, err := sp.step(ctx, s, paid)
	if err != nil {
		sp.p.log.WarnContext(ctx, "make a schedule's occurrence; the schedule loop will", slog.String("schedule", s.ID.String()), slog.String("error", err.Error()))
		return s
	}
	return got
}

// hold marks the schedule id as stepped by an API call of this process
// until the returned func is called, and waits for a step of the loop
// under way for it to end. An API call that writes a schedule and then
// steps it (create, PATCH, resume) holds it from before its write: the
// loop marks its own step before it looks at the mark (stepAll), so
// either the loop's step ended before the write (and read the schedule
// as it was) or the loop sees the mark and leaves the schedule to the
// call. Without it a loop step could read the written schedule before the
// call's step began and step it too, taking the app's creates twice.
func (sp *stepper) hold(ctx context.Context, id task.ID) (release func()) {
	mark := new(byte)
	sp.stepping.Store(id, mark)
	sp.awaitLoopStep(ctx, id)
	return func() { sp.stepping.CompareAndDelete(id, mark) }
}

// retireOld cancels what was pending for old and is not pending for s (nil:
// the schedule is gone): old's NextAt, and its Made (the pending
// occurrence before an unfinished replacement), when due after now and not
// started.
func (sp *stepper) retireOld(ctx context.Context, old, s *task.Schedule, why string) {
	sp.awaitLoopStep(ctx, old.ID)
	now := sp.now()
	var keep *time.Time
	if s != nil && s.State == task.ScheduleActive {
		keep = s.NextAt
	}
	for _, due := range []*time.Time{old.NextAt, madeOf(old)} {
		if due == nil || !due.After(now) || (keep != nil && keep.Equal(*due)) {
			continue
		}
		if err := sp.retireOccurrence(ctx, old, *due, why); err != nil {
			sp.p.log.WarnContext(ctx, "cancel a schedule's pending occurrence", slog.String("schedule", old.ID.String()),
				slog.Time("due", *due), slog.String("error", err.Error()))
		}
	}
}

// retireOccurrence cancels s's occurrence due at due, if it exists, is s's
// and has not fallen due (nor started): decided under the task's row
// lock, so an occurrence that falls due while the caller works is kept. The cancel is marked as the schedule's, so that a
// later resume may revive it (see the file comment).
func (sp *stepper) retireOccurrence(ctx context.Context, s *task.Schedule, due time.Time, why string) error {
	t, err := sp.p.getByKey(ctx, s.App, task.OccurrenceKey(s.Key, due))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up occurrence: %w", err)
	}
	if t.ScheduleID != s.ID {
		return nil
	}
	w, err := sp.p.update(ctx, t.ID, func(t *task.Task) error {
		if t.State != task.Scheduled || t.Attempts > 0 || sp.p.attemptOf(t.ID) != nil {
			return errSkip // started: it finishes
		}
		now := sp.now()
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
	sp.p.wrote(ctx, w)
	return nil
}

// cancelledBySchedule reports whether t was cancelled by a schedule
// (retireOccurrence), not by a user.
func cancelledBySchedule(t *task.Task) bool {
	n := len(t.History)
	return t.State == task.Cancelled && n > 0 && t.History[n-1].What == string(task.Cancelled) &&
		strings.HasPrefix(t.History[n-1].Error, scheduleCancelNote)
}

// step acts on s, as read, when its WakeAt has come: it makes the
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
func (sp *stepper) step(ctx context.Context, s *task.Schedule, paid int) (_ *task.Schedule, held time.Time, _ error) {
	now := sp.now()
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
		more, next = sp.following(s, rule, pending, now)
		dues = append(dues, more...)
		if !next.IsZero() {
			dues = append(dues, next)
		}
	}

	// The app's creates_per_second: what it holds back waits (see above).
	var unmade []time.Time
	if got, at := sp.p.takeCreates(s.App, max(len(dues)-paid, 0), now); paid+got < len(dues) {
		dues, unmade, held = dues[:paid+got], dues[paid+got:], at
		if h := sp.p.hooks.ScheduleHeld; h != nil {
			h(s.App)
		}
		if len(dues) == 0 {
			return s, held, nil // nothing made: the schedule stays as it is
		}
	}

	var made []store.CreateResult
	if len(dues) > 0 {
		if made, err = sp.makeOccurrences(ctx, s, dues, now); err != nil {
			return nil, time.Time{}, err
		}
	}
	if fresh {
		// The occurrence at NextAt may be an older one with the same key:
		// bring it to the schedule's template.
		if err := sp.syncOccurrence(ctx, s, made[0], now); err != nil {
			return nil, time.Time{}, err
		}
		if made := madeOf(s); made != nil && !made.Equal(pending) && made.After(now) {
			// The pending occurrence of the rule before a PATCH or a
			// resume, if the call that replaced it did not cancel it.
			if err := sp.retireOccurrence(ctx, s, *made, "changed"); err != nil {
				return nil, time.Time{}, err
			}
		}
	}

	ss := sp.p.store
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
		sp.dropStray(ctx, s, cur, made, fresh, now)
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
func (sp *stepper) following(s *task.Schedule, rule *recur.Rule, pending, now time.Time) ([]time.Time, time.Time) {
	next := func(t time.Time) time.Time { return nextTime(s, rule, t) }
	from := pending
	var out []time.Time
	if started := sp.startedAt; from.Before(started) {
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
func (sp *stepper) makeOccurrences(ctx context.Context, s *task.Schedule, dues []time.Time, now time.Time) ([]store.CreateResult, error) {
	ts := make([]*task.Task, len(dues))
	for i, due := range dues {
		ts[i] = sp.occurrence(s, due, now)
	}
	rs, err := sp.p.create(ctx, ts)
	if err != nil {
		return nil, fmt.Errorf("create occurrences of schedule %s: %w", s.ID, err)
	}
	fresh := 0 // mirrored and tracked by the create's write
	for _, r := range rs {
		if r.Created {
			fresh++
		}
	}
	if fresh > 0 {
		if h := sp.p.hooks.Created; h != nil {
			h(s.App, fresh)
		}
		if h := sp.p.hooks.OccurrencesCreated; h != nil {
			h(s.App, fresh)
		}
	}
	return rs, nil
}

// occurrence returns s's occurrence due at due, to create. The template
// was validated when the schedule was written; a broker rule tightened
// since is met at delivery (the sinks check it again).
func (sp *stepper) occurrence(s *task.Schedule, due, now time.Time) *task.Task {
	key := task.OccurrenceKey(s.Key, due)
	t := &task.Task{
		ID:         sp.p.rules.newID(now, s.App, key),
		App:        s.App,
		Key:        key,
		ScheduleID: s.ID,
		State:      task.Scheduled,
		CreatedAt:  now,
	}
	sp.applyTemplate(t, s, due, now)
	t.Record(now, "created", 0, "")
	return t
}

// applyTemplate gives t, an occurrence due at due, s's template.
func (sp *stepper) applyTemplate(t *task.Task, s *task.Schedule, due, now time.Time) {
	t.DueAt, t.NextAttemptAt = due, due
	t.Payload = append([]byte(nil), s.Payload...)
	t.Target = s.Target.Clone()
	t.Retry = withPolicyRetry(s.Retry, sp.p.rules.policy(s.App).Retry).WithDefaults()
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
func (sp *stepper) syncOccurrence(ctx context.Context, s *task.Schedule, r store.CreateResult, now time.Time) error {
	if r.Created {
		return nil
	}
	due := *s.NextAt
	w, err := sp.p.update(ctx, r.Task.ID, func(t *task.Task) error {
		if sp.p.attemptOf(t.ID) != nil {
			return errSkip
		}
		switch {
		case t.State == task.Scheduled && t.Attempts == 0 && t.ScheduleID == s.ID:
			if !t.NextAttemptAt.After(sp.now()) {
				return errSkip // due: it is delivered as it was
			}
			want := t.Clone()
			sp.applyTemplate(want, s, due, now)
			if sameTemplate(t, want) {
				return errSkip
			}
			sp.applyTemplate(t, s, due, now)
			t.Record(now, "changed", 0, "")
		case cancelledBySchedule(t):
			t.ScheduleID = s.ID
			t.Attempts, t.LastError = 0, ""
			sp.applyTemplate(t, s, due, now)
			requeue(t, due, now)
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
	sp.p.wrote(ctx, w)
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
func (sp *stepper) dropStray(ctx context.Context, s, cur *task.Schedule, made []store.CreateResult, synced bool, now time.Time) {
	for i, r := range made {
		t := r.Task
		if (!r.Created && !(synced && i == 0)) || !t.DueAt.After(now) {
			continue
		}
		if cur != nil && cur.State == task.ScheduleActive && equalTimes(cur.NextAt, &t.DueAt) {
			continue
		}
		if err := sp.retireOccurrence(ctx, s, t.DueAt, "changed"); err != nil {
			sp.p.log.WarnContext(ctx, "cancel an occurrence its schedule no longer names", slog.String("task", t.ID.String()), slog.String("error", err.Error()))
		}
	}
}

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// kick wakes the schedule loop to read the store again.
func (sp *stepper) kick() { signal(sp.kickCh) }

// run makes schedules' occurrences as their pending ones come
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
func (sp *stepper) run(ctx context.Context) {
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
		now := sp.p.clock.Now()
		if reread || !now.Before(read.Add(scheduleRescan)) {
			got, f, err := sp.due(ctx, now.Add(scheduleHorizon))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				sp.p.log.ErrorContext(ctx, "read due schedules", slog.String("error", err.Error()))
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
			for i, at := range sp.stepAll(ctx, act, held) {
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
		now = sp.p.clock.Now()
		sp.p.idle(now)
		wait := read.Add(scheduleRescan).Sub(now)
		if len(due) > 0 {
			wait = min(wait, actAt(due[0]).Sub(now))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-sp.kickCh:
			reread = true
		case <-sp.p.changed:
			clear(held) // new limits: steps held back by the old ones go at once
			reread = true
		}
	}
}

// due reads the schedules this engine acts on that wake by until,
// and whether the read was a full page (more may wake by until).
func (sp *stepper) due(ctx context.Context, until time.Time) ([]*task.Schedule, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	got, err := sp.p.store.DueSchedules(ctx, until, schedulePage)
	if err != nil {
		return nil, false, err
	}
	full := len(got) == schedulePage
	if owns := sp.p.owns; owns != nil {
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

// stepAll steps each of ss, up to scheduleWorkers at once, and
// returns when all are done, with the time each was held back until by
// its app's creates_per_second (zero: not held). A schedule in held has a
// create paid for its step. Each is read again first: the loop's copy may
// be up to scheduleRescan old, and a step of a copy that a PATCH or a pause
// has since changed would make an occurrence only to cancel it. A failed
// step is logged; its schedule keeps its WakeAt, and the next read finds
// it again.
func (sp *stepper) stepAll(ctx context.Context, ss []*task.Schedule, held map[task.ID]time.Time) []time.Time {
	sem := make(chan struct{}, scheduleWorkers)
	holds := make([]time.Time, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		if _, busy := sp.stepping.Load(s.ID); busy {
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
			defer sp.beginLoopStep(s.ID)() // before the read: see awaitLoopStep
			if _, busy := sp.stepping.Load(s.ID); busy {
				return // marked since the look above: see hold
			}
			cur, err := sp.p.store.GetSchedule(sctx, s.ID)
			if err == nil {
				_, holds[i], err = sp.step(sctx, cur, paid)
			}
			if err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
				sp.p.log.ErrorContext(ctx, "step a schedule", slog.String("schedule", s.ID.String()), slog.String("app", s.App), slog.String("error", err.Error()))
			}
		})
	}
	wg.Wait()
	return holds
}

// beginLoopStep marks s as being stepped by the loop until the returned
// func is called.
func (sp *stepper) beginLoopStep(id task.ID) (end func()) {
	done := make(chan struct{})
	sp.loopSteps.Store(id, done)
	return func() {
		sp.loopSteps.CompareAndDelete(id, done)
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
func (sp *stepper) awaitLoopStep(ctx context.Context, id task.ID) {
	if v, ok := sp.loopSteps.Load(id); ok {
		select {
		case <-v.(chan struct{}):
		case <-ctx.Done():
		}
	}
}
