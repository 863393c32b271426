package recur

import (
	"testing"
	"time"
)

// propRules are rules with hand-written matchers of local wall times, so
// that the checks below do not trust the parser. min says the rule fires
// on whole minutes only (second 0).
var propRules = []struct {
	cron  string
	match func(w time.Time) bool
	min   bool
}{
	{"30 2 * * *", func(w time.Time) bool { return w.Hour() == 2 && w.Minute() == 30 && w.Second() == 0 }, true},
	{"0 * * * *", func(w time.Time) bool { return w.Minute() == 0 && w.Second() == 0 }, true},
	{"*/7 1-3 * * *", func(w time.Time) bool {
		return w.Hour() >= 1 && w.Hour() <= 3 && w.Minute()%7 == 0 && w.Second() == 0
	}, true},
	{"0 0 * * *", func(w time.Time) bool { return w.Hour() == 0 && w.Minute() == 0 && w.Second() == 0 }, true},
	{"15 3 1,15 * SUN", func(w time.Time) bool {
		return w.Hour() == 3 && w.Minute() == 15 && w.Second() == 0 && (w.Day() == 1 || w.Day() == 15 || w.Weekday() == time.Sunday)
	}, true},
	{"0 9 * * MON-FRI", func(w time.Time) bool {
		return w.Hour() == 9 && w.Minute() == 0 && w.Second() == 0 && w.Weekday() >= time.Monday && w.Weekday() <= time.Friday
	}, true},
	{"45 30 1 * * *", func(w time.Time) bool { return w.Hour() == 1 && w.Minute() == 30 && w.Second() == 45 }, false},
	{"@monthly", func(w time.Time) bool {
		return w.Day() == 1 && w.Hour() == 0 && w.Minute() == 0 && w.Second() == 0
	}, true},
}

var propZones = []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "Australia/Sydney"}

// wallOf returns t's wall time in loc as a time in UTC.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// TestNextYear iterates Next over 2027: times increase strictly (no instant
// repeats), each is a whole second, and each matches the rule in local
// time, or is the end of a DST gap that skipped a matching wall time.
func TestNextYear(t *testing.T) {
	t.Parallel()
	start, end := utc(t, "2027-01-01T00:00:00Z"), utc(t, "2028-01-01T00:00:00Z")
	totalShifted := 0
	defer func() {
		if totalShifted == 0 {
			t.Error("no time was shifted by a DST gap: the zones have no DST?")
		}
	}()
	for _, tz := range propZones {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range propRules {
			r := mustNew(t, pr.cron, 0, tz, time.Time{})
			n, shifted := 0, 0
			for prev := start; ; n++ {
				got := r.Next(prev)
				if got.IsZero() {
					t.Fatalf("%q in %s: Next(%v) = zero", pr.cron, tz, prev)
				}
				if !got.After(prev) || got.Location() != time.UTC || got.Nanosecond() != 0 {
					t.Fatalf("%q in %s: Next(%v) = %v", pr.cron, tz, prev, got)
				}
				if !got.Before(end) {
					break
				}
				if !pr.match(wallOf(got, loc)) {
					// Must be the end of a gap that skipped a matching time.
					zs, _ := got.In(loc).ZoneBounds()
					before := wallOf(got.Add(-time.Nanosecond), loc)
					if !zs.Equal(got) || !before.Before(wallOf(got, loc)) {
						t.Fatalf("%q in %s: %v (%v) does not match", pr.cron, tz, got, got.In(loc))
					}
					skipped := false
					for w := before.Truncate(time.Second).Add(time.Second); w.Before(wallOf(got, loc)); w = w.Add(time.Second) {
						skipped = skipped || pr.match(w)
					}
					if !skipped {
						t.Fatalf("%q in %s: %v (%v) ends a gap with no matching time", pr.cron, tz, got, got.In(loc))
					}
					shifted++
				}
				prev = got
			}
			if n == 0 {
				t.Errorf("%q in %s: no time in 2027", pr.cron, tz)
			}
			totalShifted += shifted
		}
	}
}

// TestNextReference compares Next with a brute-force model around each DST
// change of 2027: walking the instants minute by minute and keeping the
// latest wall time shown so far, an instant fires when the clock reaches,
// for the first time, a matching wall time or jumps over one.
func TestNextReference(t *testing.T) {
	t.Parallel()
	type window struct{ from, to time.Time }
	for _, tz := range append(propZones, "Pacific/Apia") {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		// Two days each side of every change in 2027, and one plain week.
		windows := []window{{utc(t, "2027-06-10T00:00:00Z"), utc(t, "2027-06-17T00:00:00Z")}}
		if tz == "Pacific/Apia" {
			windows = append(windows, window{utc(t, "2011-12-28T00:00:00Z"), utc(t, "2012-01-02T00:00:00Z")})
		}
		for at := utc(t, "2027-01-01T00:00:00Z"); ; {
			_, next := at.In(loc).ZoneBounds()
			if next.IsZero() || next.Year() > 2027 {
				break
			}
			windows = append(windows, window{next.Add(-48 * time.Hour), next.Add(48 * time.Hour)})
			at = next
		}
		if want := map[string]int{"UTC": 1, "Asia/Kolkata": 1, "Pacific/Apia": 2}[tz]; want == 0 && len(windows) != 3 || want != 0 && len(windows) != want {
			t.Fatalf("%s: %d windows: the zone's changes in 2027 were not found", tz, len(windows))
		}
		for _, pr := range propRules {
			if !pr.min {
				continue
			}
			r := mustNew(t, pr.cron, 0, tz, time.Time{})
			for _, win := range windows {
				var want []time.Time
				hw := wallOf(win.from, loc)
				for at := win.from.Add(time.Minute); at.Before(win.to); at = at.Add(time.Minute) {
					w := wallOf(at, loc)
					if !w.After(hw) {
						continue
					}
					for x := hw.Add(time.Minute); !x.After(w); x = x.Add(time.Minute) {
						if pr.match(x) {
							want = append(want, at)
							break
						}
					}
					hw = w
				}
				var got []time.Time
				for at := win.from; ; {
					next := r.Next(at)
					if !next.After(at) {
						t.Fatalf("%q in %s: Next(%v) = %v", pr.cron, tz, at, next)
					}
					if !next.Before(win.to) {
						break
					}
					got = append(got, next)
					at = next
				}
				// Next from any instant, also inside a repeated hour, is the
				// model's first time after it.
				for at, i := win.from, 0; at.Before(win.to); at = at.Add(7*time.Minute + 13*time.Second) {
					for i < len(want) && !want[i].After(at) {
						i++
					}
					if i == len(want) {
						break
					}
					if next := r.Next(at); !next.Equal(want[i]) {
						t.Errorf("%q in %s: Next(%v) = %v, want %v", pr.cron, tz, at, next, want[i])
						break
					}
				}
				if len(got) != len(want) {
					t.Errorf("%q in %s, %v to %v: %d times, want %d\ngot  %v\nwant %v", pr.cron, tz, win.from, win.to, len(got), len(want), got, want)
					continue
				}
				for i := range got {
					if !got[i].Equal(want[i]) {
						t.Errorf("%q in %s: time %d is %v, want %v", pr.cron, tz, i, got[i], want[i])
						break
					}
				}
			}
		}
	}
}
