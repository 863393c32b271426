package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) {
	if os.Getenv(loadgen.EnvGetProbe) == "1" { // TestBenchHot's GET probe: this binary, started again
		if err := RunGetProbe(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// routes are the API's routes as the server registers them.
var routes = []string{
	"POST /v1/tasks",
	"GET /v1/tasks/{id}",
	"DELETE /v1/tasks/{id}",
	"POST /v1/tasks/{id}/retry",
	"GET /v1/apps/{app}/keys/{key}",
	"DELETE /v1/apps/{app}/keys/{key}",
	"GET /v1/apps/{app}/tasks",
	"POST /v1/apps/{app}/tasks:retry",
	"POST /v1/apps/{app}/tasks:cancel",
	"POST /v1/schedules",
	"GET /v1/schedules/{id}",
	"DELETE /v1/schedules/{id}",
	"POST /v1/schedules/{id}/pause",
	"POST /v1/schedules/{id}/resume",
	"GET /v1/schedules/{id}/next",
	"GET /v1/apps/{app}/schedules",
	"GET /v1/apps/{app}/schedules/{key}",
	"DELETE /v1/apps/{app}/schedules/{key}",
	"GET /v1/admin/clock",
	"POST /v1/admin/clock",
}

// request is one request as the fake API received it.
type request struct {
	Pattern string
	Vars    map[string]string
	Query   url.Values
	Header  http.Header
	Body    string
}

type answer struct {
	status int
	body   string
}

// fakeAPI fakes the server's routes: the CLI's job is to map flags to client
// calls, which is what these tests check. The server itself is tested end
// to end elsewhere.
type fakeAPI struct {
	URL string

	mu   sync.Mutex
	reqs []request
}

// newAPI starts a fake API answering each route pattern with answers'
// function; a request to any other route fails the test.
func newAPI(t *testing.T, answers map[string]func(request) answer) *fakeAPI {
	t.Helper()
	a := new(fakeAPI)
	mux := http.NewServeMux()
	for _, pat := range routes {
		mux.HandleFunc(pat, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			req := request{Pattern: r.Pattern, Vars: map[string]string{}, Query: r.URL.Query(), Header: r.Header, Body: string(b)}
			for _, v := range []string{"id", "app", "key"} {
				if x := r.PathValue(v); x != "" {
					req.Vars[v] = x
				}
			}
			a.mu.Lock()
			a.reqs = append(a.reqs, req)
			a.mu.Unlock()
			fn, ok := answers[r.Pattern]
			if !ok {
				t.Errorf("unexpected request %s %s", r.Method, r.URL)
				w.WriteHeader(http.StatusTeapot)
				return
			}
			ans := fn(req)
			if ans.body != "" {
				w.Header().Set("Content-Type", "application/json")
			}
			w.WriteHeader(ans.status)
			io.WriteString(w, ans.body)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

func (a *fakeAPI) requests() []request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]request(nil), a.reqs...)
}

// only returns the one request the API got.
func (a *fakeAPI) only(t *testing.T) request {
	t.Helper()
	r := a.requests()
	if len(r) != 1 {
		t.Fatalf("API got %d requests, want 1: %+v", len(r), r)
	}
	return r[0]
}

func fixed(status int, body string) func(request) answer {
	return func(request) answer { return answer{status, body} }
}

// runCLI runs the command line with env as the environment.
func runCLI(t *testing.T, vars map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	err = run(context.Background(), args, e)
	return out.String(), errb.String(), err
}

func serverEnv(a *fakeAPI) map[string]string { return map[string]string{EnvServer: a.URL} }

var (
	id1 = mustID("01JD8X5C2M0000ABCDEFGHJKMN")
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func mustID(s string) task.ID {
	id, err := task.ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

func sampleTask() *task.Task {
	return &task.Task{
		ID:            id1,
		App:           "billing",
		Key:           "order-42",
		DueAt:         t0,
		NextAttemptAt: t0,
		Payload:       []byte(`{"order":42}`),
		Target:        task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/hook"}},
		State:         task.Scheduled,
		CreatedAt:     t0.Add(-time.Hour),
		UpdatedAt:     t0.Add(-time.Hour),
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkPrintedTask checks that out is want, as indented JSON.
func checkPrintedTask(t *testing.T, out string, want *task.Task) {
	t.Helper()
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(b)+"\n", out); d != "" {
		t.Errorf("stdout mismatch (-want +got):\n%s", d)
	}
}

// checkJSON compares two JSON texts as values.
func checkJSON(t *testing.T, want, got string) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON %q: %v", want, err)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("got %q, not JSON: %v", got, err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("JSON mismatch (-want +got):\n%s", d)
	}
}

// checkUsageError checks that err is a usage error saying want.
func checkUsageError(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v, want a usage error", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to contain %q", err, want)
	}
}

var commandNames = []string{"serve", "schedule", "get", "cancel", "list", "retry", "bulk", "schedules"}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		stdout, stderr, err := runCLI(t, nil, args...)
		if err != nil {
			t.Errorf("%q: err = %v", args, err)
		}
		for _, name := range commandNames {
			if !strings.Contains(stdout, "\n  "+name+" ") {
				t.Errorf("%q: usage does not list %s:\n%s", args, name, stdout)
			}
		}
		if stderr != "" {
			t.Errorf("%q: stderr = %q, want nothing", args, stderr)
		}
	}
}

func TestHelpCommand(t *testing.T) {
	t.Parallel()
	for _, name := range commandNames[1:] { // serve's flags are the lead's
		stdout, stderr, err := runCLI(t, nil, "help", name)
		if err != nil {
			t.Errorf("help %s: err = %v", name, err)
		}
		if !strings.HasPrefix(stdout, "usage: toc "+name+" ") || !strings.Contains(stdout, "-server URL") {
			t.Errorf("help %s: stdout = %q, want the command's usage", name, stdout)
		}
		if stderr != "" {
			t.Errorf("help %s: stderr = %q, want nothing", name, stderr)
		}

		// -h prints the same to stderr.
		stdout, stderr, err = runCLI(t, nil, name, "-h")
		if err != nil || stdout != "" || !strings.HasPrefix(stderr, "usage: toc "+name+" ") {
			t.Errorf("%s -h: err %v, stdout %q, stderr %q; want usage on stderr only", name, err, stdout, stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `help: unknown command "frobnicate"`},
		{[]string{"get", "--bogus"}, "get: flag provided but not defined: -bogus"},
		{[]string{"list", "--limit", "many"}, `list: invalid value "many" for flag -limit`},
	}
	for _, tt := range tests {
		stdout, stderr, err := runCLI(t, nil, tt.args...)
		checkUsageError(t, err, tt.want)
		if stdout != "" {
			t.Errorf("%q: stdout = %q, want nothing", tt.args, stdout)
		}
		if !strings.Contains(stderr, "usage: toc") {
			t.Errorf("%q: stderr = %q, want usage", tt.args, stderr)
		}
	}
}

func TestBadServer(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"localhost:7070", "ftp://x", "http://"} {
		_, _, err := runCLI(t, nil, "get", "--server", server, id1.String())
		checkUsageError(t, err, fmt.Sprintf("get: --server: want an http:// or https:// URL, got %q", server))
		_, _, err = runCLI(t, map[string]string{EnvServer: server}, "get", id1.String())
		checkUsageError(t, err, fmt.Sprintf("get: $TOC_SERVER: want an http:// or https:// URL, got %q", server))
	}
}

func TestServerAndTokenFromEnvAndFlags(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{"GET /v1/tasks/{id}": fixed(200, jsonOf(t, sampleTask()))})
	other := newAPI(t, nil) // gets no request

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantAuth string
	}{
		{"env", map[string]string{EnvServer: a.URL, EnvToken: "from-env"}, []string{"get", id1.String()}, "Bearer from-env"},
		{"flags win", map[string]string{EnvServer: other.URL, EnvToken: "from-env"}, []string{"get", "--server", a.URL, "--token", "from-flag", id1.String()}, "Bearer from-flag"},
		{"flags after the ID", map[string]string{EnvServer: other.URL}, []string{"get", id1.String(), "--server=" + a.URL}, ""},
	}
	for _, tt := range tests {
		before := len(a.requests())
		if _, _, err := runCLI(t, tt.env, tt.args...); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		reqs := a.requests()
		if len(reqs) != before+1 {
			t.Fatalf("%s: API got %d requests, want 1", tt.name, len(reqs)-before)
		}
		if got := reqs[len(reqs)-1].Header.Get("Authorization"); got != tt.wantAuth {
			t.Errorf("%s: Authorization = %q, want %q", tt.name, got, tt.wantAuth)
		}
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("--server did not override $%s: other server got %d requests", EnvServer, n)
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	t.Parallel()
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	tests := []struct {
		args    []string
		wantPos []string
		wantApp string
	}{
		{[]string{"a", "--app", "x", "b"}, []string{"a", "b"}, "x"},
		{[]string{"--app=x", "a"}, []string{"a"}, "x"},
		{[]string{"a", "--", "--app", "x"}, []string{"a", "--app", "x"}, ""},
		{[]string{"-", "--app", "x"}, []string{"-"}, "x"},
		{nil, nil, ""},
	}
	for _, tt := range tests {
		fs := newFlagSet(e, "get", "")
		app := fs.String("app", "", "")
		pos, err := parseFlags(fs, tt.args)
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if d := cmp.Diff(tt.wantPos, pos); d != "" || *app != tt.wantApp {
			t.Errorf("%q: positional (-want +got):\n%s app = %q, want %q", tt.args, d, *app, tt.wantApp)
		}
	}
}

func TestAPIErrorIsNotUsage(t *testing.T) {
	t.Parallel()
	a := newAPI(t, map[string]func(request) answer{
		"GET /v1/tasks/{id}": fixed(404, `{"error":{"code":"not_found","message":"toc: task not found"}}`),
	})
	_, _, err := runCLI(t, serverEnv(a), "get", id1.String())
	if err == nil || errors.Is(err, ErrUsage) {
		t.Fatalf("err = %v, want a non-usage error", err)
	}
	if want := "toc: task not found (HTTP 404, not_found)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}
