package task

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// A task's JSON is read by hand when it has the form MarshalJSON writes
// (every Go client reads one per create, a thousand per page): known
// names spelled exactly, each once, strings without escapes, integers,
// no nulls. Anything else, and any value a field refuses, goes to
// encoding/json (unmarshalReflect), so that what is read, and each error,
// is what encoding/json makes of it: FuzzUnmarshalJSON holds the two to
// the same task.

// unmarshalFast reads b into t and reports whether it could; when it
// could not, t is unchanged.
func (t *Task) unmarshalFast(b []byte) bool {
	d := jsonReader{b: b}
	var w Task
	if !d.task(&w) || !d.end() {
		return false
	}
	*t = w
	return true
}

// DecodeList reads a JSON array of tasks (a claim's or a page's "tasks")
// by hand, as unmarshalFast reads each, and reports whether it could: when
// it could not (any element not in MarshalJSON's form, null included), the
// caller decodes b with encoding/json, which gives the same tasks or the
// error. The tasks keep nothing of b.
func DecodeList(b []byte) ([]*Task, bool) {
	d := jsonReader{b: b}
	if d.peek() != '[' {
		return nil, false
	}
	d.i++
	ts := make([]*Task, 0, 16)
	if d.peek() == ']' {
		d.i++
		return ts, d.end()
	}
	for {
		t := new(Task)
		if !d.task(t) {
			return nil, false
		}
		ts = append(ts, t)
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return ts, d.end()
		default:
			return nil, false
		}
	}
}

// task reads one task's object at d's position into t, and reports whether
// it could; when it could not, t is unchanged.
func (d *jsonReader) task(t *Task) bool {
	var w Task
	var raw, b64 []byte // payload, payload_base64 (in b)
	var parent, state string
	var seen uint32
	ok := d.object(func(name []byte) bool {
		f := taskField(name)
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		switch f {
		case fID:
			return d.id(&w.ID)
		case fApp:
			// A list's tasks mostly share their app: its string is made
			// once, not once a task.
			v, ok := d.plain()
			if string(v) != d.app {
				d.app = string(v)
			}
			w.App = d.app
			return ok
		case fKey:
			return d.str(&w.Key)
		case fScheduleID:
			return d.id(&w.ScheduleID)
		case fDueAt:
			return d.time(&w.DueAt)
		case fNextAttemptAt:
			return d.time(&w.NextAttemptAt)
		case fDeadline:
			w.Deadline = new(time.Time)
			return d.time(w.Deadline)
		case fTarget:
			return d.target(&w.Target)
		case fRetry:
			return d.retry(&w.Retry)
		case fState:
			var s string
			ok := d.word(&s)
			w.State = State(s)
			return ok
		case fAttempts:
			return d.int(&w.Attempts)
		case fLastError:
			return d.str(&w.LastError)
		case fLease:
			return d.str(&w.Lease)
		case fLeaseExpiresAt:
			w.LeaseExpiresAt = new(time.Time)
			return d.time(w.LeaseExpiresAt)
		case fCreatedAt:
			return d.time(&w.CreatedAt)
		case fUpdatedAt:
			return d.time(&w.UpdatedAt)
		case fFinishedAt:
			w.FinishedAt = new(time.Time)
			return d.time(w.FinishedAt)
		case fHistory:
			return d.history(&w.History)
		case fPayload:
			if d.peek() == 'n' {
				return false
			}
			raw = d.value()
			return raw != nil && json.Valid(raw)
		case fPayloadBase64:
			// Decoded from b, without a string made for it first.
			var ok bool
			b64, ok = d.plain()
			return ok
		case fTraceParent:
			return d.str(&parent)
		case fTraceState:
			return d.str(&state)
		}
		return false
	})
	if !ok {
		return false
	}
	if parent != "" || state != "" {
		w.Trace = &TraceContext{Parent: parent, State: state}
	}
	if len(b64) > 0 {
		// payloadIn's decoding, from the bytes.
		p := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
		n, err := base64.StdEncoding.Decode(p, b64)
		if err != nil {
			return false // encoding/json's path gives the error, and the task as it leaves it
		}
		w.Payload = p[:n]
	} else if p, err := payloadIn(raw, ""); err == nil {
		w.Payload = p
	} else {
		return false
	}
	*t = w
	return true
}

const (
	fID = iota
	fApp
	fKey
	fScheduleID
	fDueAt
	fNextAttemptAt
	fDeadline
	fTarget
	fRetry
	fState
	fAttempts
	fLastError
	fLease
	fLeaseExpiresAt
	fCreatedAt
	fUpdatedAt
	fFinishedAt
	fHistory
	fPayload
	fPayloadBase64
	fTraceParent
	fTraceState
)

// taskField returns the field a task's member name is (fID...), or -1
// for a name MarshalJSON does not write. A switch, not a map: a claim's
// answer has fifteen names a task, and hashing each took a twentieth of
// its decoding.
func taskField(name []byte) int {
	switch string(name) {
	case "id":
		return fID
	case "app":
		return fApp
	case "key":
		return fKey
	case "schedule_id":
		return fScheduleID
	case "due_at":
		return fDueAt
	case "next_attempt_at":
		return fNextAttemptAt
	case "deadline":
		return fDeadline
	case "target":
		return fTarget
	case "retry":
		return fRetry
	case "state":
		return fState
	case "attempts":
		return fAttempts
	case "last_error":
		return fLastError
	case "lease":
		return fLease
	case "lease_expires_at":
		return fLeaseExpiresAt
	case "created_at":
		return fCreatedAt
	case "updated_at":
		return fUpdatedAt
	case "finished_at":
		return fFinishedAt
	case "history":
		return fHistory
	case "payload":
		return fPayload
	case "payload_base64":
		return fPayloadBase64
	case "traceparent":
		return fTraceParent
	case "tracestate":
		return fTraceState
	}
	return -1
}

// jsonReader reads JSON in the plain form above and checks it as it
// reads: each method reports false for anything else, invalid JSON
// included (a payload, the one value of any form, is checked by
// json.Valid), so that what it takes is what encoding/json takes.
type jsonReader struct {
	b   []byte
	i   int
	app string // the last app read (task)
	// durs are the last durations read, by their text (in b): a list's
	// tasks mostly share their retry policy, whose two durations are
	// then parsed once rather than once a task.
	durs [2]durText
}

// durText is a duration read, and its text.
type durText struct {
	text []byte
	v    Duration
}

func (d *jsonReader) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonReader) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// end reports whether only whitespace is left.
func (d *jsonReader) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// object reads an object, calling member at each name with the reader at
// its value, which member must read.
func (d *jsonReader) object(member func(name []byte) bool) bool {
	if d.peek() != '{' {
		return false
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		name, ok := d.plain()
		if !ok || d.peek() != ':' {
			return false
		}
		d.i++
		if !member(name) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// plain reads a string without escapes in valid UTF-8 and returns its
// bytes (in b).
func (d *jsonReader) plain() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[start:j]
			if !utf8.Valid(s) {
				return nil, false
			}
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (d *jsonReader) str(s *string) bool {
	v, ok := d.plain()
	*s = string(v)
	return ok
}

// word is str for the values a task's state and its events' names take:
// one of those is the constant itself, not a string made for it (three
// of a claimed task's fourteen allocations: its state, and the created
// and attempt events).
func (d *jsonReader) word(s *string) bool {
	v, ok := d.plain()
	*s = knownWord(v)
	return ok
}

// knownWord returns v as a string, a constant when v is a state's or an
// event's name (comparing string(v) makes no string).
func knownWord(v []byte) string {
	for _, s := range States {
		if string(v) == string(s) {
			return string(s)
		}
	}
	for _, w := range eventWords {
		if string(v) == w {
			return w
		}
	}
	return string(v)
}

// eventWords is the events' names (Event.What) that are not a state's.
var eventWords = []string{"created", "attempt", "failed", "interrupted", "released", "retried", "rescheduled"}

func (d *jsonReader) id(id *ID) bool {
	v, ok := d.plain()
	return ok && id.UnmarshalText(v) == nil
}

func (d *jsonReader) time(t *time.Time) bool {
	d.ws()
	i := d.i
	if _, ok := d.plain(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[i:d.i]) == nil // as encoding/json calls it: quotes and all
}

func (d *jsonReader) duration(v *Duration) bool {
	s, ok := d.plain()
	if !ok {
		return false
	}
	for _, m := range d.durs {
		if m.text != nil && string(m.text) == string(s) {
			*v = m.v
			return true
		}
	}
	if v.UnmarshalText(s) != nil {
		return false
	}
	d.durs[1], d.durs[0] = d.durs[0], durText{s, *v}
	return true
}

// int reads an integer written without fraction or exponent, as JSON
// writes it: -?(0|[1-9][0-9]*).
func (d *jsonReader) int(n *int) bool {
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || d.b[digits] == '0' && d.i > digits+1 {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return false
	}
	v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, strconv.IntSize)
	*n = int(v)
	return err == nil
}

// value skips any value and returns its bytes.
func (d *jsonReader) value() []byte {
	d.ws()
	start := d.i
	depth := 0
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			if d.i >= len(d.b) {
				return nil // unterminated
			}
			d.i++
		case c == '{' || c == '[':
			depth++
			d.i++
		case c == '}' || c == ']':
			if depth == 0 {
				return d.b[start:d.i]
			}
			depth--
			d.i++
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return d.b[start:d.i]
		default: // a number or a literal, or inside a value
			d.i++
		}
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return d.b[start:d.i]
		}
	}
	return d.b[start:d.i]
}

func (d *jsonReader) target(t *Target) bool {
	var seen uint8
	return d.object(func(name []byte) bool {
		var bit uint8
		switch string(name) {
		case "http":
			bit = 1
		case "pull":
			bit = 2
		case "amqp":
			bit = 4
		case "nats":
			bit = 8
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case 1:
			t.HTTP = new(HTTPTarget)
			return d.httpTarget(t.HTTP)
		case 2:
			t.Pull = new(PullTarget)
			return d.object(func([]byte) bool { return false })
		case 4:
			t.AMQP = new(AMQPTarget)
			return d.strings(map[string]*string{"url": &t.AMQP.URL, "exchange": &t.AMQP.Exchange, "routing_key": &t.AMQP.RoutingKey})
		default:
			t.NATS = new(NATSTarget)
			return d.strings(map[string]*string{"url": &t.NATS.URL, "subject": &t.NATS.Subject})
		}
	})
}

// strings reads an object of string members, each at most once.
func (d *jsonReader) strings(fields map[string]*string) bool {
	seen := make(map[string]bool, len(fields))
	return d.object(func(name []byte) bool {
		p := fields[string(name)]
		if p == nil || seen[string(name)] {
			return false
		}
		seen[string(name)] = true
		return d.str(p)
	})
}

func (d *jsonReader) httpTarget(h *HTTPTarget) bool {
	var seen uint8
	return d.object(func(name []byte) bool {
		var bit uint8
		switch string(name) {
		case "url":
			bit = 1
		case "headers":
			bit = 2
		case "timeout":
			bit = 4
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case 1:
			return d.str(&h.URL)
		case 2:
			h.Headers = map[string]string{}
			return d.object(func(name []byte) bool {
				var v string
				if !d.str(&v) {
					return false
				}
				h.Headers[string(name)] = v
				return true
			})
		default:
			return d.duration(&h.Timeout)
		}
	})
}

func (d *jsonReader) retry(p *RetryPolicy) bool {
	var seen uint8
	return d.object(func(name []byte) bool {
		var bit uint8
		switch string(name) {
		case "max_attempts":
			bit = 1
		case "min_backoff":
			bit = 2
		case "max_backoff":
			bit = 4
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case 1:
			return d.int(&p.MaxAttempts)
		case 2:
			return d.duration(&p.MinBackoff)
		default:
			return d.duration(&p.MaxBackoff)
		}
	})
}

func (d *jsonReader) history(h *[]Event) bool {
	if d.peek() != '[' {
		return false
	}
	d.i++
	*h = []Event{}
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		var e Event
		var seen uint8
		ok := d.object(func(name []byte) bool {
			var bit uint8
			switch string(name) {
			case "at":
				bit = 1
			case "what":
				bit = 2
			case "attempt":
				bit = 4
			case "error":
				bit = 8
			default:
				return false
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			switch bit {
			case 1:
				return d.time(&e.At)
			case 2:
				return d.word(&e.What)
			case 4:
				return d.int(&e.Attempt)
			default:
				return d.str(&e.Error)
			}
		})
		if !ok {
			return false
		}
		*h = append(*h, e)
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}
