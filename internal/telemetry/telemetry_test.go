package telemetry

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toc-dev/toc/task"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "toc"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		if got := Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("Enabled(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

func TestFromRequest(t *testing.T) {
	restore := Use(nil)
	defer restore()
	for _, tt := range []struct {
		name               string
		header             map[string]string
		wantParent, wantTS string
	}{
		{"none", nil, "", ""},
		{"valid", map[string]string{"traceparent": parent, "tracestate": state}, parent, state},
		{"no state", map[string]string{"traceparent": parent}, parent, ""},
		{"invalid", map[string]string{"traceparent": "00-zz-00f067aa0ba902b7-01", "tracestate": state}, "", ""},
		{"zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "", ""},
		{"state alone", map[string]string{"tracestate": state}, "", ""},
	} {
		r := httptest.NewRequest("POST", "/v1/tasks", nil)
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		tp, ts := FromRequest(r)
		if tp != tt.wantParent || ts != tt.wantTS {
			t.Errorf("%s: FromRequest = %q, %q; want %q, %q", tt.name, tp, ts, tt.wantParent, tt.wantTS)
		}
	}

	// A request span in the context (tracing on: otelhttp's) wins: the
	// tasks are its children.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	r := httptest.NewRequest("POST", "/v1/tasks", nil)
	r.Header.Set("traceparent", parent)
	r = r.WithContext(trace.ContextWithSpanContext(r.Context(), sc))
	if tp, _ := FromRequest(r); tp != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Errorf("FromRequest with a span in the context = %q, want the span's", tp)
	}
}

func traced() *task.Task {
	due := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return &task.Task{
		ID: new(task.IDGenerator).New(due, 0), App: "billing", Key: "invoice-42", Attempts: 2,
		NextAttemptAt: due, Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://x"}},
		Retry: task.RetryPolicy{MaxAttempts: 2},
		Trace: &task.TraceContext{Parent: parent, State: state},
	}
}

// TestDeliverOff checks that with tracing off an attempt costs nothing: no
// span, the context unchanged, no allocation, and the delivery passes on
// the create's trace context as it was (none for a task without one).
func TestDeliverOff(t *testing.T) {
	restore := Use(nil)
	defer restore()
	tk := traced()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		dctx, sp := StartDeliver(ctx, tk, time.Now())
		if sp != nil || dctx != ctx {
			t.Fatal("StartDeliver made a span with tracing off")
		}
		tp, ts := Outgoing(dctx, tk)
		if tp != parent || ts != state {
			t.Fatalf("Outgoing = %q, %q; want the task's", tp, ts)
		}
		EndDeliver(sp, tk, nil, false)
	})
	if allocs != 0 {
		t.Errorf("an attempt with tracing off allocates %v times, want 0", allocs)
	}
	if tp, ts := Outgoing(ctx, &task.Task{}); tp != "" || ts != "" {
		t.Errorf("Outgoing of a task without a trace context = %q, %q; want none", tp, ts)
	}
}

func TestDeliverOn(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	restore := Use(tp)
	defer restore()

	tk := traced()
	start := tk.NextAttemptAt.Add(1500 * time.Millisecond)
	ctx, sp := StartDeliver(context.Background(), tk, start)
	out, outState := Outgoing(ctx, tk)
	EndDeliver(sp, tk, errors.New("503 Service Unavailable"), false)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != DeliverSpan {
		t.Errorf("span name %q, want %q", s.Name(), DeliverSpan)
	}
	if got := s.Parent().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("parent trace %s, want the task's", got)
	}
	if got := s.Parent().SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("parent span %s, want the task's", got)
	}
	if s.SpanContext().TraceID() != s.Parent().TraceID() {
		t.Error("the attempt's span is not in the task's trace")
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext().SpanID().String() + "-01"; out != want {
		t.Errorf("Outgoing = %q, want the attempt span's %q", out, want)
	}
	if outState != state {
		t.Errorf("Outgoing tracestate = %q, want %q", outState, state)
	}
	want := map[attribute.Key]attribute.Value{
		AttrTaskID: attribute.StringValue(tk.ID.String()), AttrApp: attribute.StringValue("billing"),
		AttrKey: attribute.StringValue("invoice-42"), AttrAttempt: attribute.IntValue(2),
		AttrTargetKind: attribute.StringValue("http"), AttrOutcome: attribute.StringValue("dead"),
		AttrLatenessMs: attribute.Int64Value(1500),
	}
	got := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		got[a.Key] = a.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, got[k].Emit(), v.Emit())
		}
	}
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "503") {
		t.Errorf("status %v, want an error naming the failure", s.Status())
	}
	if !s.StartTime().Equal(start) {
		t.Errorf("span starts at %v, want the attempt's start %v", s.StartTime(), start)
	}

	// A task without a trace context: a new trace, and its context goes out.
	ctx, sp = StartDeliver(context.Background(), &task.Task{App: "a", Target: task.Target{NATS: &task.NATSTarget{Subject: "s"}}}, start)
	out, _ = Outgoing(ctx, &task.Task{})
	EndDeliver(sp, &task.Task{}, nil, false)
	if s := rec.Ended()[1]; s.Parent().IsValid() || !strings.Contains(out, s.SpanContext().TraceID().String()) || s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("attempt of a task without a trace: parent %v, kind %v, outgoing %q", s.Parent(), s.SpanKind(), out)
	}
}

func TestValid(t *testing.T) {
	if !Valid(parent) || Valid("") || Valid("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01") {
		t.Error("Valid is wrong")
	}
}

// BenchmarkDeliverSpan is what tracing adds to one attempt: its span
// started and ended and the context a delivery carries, off (no provider:
// the default) and on (an SDK provider that records and samples every
// span, with no processor: the exporter's cost is left out).
//
//	go test -run '^$' -bench DeliverSpan -benchmem ./internal/telemetry/
func BenchmarkDeliverSpan(b *testing.B) {
	tk := traced()
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"on", sdktrace.NewTracerProvider()}, // recording, sampled, exported nowhere
	} {
		b.Run(bc.name, func(b *testing.B) {
			restore := Use(bc.tp)
			defer restore()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				dctx, sp := StartDeliver(ctx, tk, tk.NextAttemptAt)
				if tp, _ := Outgoing(dctx, tk); tp == "" {
					b.Fatal("no traceparent")
				}
				EndDeliver(sp, tk, nil, false)
			}
		})
	}
}
