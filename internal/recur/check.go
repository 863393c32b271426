package recur

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toc-dev/toc/task"
)

// Check validates the rule-related fields of a schedule: exactly one of
// Cron and Every ("cron"), a Cron that parses ("cron"), Every at least
// task.MinEvery ("every"), a known Timezone ("timezone"), EndAt not before
// StartAt ("end_at"), CatchUp "", "skip", "one" or "all" ("catch_up"), a
// Key of 1 to task.MaxScheduleKey bytes of UTF-8 ("key"), and DeadlineAfter
// not negative ("deadline_after"). It returns the first problem, in that
// order, as a *task.FieldError, or nil.
func Check(s *task.Schedule) error {
	every := s.Every.Std()
	if s.Cron == "" && every != 0 && every < task.MinEvery {
		return &task.FieldError{Field: "every", Message: fmt.Sprintf("must be at least %s, got %s", task.MinEvery, every)}
	}
	if _, err := New(s.Cron, every, s.Timezone, s.Anchor); err != nil {
		return err
	}
	if s.StartAt != nil && s.EndAt != nil && s.EndAt.Before(*s.StartAt) {
		return &task.FieldError{Field: "end_at", Message: "is before start_at"}
	}
	switch s.CatchUp {
	case "", task.CatchUpSkip, task.CatchUpOne, task.CatchUpAll:
	default:
		return &task.FieldError{Field: "catch_up", Message: fmt.Sprintf(`must be "skip", "one" or "all", got %q`, s.CatchUp)}
	}
	switch {
	case s.Key == "":
		return &task.FieldError{Field: "key", Message: "is required"}
	case len(s.Key) > task.MaxScheduleKey:
		return &task.FieldError{Field: "key", Message: fmt.Sprintf("is %d bytes, more than %d", len(s.Key), task.MaxScheduleKey)}
	case !utf8.ValidString(s.Key):
		return &task.FieldError{Field: "key", Message: "is not valid UTF-8"}
	case strings.IndexFunc(s.Key, unicode.IsControl) >= 0:
		return task.ValidateKey(s.Key) // names the control character
	}
	if s.DeadlineAfter < 0 {
		return &task.FieldError{Field: "deadline_after", Message: "must not be negative, got " + s.DeadlineAfter.Std().String()}
	}
	return nil
}
