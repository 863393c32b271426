package recur

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	cronlib "github.com/netresearch/go-cron"

	"github.com/toc-dev/toc/task"
)

// maxCron is the longest cron expression, in bytes (go-cron's limit).
const maxCron = cronlib.MaxSpecLength

// starBit is go-cron's mark of a field given as * or ? (its bit 63).
const starBit = 1 << 63

// The parsers: Vixie's OR of the day fields (DowOrDom), no extensions.
var (
	parser5 = cronlib.NewParser(cronlib.Minute | cronlib.Hour | cronlib.Dom | cronlib.Month | cronlib.Dow | cronlib.Descriptor | cronlib.DowOrDom)
	parser6 = cronlib.NewParser(cronlib.Second | cronlib.Minute | cronlib.Hour | cronlib.Dom | cronlib.Month | cronlib.Dow | cronlib.DowOrDom)
)

// field describes one field of a 6-field expression.
type field struct {
	name     string
	min, max int
	names    string // a hint for values that are not numbers
	days     bool   // ? is allowed
}

var fields = [6]field{
	{name: "seconds", max: 59},
	{name: "minute", max: 59},
	{name: "hour", max: 23},
	{name: "day-of-month", min: 1, max: 31, days: true},
	{name: "month", min: 1, max: 12, names: " or a name JAN-DEC"},
	{name: "day-of-week", max: 7, names: " or a name SUN-SAT", days: true},
}

var descriptors = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

func cronErr(format string, args ...any) error {
	return &task.FieldError{Field: "cron", Message: fmt.Sprintf(format, args...)}
}

// parseCron parses a cron expression into a rule without a zone.
func parseCron(spec string) (*Rule, error) {
	if len(spec) > maxCron {
		return nil, cronErr("is %d bytes, more than %d", len(spec), maxCron)
	}
	if d := strings.ToLower(strings.TrimSpace(spec)); strings.HasPrefix(d, "@") {
		if d == "@every" || strings.HasPrefix(d, "@every ") {
			return nil, cronErr(`%q: give intervals in "every", not in cron`, spec)
		}
		for _, want := range descriptors {
			if d == want {
				s, err := parser5.Parse(d)
				if err != nil {
					return nil, cronErr("%s", err) // not reached: descriptors parse
				}
				return fromSpec(s)
			}
		}
		return nil, cronErr("unknown descriptor %q: want @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually", spec)
	}

	fs := strings.Fields(spec)
	p := parser5
	first := 1 // index in fields of fs[0]
	switch len(fs) {
	case 5:
	case 6:
		p, first = parser6, 0
	case 0:
		return nil, cronErr("is blank: want 5 fields (minute hour day-of-month month day-of-week), 6 with a leading seconds field, or a descriptor like @daily")
	default:
		return nil, cronErr("has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)", len(fs))
	}
	// Checked here: what go-cron accepts beyond toc's syntax (TZ=, H, L, W,
	// #; it skips empty list items), and the field that is wrong, which its
	// errors do not name.
	for i, f := range fs {
		if err := checkField(fields[first+i], f); err != nil {
			return nil, err
		}
	}
	s, err := p.Parse(strings.Join(fs, " "))
	if err != nil {
		// Name the field by parsing each alone.
		for i := range fs {
			probe := make([]string, len(fs))
			for j := range probe {
				probe[j] = "*"
			}
			probe[i] = fs[i]
			if _, ferr := p.Parse(strings.Join(probe, " ")); ferr != nil {
				return nil, fieldErr(fields[first+i], fs[i], ferr)
			}
		}
		return nil, cronErr("%s", err)
	}
	return fromSpec(s)
}

// checkField checks a field's characters and list items before go-cron
// parses it.
func checkField(f field, s string) error {
	for _, c := range s {
		ok := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.ContainsRune("*,-/?", c)
		if !ok {
			return cronErr("%s field: %q: %q is not allowed (use digits, names, * , - / and, in the day fields, ?)", f.name, s, c)
		}
	}
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return cronErr("%s field: %q has an empty list item", f.name, s)
		}
		if strings.Contains(item, "?") && (!f.days || item != "?") {
			return cronErr("%s field: %q: ? stands alone and only in the day fields", f.name, s)
		}
	}
	return nil
}

var (
	reOutOfRange = regexp.MustCompile(`^(?:end of range|beginning of range) \((\d+)\) (?:above maximum|below minimum)`)
	reBackwards  = regexp.MustCompile(`^beginning of range \((\d+)\) beyond end of range \((\d+)\)`)
	reNotInt     = regexp.MustCompile(`^failed to parse int from "([^"]*)"`)
	reStep       = regexp.MustCompile(`^step \((\d+)\) must be less than range size \((\d+)\)`)
)

// fieldErr turns go-cron's error about field f (text s) into one a user can
// act on: "minute field: 61 is out of range 0-59".
func fieldErr(f field, s string, err error) error {
	msg := err.Error()
	prefix := f.name + " field: "
	if m := reOutOfRange.FindStringSubmatch(msg); m != nil {
		return cronErr("%s%s is out of range %d-%d", prefix, m[1], f.min, f.max)
	}
	if m := reBackwards.FindStringSubmatch(msg); m != nil {
		return cronErr("%s%q: range %s-%s runs backwards", prefix, s, m[1], m[2])
	}
	if m := reNotInt.FindStringSubmatch(msg); m != nil {
		switch _, perr := strconv.ParseUint(m[1], 10, 64); {
		case m[1] == "":
			return cronErr("%s%q: a range or step is missing a number", prefix, s)
		case perr != nil && strings.Trim(m[1], "0123456789") == "":
			return cronErr("%s%s is out of range %d-%d", prefix, m[1], f.min, f.max)
		default:
			return cronErr("%s%q is not a number%s", prefix, m[1], f.names)
		}
	}
	if m := reStep.FindStringSubmatch(msg); m != nil {
		return cronErr("%s%q: step %s must be less than the %s values it steps over", prefix, s, m[1], m[2])
	}
	if strings.HasPrefix(msg, "step of range must be a positive number") {
		return cronErr("%s%q: a step must be at least 1", prefix, s)
	}
	// Other go-cron messages ("too many hyphens: ..."), and the Quartz
	// extensions it names by its own option names.
	if strings.Contains(msg, "option") {
		return cronErr("%s%q: L, W, # and H are not supported", prefix, s)
	}
	return cronErr("%s%s", prefix, msg)
}

// fromSpec makes a rule of go-cron's field sets.
func fromSpec(s cronlib.Schedule) (*Rule, error) {
	spec, ok := s.(*cronlib.SpecSchedule)
	if !ok || spec.Year != nil || len(spec.DomConstraints) > 0 || len(spec.DowConstraints) > 0 {
		// Not reached with parser5 and parser6 after checkField.
		return nil, cronErr("is not a plain cron expression")
	}
	r := &Rule{
		sec:   spec.Second & (1<<60 - 1),
		min:   spec.Minute & (1<<60 - 1),
		hour:  spec.Hour & (1<<24 - 1),
		dom:   spec.Dom & (1<<32 - 2),
		month: spec.Month & (1<<13 - 2),
		dow:   cronlib.NormalizeDOW(spec.Dow) & (1<<7 - 1),
		dayOr: spec.Dom&starBit == 0 && spec.Dow&starBit == 0,
	}
	if r.sec == 0 || r.min == 0 || r.hour == 0 || r.dom == 0 || r.month == 0 || r.dow == 0 {
		return nil, cronErr("matches no time") // not reached: go-cron sets a value per field
	}
	r.never = !r.canMatch()
	return r, nil
}

// canMatch reports whether some date matches the rule's day and month
// fields (29 February counting).
func (r *Rule) canMatch() bool {
	if r.dayOr || r.dom&(1<<29-2) != 0 {
		// A weekday or a day 1-28: in every month.
		return true
	}
	days := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if r.month&(1<<uint(m)) != 0 && r.dom&(1<<uint(days[m]+1)-2) != 0 {
			return true
		}
	}
	return false
}

// quote quotes a user's string for a message.
func quote(s string) string { return strconv.Quote(s) }
