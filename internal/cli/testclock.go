package cli

import (
	"fmt"
	"strconv"
	"time"
)

// testClockFlag is `toc serve --test-clock[=RFC3339 start]`: toc on a
// clock that stands still until POST /v1/admin/clock moves it (issue #27).
// Alone, the clock starts at the wall clock's time.
type testClockFlag struct {
	on    bool
	start time.Time // zero: the wall clock's time at start
}

func (f *testClockFlag) String() string {
	switch {
	case f == nil || !f.on:
		return ""
	case f.start.IsZero():
		return "true"
	}
	return f.start.Format(time.RFC3339Nano)
}

// Set takes "true"/"false" (the flag alone is "true") or a start time.
func (f *testClockFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		f.on, f.start = b, time.Time{}
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 start time like 2027-03-14T09:00:00Z (or the flag alone, to start at the wall clock's time), got %q", s)
	}
	f.on, f.start = true, t
	return nil
}

// IsBoolFlag lets the flag stand alone.
func (f *testClockFlag) IsBoolFlag() bool { return true }

const testClockUsage = "run on a test clock that stands still until POST /v1/admin/clock (or toc clock advance) moves it; " +
	"=RFC3339 sets its start (default: now). Embedded store only; with tokens configured, an admin token moves it"
