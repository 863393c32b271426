package recur

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/task"
)

func mustNew(t testing.TB, cron string, every time.Duration, tz string, anchor time.Time) *Rule {
	t.Helper()
	r, err := New(cron, every, tz, anchor)
	if err != nil {
		t.Fatalf("New(%q, %s, %q): %v", cron, every, tz, err)
	}
	return r
}

func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// nextN returns the rule's next n times after `after`, as RFC 3339 in UTC
// with milliseconds.
func nextN(r *Rule, after time.Time, n int) []string {
	var out []string
	for range n {
		after = r.Next(after)
		if after.IsZero() {
			out = append(out, "zero")
			break
		}
		out = append(out, after.Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return out
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cron  string
		every time.Duration
		tz    string
		want  task.FieldError
	}{
		{"", 0, "", task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}},
		{"0 * * * *", time.Minute, "", task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}},
		{"", -time.Second, "", task.FieldError{Field: "every", Message: "must be positive, got -1s"}},
		{"61 * * * *", 0, "", task.FieldError{Field: "cron", Message: "minute field: 61 is out of range 0-59"}},
		{"* * *", 0, "", task.FieldError{Field: "cron", Message: "has 3 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)"}},
		{"* * * * * * *", 0, "", task.FieldError{Field: "cron", Message: "has 7 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)"}},
		{"  ", 0, "", task.FieldError{Field: "cron", Message: "is blank: want 5 fields (minute hour day-of-month month day-of-week), 6 with a leading seconds field, or a descriptor like @daily"}},
		{"0 24 * * *", 0, "", task.FieldError{Field: "cron", Message: "hour field: 24 is out of range 0-23"}},
		{"0 0 0 * *", 0, "", task.FieldError{Field: "cron", Message: "day-of-month field: 0 is out of range 1-31"}},
		{"0 0 * 13 *", 0, "", task.FieldError{Field: "cron", Message: "month field: 13 is out of range 1-12"}},
		{"0 0 * * 8", 0, "", task.FieldError{Field: "cron", Message: "day-of-week field: 8 is out of range 0-7"}},
		{"60 0 0 * * *", 0, "", task.FieldError{Field: "cron", Message: "seconds field: 60 is out of range 0-59"}},
		{"1,61 * * * *", 0, "", task.FieldError{Field: "cron", Message: "minute field: 61 is out of range 0-59"}},
		{"99999999999999999999 * * * *", 0, "", task.FieldError{Field: "cron", Message: "minute field: 99999999999999999999 is out of range 0-59"}},
		{"1,,2 * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "1,,2" has an empty list item`}},
		{"1, * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "1," has an empty list item`}},
		{"-1 * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "-1": a range or step is missing a number`}},
		{"abc * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "abc" is not a number`}},
		{"MON * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "MON" is not a number`}},
		{"0 0 * FOO *", 0, "", task.FieldError{Field: "cron", Message: `month field: "FOO" is not a number or a name JAN-DEC`}},
		{"0 0 * * FUNDAY", 0, "", task.FieldError{Field: "cron", Message: `day-of-week field: "FUNDAY" is not a number or a name SUN-SAT`}},
		{"*/0 * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "*/0": a step must be at least 1`}},
		{"*/60 * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "*/60": step 60 must be less than the 60 values it steps over`}},
		{"1-2-3 * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: too many hyphens: "1-2-3"`}},
		{"? * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "?": ? stands alone and only in the day fields`}},
		{"0 0 ?/2 * *", 0, "", task.FieldError{Field: "cron", Message: `day-of-month field: "?/2": ? stands alone and only in the day fields`}},
		{"TZ=UTC 0 * * * *", 0, "", task.FieldError{Field: "cron", Message: `seconds field: "TZ=UTC": '=' is not allowed (use digits, names, * , - / and, in the day fields, ?)`}},
		{"0 0 * * FRI#3", 0, "", task.FieldError{Field: "cron", Message: `day-of-week field: "FRI#3": '#' is not allowed (use digits, names, * , - / and, in the day fields, ?)`}},
		{"0 0 L * *", 0, "", task.FieldError{Field: "cron", Message: `day-of-month field: "L": L, W, # and H are not supported`}},
		{"H * * * *", 0, "", task.FieldError{Field: "cron", Message: `minute field: "H": L, W, # and H are not supported`}},
		{"@every 1h", 0, "", task.FieldError{Field: "cron", Message: `"@every 1h": give intervals in "every", not in cron`}},
		{"@fortnightly", 0, "", task.FieldError{Field: "cron", Message: `unknown descriptor "@fortnightly": want @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually`}},
		{"0 * * * *", 0, "Mars/Olympus_Mons", task.FieldError{Field: "timezone", Message: `unknown time zone "Mars/Olympus_Mons": give an IANA name like "Europe/Berlin" or "UTC"`}},
		{"", time.Minute, "europe/berlin", task.FieldError{Field: "timezone", Message: `unknown time zone "europe/berlin": give an IANA name like "Europe/Berlin" or "UTC"`}},
		{"0 * * * *", 0, "Local", task.FieldError{Field: "timezone", Message: `"Local" is not a zone: give an IANA name like "Europe/Berlin" or "UTC"`}},
		{"0 * * * *", 0, "../../etc/passwd", task.FieldError{Field: "timezone", Message: `unknown time zone "../../etc/passwd": give an IANA name like "Europe/Berlin" or "UTC"`}},
	}
	for _, tt := range tests {
		_, err := New(tt.cron, tt.every, tt.tz, time.Time{})
		var fe *task.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("New(%q, %s, %q) = %v, want a *task.FieldError", tt.cron, tt.every, tt.tz, err)
			continue
		}
		if diff := cmp.Diff(tt.want, *fe); diff != "" {
			t.Errorf("New(%q, %s, %q) error (-want +got):\n%s", tt.cron, tt.every, tt.tz, diff)
		}
	}
}

// TestNextSyntax checks the accepted syntax by the times it gives, in UTC.
func TestNextSyntax(t *testing.T) {
	t.Parallel()
	const after = "2027-03-01T00:00:00Z" // a Monday
	tests := []struct {
		cron string
		want []string
	}{
		{"0 9 * * MON-FRI", []string{"2027-03-01T09:00:00.000Z", "2027-03-02T09:00:00.000Z", "2027-03-03T09:00:00.000Z", "2027-03-04T09:00:00.000Z", "2027-03-05T09:00:00.000Z", "2027-03-08T09:00:00.000Z"}},
		{"0 9 * * mon-fri", []string{"2027-03-01T09:00:00.000Z", "2027-03-02T09:00:00.000Z", "2027-03-03T09:00:00.000Z", "2027-03-04T09:00:00.000Z", "2027-03-05T09:00:00.000Z", "2027-03-08T09:00:00.000Z"}},
		{"*/15 * * * *", []string{"2027-03-01T00:15:00.000Z", "2027-03-01T00:30:00.000Z", "2027-03-01T00:45:00.000Z", "2027-03-01T01:00:00.000Z"}},
		{"10-50/20 8 * * *", []string{"2027-03-01T08:10:00.000Z", "2027-03-01T08:30:00.000Z", "2027-03-01T08:50:00.000Z", "2027-03-02T08:10:00.000Z"}},
		{"5/20 8 * * *", []string{"2027-03-01T08:05:00.000Z", "2027-03-01T08:25:00.000Z", "2027-03-01T08:45:00.000Z", "2027-03-02T08:05:00.000Z"}},
		{"0 0 1,15 * *", []string{"2027-03-15T00:00:00.000Z", "2027-04-01T00:00:00.000Z", "2027-04-15T00:00:00.000Z"}},
		{"0 12 1 Jan,jul *", []string{"2027-07-01T12:00:00.000Z", "2028-01-01T12:00:00.000Z", "2028-07-01T12:00:00.000Z"}},
		{"0 0 * * 7", []string{"2027-03-07T00:00:00.000Z", "2027-03-14T00:00:00.000Z"}},
		{"0 0 * * 0", []string{"2027-03-07T00:00:00.000Z", "2027-03-14T00:00:00.000Z"}},
		{"0 0 ? * SUN", []string{"2027-03-07T00:00:00.000Z", "2027-03-14T00:00:00.000Z"}},
		{"0 22-2/2 * * *", []string{"2027-03-01T02:00:00.000Z", "2027-03-01T22:00:00.000Z", "2027-03-02T00:00:00.000Z", "2027-03-02T02:00:00.000Z"}},
		// Vixie cron: both day fields restricted, either matches.
		{"0 0 1 * MON", []string{"2027-03-08T00:00:00.000Z", "2027-03-15T00:00:00.000Z", "2027-03-22T00:00:00.000Z", "2027-03-29T00:00:00.000Z", "2027-04-01T00:00:00.000Z", "2027-04-05T00:00:00.000Z"}},
		{"0 0 13 * FRI", []string{"2027-03-05T00:00:00.000Z", "2027-03-12T00:00:00.000Z", "2027-03-13T00:00:00.000Z", "2027-03-19T00:00:00.000Z"}},
		{"0 0 */10 * SUN", []string{"2027-03-07T00:00:00.000Z", "2027-03-11T00:00:00.000Z", "2027-03-14T00:00:00.000Z", "2027-03-21T00:00:00.000Z", "2027-03-28T00:00:00.000Z", "2027-03-31T00:00:00.000Z"}},
		{"0 0 1 * *", []string{"2027-04-01T00:00:00.000Z", "2027-05-01T00:00:00.000Z"}},
		{"0 0 1 * ?", []string{"2027-04-01T00:00:00.000Z", "2027-05-01T00:00:00.000Z"}},
		{"0 0 29 2 *", []string{"2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"}},
		// Seconds.
		{"*/20 * * * * *", []string{"2027-03-01T00:00:20.000Z", "2027-03-01T00:00:40.000Z", "2027-03-01T00:01:00.000Z"}},
		{"30 0 9 * * MON", []string{"2027-03-01T09:00:30.000Z", "2027-03-08T09:00:30.000Z"}},
		{"59 59 23 31 12 *", []string{"2027-12-31T23:59:59.000Z", "2028-12-31T23:59:59.000Z"}},
		// Descriptors.
		{"@hourly", []string{"2027-03-01T01:00:00.000Z", "2027-03-01T02:00:00.000Z"}},
		{"@daily", []string{"2027-03-02T00:00:00.000Z", "2027-03-03T00:00:00.000Z"}},
		{"@midnight", []string{"2027-03-02T00:00:00.000Z", "2027-03-03T00:00:00.000Z"}},
		{" @Daily ", []string{"2027-03-02T00:00:00.000Z", "2027-03-03T00:00:00.000Z"}},
		{"@weekly", []string{"2027-03-07T00:00:00.000Z", "2027-03-14T00:00:00.000Z"}},
		{"@monthly", []string{"2027-04-01T00:00:00.000Z", "2027-05-01T00:00:00.000Z"}},
		{"@yearly", []string{"2028-01-01T00:00:00.000Z", "2029-01-01T00:00:00.000Z"}},
		{"@annually", []string{"2028-01-01T00:00:00.000Z", "2029-01-01T00:00:00.000Z"}},
		// Never.
		{"0 0 30 2 *", []string{"zero"}},
		{"0 0 31 4,6,9,11 *", []string{"zero"}},
	}
	for _, tt := range tests {
		r := mustNew(t, tt.cron, 0, "", time.Time{})
		if diff := cmp.Diff(tt.want, nextN(r, utc(t, after), len(tt.want))); diff != "" {
			t.Errorf("%q after %s (-want +got):\n%s", tt.cron, after, diff)
		}
	}
}

// TestNextDST checks the DST rules of the package doc with real zones.
func TestNextDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cron, tz, after string
		want                  []string
	}{
		// America/New_York, 2027-03-14: 02:00 EST becomes 03:00 EDT at 07:00Z.
		{"NY spring: skipped time fires at the gap's end", "30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
			[]string{"2027-03-14T07:00:00.000Z", "2027-03-15T06:30:00.000Z"}},
		{"NY spring: two skipped times fire once", "0,30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
			[]string{"2027-03-14T07:00:00.000Z", "2027-03-15T06:00:00.000Z", "2027-03-15T06:30:00.000Z"}},
		{"NY spring: skipped and 03:00 fire once", "0 2,3 * * *", "America/New_York", "2027-03-13T12:00:00Z",
			[]string{"2027-03-14T07:00:00.000Z", "2027-03-15T06:00:00.000Z", "2027-03-15T07:00:00.000Z"}},
		{"NY spring: hourly", "0 * * * *", "America/New_York", "2027-03-14T04:30:00Z",
			[]string{"2027-03-14T05:00:00.000Z", "2027-03-14T06:00:00.000Z", "2027-03-14T07:00:00.000Z", "2027-03-14T08:00:00.000Z"}},
		{"NY spring: after the gap's end", "30 2 * * *", "America/New_York", "2027-03-14T07:00:00Z",
			[]string{"2027-03-15T06:30:00.000Z"}},
		// America/New_York, 2027-11-07: 02:00 EDT becomes 01:00 EST at 06:00Z.
		{"NY fall: repeated time fires at its first instant", "30 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
			[]string{"2027-11-07T05:30:00.000Z", "2027-11-08T06:30:00.000Z"}},
		{"NY fall: hourly fires the repeated hour once", "0 * * * *", "America/New_York", "2027-11-07T03:30:00Z",
			[]string{"2027-11-07T04:00:00.000Z", "2027-11-07T05:00:00.000Z", "2027-11-07T07:00:00.000Z", "2027-11-07T08:00:00.000Z"}},
		{"NY fall: from inside the repeated hour", "* * * * *", "America/New_York", "2027-11-07T06:30:00Z",
			[]string{"2027-11-07T07:00:00.000Z", "2027-11-07T07:01:00.000Z"}},
		{"NY fall: repeated time already fired", "45 1 * * *", "America/New_York", "2027-11-07T06:30:00Z",
			[]string{"2027-11-08T06:45:00.000Z"}},
		{"NY fall: seconds at the hour's end", "59 59 1 * * *", "America/New_York", "2027-11-07T05:00:00Z",
			[]string{"2027-11-07T05:59:59.000Z", "2027-11-08T06:59:59.000Z"}},
		{"NY fall: from the change's instant", "*/30 * * * *", "America/New_York", "2027-11-07T06:00:00Z",
			[]string{"2027-11-07T07:00:00.000Z", "2027-11-07T07:30:00.000Z"}},
		// Europe/Berlin, 2027-03-28: 02:00 CET becomes 03:00 CEST at 01:00Z.
		{"Berlin spring: skipped time fires at the gap's end", "30 2 * * *", "Europe/Berlin", "2027-03-27T00:00:00Z",
			[]string{"2027-03-27T01:30:00.000Z", "2027-03-28T01:00:00.000Z", "2027-03-29T00:30:00.000Z"}},
		{"Berlin spring: hourly", "0 * * * *", "Europe/Berlin", "2027-03-27T23:30:00Z",
			[]string{"2027-03-28T00:00:00.000Z", "2027-03-28T01:00:00.000Z", "2027-03-28T02:00:00.000Z"}},
		{"Berlin spring: every 20 minutes of 02:00-02:59", "*/20 2 * * *", "Europe/Berlin", "2027-03-27T23:30:00Z",
			[]string{"2027-03-28T01:00:00.000Z", "2027-03-29T00:00:00.000Z"}},
		// Europe/Berlin, 2027-10-31: 03:00 CEST becomes 02:00 CET at 01:00Z.
		{"Berlin fall: repeated time fires at its first instant", "30 2 * * *", "Europe/Berlin", "2027-10-30T00:00:00Z",
			[]string{"2027-10-30T00:30:00.000Z", "2027-10-31T00:30:00.000Z", "2027-11-01T01:30:00.000Z"}},
		{"Berlin fall: hourly fires the repeated hour once", "0 * * * *", "Europe/Berlin", "2027-10-30T22:30:00Z",
			[]string{"2027-10-30T23:00:00.000Z", "2027-10-31T00:00:00.000Z", "2027-10-31T02:00:00.000Z", "2027-10-31T03:00:00.000Z"}},
		{"Berlin fall: from inside the repeated hour", "*/30 * * * *", "Europe/Berlin", "2027-10-31T01:10:00Z",
			[]string{"2027-10-31T02:00:00.000Z"}},
		// America/Santiago changes at midnight: 2027-04-04 00:00 -03 becomes
		// 2027-04-03 23:00 -04 at 03:00Z; 2027-09-05 00:00 -04 becomes 01:00
		// -03 at 04:00Z.
		{"Santiago fall: 23:00 repeated", "0 23 * * *", "America/Santiago", "2027-04-02T12:00:00Z",
			[]string{"2027-04-03T02:00:00.000Z", "2027-04-04T02:00:00.000Z", "2027-04-05T03:00:00.000Z"}},
		{"Santiago fall: midnight once", "0 0 * * *", "America/Santiago", "2027-04-02T12:00:00Z",
			[]string{"2027-04-03T03:00:00.000Z", "2027-04-04T04:00:00.000Z", "2027-04-05T04:00:00.000Z"}},
		{"Santiago spring: midnight skipped", "0 0 * * *", "America/Santiago", "2027-09-03T12:00:00Z",
			[]string{"2027-09-04T04:00:00.000Z", "2027-09-05T04:00:00.000Z", "2027-09-06T03:00:00.000Z"}},
		// Australia/Lord_Howe moves by 30 minutes: 2027-10-03 02:00 +1030
		// becomes 02:30 +11 at 2027-10-02T15:30Z; 2027-04-04 02:00 +11
		// becomes 01:30 +1030 at 2027-04-03T15:00Z.
		{"Lord Howe spring: half-hour gap", "15 2 * * *", "Australia/Lord_Howe", "2027-10-01T12:00:00Z",
			[]string{"2027-10-01T15:45:00.000Z", "2027-10-02T15:30:00.000Z", "2027-10-03T15:15:00.000Z"}},
		{"Lord Howe fall: half-hour repeat", "45 1 * * *", "Australia/Lord_Howe", "2027-04-02T12:00:00Z",
			[]string{"2027-04-02T14:45:00.000Z", "2027-04-03T14:45:00.000Z", "2027-04-04T15:15:00.000Z"}},
		// Pacific/Apia skipped 2011-12-30 whole: 2011-12-29 24:00 -10 became
		// 2011-12-31 00:00 +14 at 2011-12-30T10:00Z.
		{"Apia: a skipped day fires once at the gap's end", "0 12 * * *", "Pacific/Apia", "2011-12-29T00:00:00Z",
			[]string{"2011-12-29T22:00:00.000Z", "2011-12-30T10:00:00.000Z", "2011-12-30T22:00:00.000Z"}},
	}
	for _, tt := range tests {
		r := mustNew(t, tt.cron, 0, tt.tz, time.Time{})
		if diff := cmp.Diff(tt.want, nextN(r, utc(t, tt.after), len(tt.want))); diff != "" {
			t.Errorf("%s: %q in %s after %s (-want +got):\n%s", tt.name, tt.cron, tt.tz, tt.after, diff)
		}
	}
}

func TestNextStrictlyAfter(t *testing.T) {
	t.Parallel()
	r := mustNew(t, "0 * * * *", 0, "Europe/Berlin", time.Time{})
	tests := []struct{ after, want string }{
		{"2027-06-01T10:00:00Z", "2027-06-01T11:00:00.000Z"},
		{"2027-06-01T09:59:59.999999999Z", "2027-06-01T10:00:00.000Z"},
		{"2027-06-01T10:00:00.000000001Z", "2027-06-01T11:00:00.000Z"},
	}
	for _, tt := range tests {
		if got := r.Next(utc(t, tt.after)).Format(time.RFC3339Nano); got != utc(t, tt.want).Format(time.RFC3339Nano) {
			t.Errorf("Next(%s) = %s, want %s", tt.after, got, tt.want)
		}
	}
	// The result is in UTC whatever the argument's location.
	ny, _ := time.LoadLocation("America/New_York")
	got := r.Next(utc(t, "2027-06-01T10:00:00Z").In(ny))
	if got.Location() != time.UTC || !got.Equal(utc(t, "2027-06-01T11:00:00Z")) {
		t.Errorf("Next in New York = %v, want 2027-06-01T11:00:00Z in UTC", got)
	}
	// A monotonic reading does not matter.
	now := time.Now()
	if got := r.Next(now); !got.After(now) || got.Sub(now) > time.Hour {
		t.Errorf("Next(now=%v) = %v", now, got)
	}
}

func TestNextEvery(t *testing.T) {
	t.Parallel()
	anchor := utc(t, "2027-03-13T12:00:00.123Z")
	r := mustNew(t, "", 15*time.Minute, "America/New_York", anchor)
	tests := []struct{ after, want string }{
		{"2020-01-01T00:00:00Z", "2027-03-13T12:00:00.123Z"}, // before the anchor: the anchor
		{"2027-03-13T12:00:00.122Z", "2027-03-13T12:00:00.123Z"},
		{"2027-03-13T12:00:00.123Z", "2027-03-13T12:15:00.123Z"}, // k >= 0, strictly after
		{"2027-03-13T12:29:59.999Z", "2027-03-13T12:30:00.123Z"},
		{"2027-03-13T12:30:00.123Z", "2027-03-13T12:45:00.123Z"},
		{"2027-03-13T12:30:00.1231Z", "2027-03-13T12:45:00.123Z"},
		// Across New York's DST change the interval stays 15 minutes of
		// absolute time.
		{"2027-03-14T06:59:00Z", "2027-03-14T07:00:00.123Z"},
		{"2027-03-14T07:00:00.123Z", "2027-03-14T07:15:00.123Z"},
		{"2127-03-13T12:00:00.124Z", "2127-03-13T12:15:00.123Z"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(utc(t, tt.want), r.Next(utc(t, tt.after))); diff != "" {
			t.Errorf("Next(%s) (-want +got):\n%s", tt.after, diff)
		}
	}

	// A daily interval ignores the wall clock: same UTC time each day.
	day := mustNew(t, "", 24*time.Hour, "America/New_York", utc(t, "2027-03-13T12:00:00Z"))
	want := []string{"2027-03-14T12:00:00.000Z", "2027-03-15T12:00:00.000Z"}
	if diff := cmp.Diff(want, nextN(day, utc(t, "2027-03-13T12:00:00Z"), 2)); diff != "" {
		t.Errorf("every 24h (-want +got):\n%s", diff)
	}

	// The anchor is rounded up to the millisecond.
	sub := mustNew(t, "", time.Second, "", utc(t, "2027-01-01T00:00:00.0000001Z"))
	if got, want := sub.Next(utc(t, "2026-01-01T00:00:00Z")), utc(t, "2027-01-01T00:00:00.001Z"); !got.Equal(want) {
		t.Errorf("sub-millisecond anchor: Next = %v, want %v", got, want)
	}

	// Far from the anchor (more than time.Duration's 292 years).
	zero := mustNew(t, "", time.Hour, "", time.Time{})
	if got, want := zero.Next(utc(t, "2027-01-01T00:30:00Z")), utc(t, "2027-01-01T01:00:00Z"); !got.Equal(want) {
		t.Errorf("anchor at year 1: Next = %v, want %v", got, want)
	}
	if got := zero.Next(utc(t, "9999-12-31T23:30:00Z")); !got.IsZero() {
		t.Errorf("past year 9999: Next = %v, want zero", got)
	}
}

func TestNextNever(t *testing.T) {
	t.Parallel()
	for _, cron := range []string{"0 0 30 2 *", "0 0 31 2,4,6,9,11 *", "* * * 30,31 2 *"} {
		r := mustNew(t, cron, 0, "Europe/Berlin", time.Time{})
		start := time.Now()
		for range 1000 {
			if got := r.Next(utc(t, "2027-01-01T00:00:00Z")); !got.IsZero() {
				t.Fatalf("%q: Next = %v, want zero", cron, got)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%q: 1000 Next took %s", cron, d)
		}
	}
	// Rules that can match find their time even at the search bound.
	r := mustNew(t, "0 0 29 2 *", 0, "UTC", time.Time{})
	if got, want := r.Next(utc(t, "2096-03-01T00:00:00Z")), utc(t, "2104-02-29T00:00:00Z"); !got.Equal(want) {
		t.Errorf("29 February after 2096: Next = %v, want %v", got, want)
	}
	r = mustNew(t, "* * * * *", 0, "UTC", time.Time{})
	if got := r.Next(utc(t, "9999-12-31T23:59:00Z")); !got.IsZero() {
		t.Errorf("past year 9999: Next = %v, want zero", got)
	}
}

func TestLocation(t *testing.T) {
	t.Parallel()
	if got := mustNew(t, "@daily", 0, "", time.Time{}).Location(); got != time.UTC {
		t.Errorf(`Location of "" = %v, want UTC`, got)
	}
	if got := mustNew(t, "@daily", 0, "Asia/Kolkata", time.Time{}).Location().String(); got != "Asia/Kolkata" {
		t.Errorf("Location = %v, want Asia/Kolkata", got)
	}
}

// TestNextBeforeEnd checks that no rule makes a time at or after End, the
// first instant the API (and so an import of an occurrence) refuses.
func TestNextBeforeEnd(t *testing.T) {
	late := time.Date(9998, 12, 31, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		cron  string
		every time.Duration
		tz    string
	}{
		{cron: "0 0 1 1 *"},                             // 9999-01-01 would be next
		{cron: "30 23 31 12 *", tz: "America/New_York"}, // 9998-12-31 23:30 local is 9999 in UTC
		{every: 36 * time.Hour},
	} {
		r, err := New(c.cron, c.every, c.tz, late)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Next(late); !got.IsZero() {
			t.Errorf("%q every %v in %q: Next(%v) = %v, want none (End is %v)", c.cron, c.every, c.tz, late, got, End)
		}
	}
}
