// Package sink defines how a due task leaves toc: a Sink delivers one task
// and says whether the receiver took it.
package sink

import (
	"context"
	"encoding/json"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/task"
)

// Headers every sink sets on what it sends (HTTP headers, AMQP and NATS
// message headers), so a receiver reads the same names whatever the target.
const (
	HeaderTaskID  = "Toc-Task-Id"
	HeaderApp     = "Toc-App"
	HeaderKey     = "Toc-Key" // only when the task has a key
	HeaderAttempt = "Toc-Attempt"
	HeaderDueAt   = "Toc-Due-At" // RFC 3339, ms
	// HeaderScheduleID names the schedule that made the task (an
	// occurrence of a recurring schedule); only on occurrences.
	HeaderScheduleID = "Toc-Schedule-Id"
)

// Sink delivers a due task. A nil error means the receiver has the task and
// it is marked delivered; any error is a failed attempt, retried with
// backoff. Deliver must return when ctx is done.
type Sink interface {
	Deliver(ctx context.Context, t *task.Task) error
}

// Func adapts a function to a Sink, as http.HandlerFunc does.
type Func func(ctx context.Context, t *task.Task) error

// Deliver calls f(ctx, t).
func (f Func) Deliver(ctx context.Context, t *task.Task) error { return f(ctx, t) }

// IsJSON reports whether p is JSON, as encoding/json's Valid says: a sink
// labels such a payload application/json (and any other
// application/octet-stream). It asks jsontext's validator first, about
// twice as fast (the payload is read in full on every delivery), with the
// checks json.Valid does not make turned off (valid UTF-8, unique names):
// what it accepts json.Valid accepts (FuzzIsJSON), and json.Valid has the
// last word on what it refuses.
func IsJSON(p []byte) bool {
	return len(p) > 0 && (jsontext.Value(p).IsValid(jsonLax...) || json.Valid(p))
}

// jsonLax are IsJSON's jsontext options.
var jsonLax = []jsontext.Options{jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true)}
