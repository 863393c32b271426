// Package clock is the time toc's engine runs on: the wall clock in
// production, or a test clock that stands still until a test moves it
// (toc serve --test-clock, issue #27).
//
// The seam is Now alone. The engine's loops sleep on real timers for the
// time their clock says is left (next.Sub(c.Now())), and whoever moves a
// Test clock wakes them afterwards (engine.Engine.AdvanceClock does): a
// loop asleep until 30 minutes of clock time from now then wakes as soon
// as the clock is moved, and sees the new time. Waits that only pace work
// (gathering a batch, a worker's idle time, a store's retry back-off, an
// HTTP timeout) stay on the wall clock: they end by themselves whatever
// the clock says.
package clock

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Real is the wall clock: time.Now. Its zero value is ready.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Or returns c, or the wall clock when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// ErrBackwards is the error of a move that would set a Test clock back.
var ErrBackwards = errors.New("clock: a test clock never goes back")

// Test is a clock that stands still until Set or Advance moves it, and
// never goes back. Its time is in UTC, whole milliseconds (the precision
// toc stores times at: a clock between two milliseconds would make a task
// due "in 30m" fall due just after the clock's 30 minutes), with no
// monotonic reading.
// It is safe for concurrent use.
type Test struct {
	mu  sync.Mutex
	now time.Time
}

// NewTest returns a test clock reading start.
func NewTest(start time.Time) *Test {
	return &Test{now: start.Round(0).UTC().Truncate(time.Millisecond)}
}

// Now returns the clock's time.
func (c *Test) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (to the millisecond), which must not be
// before its time (an error wrapping ErrBackwards). Setting it to its own time is allowed
// and does nothing.
func (c *Test) Set(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		return fmt.Errorf("%w: it reads %s, asked for %s", ErrBackwards, c.now.Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))
	}
	c.now = t.Round(0).UTC().Truncate(time.Millisecond)
	return nil
}

// Advance moves the clock d forward (to the millisecond); d must not be
// negative.
func (c *Test) Advance(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: asked to advance %s", ErrBackwards, d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d).Truncate(time.Millisecond)
	return nil
}
