package task

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// A task's JSON is written by hand: it is every answer's bulk (one per
// create, a thousand per batch or page), and encoding/json's reflection
// took a sixth of a single create's CPU on the server. The bytes are
// exactly those json.Marshal writes for taskJSON (field order, omitempty,
// escaping of <, > and & and of U+2028/U+2029, invalid UTF-8 as \ufffd,
// the payload compacted): FuzzAppendJSON holds the two to the same output.

// AppendJSON appends t's JSON, exactly what [Task.MarshalJSON] returns, to
// dst and returns the extended slice. On error (a time outside years
// 0-9999) it returns dst unchanged.
func (t *Task) AppendJSON(dst []byte) ([]byte, error) {
	b, err := t.appendJSON(dst)
	if err != nil {
		return dst, fmt.Errorf("toc: encode task %s: %w", t.ID, err)
	}
	return b, nil
}

// JSONSize is about the bytes of t's JSON, to size a buffer for
// [Task.AppendJSON].
func (t *Task) JSONSize() int {
	n := 512 + len(t.App) + len(t.Key) + len(t.Payload)*7/3 + len(t.LastError) + 96*len(t.History)
	if t.Target.HTTP != nil {
		n += len(t.Target.HTTP.URL)
	}
	return n
}

func (t *Task) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"id":"`...)
	b = appendID(b, t.ID)
	b = append(b, `","app":`...)
	b = appendString(b, t.App)
	if t.Key != "" {
		b = append(b, `,"key":`...)
		b = appendString(b, t.Key)
	}
	if !t.ScheduleID.IsZero() {
		b = append(b, `,"schedule_id":"`...)
		b = appendID(b, t.ScheduleID)
		b = append(b, '"')
	}
	b = append(b, `,"due_at":`...)
	if b, err = appendTime(b, t.DueAt); err != nil {
		return nil, err
	}
	b = append(b, `,"next_attempt_at":`...)
	if b, err = appendTime(b, t.NextAttemptAt); err != nil {
		return nil, err
	}
	if t.Deadline != nil {
		b = append(b, `,"deadline":`...)
		if b, err = appendTime(b, *t.Deadline); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"target":`...)
	b = t.Target.appendJSON(b)
	b = append(b, `,"retry":`...)
	b = t.Retry.appendJSON(b)
	b = append(b, `,"state":`...)
	b = appendString(b, string(t.State))
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	if t.LastError != "" {
		b = append(b, `,"last_error":`...)
		b = appendString(b, t.LastError)
	}
	if t.Lease != "" {
		b = append(b, `,"lease":`...)
		b = appendString(b, t.Lease)
	}
	if t.LeaseExpiresAt != nil {
		b = append(b, `,"lease_expires_at":`...)
		if b, err = appendTime(b, *t.LeaseExpiresAt); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"created_at":`...)
	if b, err = appendTime(b, t.CreatedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"updated_at":`...)
	if b, err = appendTime(b, t.UpdatedAt); err != nil {
		return nil, err
	}
	if t.FinishedAt != nil {
		b = append(b, `,"finished_at":`...)
		if b, err = appendTime(b, *t.FinishedAt); err != nil {
			return nil, err
		}
	}
	if len(t.History) > 0 {
		b = append(b, `,"history":[`...)
		for i := range t.History {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = t.History[i].appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if len(t.Payload) > 0 && utf8.Valid(t.Payload) && json.Valid(t.Payload) {
		b = append(b, `,"payload":`...)
		b = appendCompact(b, t.Payload)
	}
	b = append(b, `,"payload_base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, t.Payload)
	b = append(b, '"')
	if t.Trace != nil {
		if t.Trace.Parent != "" {
			b = append(b, `,"traceparent":`...)
			b = appendString(b, t.Trace.Parent)
		}
		if t.Trace.State != "" {
			b = append(b, `,"tracestate":`...)
			b = appendString(b, t.Trace.State)
		}
	}
	return append(b, '}'), nil
}

func (e *Event) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"at":`...)
	b, err := appendTime(b, e.At)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"what":`...)
	b = appendString(b, e.What)
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, e.Error)
	}
	return append(b, '}'), nil
}

// AppendJSON appends t's JSON, exactly what json.Marshal writes for it,
// to b and returns the extended slice (a client's create body).
func (t Target) AppendJSON(b []byte) []byte { return t.appendJSON(b) }

// AppendJSON appends p's JSON, exactly what json.Marshal writes for it,
// to b and returns the extended slice (a client's create body).
func (p RetryPolicy) AppendJSON(b []byte) []byte { return p.appendJSON(b) }

func (t *Target) appendJSON(b []byte) []byte {
	b = append(b, '{')
	start := len(b)
	comma := func(b []byte) []byte {
		if len(b) > start {
			b = append(b, ',')
		}
		return b
	}
	if h := t.HTTP; h != nil {
		b = append(b, `"http":{"url":`...)
		b = appendString(b, h.URL)
		if len(h.Headers) > 0 {
			b = append(b, `,"headers":{`...)
			names := make([]string, 0, len(h.Headers))
			for k := range h.Headers {
				names = append(names, k)
			}
			slices.Sort(names)
			for i, k := range names {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendString(b, k)
				b = append(b, ':')
				b = appendString(b, h.Headers[k])
			}
			b = append(b, '}')
		}
		if h.Timeout != 0 {
			b = append(b, `,"timeout":`...)
			b = appendString(b, time.Duration(h.Timeout).String())
		}
		b = append(b, '}')
	}
	if t.Pull != nil {
		b = append(comma(b), `"pull":{}`...)
	}
	if a := t.AMQP; a != nil {
		b = append(comma(b), `"amqp":{`...)
		n := len(b)
		if a.URL != "" {
			b = appendString(append(b, `"url":`...), a.URL)
		}
		if a.Exchange != "" {
			if len(b) > n {
				b = append(b, ',')
			}
			b = appendString(append(b, `"exchange":`...), a.Exchange)
		}
		if a.RoutingKey != "" {
			if len(b) > n {
				b = append(b, ',')
			}
			b = appendString(append(b, `"routing_key":`...), a.RoutingKey)
		}
		b = append(b, '}')
	}
	if n := t.NATS; n != nil {
		b = append(comma(b), `"nats":{`...)
		if n.URL != "" {
			b = append(appendString(append(b, `"url":`...), n.URL), ',')
		}
		b = appendString(append(b, `"subject":`...), n.Subject)
		b = append(b, '}')
	}
	return append(b, '}')
}

func (p *RetryPolicy) appendJSON(b []byte) []byte {
	b = append(b, '{')
	n := len(b)
	if p.MaxAttempts != 0 {
		b = strconv.AppendInt(append(b, `"max_attempts":`...), int64(p.MaxAttempts), 10)
	}
	if p.MinBackoff != 0 {
		if len(b) > n {
			b = append(b, ',')
		}
		b = appendString(append(b, `"min_backoff":`...), time.Duration(p.MinBackoff).String())
	}
	if p.MaxBackoff != 0 {
		if len(b) > n {
			b = append(b, ',')
		}
		b = appendString(append(b, `"max_backoff":`...), time.Duration(p.MaxBackoff).String())
	}
	return append(b, '}')
}

// appendID appends id's text form (no quotes).
func appendID(b []byte, id ID) []byte {
	out := id.text()
	return append(b, out[:]...)
}

// appendTime appends t as time.Time's MarshalJSON does.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes a JSON string holds as they are, with
// encoding/json's HTML escaping: not control characters, '"', '\\', '<',
// '>' or '&'.
var jsonSafe = func() (s [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		s[c] = true
	}
	for _, c := range `"\<>&` {
		s[c] = false
	}
	return s
}()

// appendString appends s as a JSON string the way encoding/json does.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCompact appends the valid JSON p as encoding/json writes a
// json.RawMessage: without insignificant whitespace, with <, >, &, U+2028
// and U+2029 escaped.
func appendCompact(b, p []byte) []byte {
	plain := true
	for _, c := range p {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2: // 0xE2: U+2028 and U+2029 start with it
			plain = false
		}
		if !plain {
			break
		}
	}
	if plain {
		return append(b, p...)
	}
	var compact, escaped bytes.Buffer
	if err := json.Compact(&compact, p); err != nil {
		return append(b, p...) // p is valid: not reached
	}
	json.HTMLEscape(&escaped, compact.Bytes())
	return append(b, escaped.Bytes()...)
}
