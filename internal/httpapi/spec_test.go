package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
)

// specRouter finds the spec's operation of a request (loaded once).
var specRouter = sync.OnceValues(func() (routers.Router, error) {
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec())
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	doc.Servers = nil // match the test server's host
	return legacy.NewRouter(doc)
})

// httpHeaders are the answer headers of HTTP itself, which the spec does
// not declare.
var httpHeaders = []string{"Content-Type", "Content-Length", "Date", "Accept-Ranges", "Transfer-Encoding"}

// maxChecked is the most of an answer's body kept for the check; a longer
// body (a backup, an export) has its status and headers checked only.
const maxChecked = 1 << 20

// specChecked serves next (wrapped as the server wraps the API, with request
// ids) and checks every answer the behaviour suite gets from a route of
// internal/openapi's spec against the spec: its status is one the
// operation names, and its headers and body match. The requests are not
// checked: the suite sends bad ones on purpose. What does not match fails
// t when the test ends.
func specChecked(t *testing.T, next http.Handler, log *slog.Logger) http.Handler {
	t.Helper()
	router, err := specRouter()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failures []string
	// Registered before the server's own cleanup, so it runs after the
	// server stopped serving.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range failures {
			t.Errorf("an answer the OpenAPI description does not describe: %s", f)
		}
	})
	next = reqlog.RequestID(next, log)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := router.FindRoute(r)
		if err != nil || r.Method == http.MethodHead || slices.Contains(slices.Collect(maps.Values(params)), "") {
			// Not a route of the spec: an unknown path, a method the path
			// has not (405, checked by internal/openapi), or an empty path
			// parameter (kin-openapi's router takes /v1/tasks for
			// /v1/tasks/{id}; ServeMux does not).
			next.ServeHTTP(w, r)
			return
		}
		rec := &teeWriter{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if err := checkAnswer(r, route, params, rec); err != nil {
			mu.Lock()
			failures = append(failures, err.Error())
			mu.Unlock()
		}
	})
}

func checkAnswer(r *http.Request, route *routers.Route, params map[string]string, rec *teeWriter) error {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	what := fmt.Sprintf("%s %s: %d", r.Method, r.URL.Path, status)
	if route.Operation.Responses.Status(status) == nil {
		return fmt.Errorf("%s: the status is not among the operation's responses: %s", what, truncated(rec.body.Bytes()))
	}
	declared := route.Operation.Responses.Status(status).Value.Headers
	for h := range rec.Header() {
		isIt := func(name string) bool { return strings.EqualFold(name, h) }
		if !slices.Contains(httpHeaders, h) && !slices.ContainsFunc(slices.Collect(maps.Keys(declared)), isIt) &&
			!slices.ContainsFunc(rec.Header().Values("Trailer"), isIt) {
			return fmt.Errorf("%s: sends %s: %q, which the spec does not declare", what, h, rec.Header().Get(h))
		}
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{ExcludeResponseBody: rec.long, IncludeResponseStatus: true, MultiError: true},
	}
	header := rec.Header().Clone()
	if len(header.Values("Trailer")) > 0 {
		// The trailers' values are set in the header map after the body.
		for _, k := range header.Values("Trailer") {
			header.Del(k)
		}
	}
	err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options:                in.Options,
	})
	if err != nil {
		return fmt.Errorf("%s: %v\nbody: %s", what, err, truncated(rec.body.Bytes()))
	}
	return nil
}

func truncated(b []byte) string {
	if len(b) > 1000 {
		return string(b[:1000]) + "…"
	}
	return string(b)
}

// teeWriter passes an answer on and keeps its status and (up to
// maxChecked bytes of) its body.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	long   bool
}

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(b) > maxChecked {
		w.long = true
	} else {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// write deadlines of the streamed answers).
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
