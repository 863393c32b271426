package record

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/task"
)

// fullSchedule returns a schedule with every field, and every field of its
// fields, set (times with a part below the millisecond).
func fullSchedule(t testing.TB) *task.Schedule {
	var s task.Schedule
	n := 0
	fill(t, reflect.ValueOf(&s).Elem(), "schedule", &n)
	return &s
}

// typicalSchedule is a schedule as the engine keeps it: a weekday cron in
// Berlin with a pending occurrence.
func typicalSchedule() *task.Schedule {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	created := at.Add(-26*time.Hour + 123*time.Millisecond)
	return &task.Schedule{
		ID:        goldenID,
		App:       "shop",
		Key:       "daily-report",
		Cron:      "0 9 * * MON-FRI",
		Timezone:  "Europe/Berlin",
		CatchUp:   task.CatchUpOne,
		State:     task.ScheduleActive,
		NextAt:    &at,
		LastAt:    new(at.Add(-24 * time.Hour)),
		CreatedAt: created,
		UpdatedAt: at.Add(-24 * time.Hour),
		Payload:   []byte(`{"report":"daily"}`),
		Target: task.Target{HTTP: &task.HTTPTarget{
			URL:     "https://example.com/report",
			Headers: map[string]string{"Authorization": "Bearer t"},
			Timeout: task.Duration(5 * time.Second),
		}},
		Retry:         task.RetryPolicy{MaxAttempts: 5},
		DeadlineAfter: task.Duration(10 * time.Minute),
		Anchor:        created,
		WakeAt:        at,
	}
}

// goldenSchedule is typicalSchedule's record: the format, pinned.
const goldenSchedule = "\x01" + `{"id":"01KJX4Z6SV0000AW5Q1B7G3T4M","app":"shop","key":"daily-report","cron":"0 9 * * MON-FRI","timezone":"Europe/Berlin","catch_up":"one","state":"active","next_at_ms":1795507200000,"last_at_ms":1795420800000,"created_at_ms":1795413600123,"updated_at_ms":1795420800000,"payload":"eyJyZXBvcnQiOiJkYWlseSJ9","target":{"http":{"url":"https://example.com/report","headers":{"Authorization":"Bearer t"},"timeout":"5s"}},"retry":{"max_attempts":5},"deadline_after_ns":600000000000,"anchor_ms":1795413600123,"wake_at_ms":1795507200000}`

// checkScheduleEqual fails unless got is deeply equal to want.
func checkScheduleEqual(t *testing.T, want, got *task.Schedule) {
	t.Helper()
	if reflect.DeepEqual(want, got) {
		return
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("schedule differs (-want +got):\n%s", diff)
	} else {
		t.Errorf("schedule differs (in a location?):\nwant %#v\ngot  %#v", want, got)
	}
}

func scheduleRoundTrip(t *testing.T, s *task.Schedule) *task.Schedule {
	t.Helper()
	b, err := EncodeSchedule(s)
	if err != nil {
		t.Fatalf("EncodeSchedule: %v", err)
	}
	got, err := DecodeSchedule(b)
	if err != nil {
		t.Fatalf("DecodeSchedule(%q): %v", b, err)
	}
	return got
}

// TestScheduleEveryField fills every field of a schedule, however deep, and
// checks that it comes back, its times rounded up to the millisecond. A
// field added to Schedule that the record does not carry makes it fail.
func TestScheduleEveryField(t *testing.T) {
	full := fullSchedule(t)
	want := NormalizeSchedule(full.Clone())
	if reflect.DeepEqual(want, full) {
		t.Fatal("fill made times at whole milliseconds: the test would not see rounding")
	}
	checkScheduleEqual(t, want, scheduleRoundTrip(t, full))

	// One field at a time, so that a field whose absence is wrong cannot
	// hide behind the others.
	v := reflect.ValueOf(full).Elem()
	for i := range v.NumField() {
		t.Run(v.Type().Field(i).Name, func(t *testing.T) {
			var s task.Schedule
			reflect.ValueOf(&s).Elem().Field(i).Set(v.Field(i))
			checkScheduleEqual(t, NormalizeSchedule(s.Clone()), scheduleRoundTrip(t, &s))
		})
	}
}

// TestScheduleGolden pins the format: typicalSchedule encodes to
// goldenSchedule and back.
func TestScheduleGolden(t *testing.T) {
	b, err := EncodeSchedule(typicalSchedule())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != goldenSchedule {
		t.Errorf("EncodeSchedule changed the format:\n got %s\nwant %s", b, goldenSchedule)
	}
	got, err := DecodeSchedule([]byte(goldenSchedule))
	if err != nil {
		t.Fatal(err)
	}
	checkScheduleEqual(t, typicalSchedule(), got)
}

// TestScheduleZeroAndEmpty pins what comes back for zero and empty values.
func TestScheduleZeroAndEmpty(t *testing.T) {
	var zero time.Time
	epoch := time.Unix(0, 0).UTC()
	for _, tc := range []struct {
		name     string
		in, want *task.Schedule
	}{
		{"zero", &task.Schedule{}, &task.Schedule{}},
		{"empty payload", &task.Schedule{Payload: []byte{}}, &task.Schedule{}},
		{"non-UTF-8 payload", &task.Schedule{Payload: []byte{0xff, 0, '"', 0xc3}}, &task.Schedule{Payload: []byte{0xff, 0, '"', 0xc3}}},
		{
			"empty headers",
			&task.Schedule{Target: task.Target{HTTP: &task.HTTPTarget{Headers: map[string]string{}}}},
			&task.Schedule{Target: task.Target{HTTP: &task.HTTPTarget{}}},
		},
		{
			"empty targets",
			&task.Schedule{Target: task.Target{Pull: &task.PullTarget{}, AMQP: &task.AMQPTarget{}, NATS: &task.NATSTarget{}}},
			&task.Schedule{Target: task.Target{Pull: &task.PullTarget{}, AMQP: &task.AMQPTarget{}, NATS: &task.NATSTarget{}}},
		},
		{
			"pointers to zero times",
			&task.Schedule{StartAt: &zero, EndAt: &zero, NextAt: &zero, LastAt: &zero},
			&task.Schedule{StartAt: &zero, EndAt: &zero, NextAt: &zero, LastAt: &zero},
		},
		{
			"the epoch is not zero",
			&task.Schedule{StartAt: &epoch, CreatedAt: epoch, Anchor: epoch, WakeAt: epoch},
			&task.Schedule{StartAt: &epoch, CreatedAt: epoch, Anchor: epoch, WakeAt: epoch},
		},
		{
			"negative durations",
			&task.Schedule{Every: -1, DeadlineAfter: task.Duration(-1 << 63)},
			&task.Schedule{Every: -1, DeadlineAfter: task.Duration(-1 << 63)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkScheduleEqual(t, tc.want, scheduleRoundTrip(t, tc.in))
		})
	}
}

// TestScheduleTimes checks that times come back in UTC at the millisecond,
// rounded up, and that times a record cannot hold are refused by name.
func TestScheduleTimes(t *testing.T) {
	paris := time.FixedZone("Paris", 3600)
	for _, tc := range []struct{ in, want time.Time }{
		{time.UnixMilli(1_767_225_600_123), time.UnixMilli(1_767_225_600_123).UTC()},
		{time.Unix(1_767_225_600, 123_000_001), time.UnixMilli(1_767_225_600_124).UTC()},
		{time.Unix(-1, 999_999_999), time.Unix(0, 0).UTC()},
		{time.Unix(-1, 998_000_000), time.Unix(-1, 998_000_000).UTC()},
		{time.Date(2026, 7, 1, 12, 0, 0, 0, paris), time.Date(2026, 7, 1, 11, 0, 0, 0, time.UTC)},
		{time.Unix(maxUnixSec, 0), time.Unix(maxUnixSec, 0).UTC()},
		{time.Unix(-maxUnixSec, 0), time.Unix(-maxUnixSec, 0).UTC()},
	} {
		in := &task.Schedule{NextAt: &tc.in, WakeAt: tc.in, UpdatedAt: tc.in}
		want := &task.Schedule{NextAt: &tc.want, WakeAt: tc.want, UpdatedAt: tc.want}
		checkScheduleEqual(t, want, scheduleRoundTrip(t, in))
	}
	now := time.Now() // with a monotonic reading
	got := scheduleRoundTrip(t, &task.Schedule{Anchor: now})
	if !got.Anchor.Equal(task.Ms(now)) || got.Anchor != task.Ms(now) {
		t.Errorf("Anchor %v came back %v", now, got.Anchor)
	}

	for _, s := range []*task.Schedule{
		{WakeAt: time.Unix(maxUnixSec+1, 0)},
		{EndAt: new(time.Unix(-maxUnixSec-1, 0))},
	} {
		if b, err := EncodeSchedule(s); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("EncodeSchedule of %+v = %q, %v; want an error", s, b, err)
		}
	}
	for _, tc := range []struct{ b, field string }{
		{"\x01{\"wake_at_ms\":1000000000000001000}", "wake_at"},
		{"\x01{\"end_at_ms\":-1000000000000001000}", "end_at"},
	} {
		if s, err := DecodeSchedule([]byte(tc.b)); err == nil || !strings.Contains(err.Error(), tc.field) || !errors.Is(err, errOutOfRange) {
			t.Errorf("DecodeSchedule(%q) = %+v, %v; want an error naming %s", tc.b, s, err, tc.field)
		}
	}
}

// TestScheduleMalformed checks that DecodeSchedule refuses what is not a
// record of this release, and EncodeSchedule strings JSON would change.
func TestScheduleMalformed(t *testing.T) {
	for _, tc := range []struct{ b, want string }{
		{"", "unknown version"},
		{"\x02{}", "unknown version"},
		{"{}", "unknown version"},
		{"\x01", "EOF"},
		{"\x01{", "EOF"},
		{"\x01[]", "cannot unmarshal"},
		{"\x01{\"app\":1}", "cannot unmarshal"},
		{"\x01{\"id\":\"nope\"}", "malformed task id"},
		{"\x01{\"payload\":\"!\"}", "illegal base64"},
		{"\x01{\"color\":\"red\"}", "unknown field"},
		{"\x01{}{}", "after the record"},
		{"\x01{} x", "after the record"},
		{"\x01{\"target\":{\"http\":{\"timeout\":\"soon\"}}}", "duration"},
	} {
		if s, err := DecodeSchedule([]byte(tc.b)); err == nil || s != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeSchedule(%q) = %+v, %v; want an error with %q", tc.b, s, err, tc.want)
		}
	}
	if s, err := DecodeSchedule([]byte("\x01{} \n")); err != nil || !reflect.DeepEqual(s, &task.Schedule{}) {
		t.Errorf("DecodeSchedule with trailing space = %+v, %v", s, err)
	}

	for _, tc := range []struct {
		s     *task.Schedule
		field string
	}{
		{&task.Schedule{Key: "a\xffb"}, "key"},
		{&task.Schedule{App: "\xc3"}, "app"},
		{&task.Schedule{Target: task.Target{HTTP: &task.HTTPTarget{Headers: map[string]string{"X": "\xff"}}}}, "target.http.headers"},
		{&task.Schedule{Target: task.Target{NATS: &task.NATSTarget{Subject: "\xff"}}}, "target.nats"},
	} {
		if b, err := EncodeSchedule(tc.s); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("EncodeSchedule(%+v) = %q, %v; want an error naming %s", tc.s, b, err, tc.field)
		}
	}

	// Damage each byte of a record: whatever decodes must survive another
	// round.
	b, err := EncodeSchedule(typicalSchedule())
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		for _, x := range []byte{0x01, 0x20, 0x7F, 0x80} {
			c := bytes.Clone(b)
			c[i] ^= x
			checkScheduleRedecode(t, c)
		}
	}
}

// TestDecodeScheduleShares checks that a decoded schedule shares no memory
// with the record.
func TestDecodeScheduleShares(t *testing.T) {
	b, err := EncodeSchedule(typicalSchedule())
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSchedule(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	checkScheduleEqual(t, typicalSchedule(), s)
}

// TestApplySchedule checks UpdateSchedule's middle: fn works on a copy, its
// error comes back unchanged, identity is kept, times are normalized.
func TestApplySchedule(t *testing.T) {
	old := typicalSchedule()
	refused := errors.New("no")
	if got, err := ApplySchedule(old, func(s *task.Schedule) error {
		s.Key = "mine"
		s.Payload[0] = 'X'
		return refused
	}); got != nil || err != refused {
		t.Errorf("ApplySchedule with fn failing = %v, %v", got, err)
	}
	checkScheduleEqual(t, typicalSchedule(), old)
	for _, change := range []func(*task.Schedule){
		func(s *task.Schedule) { s.ID = task.ID{} },
		func(s *task.Schedule) { s.App = "other" },
		func(s *task.Schedule) { s.Key = "other" },
	} {
		if got, err := ApplySchedule(old, func(s *task.Schedule) error { change(s); return nil }); got != nil || !errors.Is(err, ErrChangedScheduleIdentity) {
			t.Errorf("ApplySchedule changing identity = %v, %v", got, err)
		}
	}
	var kept *task.Schedule
	got, err := ApplySchedule(old, func(s *task.Schedule) error {
		s.Every = task.Duration(time.Minute)
		s.WakeAt = time.Date(2030, 1, 1, 0, 0, 0, 1, time.FixedZone("X", 3600))
		kept = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2029, 12, 31, 23, 0, 0, 1e6, time.UTC); got.WakeAt != want || got.Every != task.Duration(time.Minute) {
		t.Errorf("ApplySchedule = WakeAt %v, Every %v; want %v, 1m", got.WakeAt, got.Every, want)
	}
	kept.Payload[0] = 'Y'
	if got.Payload[0] == 'Y' {
		t.Error("ApplySchedule's result shares memory with what fn was given")
	}
}

// checkScheduleRedecode checks that DecodeSchedule, given b, returns an
// error or a schedule that encodes, decodes to the same schedule, and
// encodes the same again.
func checkScheduleRedecode(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeSchedule(b)
	if err != nil {
		if got != nil {
			t.Fatalf("DecodeSchedule(%q) returned a schedule and an error: %v", b, err)
		}
		return
	}
	b2, err := EncodeSchedule(got)
	if err != nil {
		t.Fatalf("DecodeSchedule(%q) accepted a schedule that EncodeSchedule refuses: %v\n%#v", b, err, got)
	}
	again, err := DecodeSchedule(b2)
	if err != nil {
		t.Fatalf("DecodeSchedule(EncodeSchedule(DecodeSchedule(%q))) = %v", b, err)
	}
	if !reflect.DeepEqual(got, again) {
		t.Fatalf("DecodeSchedule(%q) does not survive another round (-want +got):\n%s", b, gocmp.Diff(got, again))
	}
	if b3, err := EncodeSchedule(again); err != nil || !bytes.Equal(b2, b3) {
		t.Fatalf("EncodeSchedule is not deterministic: %q then %q, %v", b2, b3, err)
	}
}

func TestCheckSchedule(t *testing.T) {
	if err := CheckSchedule(typicalSchedule()); err != nil {
		t.Errorf("CheckSchedule(typical) = %v", err)
	}
	for _, tc := range []struct {
		change func(*task.Schedule)
		want   string
	}{
		{func(s *task.Schedule) { s.ID = task.ID{} }, "without an id"},
		{func(s *task.Schedule) { s.Key = "" }, "no key"},
		{func(s *task.Schedule) { s.App = "a\x00b" }, "NUL"},
		{func(s *task.Schedule) { s.State = "" }, "unknown state"},
		{func(s *task.Schedule) { s.State = "scheduled" }, "unknown state"},
	} {
		s := typicalSchedule()
		tc.change(s)
		if err := CheckSchedule(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckSchedule(%+v) = %v, want an error with %q", s, err, tc.want)
		}
	}
}
