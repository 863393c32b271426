package recur

import (
	"math/bits"
	"slices"
	"time"
	_ "time/tzdata" // the zone database, built into the binary

	"github.com/toc-dev/toc/task"
)

// searchYears is how many calendar years after its start Next searches
// for a matching wall time: enough for 29 February across a non-leap
// century (2096 to 2104), the longest gap of any rule that can match.
const searchYears = 8

// maxYear is the last year Next returns a time in: RFC 3339 has 4 digits.
const maxYear = 9999

// maxOffset bounds the offset of any zone from UTC, with margin (tzdata's
// extremes are within ±16h, local mean times included).
const maxOffset = 26 * 60 * 60

// maxBackJump bounds how far a zone's clock is ever set back.
const maxBackJump = 48 * time.Hour

// Rule is a schedule's rule in its zone: a cron expression or a fixed
// interval. It is immutable and safe for concurrent use.
type Rule struct {
	loc *time.Location

	// every-rule
	every  time.Duration
	anchor time.Time

	// cron rule: bit n of a set is value n (starBit cleared). dayOr: both
	// day fields are restricted, and a day matches if either does.
	sec, min, hour, dom, month, dow uint64
	dayOr                           bool
	never                           bool // no wall time can match
}

// New parses a rule: exactly one of cron (non-empty) and every (> 0). tz is
// an IANA zone name, "" meaning "UTC". anchor is the instant an every-rule
// counts from (ignored for cron).
//
// Errors are *task.FieldError naming the field: "cron", "every" or
// "timezone"; "cron" also when both or neither of cron and every are given.
// New does not apply task.MinEvery: [Check] does.
func New(cron string, every time.Duration, tz string, anchor time.Time) (*Rule, error) {
	if (cron != "") == (every != 0) {
		return nil, &task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}
	}
	var r *Rule
	if cron != "" {
		var err error
		if r, err = parseCron(cron); err != nil {
			return nil, err
		}
	} else {
		if every < 0 {
			return nil, &task.FieldError{Field: "every", Message: "must be positive, got " + every.String()}
		}
		r = &Rule{every: every, anchor: task.Ms(anchor)}
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}
	r.loc = loc
	return r, nil
}

// loadZone loads an IANA zone, "" meaning UTC.
func loadZone(tz string) (*time.Location, error) {
	if tz == "Local" {
		// time.LoadLocation's name for the server's own zone.
		return nil, &task.FieldError{Field: "timezone", Message: `"Local" is not a zone: give an IANA name like "Europe/Berlin" or "UTC"`}
	}
	if _, known := slices.BinarySearch(zoneNames, tz); !known && tz != "" && tz != "UTC" {
		// Only the database built into the binary: a zone that merely this
		// machine's /usr/share/zoneinfo has would not load on another node,
		// or after a move.
		return nil, &task.FieldError{Field: "timezone", Message: "unknown time zone " + quote(tz) + `: give an IANA name like "Europe/Berlin" or "UTC"`}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &task.FieldError{Field: "timezone", Message: "unknown time zone " + quote(tz) + `: give an IANA name like "Europe/Berlin" or "UTC"`}
	}
	return loc, nil
}

// Location returns the rule's zone: UTC when it was given as "".
func (r *Rule) Location() *time.Location { return r.loc }

// End is the first instant Next never returns, the start of the year 9999
// in UTC: the API and import take times before it (an occurrence the rule
// makes can be exported and imported again).
var End = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Next returns the first time of the rule strictly after `after`, in UTC at
// millisecond precision, or the zero time when there is none: a cron rule
// that can never match, or a time at or after End. The package doc says
// how cron rules meet DST changes and how far Next searches.
func (r *Rule) Next(after time.Time) time.Time {
	if t := r.next(after); t.Before(End) {
		return t
	}
	return time.Time{}
}

func (r *Rule) next(after time.Time) time.Time {
	after = after.Round(0) // no monotonic reading: only the instant counts
	if r.every > 0 {
		return r.nextEvery(after)
	}
	if r.never {
		return time.Time{}
	}
	// A wall time w fires at first(w), the earliest instant whose wall time
	// is w or later. first is non-decreasing in w, and first(w) > after
	// exactly when w is later than every wall time the zone's clock showed
	// up to after (its high water). So the answer is first of the earliest
	// matching wall time past the high water.
	hw := r.highWater(after)
	y, mo, d := hw.Date()
	h, mi, s := hw.Clock()
	w := r.nextWall(time.Date(y, mo, d, h, mi, s+1, 0, time.UTC))
	if w.IsZero() {
		return time.Time{}
	}
	return task.Ms(r.first(w))
}

// nextEvery returns anchor + k*every for the smallest whole k >= 0 that is
// after `after`.
func (r *Rule) nextEvery(after time.Time) time.Time {
	t := r.anchor
	if t.After(after) {
		return t
	}
	// after.Sub saturates past 292 years: step by whole intervals first.
	const maxStep = time.Duration(1<<63 - 1)
	big := maxStep / r.every * r.every
	for after.Sub(t) >= big {
		if t.Year() > maxYear {
			return time.Time{}
		}
		t = t.Add(big)
	}
	k := after.Sub(t)/r.every + 1
	t = task.Ms(t.Add(k * r.every))
	if t.Year() > maxYear {
		return time.Time{}
	}
	return t
}

// wall returns t's wall time in the rule's zone as a time in UTC.
func (r *Rule) wall(t time.Time) time.Time {
	_, off := t.In(r.loc).Zone()
	return t.Add(time.Duration(off) * time.Second).UTC()
}

// highWater returns the latest wall time the zone's clock showed at or
// before t: t's own, or a later one shown before a recent change back.
func (r *Rule) highWater(t time.Time) time.Time {
	hw := r.wall(t)
	at := t
	for range 4 {
		start, _ := at.In(r.loc).ZoneBounds()
		if start.IsZero() || t.Sub(start) > maxBackJump {
			break
		}
		at = start.Add(-time.Nanosecond) // the last instant before the change
		if w := r.wall(at); w.After(hw) {
			hw = w
		}
	}
	return hw
}

// first returns the earliest instant whose wall time in the rule's zone is
// w (a wall time given in UTC) or later: w's instant when it exists once,
// its first instant when the clock shows it twice, and the end of the gap
// when the clock skips it.
func (r *Rule) first(w time.Time) time.Time {
	u := w.Unix()
	// No instant before u-maxOffset has a wall time of u or later. Walk the
	// zone's periods from there: in each, the clock runs from the wall time
	// of the period's start without a jump.
	t := time.Unix(u-maxOffset, 0).In(r.loc)
	for {
		start, end := t.ZoneBounds()
		_, off := t.Zone()
		if !start.IsZero() && start.Unix()+int64(off) >= u {
			return start.UTC() // w is in a gap, or w is the period's start
		}
		if c := u - int64(off); end.IsZero() || c < end.Unix() {
			return time.Unix(c, 0).UTC()
		}
		t = end
	}
}

// nextWall returns the earliest wall time at or after t (a wall time in
// UTC, whole seconds) that matches the rule, or the zero time when there is
// none within searchYears.
func (r *Rule) nextWall(t time.Time) time.Time {
	limit := min(t.Year()+searchYears, maxYear)
	for t.Year() <= limit {
		y, mo, d := t.Date()
		h, mi, s := t.Clock()
		switch {
		case r.month&(1<<uint(mo)) == 0:
			if n := nextBit(r.month, int(mo)); n > 0 {
				t = time.Date(y, time.Month(n), 1, 0, 0, 0, 0, time.UTC)
			} else {
				t = time.Date(y+1, time.January, 1, 0, 0, 0, 0, time.UTC)
			}
		case !r.dayMatches(t):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case r.hour&(1<<uint(h)) == 0:
			if n := nextBit(r.hour, h); n >= 0 && n < 24 {
				t = time.Date(y, mo, d, n, 0, 0, 0, time.UTC)
			} else {
				t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			}
		case r.min&(1<<uint(mi)) == 0:
			if n := nextBit(r.min, mi); n >= 0 && n < 60 {
				t = time.Date(y, mo, d, h, n, 0, 0, time.UTC)
			} else {
				t = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
			}
		case r.sec&(1<<uint(s)) == 0:
			if n := nextBit(r.sec, s); n >= 0 && n < 60 {
				t = time.Date(y, mo, d, h, mi, n, 0, time.UTC)
			} else {
				t = time.Date(y, mo, d, h, mi+1, 0, 0, time.UTC)
			}
		default:
			return t
		}
	}
	return time.Time{}
}

// dayMatches reports whether the rule's day fields match t's date.
func (r *Rule) dayMatches(t time.Time) bool {
	dom := r.dom&(1<<uint(t.Day())) != 0
	dow := r.dow&(1<<uint(t.Weekday())) != 0
	if r.dayOr {
		return dom || dow
	}
	return dom && dow
}

// nextBit returns the lowest value in set above v, or -1.
func nextBit(set uint64, v int) int {
	set &^= 1<<uint(v+1) - 1
	if set == 0 {
		return -1
	}
	return bits.TrailingZeros64(set)
}
