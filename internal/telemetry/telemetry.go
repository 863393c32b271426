// Package telemetry is toc's OpenTelemetry tracing: the setup from the
// standard OTEL_* environment variables (Start), the API's request spans
// (Handler), the span of each delivery attempt (StartDeliver, EndDeliver)
// and the W3C trace context a task keeps and a delivery carries
// (FromRequest, Outgoing).
//
// # Off by default
//
// Tracing is on only when Start finds an OTLP endpoint in the environment
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
// OTEL_TRACES_EXPORTER=otlp for the default localhost:4318) and
// OTEL_SDK_DISABLED is not true. Otherwise no provider is installed and
// every function here returns at once without allocating: a fire costs what
// it cost before tracing existed. A task created with a traceparent still
// passes it on to its receiver unchanged (Outgoing); one created without
// gets none.
//
// # The trace of a task
//
// A create keeps the trace context it was made in with the task
// (task.Task.Trace): the API request's span when
// tracing is on (itself a child of the caller's traceparent), else the
// caller's traceparent and tracestate headers as sent, when valid. A
// schedule keeps its creator's and gives it to each occurrence. Each
// delivery attempt is a span "toc deliver" whose parent is that context,
// and the attempt's own context travels with the delivery: traceparent
// (and tracestate) as an HTTP header of a push, as a message header on
// AMQP and NATS, so that the receiver's span continues the same trace.
package telemetry

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toc-dev/toc/task"
)

// The W3C trace context headers, as a push and a message carry them.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// DeliverSpan is the name of a delivery attempt's span.
const DeliverSpan = "toc deliver"

// The attributes of a delivery attempt's span.
const (
	AttrTaskID     = attribute.Key("toc.task.id")
	AttrApp        = attribute.Key("toc.app")
	AttrKey        = attribute.Key("toc.task.key") // only when the task has a key
	AttrAttempt    = attribute.Key("toc.attempt")
	AttrTargetKind = attribute.Key("toc.target.kind") // http, amqp, nats
	AttrOutcome    = attribute.Key("toc.outcome")     // delivered, failed, dead, released
	AttrLatenessMs = attribute.Key("toc.lateness_ms") // attempt start - its due time, in ms
	AttrScheduleID = attribute.Key("toc.schedule.id") // only on occurrences
)

// tracer is the tracer of toc's spans while tracing is on, nil while off.
var tracer atomic.Pointer[trace.Tracer]

// On reports whether tracing is on.
func On() bool { return tracer.Load() != nil }

// Use turns tracing on with tp's tracer (nil turns it off) and returns a
// function that restores the previous state. Start calls it; tests use it
// with an in-memory provider.
func Use(tp trace.TracerProvider) (restore func()) {
	var next *trace.Tracer
	if tp != nil {
		t := tp.Tracer("github.com/toc-dev/toc")
		next = &t
	}
	prev := tracer.Swap(next)
	return func() { tracer.Store(prev) }
}

// w3c is the propagator of the trace context toc keeps and sends. It is
// used directly rather than through otel's global propagator, so that what
// toc stores and sends does not depend on another package's settings.
var w3c = propagation.TraceContext{}

// FromRequest returns the trace context a create made by r is in, to keep
// with its tasks: the API request's span when tracing is on, else the
// request's traceparent and tracestate headers when the traceparent is
// valid (an invalid one is ignored, as the W3C recommendation says), else
// nothing.
func FromRequest(r *http.Request) (traceparent, tracestate string) {
	if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
		return format(sc)
	}
	if len(r.Header[http.CanonicalHeaderKey(HeaderTraceParent)]) == 0 {
		return "", ""
	}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	if !sc.IsValid() {
		return "", ""
	}
	return format(sc)
}

// format returns sc's traceparent and tracestate headers.
func format(sc trace.SpanContext) (traceparent, tracestate string) {
	var c pair
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.parent, c.state
}

// Outgoing returns the trace context a delivery of t carries: the
// attempt's span's when tracing is on (ctx is StartDeliver's), else the
// context t was created in, unchanged; empty strings for none.
func Outgoing(ctx context.Context, t *task.Task) (traceparent, tracestate string) {
	if On() {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			return format(sc)
		}
	}
	if t.Trace == nil {
		return "", ""
	}
	return t.Trace.Parent, t.Trace.State
}

// StartDeliver starts the span of an attempt at t (t.Attempts counts it),
// begun at start, as a child of the trace context t was created in (a new
// trace when it has none). It returns ctx unchanged and a nil span when
// tracing is off. End the span with EndDeliver, and give the returned
// context to the sink, so that the delivery carries the span's context.
func StartDeliver(ctx context.Context, t *task.Task, start time.Time) (context.Context, trace.Span) {
	tr := tracer.Load()
	if tr == nil {
		return ctx, nil
	}
	if t.Trace != nil {
		ctx = w3c.Extract(ctx, &pair{parent: t.Trace.Parent, state: t.Trace.State})
	}
	kind := trace.SpanKindProducer // a message handed to a broker
	if t.Target.HTTP != nil {
		kind = trace.SpanKindClient
	}
	ctx, sp := (*tr).Start(ctx, DeliverSpan, trace.WithSpanKind(kind), trace.WithTimestamp(start))
	if sp.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 7)
		attrs = append(attrs,
			AttrTaskID.String(t.ID.String()),
			AttrApp.String(t.App),
			AttrAttempt.Int(t.Attempts),
			AttrTargetKind.String(t.Target.Kind()),
			AttrLatenessMs.Int64(start.Sub(t.NextAttemptAt).Milliseconds()))
		if t.Key != "" {
			attrs = append(attrs, AttrKey.String(t.Key))
		}
		if !t.ScheduleID.IsZero() {
			attrs = append(attrs, AttrScheduleID.String(t.ScheduleID.String()))
		}
		sp.SetAttributes(attrs...)
	}
	return ctx, sp
}

// EndDeliver ends sp, an attempt at t that ended with err (nil:
// delivered); released says the attempt was cut short by a shutdown. A
// nil sp (tracing off) is ignored.
func EndDeliver(sp trace.Span, t *task.Task, err error, released bool) {
	if sp == nil {
		return
	}
	if sp.IsRecording() {
		outcome := "delivered"
		switch {
		case released:
			outcome = "released"
		case err != nil && t.Attempts >= t.Retry.MaxAttempts:
			outcome = "dead"
		case err != nil:
			outcome = "failed"
		}
		sp.SetAttributes(AttrOutcome.String(outcome))
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
	}
	sp.End()
}

// pair is a TextMapCarrier of the two trace context headers, so that
// reading and writing them allocates no map.
type pair struct{ parent, state string }

func (p *pair) Get(key string) string {
	switch key {
	case HeaderTraceParent:
		return p.parent
	case HeaderTraceState:
		return p.state
	}
	return ""
}

func (p *pair) Keys() []string { return []string{HeaderTraceParent, HeaderTraceState} }

func (p *pair) Set(key, value string) {
	switch key {
	case HeaderTraceParent:
		p.parent = value
	case HeaderTraceState:
		p.state = value
	}
}

// Valid reports whether traceparent is a W3C traceparent header that
// names a trace (what an import checks of a task's traceparent).
func Valid(traceparent string) bool {
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), &pair{parent: traceparent})).IsValid()
}
