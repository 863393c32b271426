package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ShutdownTimeout bounds the flush of the spans still buffered when the
// server stops.
const ShutdownTimeout = 5 * time.Second

// Enabled reports whether the environment (getenv, os.Getenv when nil)
// asks for traces: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER is otlp, and
// neither OTEL_SDK_DISABLED is true nor OTEL_TRACES_EXPORTER none.
func Enabled(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	if disabled, _ := strconv.ParseBool(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); disabled {
		return false
	}
	switch strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Start turns tracing on when the environment asks for it (Enabled): spans
// are batched and exported by OTLP over HTTP, as the standard OTEL_*
// variables say (endpoint, headers, timeout, OTEL_SERVICE_NAME, default
// "toc", OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its argument,
// default parentbased_always_on). Otherwise it does nothing. The returned
// stop flushes the spans still buffered (within ShutdownTimeout) and turns
// tracing off; call it once the server and its deliveries have stopped.
func Start(ctx context.Context, log *slog.Logger) (stop func(), err error) {
	if !Enabled(nil) {
		return func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter from OTEL_EXPORTER_OTLP_*: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("toc")), // unless OTEL_SERVICE_NAME says otherwise
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing", slog.String("error", err.Error()))
	}))
	restore := Use(tp)
	log.Info("tracing on: exporting spans by OTLP/HTTP", slog.String("service", serviceName(res)))
	return func() {
		restore()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: flush the last spans", slog.String("error", err.Error()))
		}
	}, nil
}

func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

// worthSpan reports whether a request is worth a span: not the probes, the
// metrics scrape or the dashboard's files, which would fill a trace store
// with noise.
func worthSpan(r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == "/healthz", p == "/readyz", p == "/metrics", strings.HasPrefix(p, "/ui/"):
		return false
	}
	return true
}

// Handler makes each request to h (but probes, metrics and the
// dashboard's files) a server span, a child of the caller's
// traceparent, named after its route (route returns the pattern r goes
// to, "" for none) when tracing is on; it returns h itself when off.
func Handler(h http.Handler, route func(*http.Request) string) http.Handler {
	if !On() {
		return h
	}
	return otelhttp.NewHandler(h, "toc api", otelhttp.WithFilter(worthSpan), otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if route != nil {
			if p := route(r); p != "" {
				return p
			}
		}
		return r.Method
	}))
}
