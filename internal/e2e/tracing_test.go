package e2e_test

import (
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
)

// otlpSpan is a span as an OTLP/HTTP export carried it.
type otlpSpan struct {
	service                   string
	name                      string
	traceID, spanID, parentID string
	attrs                     map[string]string
}

// otlpServer is an OTLP/HTTP trace endpoint: it decodes each POST
// /v1/traces with OpenTelemetry's own protobuf types and keeps the spans.
type otlpServer struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []otlpSpan
	exports int
	bad     []string
}

func newOTLPServer(t *testing.T) *otlpServer {
	o := &otlpServer{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			o.fail(fmt.Sprintf("%s %s", r.Method, r.URL.Path))
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				o.fail(err.Error())
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			o.fail(err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.exports++
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					sp := otlpSpan{service: service, name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
						spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()),
						attrs: map[string]string{}}
					for _, a := range s.GetAttributes() {
						sp.attrs[a.GetKey()] = anyValue(a.GetValue())
					}
					o.spans = append(o.spans, sp)
				}
			}
		}
		o.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(o.Close)
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, b := range o.bad {
			t.Errorf("OTLP endpoint: %s", b)
		}
	})
	return o
}

func (o *otlpServer) fail(s string) {
	o.mu.Lock()
	o.bad = append(o.bad, s)
	o.mu.Unlock()
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

// find returns the spans for which keep is true.
func (o *otlpServer) find(keep func(otlpSpan) bool) []otlpSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []otlpSpan
	for _, s := range o.spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// env is the environment that points a child's traces at o, flushed
// every 100 ms.
func (o *otlpServer) env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + o.URL, "OTEL_SERVICE_NAME=toc-e2e", "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// callerContext is the trace context of a caller's span: a new trace.
func callerContext(t *testing.T) (traceID, spanID, traceparent string) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return traceID, spanID, "00-" + traceID + "-" + spanID + "-01"
}

// createTraced creates a task at base with body (JSON) and, when
// traceparent is not empty, the trace context headers; it returns the
// task's id.
func createTraced(t *testing.T, base, body, traceparent, tracestate string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/tasks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
		req.Header.Set("tracestate", tracestate)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		ID          string `json:"id"`
		TraceParent string `json:"traceparent"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &got) != nil {
		t.Fatalf("create: %s %s", resp.Status, b)
	}
	return got.ID
}

// traceparentParts splits a traceparent into its trace and span ids.
func traceparentParts(tp string) (traceID, spanID string) {
	p := strings.Split(tp, "-")
	if len(p) != 4 {
		return "", ""
	}
	return p[1], p[2]
}

// checkTrace checks one trace from the create through the attempts to the
// receiver: the create's request span is the child of the caller's span;
// each attempt of task id is a "toc deliver" span in the same trace, the
// child of the create's span, with its attributes; and the receiver got,
// for each attempt, a traceparent of that trace naming the attempt's span
// (received, in the order of the attempts). It waits for the spans.
func checkTrace(t *testing.T, o *otlpServer, traceID, callerSpan, id, kind string, received []string) {
	t.Helper()
	var creates, attempts []otlpSpan
	testkit.WaitFor(t, 20*time.Second, "the create's and the attempts' spans", func() bool {
		creates = o.find(func(s otlpSpan) bool { return s.traceID == traceID && s.name == "POST /v1/tasks" })
		attempts = o.find(func(s otlpSpan) bool { return s.name == "toc deliver" && s.attrs["toc.task.id"] == id })
		return len(creates) == 1 && len(attempts) >= len(received)
	})
	create := creates[0]
	if create.parentID != callerSpan || create.service != "toc-e2e" {
		t.Errorf("create span: parent %s (want the caller's %s), service %q", create.parentID, callerSpan, create.service)
	}
	if len(attempts) != len(received) {
		t.Errorf("%d attempt spans, want %d: %+v", len(attempts), len(received), attempts)
	}
	byAttempt := map[string]otlpSpan{}
	for _, a := range attempts {
		byAttempt[a.attrs["toc.attempt"]] = a
	}
	for i, tp := range received {
		n := strconv.Itoa(i + 1)
		a, ok := byAttempt[n]
		if !ok {
			t.Errorf("no span of attempt %s", n)
			continue
		}
		if a.traceID != traceID || a.parentID != create.spanID {
			t.Errorf("attempt %s: span in trace %s with parent %s, want trace %s and the create's span %s", n, a.traceID, a.parentID, traceID, create.spanID)
		}
		if a.attrs["toc.app"] != "orders" || a.attrs["toc.target.kind"] != kind || a.attrs["toc.task.key"] == "" ||
			a.attrs["toc.outcome"] == "" || a.attrs["toc.lateness_ms"] == "" {
			t.Errorf("attempt %s: attributes %v", n, a.attrs)
		}
		gotTrace, gotSpan := traceparentParts(tp)
		if gotTrace != traceID || gotSpan != a.spanID {
			t.Errorf("attempt %s: the receiver got traceparent %q, want trace %s and the attempt's span %s", n, tp, traceID, a.spanID)
		}
	}
}

// traceHooks is a webhook receiver that keeps the traceparent and
// tracestate of each push and answers 503 to the first push of each task.
type traceHooks struct {
	*httptest.Server
	mu     sync.Mutex
	parent map[string][]string // task id → traceparent of each push
	state  map[string][]string
}

func newTraceHooks(t *testing.T) *traceHooks {
	h := &traceHooks{parent: map[string][]string{}, state: map[string][]string{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Toc-Task-Id")
		h.mu.Lock()
		h.parent[id] = append(h.parent[id], r.Header.Get("traceparent"))
		h.state[id] = append(h.state[id], r.Header.Get("tracestate"))
		n := len(h.parent[id])
		h.mu.Unlock()
		if n == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *traceHooks) pushes(id string) (parents, states []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.parent[id]...), append([]string(nil), h.state[id]...)
}

const retryFast = `"retry":{"max_attempts":3,"min_backoff":"20ms","max_backoff":"50ms"}`

// traceHTTP runs the HTTP case against the toc at base (exporting to o): a
// create with a traceparent, an attempt answered 503 and one delivered,
// all in the caller's trace.
func traceHTTP(t *testing.T, o *otlpServer, base string) {
	hooks := newTraceHooks(t)
	traceID, callerSpan, tp := callerContext(t)
	id := createTraced(t, base, `{"app":"orders","key":"t-http","delay":"0s","payload":{"n":1},`+retryFast+
		`,"target":{"http":{"url":"`+hooks.URL+`"}}}`, tp, "e2e=1")
	var parents, states []string
	testkit.WaitFor(t, 20*time.Second, "two pushes", func() bool {
		parents, states = hooks.pushes(id)
		return len(parents) >= 2
	})
	for i, s := range states {
		if s != "e2e=1" {
			t.Errorf("push %d: tracestate %q, want the caller's", i+1, s)
		}
	}
	checkTrace(t, o, traceID, callerSpan, id, "http", parents)
}

// TestTracingHTTP: with OTEL_EXPORTER_OTLP_ENDPOINT set, a create with a
// traceparent, its failed first attempt and its delivered second one are
// one trace, exported by OTLP/HTTP, and each push carries a traceparent
// naming its attempt's span.
func TestTracingHTTP(t *testing.T) {
	o := newOTLPServer(t)
	c := startChildEnv(t, o.env(), t.TempDir())
	traceHTTP(t, o, c.url)
}

// TestTracingCluster is TestTracingHTTP on two cluster nodes (PostgreSQL
// + Redis): the create goes to one, the trace context travels in the SQL
// record to whichever node delivers.
func TestTracingCluster(t *testing.T) {
	env := newClusterEnv(t)
	o := newOTLPServer(t)
	a := startChildEnv(t, o.env(), t.TempDir(), env.flags()...)
	startChildEnv(t, o.env(), t.TempDir(), env.flags()...)
	traceHTTP(t, o, a.url)
}

// TestTracingAMQP: a message published to RabbitMQ carries the attempt's
// traceparent (and the caller's tracestate) as headers.
func TestTracingAMQP(t *testing.T) {
	url := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	ch, exchange, queue := rabbitQueue(t, url, "orders")
	o := newOTLPServer(t)
	c := startChildEnv(t, o.env(), t.TempDir(), "--amqp", url)
	traceID, callerSpan, tp := callerContext(t)
	id := createTraced(t, c.url, `{"app":"orders","key":"t-amqp","delay":"0s","target":{"amqp":{"exchange":"`+exchange+`"}}}`, tp, "e2e=1")
	var got string
	testkit.WaitFor(t, 20*time.Second, "the message", func() bool {
		msg, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return false
		}
		got, _ = msg.Headers["traceparent"].(string)
		if s, _ := msg.Headers["tracestate"].(string); s != "e2e=1" {
			t.Errorf("tracestate %q, want the caller's", s)
		}
		return true
	})
	checkTrace(t, o, traceID, callerSpan, id, "amqp", []string{got})
}

// natsStream makes a JetStream stream of the test's own that captures a
// subject of its own, and returns it with the subject.
func natsStream(t *testing.T) (jetstream.Stream, string) {
	url := cmp.Or(os.Getenv("TOC_NATS_URL"), "nats://127.0.0.1:4222")
	const start = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		testsvc.Missing(t, "NATS", url, start, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.AccountInfo(ctx); err != nil {
		testsvc.Missing(t, "NATS JetStream", url, start+" (with -js)", err)
	}
	tok := testsvc.Token()
	subject := "toc.e2e." + tok
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "toc-e2e-" + tok, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(context.Background(), "toc-e2e-"+tok); err != nil {
			t.Errorf("delete stream: %v", err)
		}
	})
	return stream, subject
}

// TestTracingNATS: a message published to JetStream carries the attempt's
// traceparent as a header.
func TestTracingNATS(t *testing.T) {
	stream, subject := natsStream(t)
	o := newOTLPServer(t)
	c := startChildEnv(t, o.env(), t.TempDir(), "--nats", cmp.Or(os.Getenv("TOC_NATS_URL"), "nats://127.0.0.1:4222"))
	traceID, callerSpan, tp := callerContext(t)
	id := createTraced(t, c.url, `{"app":"orders","key":"t-nats","delay":"0s","target":{"nats":{"subject":"`+subject+`"}}}`, tp, "e2e=1")
	var got string
	testkit.WaitFor(t, 20*time.Second, "the message", func() bool {
		msg, err := stream.GetLastMsgForSubject(context.Background(), subject)
		if err != nil {
			return false
		}
		got = msg.Header.Get("traceparent")
		if s := msg.Header.Get("tracestate"); s != "e2e=1" {
			t.Errorf("tracestate %q, want the caller's", s)
		}
		return true
	})
	checkTrace(t, o, traceID, callerSpan, id, "nats", []string{got})
}

// TestTracingOff: with tracing off (OTEL_SDK_DISABLED=true beside an
// endpoint; no OTEL_* variable at all is the same) nothing is exported, a
// task created with a traceparent passes it on unchanged (toc makes no
// span of its own), and a task created without one is pushed without one:
// toc invents no trace.
func TestTracingOff(t *testing.T) {
	o := newOTLPServer(t)
	c := startChildEnv(t, append(o.env(), "OTEL_SDK_DISABLED=true"), t.TempDir())
	hooks := newTraceHooks(t)
	_, _, tp := callerContext(t)
	traced := createTraced(t, c.url, `{"app":"orders","key":"off-1","delay":"0s",`+retryFast+`,"target":{"http":{"url":"`+hooks.URL+`"}}}`, tp, "e2e=1")
	plain := createTraced(t, c.url, `{"app":"orders","key":"off-2","delay":"0s",`+retryFast+`,"target":{"http":{"url":"`+hooks.URL+`"}}}`, "", "")
	testkit.WaitFor(t, 20*time.Second, "two pushes of each task", func() bool {
		a, _ := hooks.pushes(traced)
		b, _ := hooks.pushes(plain)
		return len(a) >= 2 && len(b) >= 2
	})
	parents, states := hooks.pushes(traced)
	for i := range parents {
		if parents[i] != tp || states[i] != "e2e=1" {
			t.Errorf("push %d of the traced task: traceparent %q tracestate %q, want the caller's %q, e2e=1", i+1, parents[i], states[i], tp)
		}
	}
	parents, states = hooks.pushes(plain)
	for i := range parents {
		if parents[i] != "" || states[i] != "" {
			t.Errorf("push %d of a task created without a trace: traceparent %q tracestate %q, want none", i+1, parents[i], states[i])
		}
	}
	// The server has ended its attempts' work; stop it, which would flush
	// any span buffered, and look.
	if err, _ := c.terminate(t); err != nil {
		t.Fatalf("toc serve: %v\n%s", err, c.stderr)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exports != 0 || len(o.spans) != 0 {
		t.Errorf("tracing off exported %d times, %d spans", o.exports, len(o.spans))
	}
}
