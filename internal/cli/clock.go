package cli

import (
	"context"
	"fmt"
	"time"
)

const clockHelp = `
Shows the server's clock, or moves the test clock of a server started with
"toc serve --test-clock" forward. An advance hands every task, retry and
schedule occurrence due by the new time to its sink in due order, as if
the time had passed step by step, and returns once every push attempt due
by then has ended; it prints the new time and how many fired. The clock
never goes back. A server on the wall clock refuses to move (HTTP 409).
With tokens configured, it takes an admin token.

Examples:
  toc clock
  toc clock advance 30m
  toc clock advance --to 2027-03-14T09:00:00Z
`

func runClock(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "clock", clockHelp)
	conn := addConnFlags(fs)
	to := fs.String("to", "", "advance: move the clock to this RFC 3339 time instead of by a duration")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	c, err := conn.client(e, "clock")
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 && *to == "":
		s, err := c.Clock(ctx)
		if err != nil {
			return err
		}
		kind := "wall clock"
		if s.TestClock {
			kind = "test clock"
		}
		fmt.Fprintf(e.stdout, "%s (%s)\n", s.Now.UTC().Format(time.RFC3339Nano), kind)
		return nil
	case len(pos) == 0 || pos[0] != "advance":
		return usagef("clock: want no argument, or advance DURATION, or advance --to TIME; got %q", pos)
	}
	var advanced func() (time.Time, int, error)
	switch {
	case len(pos) == 2 && *to == "":
		d, err := time.ParseDuration(pos[1])
		if err != nil || d < 0 {
			return usagef("clock advance: %q is not a duration like 30m or 1h30m (the clock never goes back)", pos[1])
		}
		advanced = func() (time.Time, int, error) {
			s, err := c.AdvanceClock(ctx, d)
			return s.Now, s.Fired, err
		}
	case len(pos) == 1 && *to != "":
		t, err := time.Parse(time.RFC3339Nano, *to)
		if err != nil {
			return usagef("clock advance: --to %q is not an RFC 3339 time like 2027-03-14T09:00:00Z", *to)
		}
		advanced = func() (time.Time, int, error) {
			s, err := c.AdvanceClockTo(ctx, t)
			return s.Now, s.Fired, err
		}
	default:
		return usagef("clock advance: give one duration (like 30m) or --to TIME")
	}
	now, fired, err := advanced()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s fired %d\n", now.UTC().Format(time.RFC3339Nano), fired)
	return nil
}
