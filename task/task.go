// Package task defines toc's task: what a client schedules, what the store
// keeps and what the API returns. It uses the standard library only, so that
// clients can import it without pulling in the server.
package task

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// State is where a task is in its life.
//
//	scheduled → delivering → delivered | dead | expired
//	          ↖____________↙ (a failed attempt with attempts left)
//	scheduled → cancelled | expired
type State string

// The states. Delivered, Dead, Expired and Cancelled are final.
const (
	Scheduled  State = "scheduled"
	Delivering State = "delivering"
	Delivered  State = "delivered"
	Dead       State = "dead"
	Expired    State = "expired"
	Cancelled  State = "cancelled"
)

// States lists every state, in a fixed order.
var States = []State{Scheduled, Delivering, Delivered, Dead, Expired, Cancelled}

// Final reports whether no transition leaves s.
func (s State) Final() bool {
	switch s {
	case Delivered, Dead, Expired, Cancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of [States].
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Task is one timer. Times are kept to the millisecond, in UTC.
type Task struct {
	ID  ID     `json:"id"`
	App string `json:"app"`
	Key string `json:"key,omitempty"`
	// ScheduleID names the schedule that made the task (an occurrence);
	// zero for a task created on its own.
	ScheduleID ID `json:"schedule_id,omitzero"`

	// DueAt is the time the task was scheduled for. It does not move when an
	// attempt fails; NextAttemptAt does.
	DueAt         time.Time  `json:"due_at"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	Deadline      *time.Time `json:"deadline,omitempty"`

	// Payload is delivered as these exact bytes. In JSON it travels as
	// payload_base64, and also as payload when the bytes are valid JSON in
	// valid UTF-8.
	Payload []byte `json:"-"`

	Target Target      `json:"target"`
	Retry  RetryPolicy `json:"retry"`

	State     State  `json:"state"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`

	// Lease is the token of the current delivery attempt, set while the task
	// is delivering; LeaseExpiresAt is when that attempt is given up.
	Lease          string     `json:"lease,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`

	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// History is what happened to the task, oldest first: the last
	// MaxHistory events (attempts started and ended, state changes).
	History []Event `json:"history,omitempty"`

	// Trace is the W3C trace context the task was created in: the create
	// request's, or its schedule's. Each delivery attempt is a span in that
	// trace, and a delivery passes the context on to the receiver. Nil when
	// the create carried none. In JSON it is the task's traceparent and
	// tracestate. A pointer, so that a task without one is no larger than
	// before tracing (every fire copies tasks); never changed in place.
	Trace *TraceContext `json:"-"`

	// WakeAt is when the engine must next look at the task: the next attempt,
	// the deadline, or the end of a lease. Zero when nothing is pending. It is
	// the key of the store's time index and is not part of the API.
	WakeAt time.Time `json:"-"`
}

// TraceContext is a W3C trace context (https://www.w3.org/TR/trace-context/):
// the traceparent and tracestate headers.
type TraceContext struct {
	Parent string // traceparent, like 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	State  string // tracestate; "" for none
}

// Event is one entry of a task's history.
type Event struct {
	At      time.Time `json:"at"`
	What    string    `json:"what"`              // "created", "attempt", "failed", "delivered", "dead", "expired", "cancelled", "retried", "rescheduled", "released"
	Attempt int       `json:"attempt,omitempty"` // the attempt it concerns
	Error   string    `json:"error,omitempty"`
}

// MaxHistory is how many events a task keeps; older ones are dropped.
const MaxHistory = 32

// Record appends an event to t's history, dropping the oldest past
// MaxHistory.
func (t *Task) Record(at time.Time, what string, attempt int, err string) {
	if len(t.History) >= MaxHistory {
		t.History = append(t.History[:0:0], t.History[len(t.History)-MaxHistory+1:]...)
	}
	t.History = append(t.History, Event{At: at, What: what, Attempt: attempt, Error: err})
}

// taskJSON is Task's wire form: Task's fields plus the payload in its two
// encodings.
type taskJSON struct {
	taskAlias
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64"`
	TraceParent   string          `json:"traceparent,omitempty"` // Trace
	TraceState    string          `json:"tracestate,omitempty"`
}

type taskAlias Task // has Task's fields, not its methods

// MarshalJSON writes the task with payload_base64 always, and payload when
// the payload bytes are valid JSON in valid UTF-8 (encoding/json accepts
// invalid UTF-8 inside strings; a client reading it would get other bytes).
// It is [Task.AppendJSON] into a buffer of its own (json.go).
func (t Task) MarshalJSON() ([]byte, error) {
	b, err := t.AppendJSON(make([]byte, 0, t.JSONSize()))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// payloadOut is a payload's two wire forms: payload, only when the bytes
// are valid JSON in valid UTF-8 (encoding/json accepts invalid UTF-8 inside
// strings; a client reading it would get other bytes), and payload_base64,
// always.
func payloadOut(p []byte) (json.RawMessage, string) {
	b64 := base64.StdEncoding.EncodeToString(p)
	if len(p) > 0 && utf8.Valid(p) && json.Valid(p) {
		return p, b64
	}
	return nil, b64
}

// payloadIn reads a payload back from its two wire forms, payload_base64
// first.
func payloadIn(raw json.RawMessage, b64 string) ([]byte, error) {
	switch {
	case b64 != "":
		p, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("payload_base64: %w", err)
		}
		return p, nil
	case len(raw) > 0:
		return append([]byte(nil), raw...), nil
	}
	return nil, nil
}

// UnmarshalJSON reads what MarshalJSON writes: by hand when b has its
// form (jsondecode.go), else as encoding/json does.
func (t *Task) UnmarshalJSON(b []byte) error {
	if t.unmarshalFast(b) {
		return nil
	}
	return t.unmarshalReflect(b)
}

// unmarshalReflect is UnmarshalJSON by encoding/json.
func (t *Task) unmarshalReflect(b []byte) error {
	var w taskJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = Task(w.taskAlias)
	if w.TraceParent != "" || w.TraceState != "" {
		t.Trace = &TraceContext{Parent: w.TraceParent, State: w.TraceState}
	}
	p, err := payloadIn(w.Payload, w.PayloadBase64)
	t.Payload = p
	return err
}

// Clone returns a deep copy of t.
func (t *Task) Clone() *Task {
	c := *t
	c.Payload = append([]byte(nil), t.Payload...)
	if t.Payload == nil {
		c.Payload = nil
	}
	c.Deadline = cloneTime(t.Deadline)
	c.LeaseExpiresAt = cloneTime(t.LeaseExpiresAt)
	c.FinishedAt = cloneTime(t.FinishedAt)
	c.Target = t.Target.Clone()
	if t.Trace != nil {
		tc := *t.Trace
		c.Trace = &tc
	}
	if t.History != nil {
		c.History = append([]Event(nil), t.History...)
	}
	return &c
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// Target says how a due task is delivered. Exactly one field is set.
type Target struct {
	HTTP *HTTPTarget `json:"http,omitempty"`
	Pull *PullTarget `json:"pull,omitempty"`
	AMQP *AMQPTarget `json:"amqp,omitempty"`
	NATS *NATSTarget `json:"nats,omitempty"`
}

// Kind names the set field: "http", "pull", "amqp" or "nats" ("" when none
// is set).
func (t Target) Kind() string {
	switch {
	case t.HTTP != nil:
		return "http"
	case t.Pull != nil:
		return "pull"
	case t.AMQP != nil:
		return "amqp"
	case t.NATS != nil:
		return "nats"
	}
	return ""
}

// Clone returns a deep copy.
func (t Target) Clone() Target {
	c := t
	if t.HTTP != nil {
		h := *t.HTTP
		if t.HTTP.Headers != nil {
			h.Headers = make(map[string]string, len(t.HTTP.Headers))
			for k, v := range t.HTTP.Headers {
				h.Headers[k] = v
			}
		}
		c.HTTP = &h
	}
	if t.Pull != nil {
		p := *t.Pull
		c.Pull = &p
	}
	if t.AMQP != nil {
		a := *t.AMQP
		c.AMQP = &a
	}
	if t.NATS != nil {
		n := *t.NATS
		c.NATS = &n
	}
	return c
}

// HTTPTarget delivers a task by POSTing its payload to URL.
type HTTPTarget struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds one attempt. Default [DefaultHTTPTimeout].
	Timeout Duration `json:"timeout,omitempty"`
}

// AMQPTarget publishes a task to a RabbitMQ (AMQP 0-9-1) exchange with
// publisher confirms: the task is delivered when the broker confirms it.
type AMQPTarget struct {
	// URL names the broker: empty for the server's --amqp setting, the name
	// of a broker the server's configuration lets the app use, or exactly
	// the URL of one (like amqp://user:pass@host:5672/vhost). Any other is
	// refused at create.
	URL string `json:"url,omitempty"`
	// Exchange to publish to ("" is the default exchange).
	Exchange string `json:"exchange,omitempty"`
	// RoutingKey of the message. Default: the task's app.
	RoutingKey string `json:"routing_key,omitempty"`
}

// NATSTarget publishes a task to a NATS JetStream subject, with Nats-Msg-Id
// set to the task id so JetStream drops a redelivered duplicate.
type NATSTarget struct {
	// URL names the server: empty for the server's --nats setting, the name
	// of a broker the server's configuration lets the app use, or exactly
	// the URL of one (like nats://host:4222). Any other is refused at
	// create.
	URL string `json:"url,omitempty"`
	// Subject to publish to; a stream must capture it. Required.
	Subject string `json:"subject"`
}

// PullTarget makes a due task available to consumers that claim it.
type PullTarget struct{}

// RetryPolicy says how often and how soon a failed delivery is tried again.
// Zero fields take the defaults.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included. Default
	// [DefaultMaxAttempts].
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MinBackoff is the delay after the first failure. Default
	// [DefaultMinBackoff].
	MinBackoff Duration `json:"min_backoff,omitempty"`
	// MaxBackoff caps the delay. Default [DefaultMaxBackoff].
	MaxBackoff Duration `json:"max_backoff,omitempty"`
}

// Defaults for a task's delivery.
const (
	DefaultMaxAttempts = 16
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultHTTPTimeout = 10 * time.Second
)

// WithDefaults returns p with its zero fields set to the defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MinBackoff == 0 {
		p.MinBackoff = Duration(DefaultMinBackoff)
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = Duration(DefaultMaxBackoff)
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = p.MinBackoff
	}
	return p
}

// Duration is a time.Duration that travels in JSON as a Go duration string
// ("1.5s", "10m").
type Duration time.Duration

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration like \"1.5s\" or \"10m\": %q", b)
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Ms rounds t up to the next whole millisecond in UTC, so that a task is
// never fired before the instant it was given.
func Ms(t time.Time) time.Time {
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r.UTC().Round(0)
}
