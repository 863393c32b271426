package recur

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/task"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	at := func(s string) *time.Time { v := utc(t, s); return &v }
	valid := func() *task.Schedule {
		return &task.Schedule{App: "shop", Key: "daily-report", Cron: "0 9 * * MON-FRI", Timezone: "Europe/Berlin"}
	}
	tests := []struct {
		name   string
		change func(s *task.Schedule)
		want   *task.FieldError // nil: valid
	}{
		{"valid cron", func(s *task.Schedule) {}, nil},
		{"valid every", func(s *task.Schedule) { s.Cron, s.Every = "", task.Duration(15*time.Minute) }, nil},
		{"every of exactly MinEvery", func(s *task.Schedule) { s.Cron, s.Every = "", task.Duration(task.MinEvery) }, nil},
		{"zone defaults to UTC", func(s *task.Schedule) { s.Timezone = "" }, nil},
		{"all fields", func(s *task.Schedule) {
			s.StartAt, s.EndAt = at("2027-01-01T00:00:00Z"), at("2027-01-01T00:00:00Z")
			s.CatchUp, s.DeadlineAfter = task.CatchUpAll, task.Duration(time.Minute)
			s.Key = strings.Repeat("k", task.MaxScheduleKey)
		}, nil},
		{"catch_up skip", func(s *task.Schedule) { s.CatchUp = task.CatchUpSkip }, nil},
		{"catch_up one", func(s *task.Schedule) { s.CatchUp = task.CatchUpOne }, nil},
		{"never-matching cron parses", func(s *task.Schedule) { s.Cron = "0 0 30 2 *" }, nil},

		{"both cron and every", func(s *task.Schedule) { s.Every = task.Duration(time.Minute) },
			&task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}},
		{"neither cron nor every", func(s *task.Schedule) { s.Cron = "" },
			&task.FieldError{Field: "cron", Message: "give exactly one of cron and every"}},
		{"bad cron", func(s *task.Schedule) { s.Cron = "61 * * * *" },
			&task.FieldError{Field: "cron", Message: "minute field: 61 is out of range 0-59"}},
		{"short cron", func(s *task.Schedule) { s.Cron = "* * *" },
			&task.FieldError{Field: "cron", Message: "has 3 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)"}},
		{"every below MinEvery", func(s *task.Schedule) { s.Cron, s.Every = "", task.Duration(999*time.Millisecond) },
			&task.FieldError{Field: "every", Message: "must be at least 1s, got 999ms"}},
		{"negative every", func(s *task.Schedule) { s.Cron, s.Every = "", task.Duration(-time.Minute) },
			&task.FieldError{Field: "every", Message: "must be at least 1s, got -1m0s"}},
		{"unknown zone", func(s *task.Schedule) { s.Timezone = "Europe/Atlantis" },
			&task.FieldError{Field: "timezone", Message: `unknown time zone "Europe/Atlantis": give an IANA name like "Europe/Berlin" or "UTC"`}},
		{"end_at before start_at", func(s *task.Schedule) {
			s.StartAt, s.EndAt = at("2027-01-02T00:00:00Z"), at("2027-01-01T23:59:59.999Z")
		}, &task.FieldError{Field: "end_at", Message: "is before start_at"}},
		{"unknown catch_up", func(s *task.Schedule) { s.CatchUp = "some" },
			&task.FieldError{Field: "catch_up", Message: `must be "skip", "one" or "all", got "some"`}},
		{"empty key", func(s *task.Schedule) { s.Key = "" },
			&task.FieldError{Field: "key", Message: "is required"}},
		{"long key", func(s *task.Schedule) { s.Key = strings.Repeat("k", task.MaxScheduleKey+1) },
			&task.FieldError{Field: "key", Message: "is 201 bytes, more than 200"}},
		{"key not UTF-8", func(s *task.Schedule) { s.Key = "report\xff" },
			&task.FieldError{Field: "key", Message: "is not valid UTF-8"}},
		{"key with a control character", func(s *task.Schedule) { s.Key = "report\n1" },
			&task.FieldError{Field: "key", Message: "has the control character U+000A at byte 6: keys are printable text"}},
		{"negative deadline_after", func(s *task.Schedule) { s.DeadlineAfter = task.Duration(-time.Second) },
			&task.FieldError{Field: "deadline_after", Message: "must not be negative, got -1s"}},
		{"first problem wins", func(s *task.Schedule) { s.Cron, s.Key, s.CatchUp = "* * *", "", "some" },
			&task.FieldError{Field: "cron", Message: "has 3 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)"}},
	}
	for _, tt := range tests {
		s := valid()
		tt.change(s)
		err := Check(s)
		if tt.want == nil {
			if err != nil {
				t.Errorf("%s: Check = %v, want nil", tt.name, err)
			}
			continue
		}
		var fe *task.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: Check = %v, want a *task.FieldError", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, fe); diff != "" {
			t.Errorf("%s: Check (-want +got):\n%s", tt.name, diff)
		}
	}
}
