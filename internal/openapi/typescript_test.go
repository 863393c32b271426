package openapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// toolsDir holds the npm project of the checks in other languages.
const toolsDir = "../../tools/openapi"

// TestTypeScriptClient generates TypeScript types from openapi.json with
// openapi-typescript, type-checks tools/openapi/client.ts against them with
// tsc (strict), and runs the compiled program with Node against a real
// server: it creates, gets, patches, cancels, claims and acks. Its traffic
// goes through a proxy that validates every request and answer against the
// spec. It needs node, npm and tools/openapi/node_modules (npm ci in that
// folder): without them it skips, and fails under CI=true (.ci/run installs
// them).
func TestTypeScriptClient(t *testing.T) {
	node := needNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// npm run build: openapi-typescript, then tsc.
	build := exec.CommandContext(ctx, "npm", "run", "--silent", "build")
	build.Dir = toolsDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build (openapi-typescript, tsc) in %s: %v\n%s", toolsDir, err, out)
	}

	s := startStack(t)
	v := newValidatingProxy(t, s.url)
	run := exec.CommandContext(ctx, node, "dist/client.js")
	run.Dir = toolsDir
	run.Env = append(os.Environ(), "TOC_URL="+v.url, "TOC_TOKEN="+adminToken, "TOC_APP=ts")
	out, err := run.CombinedOutput()
	t.Logf("node dist/client.js:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client failed against the server: %v", err)
	}
	for _, e := range v.failures() {
		t.Error(e)
	}
	if v.count() < 10 {
		t.Errorf("the proxy saw %d exchanges; the client makes more", v.count())
	}
}

// needNode returns node's path, or skips (fails under CI=true) when node,
// npm or the npm packages of tools/openapi are missing.
func needNode(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; .ci/run installs the packages (npm ci in tools/openapi)", what)
		}
		t.Skipf("%s; to run this test: cd tools/openapi && npm ci", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm is not installed")
	}
	for _, bin := range []string{"openapi-typescript", "tsc"} {
		if _, err := os.Stat(filepath.Join(toolsDir, "node_modules", ".bin", bin)); err != nil {
			missing(bin + " is not in tools/openapi/node_modules")
		}
	}
	return node
}

// validatingProxy forwards requests to a server and validates each request
// and its answer against the spec, keeping what does not match.
type validatingProxy struct {
	url    string
	router routers.Router
	mu     struct {
		sync.Mutex
		failures []string
		count    int
	}
}

func newValidatingProxy(t *testing.T, target string) *validatingProxy {
	t.Helper()
	doc := loadSpec(t)
	doc.Servers = openapi3.Servers{} // match any host: the proxy's
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	v := &validatingProxy{router: router}
	proxy := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		in, err := v.validateRequest(r, body)
		if err != nil {
			v.fail(err.Error())
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		resp := rec.Result()
		if in != nil {
			if err := v.validateResponse(in, resp, rec.Body.Bytes()); err != nil {
				v.fail(err.Error())
			}
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(hs.Close)
	v.url = hs.URL
	return v
}

func (v *validatingProxy) validateRequest(r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	v.mu.Lock()
	v.mu.count++
	v.mu.Unlock()
	probe := r.Clone(r.Context())
	probe.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := v.router.FindRoute(probe)
	if err != nil {
		return nil, fmt.Errorf("%s %s: not in the spec: %v", r.Method, r.URL.Path, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return in, fmt.Errorf("%s %s %s: the request does not match the spec: %v", r.Method, r.URL.Path, truncate(body), err)
	}
	return in, nil
}

func (v *validatingProxy) validateResponse(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) error {
	what := in.Request.Method + " " + in.Request.URL.Path
	var errs []error
	if in.Route.Operation.Responses.Status(resp.StatusCode) == nil {
		errs = append(errs, fmt.Errorf("status %d is not among the operation's responses", resp.StatusCode))
	}
	err := openapi3filter.ValidateResponse(in.Request.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                in.Options,
	})
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: the answer (%d) does not match the spec: %v\nbody: %s", what, resp.StatusCode, err, truncate(body))
	}
	return nil
}

func (v *validatingProxy) fail(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mu.failures = append(v.mu.failures, msg)
}

func (v *validatingProxy) failures() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.mu.failures...)
}

func (v *validatingProxy) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mu.count
}
