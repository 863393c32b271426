package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
)

// A test clock (issue #27): with Config.Clock a *clock.Test, the engine's
// time stands still until AdvanceClock moves it. AdvanceClock moves it in
// due order, as if the time had passed step by step: it sets the clock to
// the next instant anything is due (a task, a retry, a lease's or a
// deadline's end, a schedule's occurrence, an entry the engine put off),
// wakes the loops, waits until the engine has done everything due by then
// (quiet), and goes on to the next instant, up to the target. A retry due
// 1 s after an attempt at T thus fires at T+1s of the clock, within the
// same advance.
//
// Quiet at now means: the wheel holds nothing due by now and the loader
// has loaded up to now+Window; no task is ready, no fire job runs, no push
// attempt is under way, waiting for a worker or waiting for its outcome to
// be stored; the schedule loop has read the schedules and stepped those
// due at now or later; finished tasks past the retention are swept. The
// engine's own waits that only pace work (outcome gathering, store retry
// back-off, a sink's timeout) run on the wall clock meanwhile, so an
// advance takes as long as the deliveries it makes.

// ErrWallClock is AdvanceClock's error on an engine that runs on the wall
// clock.
var ErrWallClock = errors.New("toc: this server runs on the wall clock, which only time moves; start it with `toc serve --test-clock` to move its time from tests")

// ClockBackError is AdvanceClock's error for a target before the clock's
// time: a test clock never goes back.
type ClockBackError struct {
	Now, To time.Time
}

func (e *ClockBackError) Error() string {
	return fmt.Sprintf("the test clock reads %s and never goes back (asked for %s)",
		e.Now.Format(time.RFC3339Nano), e.To.Format(time.RFC3339Nano))
}

// testClockState is the engine's part of AdvanceClock.
type testClockState struct {
	advancing sync.Mutex   // one advance at a time
	fired     atomic.Int64 // push attempts started and pull tasks fallen due, ever

	mu struct {
		sync.Mutex
		passes uint64    // times the schedule loop went to sleep
		at     time.Time // the clock's time it last went to sleep at
	}
}

// scheduleIdle notes that the schedule loop goes to sleep, having acted on
// everything due at now.
func (s *testClockState) scheduleIdle(now time.Time) {
	s.mu.Lock()
	s.mu.passes++
	s.mu.at = now
	s.mu.Unlock()
}

func (s *testClockState) schedulePass() (uint64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.passes, s.mu.at
}

// Now returns the engine's clock's time.
func (e *Engine) Now() time.Time { return e.clock.Now() }

// TestClock reports whether the engine runs on a test clock
// (Config.Clock is a *clock.Test).
func (e *Engine) TestClock() bool {
	_, ok := e.clock.(*clock.Test)
	return ok
}

// quietPoll is how often an advance looks whether the engine is quiet.
const quietPoll = time.Millisecond

// AdvanceClock moves the engine's test clock forward to `to` in due order
// (see above) and returns the clock's time after it and how many push
// attempts started and pull tasks fell due on the way. It returns
// ErrWallClock on the wall clock, a *ClockBackError for a `to` before the
// clock's time, and ctx's error when ctx ends first (the clock stays where
// the advance had moved it). Advances run one at a time.
func (e *Engine) AdvanceClock(ctx context.Context, to time.Time) (now time.Time, fired int, err error) {
	tc, ok := e.clock.(*clock.Test)
	if !ok {
		return e.clock.Now(), 0, ErrWallClock
	}
	if err := e.checkReady(); err != nil {
		return tc.Now(), 0, err
	}
	e.tclock.advancing.Lock()
	defer e.tclock.advancing.Unlock()
	to = to.UTC()
	if now := tc.Now(); to.Before(now) {
		return now, 0, &ClockBackError{Now: now, To: to}
	}
	start, from := e.tclock.fired.Load(), tc.Now()
	defer func() {
		e.log.InfoContext(ctx, "test clock advanced", slog.Time("from", from), slog.Time("to", now), slog.Int("fired", fired), slog.Any("error", err))
	}()
	for {
		now := tc.Now()
		next, err := e.settleAt(ctx, now, to)
		if err != nil {
			return now, int(e.tclock.fired.Load() - start), fmt.Errorf("advance the test clock at %s: %w", now.Format(time.RFC3339Nano), err)
		}
		if !now.Before(to) {
			return now, int(e.tclock.fired.Load() - start), nil
		}
		if err := tc.Set(earliest(next, to)); err != nil {
			return now, int(e.tclock.fired.Load() - start), err
		}
	}
}

// settleAt has the engine do everything due at now, the clock's time, and
// waits until it is quiet; it returns the next instant after now that
// anything is due, or a time after `to` when nothing is by then.
func (e *Engine) settleAt(ctx context.Context, now, to time.Time) (next time.Time, err error) {
	passes, _ := e.tclock.schedulePass()
	signal(e.loadKick)
	signal(e.kick)
	if e.schedules != nil {
		e.steps.kick()
	}
	if err := e.sweepTo(ctx, now); err != nil {
		return time.Time{}, err
	}
	wheelNext, err := e.awaitQuiet(ctx, now, passes)
	if err != nil {
		return time.Time{}, err
	}
	next = to.Add(time.Millisecond)
	if !wheelNext.IsZero() && wheelNext.After(now) {
		next = earliest(next, wheelNext)
	}
	// The store's next wake after now, strictly: what is due at now (a
	// pull task waiting for a claim) stays so.
	ws, err := e.store.Wakeups(ctx, store.Cursor{At: now, ID: sched.MaxID}, to, 1)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the next wakeup: %w", err)
	}
	if len(ws) > 0 {
		next = earliest(next, ws[0].At)
	}
	if e.schedules != nil {
		ss, err := e.schedules.DueSchedules(ctx, to, schedulePage)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the next schedule: %w", err)
		}
		for _, s := range ss { // in WakeAt order
			if s.WakeAt.After(now) {
				next = earliest(next, s.WakeAt)
				break
			}
		}
	}
	return next, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sweepTo deletes the finished tasks past the retention at now (the sweep
// loop's work, which runs on a wall-clock ticker).
func (e *Engine) sweepTo(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-e.cfg.Retention)
	for {
		n, err := e.store.Sweep(ctx, cutoff, 1000)
		if err != nil {
			return fmt.Errorf("sweep finished tasks: %w", err)
		}
		if n < 1000 {
			return nil
		}
	}
}

// awaitQuiet waits until the engine is quiet at now (see above) and
// returns the wheel's next instant. passes is the schedule loop's count
// from before the loops were woken.
func (e *Engine) awaitQuiet(ctx context.Context, now time.Time, passes uint64) (wheelNext time.Time, err error) {
	t := time.NewTimer(quietPoll)
	defer t.Stop()
	for {
		quiet, next := e.quietAt(now, passes)
		if quiet {
			return next, nil
		}
		if err := e.checkReady(); err != nil {
			return time.Time{}, err // stopping: the loops will not get quiet
		}
		t.Reset(quietPoll)
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (e *Engine) quietAt(now time.Time, passes uint64) (bool, time.Time) {
	e.mu.Lock()
	if e.mu.core == nil {
		e.mu.Unlock()
		return true, time.Time{}
	}
	moved, next := e.mu.core.Advance(now)
	st := e.mu.core.Stats()
	e.mu.Unlock()
	if moved > 0 {
		e.signalReady()
		return false, next
	}
	if st.Cursor.Before(now.Add(e.cfg.Window)) {
		signal(e.loadKick)
		return false, next
	}
	if st.Ready > 0 || len(e.writing) > 0 || e.busy.Load() > 0 {
		return false, next
	}
	e.out.Lock()
	busy := len(e.out.pending) > 0 || e.out.settlers > 0 || len(e.out.waiting.ring) > 0
	for _, a := range e.out.attempts {
		// A pull task's lease held here (pull.go) waits for its consumer,
		// not for the engine: it ends by an ack or by the clock.
		if busy || a == nil || !a.pull || a.ending {
			busy = true
			break
		}
	}
	e.out.Unlock()
	if busy {
		return false, next
	}
	if e.schedules != nil {
		if p, at := e.tclock.schedulePass(); p <= passes || at.Before(now) {
			return false, next
		}
	}
	return true, next
}
