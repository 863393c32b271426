// Package recur computes the times of a recurring schedule's rule: a cron
// expression or a fixed interval ("every"), evaluated in the schedule's time
// zone. It is pure computation: no storage, no clock, no goroutines; a
// [Rule] is immutable and safe for concurrent use.
//
// # Cron syntax
//
// A cron rule has 5 fields (minute, hour, day of month, month, day of week)
// or 6 with a leading seconds field. A field is *, a number, a name (JAN to
// DEC, SUN to SAT, any case; 7 is also Sunday), a range (1-5), a list
// (1,15), or a step (*/15, 10-50/10, 5/10 meaning 5-max/10). ? is * in the
// day fields. A range whose start is after its end wraps around (hours
// 22-2, days of week FRI-MON, days of month 25-5). The descriptors are
// @hourly, @daily (@midnight), @weekly (Sunday 00:00), @monthly and @yearly
// (@annually). Not accepted: @every (use the every field), a TZ= prefix (use
// the timezone field), and the Quartz extensions L, W, # and H.
//
// Days follow Vixie cron: when both day of month and day of week are
// restricted, a day matches if either matches; "0 0 1 * MON" fires on the
// 1st and on every Monday. When one of them is * (or ?), the other alone
// decides. A * with a step above 1, like */2, counts as restricted (Vixie
// cron counts it as *).
//
// # Time zones and DST
//
// A cron rule is evaluated in its zone's wall clock, and each matching wall
// time fires once, at the first instant the zone's clock shows that time or
// a later one:
//
//   - A wall time skipped by a change to summer time fires at the first
//     instant after the gap. "30 2 * * *" in America/New_York on
//     2027-03-14, when 02:00-03:00 does not exist, fires at 03:00 EDT
//     (07:00Z). Several skipped times fire once: "0,30 2 * * *" fires once
//     at 03:00 that day, and "0 * * * *" fires at 01:00 EST then 03:00 EDT.
//   - A wall time repeated by the change back fires once, at its first
//     instant. "30 1 * * *" in America/New_York on 2027-11-07 fires at
//     01:30 EDT (05:30Z) and not at 01:30 EST. This holds for hourly and
//     finer rules too: "0 * * * *" fires at 01:00 EDT (05:00Z), not at
//     01:00 EST (06:00Z), then at 02:00 EST (07:00Z), two hours later;
//     "*/15 * * * *" is silent through the repeated hour.
//
// An every-rule ignores the zone (it is still checked): its times are
// anchor + k*every for whole k >= 0, plain durations in absolute time, so
// "every 24h" drifts an hour against the wall clock across a DST change.
//
// # Bounds
//
// [Rule.Next] returns times to the millisecond in UTC, never at or before
// its argument. A cron rule's times are whole seconds. A cron rule that
// can never match (like "0 0 30 2 *") is known when parsed and Next answers
// the zero time at once. Otherwise Next searches wall times up to the end
// of the 8th calendar year after its argument's: every rule that can match
// has a time in any such window (the longest gap is 29 February across a
// non-leap century, 2096 to 2104), so the bound never hides a time. Times
// from the year 9999 on ([End]) are never returned: the API takes times
// before it.
//
// # The cron library
//
// Expressions are parsed by github.com/netresearch/go-cron (v0.9), the
// maintained fork of github.com/robfig/cron, the most used Go cron package,
// unmaintained since 2020. The fork fixes robfig's parser panics and has no
// dependencies, and its parser gives the field sets as exported bit masks
// (SpecSchedule). That is all toc takes from it: recur computes the times
// itself over those sets, because neither library's Next follows toc's DST
// rules (go-cron fires "30 2 * * *" at 03:30, not 03:00, on a
// spring-forward day, and "30 1 * * *" twice on a fall-back day; robfig/cron
// skips the spring-forward run altogether). go-cron ANDs day of month with
// day of week by default, so recur sets its DowOrDom option to keep Vixie
// cron's OR. github.com/adhocore/gronx was considered, but it evaluates the
// expression string at each candidate time and gives no field sets;
// github.com/hashicorp/cronexpr keeps its sets private.
package recur
