package task

import (
	"encoding/json"
	"time"
)

// ScheduleState is where a schedule is in its life.
type ScheduleState string

// The states of a schedule. Ended is final: its rule has no time left
// before its EndAt.
const (
	ScheduleActive ScheduleState = "active"
	SchedulePaused ScheduleState = "paused"
	ScheduleEnded  ScheduleState = "ended"
)

// ScheduleStates lists every schedule state, in a fixed order.
var ScheduleStates = []ScheduleState{ScheduleActive, SchedulePaused, ScheduleEnded}

// CatchUp says what a schedule does with the occurrences it missed while toc
// was down.
type CatchUp string

// The catch-up policies.
const (
	CatchUpSkip CatchUp = "skip" // only the next future occurrence
	CatchUpOne  CatchUp = "one"  // the latest missed one now, then on (the default)
	CatchUpAll  CatchUp = "all"  // every missed one (the most recent MaxCatchUp), oldest first
)

// MaxCatchUp bounds the occurrences CatchUpAll creates after downtime.
const MaxCatchUp = 1000

// MaxScheduleKey is the longest schedule key, in bytes: an occurrence's key
// is the schedule's key, "@" and a 24-byte time.
const MaxScheduleKey = 200

// MinEvery is the shortest interval of an every-schedule.
const MinEvery = time.Second

// Schedule is a recurring timer: a rule (Cron or Every, in Timezone) and a
// task template. At each of the rule's times the schedule makes an
// ordinary task of its app, an occurrence, with the key
// OccurrenceKey(Key, due) and ScheduleID set. A schedule has at most one
// pending occurrence: the next is made when the current one comes due.
// Times are kept to the millisecond, in UTC.
type Schedule struct {
	ID  ID     `json:"id"`
	App string `json:"app"`
	Key string `json:"key"`

	// Exactly one of Cron and Every is set.
	Cron     string   `json:"cron,omitempty"`
	Every    Duration `json:"every,omitempty"`
	Timezone string   `json:"timezone"` // an IANA name; "UTC" by default

	StartAt *time.Time    `json:"start_at,omitempty"` // no occurrence before
	EndAt   *time.Time    `json:"end_at,omitempty"`   // no occurrence after
	CatchUp CatchUp       `json:"catch_up"`
	State   ScheduleState `json:"state"`

	// NextAt is the due time of the next occurrence: the pending one, or
	// the rule's next time when none is pending. Nil when there is none
	// (paused, ended).
	NextAt *time.Time `json:"next_at,omitempty"`
	// LastAt is the due time of the last occurrence that came due: nil
	// until one did (the pending occurrence, made ahead, is NextAt).
	LastAt *time.Time `json:"last_at,omitempty"`
	// Made is the due time of the last occurrence made, pending or not:
	// the engine's own bookkeeping (which pending occurrence to retire
	// when the rule changes), not part of the API.
	Made *time.Time `json:"-"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	// The task template. DeadlineAfter, when set, gives each occurrence
	// the deadline due + DeadlineAfter.
	Payload       []byte      `json:"-"`
	Target        Target      `json:"target"`
	Retry         RetryPolicy `json:"retry"`
	DeadlineAfter Duration    `json:"deadline_after,omitempty"`
	// TraceParent and TraceState are the W3C trace context the schedule
	// was created in; every occurrence is created in it (Task.Trace).
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`

	// Anchor is the instant an every-schedule counts from: StartAt when
	// given, else the create, or the last PATCH that changed the rule, or
	// the last resume. Not part of the API.
	Anchor time.Time `json:"-"`
	// WakeAt is when the engine must next act on the schedule: make the
	// occurrence after the pending one, at the pending one's due time.
	// Zero when nothing is to be done (paused, ended). It is the key of the
	// stores' order of schedules and is not part of the API.
	WakeAt time.Time `json:"-"`
}

// OccurrenceKey is the task key of a schedule's occurrence due at due:
// "daily-report@2026-11-24T08:00:00.000Z".
func OccurrenceKey(scheduleKey string, due time.Time) string {
	return scheduleKey + "@" + due.UTC().Format("2006-01-02T15:04:05.000Z")
}

// scheduleJSON is Schedule's wire form: its fields plus the payload in its
// two encodings, as for a task.
type scheduleJSON struct {
	scheduleAlias
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64"`
}

type scheduleAlias Schedule

// MarshalJSON writes the schedule with payload_base64 always, and payload
// when the bytes are valid JSON in valid UTF-8, as for a task.
func (s Schedule) MarshalJSON() ([]byte, error) {
	w := scheduleJSON{scheduleAlias: scheduleAlias(s)}
	w.Payload, w.PayloadBase64 = payloadOut(s.Payload)
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Schedule) UnmarshalJSON(b []byte) error {
	var w scheduleJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = Schedule(w.scheduleAlias)
	p, err := payloadIn(w.Payload, w.PayloadBase64)
	s.Payload = p
	return err
}

// Clone returns a deep copy of s.
func (s *Schedule) Clone() *Schedule {
	c := *s
	if s.Payload != nil {
		c.Payload = append([]byte(nil), s.Payload...)
	}
	c.StartAt = cloneTime(s.StartAt)
	c.EndAt = cloneTime(s.EndAt)
	c.NextAt = cloneTime(s.NextAt)
	c.LastAt = cloneTime(s.LastAt)
	c.Made = cloneTime(s.Made)
	c.Target = s.Target.Clone()
	return &c
}
