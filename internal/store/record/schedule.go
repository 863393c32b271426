package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toc-dev/toc/task"
)

// Schedule records: how every backend stores a [task.Schedule].
//
// A schedule is small and written only when it changes or makes an
// occurrence, so its record is plain JSON rather than a hand-written
// binary layout: the byte [ScheduleVersion], then the JSON of
// scheduleRecord, which holds every field of task.Schedule, the three the
// API leaves out (Anchor, WakeAt and Made) and the payload's bytes included.
//
// Times are kept as Unix milliseconds (a finer time is rounded up, as
// [task.Ms] does: never early) and come back in UTC, without a monotonic
// reading, within the range of task records (about ±31.7 million years of
// 1970). A zero time is left out and comes back zero; a nil *time.Time
// comes back nil. Durations are kept as nanoseconds. Strings must be valid
// UTF-8 (they come from JSON): EncodeSchedule refuses one that is not
// rather than let encoding/json change its bytes. An empty payload or
// header map comes back nil, as from a task record.
//
// To add a field: add it to scheduleRecord with omitempty, so that records
// without it still read. A record with a field this release does not know
// is refused, as a task record's unknown bit is: an earlier release that
// rewrote it would drop the field silently.

// ScheduleVersion is the first byte of every schedule record.
const ScheduleVersion = 1

// scheduleRecord is what a schedule record holds. Its JSON names are part
// of the format.
type scheduleRecord struct {
	ID            task.ID          `json:"id"`
	App           string           `json:"app"`
	Key           string           `json:"key"`
	Cron          string           `json:"cron,omitempty"`
	Every         int64            `json:"every_ns,omitempty"`
	Timezone      string           `json:"timezone,omitempty"`
	StartAt       *int64           `json:"start_at_ms,omitempty"`
	EndAt         *int64           `json:"end_at_ms,omitempty"`
	CatchUp       string           `json:"catch_up,omitempty"`
	State         string           `json:"state,omitempty"`
	NextAt        *int64           `json:"next_at_ms,omitempty"`
	LastAt        *int64           `json:"last_at_ms,omitempty"`
	Made          *int64           `json:"made_ms,omitempty"`
	CreatedAt     *int64           `json:"created_at_ms,omitempty"` // nil: the zero time
	UpdatedAt     *int64           `json:"updated_at_ms,omitempty"`
	Payload       []byte           `json:"payload,omitempty"` // base64 in JSON
	Target        task.Target      `json:"target,omitzero"`
	Retry         task.RetryPolicy `json:"retry,omitzero"`
	DeadlineAfter int64            `json:"deadline_after_ns,omitempty"`
	Anchor        *int64           `json:"anchor_ms,omitempty"`
	WakeAt        *int64           `json:"wake_at_ms,omitempty"`
	TraceParent   string           `json:"traceparent,omitempty"` // added with tracing
	TraceState    string           `json:"tracestate,omitempty"`
}

// EncodeSchedule returns s's record. It fails for a time out of range or a
// string that is not valid UTF-8, naming the field.
func EncodeSchedule(s *task.Schedule) ([]byte, error) {
	var bad string
	ms := func(field string, t time.Time) int64 {
		if !timeInRange(t) && bad == "" {
			bad = fmt.Sprintf("%s %v is out of range", field, t)
		}
		return task.Ms(t).UnixMilli()
	}
	ptr := func(field string, t *time.Time) *int64 {
		if t == nil {
			return nil
		}
		return new(ms(field, *t))
	}
	val := func(field string, t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		return ptr(field, &t)
	}
	r := scheduleRecord{
		ID:            s.ID,
		App:           s.App,
		Key:           s.Key,
		Cron:          s.Cron,
		Every:         int64(s.Every),
		Timezone:      s.Timezone,
		StartAt:       ptr("start_at", s.StartAt),
		EndAt:         ptr("end_at", s.EndAt),
		CatchUp:       string(s.CatchUp),
		State:         string(s.State),
		NextAt:        ptr("next_at", s.NextAt),
		LastAt:        ptr("last_at", s.LastAt),
		Made:          ptr("made", s.Made),
		CreatedAt:     val("created_at", s.CreatedAt),
		UpdatedAt:     val("updated_at", s.UpdatedAt),
		Payload:       s.Payload,
		Target:        s.Target,
		Retry:         s.Retry,
		DeadlineAfter: int64(s.DeadlineAfter),
		Anchor:        val("anchor", s.Anchor),
		WakeAt:        val("wake_at", s.WakeAt),
		TraceParent:   s.TraceParent,
		TraceState:    s.TraceState,
	}
	if bad == "" {
		bad = invalidUTF8(s)
	}
	if bad != "" {
		return nil, fmt.Errorf("toc: encode schedule %s: %s", s.ID, bad)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("toc: encode schedule %s: %w", s.ID, err)
	}
	return append([]byte{ScheduleVersion}, b...), nil
}

// invalidUTF8 names the first of s's strings that is not valid UTF-8, or
// returns "".
func invalidUTF8(s *task.Schedule) string {
	check := []struct{ field, s string }{
		{"app", s.App}, {"key", s.Key}, {"cron", s.Cron}, {"timezone", s.Timezone},
		{"catch_up", string(s.CatchUp)}, {"state", string(s.State)}, {"traceparent", s.TraceParent + s.TraceState},
	}
	if h := s.Target.HTTP; h != nil {
		check = append(check, struct{ field, s string }{"target.http.url", h.URL})
		for k, v := range h.Headers {
			check = append(check, struct{ field, s string }{"target.http.headers", k + v})
		}
	}
	if a := s.Target.AMQP; a != nil {
		check = append(check, struct{ field, s string }{"target.amqp", a.URL + a.Exchange + a.RoutingKey})
	}
	if n := s.Target.NATS; n != nil {
		check = append(check, struct{ field, s string }{"target.nats", n.URL + n.Subject})
	}
	for _, c := range check {
		if !utf8.ValidString(c.s) {
			return c.field + " is not valid UTF-8"
		}
	}
	return ""
}

// errScheduleTrailing is what a schedule record with bytes after its JSON
// value fails with.
var errScheduleTrailing = errors.New("bytes after the record")

// DecodeSchedule reads a schedule record. The schedule shares no memory
// with b. Malformed input, or a record with fields unknown to this
// release, returns an error.
func DecodeSchedule(b []byte) (*task.Schedule, error) {
	if len(b) == 0 || b[0] != ScheduleVersion {
		return nil, fmt.Errorf("toc: schedule record of unknown version (first byte %x)", b[:min(len(b), 1)])
	}
	var r scheduleRecord
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("toc: decode schedule record: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("toc: decode schedule record: %w", errScheduleTrailing)
	}
	var bad string
	at := func(field string, ms *int64) *time.Time {
		if ms == nil {
			return nil
		}
		if *ms < -maxUnixSec*1e3 || *ms > maxUnixSec*1e3+999 {
			if bad == "" {
				bad = field
			}
			return nil
		}
		return new(time.UnixMilli(*ms).UTC())
	}
	val := func(field string, ms *int64) time.Time {
		if t := at(field, ms); t != nil {
			return *t
		}
		return time.Time{}
	}
	s := &task.Schedule{
		ID:            r.ID,
		App:           r.App,
		Key:           r.Key,
		Cron:          r.Cron,
		Every:         task.Duration(r.Every),
		Timezone:      r.Timezone,
		StartAt:       at("start_at", r.StartAt),
		EndAt:         at("end_at", r.EndAt),
		CatchUp:       task.CatchUp(r.CatchUp),
		State:         task.ScheduleState(r.State),
		NextAt:        at("next_at", r.NextAt),
		LastAt:        at("last_at", r.LastAt),
		Made:          at("made", r.Made),
		CreatedAt:     val("created_at", r.CreatedAt),
		UpdatedAt:     val("updated_at", r.UpdatedAt),
		Payload:       r.Payload,
		Target:        r.Target,
		Retry:         r.Retry,
		DeadlineAfter: task.Duration(r.DeadlineAfter),
		Anchor:        val("anchor", r.Anchor),
		WakeAt:        val("wake_at", r.WakeAt),
		TraceParent:   r.TraceParent,
		TraceState:    r.TraceState,
	}
	if bad != "" {
		return nil, fmt.Errorf("toc: decode schedule record: %s: %w", bad, errOutOfRange)
	}
	if len(s.Payload) == 0 {
		s.Payload = nil
	}
	if h := s.Target.HTTP; h != nil && len(h.Headers) == 0 {
		h.Headers = nil
	}
	return s, nil
}

// NormalizeSchedule puts s's times in UTC at millisecond precision (rounded
// up) without a monotonic reading, as they come back from a record, and
// returns s.
func NormalizeSchedule(s *task.Schedule) *task.Schedule {
	ms := func(p *time.Time) {
		if p != nil {
			*p = task.Ms(*p)
		}
	}
	ms(s.StartAt)
	ms(s.EndAt)
	ms(s.NextAt)
	ms(s.LastAt)
	ms(s.Made)
	ms(&s.CreatedAt)
	ms(&s.UpdatedAt)
	ms(&s.Anchor)
	ms(&s.WakeAt)
	return s
}

// ErrChangedScheduleIdentity is returned by a store's UpdateSchedule when
// fn changed the schedule's ID, App or Key.
var ErrChangedScheduleIdentity = errors.New("toc: update must not change a schedule's id, app or key")

// ApplySchedule is the middle of every store's UpdateSchedule, as [Apply]
// is of Update: it calls fn with a copy of old, refuses a change of
// identity (ErrChangedScheduleIdentity), and returns the result normalized and in
// memory of its own. An error from fn comes back unchanged.
func ApplySchedule(old *task.Schedule, fn func(*task.Schedule) error) (*task.Schedule, error) {
	c := old.Clone()
	if err := fn(c); err != nil {
		return nil, err
	}
	if c.ID != old.ID || c.App != old.App || c.Key != old.Key {
		return nil, ErrChangedScheduleIdentity
	}
	return NormalizeSchedule(c.Clone()), nil
}

// CheckSchedule refuses a schedule that no store keeps: one without an id
// or a key, with a NUL byte in its app, or in a state that is not one of
// [task.ScheduleStates]. Every backend checks each schedule it writes with
// it, so that they all refuse the same ones.
func CheckSchedule(s *task.Schedule) error {
	switch {
	case s.ID.IsZero():
		return errors.New("toc: schedule without an id")
	case s.Key == "":
		return fmt.Errorf("toc: schedule %s has no key", s.ID)
	case strings.IndexByte(s.App, 0) >= 0:
		return fmt.Errorf("toc: schedule %s: app %q contains a NUL byte", s.ID, s.App)
	case !slices.Contains(task.ScheduleStates, s.State):
		return fmt.Errorf("toc: schedule %s: unknown state %q", s.ID, s.State)
	}
	return nil
}
