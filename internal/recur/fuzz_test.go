package recur

import (
	"testing"
	"time"
)

var fuzzZones = []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Apia", "America/Santiago"}

// FuzzRule parses arbitrary cron strings: New never panics, and a rule it
// accepts gives times strictly after their argument, in UTC to the
// millisecond, or zero.
func FuzzRule(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "0 9 * * MON-FRI", "*/15 * * * *", "30 2 * * *", "0,30 1 * * *", "0 0 1 * MON",
		"0 0 30 2 *", "0 0 29 2 *", "*/20 * * * * *", "59 59 23 31 12 *", "@daily", "@monthly", "@yearly",
		"61 * * * *", "* * *", "1,,2 * * * *", "TZ=UTC * * * * *", "0 0 L * *", "22-2/3 * * jan-mar ?",
		"@every 1s", "", " ", "1-2-3 4/5/6 * * *",
	} {
		f.Add(s, int64(1804000000), uint8(1)) // 2027-03-01
	}
	f.Add("30 1 * * *", int64(1825478000), uint8(1)) // 2027-11-07, inside New York's repeated hour
	f.Fuzz(func(t *testing.T, cron string, sec int64, zone uint8) {
		tz := fuzzZones[int(zone)%len(fuzzZones)]
		r, err := New(cron, 0, tz, time.Time{})
		if err != nil {
			return
		}
		// Any instant from 1200 BC to AD 5100.
		after := time.Unix(sec%(100_000_000_000), 0)
		for range 3 {
			next := r.Next(after)
			if next.IsZero() {
				return
			}
			if !next.After(after) || next.Location() != time.UTC || next.Nanosecond()%int(time.Millisecond) != 0 {
				t.Fatalf("New(%q, %s).Next(%v) = %v", cron, tz, after, next)
			}
			after = next
		}
	})
}
