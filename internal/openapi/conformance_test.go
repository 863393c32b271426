package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec())
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	return doc
}

// operations lists the spec's operations as "METHOD /path".
func operations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// call is one request of the conformance test.
type call struct {
	op     string            // the spec's operation: "PATCH /v1/tasks/{id}"
	params map[string]string // path parameters
	query  string
	token  string // default adminToken; "-" for none
	body   string // JSON, "" for none
	ctype  string // the body's content type; default application/json
	header http.Header
	// invalid marks a request that breaks the spec on purpose (an error
	// case): the spec must refuse it too.
	invalid bool
	want    int
}

// checker sends calls to the server and validates them and their answers
// against the spec, noting which operations and statuses were seen.
type checker struct {
	t    *testing.T
	doc  *openapi3.T
	base string
	seen map[string][]int // operation → statuses
}

func (c *checker) do(cl call) []byte {
	c.t.Helper()
	method, tmpl, _ := strings.Cut(cl.op, " ")
	item := c.doc.Paths.Value(tmpl)
	if item == nil || item.GetOperation(method) == nil {
		c.t.Fatalf("%s: not in the spec", cl.op)
	}
	path := tmpl
	for k, v := range cl.params {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	u := c.base + path
	if cl.query != "" {
		u += "?" + cl.query
	}
	newReq := func() *http.Request {
		var body io.Reader
		if cl.body != "" {
			body = strings.NewReader(cl.body)
		}
		req, err := http.NewRequest(method, u, body)
		if err != nil {
			c.t.Fatal(err)
		}
		if cl.body != "" {
			req.Header.Set("Content-Type", cmpOr(cl.ctype, "application/json"))
		}
		for k, vs := range cl.header {
			req.Header[k] = vs
		}
		switch tok := cmpOr(cl.token, adminToken); tok {
		case "-":
		default:
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		return req
	}
	route := &routers.Route{Spec: c.doc, Path: tmpl, PathItem: item, Method: method, Operation: item.GetOperation(method)}
	in := &openapi3filter.RequestValidationInput{
		Request: newReq(), PathParams: cl.params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true},
	}
	// A request the spec allows must be valid, and one the test breaks on
	// purpose must break the spec too: the spec is as strict as the server.
	switch err := openapi3filter.ValidateRequest(context.Background(), in); {
	case err != nil && !cl.invalid:
		c.t.Errorf("%s %s: the request does not match the spec: %v", cl.op, truncate([]byte(cl.body)), err)
	case err == nil && cl.invalid:
		c.t.Errorf("%s %s?%s %s: the spec allows a request meant to break it", cl.op, path, cl.query, truncate([]byte(cl.body)))
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		c.t.Fatalf("%s: %v", cl.op, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.seen[cl.op] = append(c.seen[cl.op], resp.StatusCode)
	if resp.StatusCode != cl.want {
		c.t.Errorf("%s %s %s: status %d, want %d: %s", cl.op, path, cl.body, resp.StatusCode, cl.want, body)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		c.t.Errorf("%s: no X-Request-Id in the answer", cl.op)
	}
	// Only a status the operation names is described: default stands for
	// the statuses toc does not answer on this route (and 405, checked
	// by TestMethodNotAllowed).
	if item.GetOperation(method).Responses.Status(resp.StatusCode) == nil {
		c.t.Errorf("%s: status %d is not among the operation's responses", cl.op, resp.StatusCode)
	}
	// Every header toc sends is declared (beyond those of HTTP itself).
	if r := item.GetOperation(method).Responses.Status(resp.StatusCode); r != nil {
		for h := range resp.Header {
			declared := func(name string) bool { return strings.EqualFold(name, h) }
			if !slices.Contains(httpHeaders, h) && !slices.ContainsFunc(slices.Collect(maps.Keys(r.Value.Headers)), declared) {
				c.t.Errorf("%s: answer %d sends %s: %q, which the spec does not declare", cl.op, resp.StatusCode, h, resp.Header.Get(h))
			}
		}
	}
	// net/http moves the Trailer header that announced trailers to
	// resp.Trailer's keys; the spec declares it as sent.
	header := resp.Header.Clone()
	for k := range resp.Trailer {
		header.Add("Trailer", k)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                in.Options,
	})
	if err != nil {
		c.t.Errorf("%s %s: the answer (%d) does not match the spec: %v\nbody: %s", cl.op, path, resp.StatusCode, err, truncate(body))
	}
	return body
}

// httpHeaders are the answer headers of HTTP itself, which the spec does
// not declare.
var httpHeaders = []string{"Content-Type", "Content-Length", "Date", "Accept-Ranges", "Transfer-Encoding"}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// taskOf decodes a task from an answer.
func (c *checker) taskOf(body []byte) *task.Task {
	c.t.Helper()
	var tk task.Task
	if err := json.Unmarshal(body, &tk); err != nil {
		c.t.Fatalf("decode task: %v: %s", err, body)
	}
	return &tk
}

// waitState polls GET /v1/tasks/{id} (outside the checker) until the task
// is in state.
func waitState(t *testing.T, base string, id task.ID, state task.State) {
	t.Helper()
	var tk task.Task
	defer func() {
		if t.Failed() {
			t.Logf("task %s: state %s, want %s", id, tk.State, state)
		}
	}()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("task %s to be %s", id, state), func() bool {
		req, _ := http.NewRequest("GET", base+"/v1/tasks/"+id.String(), nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		tk = task.Task{}
		err = json.NewDecoder(resp.Body).Decode(&tk)
		resp.Body.Close()
		return err == nil && tk.State == state
	})
}

// TestConformance sends real requests, successes and errors, for every
// operation of the spec to a real server, and validates each request and
// answer (status, headers, body) against the spec.
func TestConformance(t *testing.T) {
	doc := loadSpec(t)
	s := startStack(t)
	c := &checker{t: t, doc: doc, base: s.url, seen: map[string][]int{}}
	ok := receiver(t, http.StatusNoContent)
	failing := receiver(t, http.StatusInternalServerError)
	target := func(u string) string { return `{"http":{"url":"` + u + `","headers":{"X-Team":"pay"},"timeout":"5s"}}` }
	create := func(app, key, rest string) *task.Task {
		t.Helper()
		k := ""
		if key != "" {
			k = `"key":"` + key + `",`
		}
		return c.taskOf(c.do(call{op: "POST /v1/tasks", body: `{"app":"` + app + `",` + k + rest + `}`, want: http.StatusCreated}))
	}
	id := func(tk *task.Task) map[string]string { return map[string]string{"id": tk.ID.String()} }
	later := `"delay":"1h","payload":{"order":1234},"target":` + target(ok)

	// Tasks in every state the cases need.
	sched := create("shop", "order-1", later+`,"deadline":"2099-01-02T03:04:05.678Z","retry":{"max_attempts":3,"min_backoff":"1s","max_backoff":"1m"}`)
	create("shop", "order/2", `"due_at":"2099-01-01T00:00:00Z","payload_base64":"AAEC/w==","target":`+target(ok))
	delivered := create("shop", "order-3", `"delay":"0s","payload":[1,2,3],"target":`+target(ok))
	dead := create("billing", "refund-1", `"delay":"0s","target":`+target(failing)+`,"retry":{"max_attempts":1}`)
	billing := create("billing", "refund-2", later)
	waitState(t, s.url, delivered.ID, task.Delivered)
	waitState(t, s.url, dead.ID, task.Dead)
	create("shop", "promo-1", later) // for the bulk cancel below
	create("shop", "promo-2", later)
	const bulkRetry, bulkCancel = "POST /v1/apps/{app}/tasks:retry", "POST /v1/apps/{app}/tasks:cancel"
	shopApp, billingApp := map[string]string{"app": "shop"}, map[string]string{"app": "billing"}
	padded := func(body string) string { return body[:len(body)-1] + strings.Repeat(" ", 70_000) + "}" } // over the 64 KiB body cap

	cases := []call{
		// POST /v1/tasks
		{op: "POST /v1/tasks", body: `{"app":"shop","key":"order-1","delay":"1h","target":` + target(ok) + `}`, want: 200},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"soon","target":` + target(ok) + `}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","color":"blue"}`, invalid: true, want: 400},
		// The exactly-one rules: the spec refuses what the server refuses.
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","due_at":"2099-01-01T00:00:00Z","target":` + target(ok) + `}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","target":` + target(ok) + `}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","payload":1,"payload_base64":"AQ==","target":` + target(ok) + `}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","target":{"pull":{},"http":{"url":"` + ok + `"}}}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","target":{}}`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop"`, invalid: true, want: 400},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","target":` + target(ok) + `}`, token: "-", want: 401},
		{op: "POST /v1/tasks", body: `{"app":"billing","delay":"1s","target":` + target(ok) + `}`, token: shopToken, want: 403},
		{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","payload_base64":"` + strings.Repeat("A", 100_000) + `","target":` + target(ok) + `}`, want: 413},

		// POST /v1/tasks:batch
		{op: "POST /v1/tasks:batch", body: `{"tasks":[{"app":"shop","key":"b-1","delay":"1h","target":` + target(ok) + `},{"app":"shop","key":"order-1","delay":"1h","target":` + target(ok) + `}]}`, want: 200},
		{op: "POST /v1/tasks:batch", body: `{"tasks":[{"app":"shop","key":"b-2","delay":"1h","target":` + target(ok) + `},{"app":"Bad App","delay":"1h"}]}`, invalid: true, want: 200},
		{op: "POST /v1/tasks:batch", body: `{"tasks":[{"app":"shop","key":"b-3","delay":"1h","target":` + target(ok) + `},{"app":"shop","key":"b-1","delay":"1h","target":` + target(ok) + `}]}`,
			header: http.Header{"Prefer": {"return=minimal"}}, want: 200},
		{op: "POST /v1/tasks:batch", body: `{}`, invalid: true, want: 400},
		{op: "POST /v1/tasks:batch", body: `{"tasks":[]}`, token: "-", want: 401},

		// GET /v1/tasks/{id}
		{op: "GET /v1/tasks/{id}", params: id(sched), want: 200},
		{op: "GET /v1/tasks/{id}", params: id(dead), want: 200},
		{op: "GET /v1/tasks/{id}", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, want: 404},
		{op: "GET /v1/tasks/{id}", params: map[string]string{"id": "nope"}, want: 404},
		{op: "GET /v1/tasks/{id}", params: id(billing), token: shopToken, want: 404},
		{op: "GET /v1/tasks/{id}", params: id(sched), token: "wrong", want: 401},

		// PATCH /v1/tasks/{id}
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"delay":"2h","payload":{"order":1234,"v":2}}`, want: 200},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"deadline":null}`, want: 200},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"deadline":"2099-02-03T04:05:06Z","payload_base64":"aGk="}`, want: 200},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{}`, invalid: true, want: 400},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"due_at":"tomorrow"}`, invalid: true, want: 400},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"due_at":"2099-01-01T00:00:00Z","delay":"1h"}`, invalid: true, want: 400},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"payload":1,"payload_base64":"AQ=="}`, invalid: true, want: 400},
		{op: "PATCH /v1/tasks/{id}", params: id(delivered), body: `{"delay":"1h"}`, want: 409},
		{op: "PATCH /v1/tasks/{id}", params: id(billing), body: `{"delay":"1h"}`, token: shopToken, want: 404},
		{op: "PATCH /v1/tasks/{id}", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, body: `{"delay":"1h"}`, want: 404},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"payload_base64":"` + strings.Repeat("A", 100_000) + `"}`, want: 413},
		{op: "PATCH /v1/tasks/{id}", params: id(sched), body: `{"delay":"1h"}`, token: "-", want: 401},

		// POST /v1/tasks/{id}/retry
		{op: "POST /v1/tasks/{id}/retry", params: id(sched), want: 409},
		{op: "POST /v1/tasks/{id}/retry", params: id(billing), token: shopToken, want: 404},
		{op: "POST /v1/tasks/{id}/retry", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, want: 404},
		{op: "POST /v1/tasks/{id}/retry", params: id(dead), token: "-", want: 401},
		{op: "POST /v1/tasks/{id}/retry", params: id(dead), want: 200}, // fails again: dead once more

		// GET /v1/apps/{app}
		{op: "GET /v1/apps/{app}", params: map[string]string{"app": "shop"}, token: shopToken, want: 200},
		{op: "GET /v1/apps/{app}", params: map[string]string{"app": "Not An App"}, invalid: true, want: 400},
		{op: "GET /v1/apps/{app}", params: map[string]string{"app": "billing"}, token: shopToken, want: 403},
		{op: "GET /v1/apps/{app}", params: map[string]string{"app": "shop"}, token: "-", want: 401},

		// GET and DELETE /v1/apps/{app}/keys/{key}
		{op: "GET /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order/2"}, want: 200},
		{op: "GET /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order-1"}, token: shopToken, want: 200},
		{op: "GET /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "nobody"}, want: 404},
		{op: "GET /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "billing", "key": "refund-2"}, token: shopToken, want: 404},
		{op: "GET /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order-1"}, token: "-", want: 401},
		{op: "DELETE /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order-3"}, want: 409},
		{op: "DELETE /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "billing", "key": "refund-2"}, token: shopToken, want: 404},
		{op: "DELETE /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "nobody"}, want: 404},
		{op: "DELETE /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order/2"}, token: "-", want: 401},
		{op: "DELETE /v1/apps/{app}/keys/{key}", params: map[string]string{"app": "shop", "key": "order/2"}, want: 204},

		// GET /v1/apps/{app}/tasks
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=scheduled&limit=1", want: 200},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "billing"}, query: "state=dead", want: 200},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "nobody"}, query: "state=expired", want: 200},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, invalid: true, want: 400},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=sleeping", invalid: true, want: 400},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=dead&limit=many", invalid: true, want: 400},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=dead&cursor=xyz", want: 400},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "billing"}, query: "state=dead", token: shopToken, want: 403},
		{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=dead", token: "-", want: 401},

		// POST /v1/apps/{app}/claim (the pull flow is below)
		{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "shop"}, want: 200},
		{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "shop"}, body: `{"max":0}`, invalid: true, want: 400},
		{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "shop"}, body: `{"lease":"forever"}`, invalid: true, want: 400},
		{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "billing"}, token: shopToken, want: 403},
		{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "shop"}, token: "-", want: 401},

		// POST /v1/apps/{app}/tasks:retry and tasks:cancel (the cancel that
		// stops at its limit is below)
		{op: bulkRetry, params: billingApp, body: `{"state":"dead","key_prefix":"refund-","due_after":"2000-01-01T00:00:00Z","due_before":"2099-01-01T00:00:00.5Z","limit":1000}`, want: 200},
		{op: bulkRetry, params: shopApp, body: `{"state":"expired"}`, token: shopToken, want: 200},
		{op: bulkRetry, params: shopApp, body: `{"state":"scheduled"}`, invalid: true, want: 400},
		{op: bulkRetry, params: shopApp, body: `{}`, invalid: true, want: 400},
		{op: bulkRetry, params: shopApp, body: `{"state":"dead","due_after":"yesterday"}`, invalid: true, want: 400},
		{op: bulkRetry, params: shopApp, body: `{"state":"dead","colour":"red"}`, invalid: true, want: 400},
		{op: bulkRetry, params: shopApp, body: `{"state":"dead","due_after":"2030-01-01T00:00:00Z","due_before":"2029-01-01T00:00:00Z"}`, want: 400},
		{op: bulkRetry, params: billingApp, body: `{"state":"dead"}`, token: shopToken, want: 403},
		{op: bulkRetry, params: shopApp, body: `{"state":"dead"}`, token: "-", want: 401},
		{op: bulkRetry, params: shopApp, body: padded(`{"state":"dead"}`), want: 413},
		{op: bulkCancel, params: shopApp, body: `{"state":"scheduled","key_prefix":"no-such-"}`, token: shopToken, want: 200},
		{op: bulkCancel, params: shopApp, body: `{"state":"dead"}`, invalid: true, want: 400},
		{op: bulkCancel, params: shopApp, body: `{"state":"scheduled","limit":0}`, invalid: true, want: 400},
		{op: bulkCancel, params: shopApp, body: `{"state":"scheduled","key_prefix":"` + strings.Repeat("k", 257) + `"}`, invalid: true, want: 400},
		{op: bulkCancel, params: billingApp, body: `{"state":"scheduled","key_prefix":"refund-"}`, token: shopToken, want: 403},
		{op: bulkCancel, params: shopApp, body: `{"state":"scheduled"}`, token: "-", want: 401},
		{op: bulkCancel, params: shopApp, body: padded(`{"state":"scheduled","key_prefix":"promo-"}`), want: 413},

		// GET /v1/admin/backup (501 is below)
		{op: "GET /v1/admin/backup", want: 200},
		{op: "GET /v1/admin/backup", token: shopToken, want: 403},
		{op: "GET /v1/admin/backup", token: "-", want: 401},

		// Operations
		{op: "GET /v1/stats", want: 200},
		{op: "GET /v1/stats", token: shopToken, want: 200},
		{op: "GET /v1/stats", token: "-", want: 401},
		{op: "GET /metrics", want: 200},
		{op: "GET /metrics", token: shopToken, want: 403},
		{op: "GET /metrics", token: "-", want: 401},
		{op: "GET /healthz", token: "-", want: 200},
		{op: "GET /readyz", token: "-", want: 200},
		{op: "GET /openapi.json", token: "-", want: 200},
	}
	for _, cl := range cases {
		c.do(cl)
	}

	// Export and import: the server's own tasks import as existing (or
	// taken, under another id).
	exp := string(c.do(call{op: "GET /v1/admin/export", want: 200}))
	c.do(call{op: "GET /v1/admin/export", query: "app=shop&state=scheduled", want: 200})
	for _, cl := range []call{
		{op: "GET /v1/admin/export", query: "state=sleeping", invalid: true, want: 400},
		{op: "GET /v1/admin/export", token: shopToken, want: 403},
		{op: "GET /v1/admin/export", token: "-", want: 401},
	} {
		c.do(cl)
	}
	if n := strings.Count(exp, "\n"); n < 5 {
		t.Errorf("export of %d tasks: %s", n, truncate([]byte(exp)))
	}
	deadLine := strings.TrimSpace(string(c.do(call{op: "GET /v1/tasks/{id}", params: id(dead), want: 200})))
	otherID := strings.Replace(strings.TrimSpace(string(c.do(call{op: "GET /v1/tasks/{id}", params: id(delivered), want: 200}))),
		delivered.ID.String(), "01M80F90RN0004F54V5R69H3J3", 1)
	const ndjson = "application/x-ndjson"
	imported := string(c.do(call{op: "POST /v1/admin/import", body: deadLine + "\n" + otherID + "\n", ctype: ndjson, want: 200}))
	if !strings.Contains(imported, `"existing":1`) || !strings.Contains(imported, `"holder":"`+delivered.ID.String()+`"`) {
		t.Errorf("import of the server's own tasks: %s", imported)
	}
	for _, cl := range []call{
		{op: "POST /v1/admin/import", body: strings.Replace(deadLine, `"state":"dead"`, `"state":"asleep"`, 1), ctype: ndjson, want: 400},
		{op: "POST /v1/admin/import", body: "\n", ctype: ndjson, want: 400},
		{op: "POST /v1/admin/import", body: deadLine, ctype: ndjson, token: shopToken, want: 403},
		{op: "POST /v1/admin/import", body: deadLine, ctype: ndjson, token: "-", want: 401},
		{op: "POST /v1/admin/import", body: strings.Replace(deadLine, `"payload_base64":"`, `"payload_base64":"`+strings.Repeat("A", 100_000), 1), ctype: ndjson, want: 413},
	} {
		c.do(cl)
	}

	// A key kept across pages: the first page of one has a next_cursor.
	var page struct {
		Tasks      []*task.Task `json:"tasks"`
		NextCursor string       `json:"next_cursor"`
	}
	if err := json.Unmarshal(c.do(call{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=scheduled&limit=1", want: 200}), &page); err != nil || page.NextCursor == "" {
		t.Fatalf("first page: %v, next_cursor %q", err, page.NextCursor)
	}
	c.do(call{op: "GET /v1/apps/{app}/tasks", params: map[string]string{"app": "shop"}, query: "state=scheduled&limit=1000&cursor=" + page.NextCursor, want: 200})

	// Cancel: 204, again 204, 409 when finished.
	c.do(call{op: "DELETE /v1/tasks/{id}", params: id(sched), want: 204})
	c.do(call{op: "DELETE /v1/tasks/{id}", params: id(sched), want: 204})
	for _, cl := range []call{
		{op: "DELETE /v1/tasks/{id}", params: id(delivered), want: 409},
		{op: "DELETE /v1/tasks/{id}", params: id(billing), token: shopToken, want: 404},
		{op: "DELETE /v1/tasks/{id}", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, want: 404},
		{op: "DELETE /v1/tasks/{id}", params: id(billing), token: "-", want: 401},
	} {
		c.do(cl)
	}

	// Pull: claim, ack, nack.
	pull := func(key string) *task.Task {
		return create("shop", key, `"delay":"0s","payload":{"job":"`+key+`"},"target":{"pull":{}}`)
	}
	p1, p2 := pull("job-1"), pull("job-2")
	var claimed struct{ Tasks []*task.Task }
	deadline := time.Now().Add(10 * time.Second)
	for len(claimed.Tasks) < 2 {
		var more struct{ Tasks []*task.Task }
		if err := json.Unmarshal(c.do(call{op: "POST /v1/apps/{app}/claim", params: map[string]string{"app": "shop"}, body: `{"max":10,"lease":"30s","wait":"1s"}`, token: shopToken, want: 200}), &more); err != nil {
			t.Fatal(err)
		}
		claimed.Tasks = append(claimed.Tasks, more.Tasks...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d tasks, want 2", len(claimed.Tasks))
		}
	}
	lease := map[task.ID]string{}
	for _, tk := range claimed.Tasks {
		lease[tk.ID] = tk.Lease
	}
	ackBody := func(l string) string { return `{"lease":"` + l + `"}` }
	for _, cl := range []call{
		{op: "POST /v1/tasks/{id}/ack", params: id(p1), body: ackBody(lease[p1.ID]), token: shopToken, want: 204},
		{op: "POST /v1/tasks/{id}/ack", params: id(p1), body: ackBody(lease[p1.ID]), want: 409},
		{op: "POST /v1/tasks/{id}/ack", params: id(p1), invalid: true, want: 400},
		{op: "POST /v1/tasks/{id}/ack", params: id(billing), body: ackBody("x"), token: shopToken, want: 404},
		{op: "POST /v1/tasks/{id}/ack", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, body: ackBody("x"), want: 404},
		{op: "POST /v1/tasks/{id}/ack", params: id(p1), body: ackBody("x"), token: "-", want: 401},
		{op: "POST /v1/tasks/{id}/ack", params: id(p1), body: `{"lease":"` + strings.Repeat("x", 70_000) + `"}`, want: 413},

		{op: "POST /v1/tasks/{id}/nack", params: id(p2), body: `{"lease":"` + lease[p2.ID] + `","error":"out of paper","retry_in":"1h"}`, want: 204},
		{op: "POST /v1/tasks/{id}/nack", params: id(p2), body: `{"lease":"` + lease[p2.ID] + `"}`, want: 409},
		{op: "POST /v1/tasks/{id}/nack", params: id(p2), body: `{"lease":"x","retry_in":"-1s"}`, want: 400},
		{op: "POST /v1/tasks/{id}/nack", params: id(billing), body: `{"lease":"x"}`, token: shopToken, want: 404},
		{op: "POST /v1/tasks/{id}/nack", params: map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}, body: `{"lease":"x"}`, want: 404},
		{op: "POST /v1/tasks/{id}/nack", params: id(p2), body: `{"lease":"x"}`, token: "-", want: 401},
	} {
		c.do(cl)
	}
	// The nacked task's history has the attempt and its error.
	got := c.taskOf(c.do(call{op: "GET /v1/tasks/{id}", params: id(p2), want: 200}))
	if n := len(got.History); n < 3 || got.History[n-1].What != "failed" || got.History[n-1].Error != "out of paper" {
		t.Errorf("history after a nack = %+v", got.History)
	}

	// Many acks in one request, each with its own result: delivered, a
	// stale lease, another app's task (absent to this token).
	p3, p4 := pull("job-3"), pull("job-4")
	claimed.Tasks = nil
	for len(claimed.Tasks) < 2 {
		var more struct{ Tasks []*task.Task }
		if err := json.Unmarshal(c.do(call{op: "POST /v1/apps/{app}/claim", params: shopApp, body: `{"max":10,"lease":"30s","wait":"1s"}`, token: shopToken, want: 200}), &more); err != nil {
			t.Fatal(err)
		}
		claimed.Tasks = append(claimed.Tasks, more.Tasks...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d tasks, want 2", len(claimed.Tasks))
		}
	}
	for _, tk := range claimed.Tasks {
		lease[tk.ID] = tk.Lease
	}
	const ackMany = "POST /v1/apps/{app}/tasks:ack"
	acks := func(items ...string) string { return `{"acks":[` + strings.Join(items, ",") + `]}` }
	item := func(tk *task.Task, lease string) string {
		return `{"id":"` + tk.ID.String() + `","lease":"` + lease + `"}`
	}
	results := string(c.do(call{op: ackMany, params: shopApp, body: acks(item(p3, lease[p3.ID]), item(p4, "stale"), item(billing, "x")), token: shopToken, want: 200}))
	if !strings.HasPrefix(results, `{"results":[{},{"error":{"code":"conflict"`) || !strings.Contains(results, `},{"error":{"code":"not_found"`) {
		t.Errorf("ack of three tasks: %s, want delivered, conflict, not found", results)
	}
	for _, cl := range []call{
		{op: ackMany, params: shopApp, body: acks(item(p4, lease[p4.ID]), `{"id":"nope","lease":"x"}`, item(p4, "")), invalid: true, want: 200},
		{op: ackMany, params: shopApp, body: `{}`, invalid: true, want: 400},
		{op: ackMany, params: shopApp, body: `{"acks":[]}`, invalid: true, want: 400},
		{op: ackMany, params: shopApp, body: acks(`{"id":"` + p4.ID.String() + `","lease":"x","error":"no"}`), invalid: true, want: 400},
		{op: ackMany, params: billingApp, body: acks(item(billing, "x")), token: shopToken, want: 403},
		{op: ackMany, params: shopApp, body: acks(item(p4, "x")), token: "-", want: 401},
	} {
		c.do(cl)
	}
	waitState(t, s.url, p3.ID, task.Delivered)
	waitState(t, s.url, p4.ID, task.Delivered)

	// A bulk cancel that stops at its limit says there is more; the
	// repeat does the rest.
	for _, want := range []string{`{"count":1,"more":true}`, `{"count":1}`} {
		got := c.do(call{op: bulkCancel, params: shopApp, body: `{"state":"scheduled","key_prefix":"promo-","limit":1}`, want: 200})
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("bulk cancel with limit 1: %s, want %s", got, want)
		}
	}
	if got := string(c.do(call{op: bulkCancel, params: shopApp, body: `{"state":"scheduled","key_prefix":"promo-"}`, want: 200})); strings.TrimSpace(got) != `{"count":0}` {
		t.Errorf("bulk cancel repeated: %s, want a count of 0", got)
	}

	schedulesCheck(t, c, target(ok))

	// 429 from a server at its limit of concurrent requests: one, held by
	// a create whose body has not finished arriving.
	busyCheck(t, c, s, []call{
		{op: bulkRetry, params: shopApp, body: `{"state":"dead"}`, want: 429},
		{op: bulkCancel, params: shopApp, body: `{"state":"scheduled"}`, want: 429},
		{op: ackMany, params: shopApp, body: acks(item(p4, "x")), want: 429},
		{op: "GET /v1/admin/backup", want: 429},
		{op: "GET /v1/admin/export", want: 429},
		{op: "POST /v1/schedules", body: `{"app":"shop","key":"busy","every":"1h","target":{"pull":{}}}`, want: 429},
		{op: "POST /v1/admin/import", body: "{}", ctype: "application/x-ndjson", want: 429},
	})

	// A store without a backup of its own (a cluster node's): 501.
	storeOnlyCheck(t, c, []call{{op: "GET /v1/admin/backup", want: 501}})
	clockCalls(t, c) // clock_test.go

	// Rate limits: 429 with Retry-After.
	s.eng.SetPolicies(engine.Policies{Apps: map[string]engine.AppPolicy{"slow": {CreatesPerSecond: 0.001}, "capped": {MaxSchedules: 1}}})
	slow := `{"app":"slow","delay":"1h","target":` + target(ok) + `}`
	c.do(call{op: "POST /v1/tasks", body: slow, want: 201})
	c.do(call{op: "POST /v1/tasks", body: slow, want: 429})
	c.do(call{op: "POST /v1/schedules", body: `{"app":"slow","key":"s","every":"1h","target":{"pull":{}}}`, want: 429})
	// An app at its max_schedules: 409.
	c.do(call{op: "POST /v1/schedules", body: `{"app":"capped","key":"a","every":"1h","target":{"pull":{}}}`, want: 201})
	c.do(call{op: "POST /v1/schedules", body: `{"app":"capped","key":"b","every":"1h","target":{"pull":{}}}`, want: 409})

	// A stopped engine is not ready: 503 with Retry-After.
	s.stop()
	c.do(call{op: "GET /readyz", token: "-", want: 503})
	c.do(call{op: "POST /v1/tasks", body: `{"app":"shop","delay":"1s","target":` + target(ok) + `}`, want: 503})
	c.do(call{op: "GET /v1/tasks/{id}", params: id(billing), want: 200}) // reads still work
	c.do(call{op: bulkRetry, params: shopApp, body: `{"state":"dead"}`, want: 503})
	c.do(call{op: bulkCancel, params: shopApp, body: `{"state":"scheduled"}`, want: 503})
	c.do(call{op: ackMany, params: shopApp, body: acks(item(p4, "x")), want: 503})
	c.do(call{op: "POST /v1/admin/import", body: deadLine, ctype: ndjson, want: 503})
	c.do(call{op: "POST /v1/schedules", body: `{"app":"shop","key":"late","every":"1h","target":{"pull":{}}}`, want: 503})

	// Every operation of the spec was called, with a success and (where
	// the spec has any) an error.
	for _, o := range operations(doc) {
		statuses := c.seen[o]
		method, path, _ := strings.Cut(o, " ")
		documented := doc.Paths.Value(path).GetOperation(method).Responses.Map()
		hasErr := false
		for code := range documented {
			if n, _ := strconv.Atoi(code); n >= 400 {
				hasErr = true
			}
		}
		success := slices.ContainsFunc(statuses, func(s int) bool { return s < 300 })
		failure := slices.ContainsFunc(statuses, func(s int) bool { return s >= 400 })
		switch {
		case len(statuses) == 0:
			t.Errorf("%s: no test case: add one to TestConformance", o)
		case !success:
			t.Errorf("%s: no successful case (saw %v)", o, statuses)
		case hasErr && !failure:
			t.Errorf("%s: no error case (saw %v)", o, statuses)
		}
		var untested []string
		for code := range documented {
			if n, _ := strconv.Atoi(code); !slices.Contains(statuses, n) {
				untested = append(untested, code)
			}
		}
		if len(untested) > 0 {
			slices.Sort(untested)
			t.Logf("%s: documented but not exercised: %v", o, untested)
		}
	}
}

// schedulesCheck calls every schedule route, successes and errors.
func schedulesCheck(t *testing.T, c *checker, target string) {
	t.Helper()
	schedOf := func(body []byte) *task.Schedule {
		t.Helper()
		var s task.Schedule
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("decode schedule: %v: %s", err, body)
		}
		return &s
	}
	create := func(body string) *task.Schedule {
		t.Helper()
		return schedOf(c.do(call{op: "POST /v1/schedules", body: body, want: http.StatusCreated}))
	}
	report := `{"app":"shop","key":"daily-report","cron":"0 9 * * MON-FRI","timezone":"Europe/Berlin","start_at":"2030-01-01T00:00:00Z",` +
		`"end_at":"2099-01-01T00:00:00.5Z","catch_up":"all","payload":{"report":"daily"},"target":` + target + `,"retry":{"max_attempts":3},"deadline_after":"10m"}`
	sc := create(report)
	sweep := create(`{"app":"billing","key":"sweep","every":"15m","payload_base64":"AAE=","target":` + target + `}`)
	over := create(`{"app":"shop","key":"over","every":"1h","end_at":"2001-01-01T00:00:00Z","target":{"pull":{}}}`)
	if sc.NextAt == nil || over.State != task.ScheduleEnded {
		t.Fatalf("schedules: next_at %v, a schedule past its end is %s", sc.NextAt, over.State)
	}
	id := func(s *task.Schedule) map[string]string { return map[string]string{"id": s.ID.String()} }
	absent := map[string]string{"id": "01M80F90RN0004F54V5R69H3J2"}
	shop, billing := map[string]string{"app": "shop"}, map[string]string{"app": "billing"}
	byKey := func(app, key string) map[string]string { return map[string]string{"app": app, "key": key} }
	const (
		get, patch, del = "GET /v1/schedules/{id}", "PATCH /v1/schedules/{id}", "DELETE /v1/schedules/{id}"
		pause, resume   = "POST /v1/schedules/{id}/pause", "POST /v1/schedules/{id}/resume"
		next, list      = "GET /v1/schedules/{id}/next", "GET /v1/apps/{app}/schedules"
		getKey, delKey  = "GET /v1/apps/{app}/schedules/{key}", "DELETE /v1/apps/{app}/schedules/{key}"
		createS, big    = "POST /v1/schedules", 100_000
	)
	for _, cl := range []call{
		{op: createS, body: report, token: shopToken, want: 200},
		{op: createS, body: `{"app":"shop","key":"x","cron":"61 * * * *","target":{"pull":{}}}`, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"soon","target":{"pull":{}}}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","colour":"red"}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","catch_up":"most"}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","cron":"@daily","target":{"pull":{}}}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","target":{"pull":{}}}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","payload":1,"payload_base64":"AQ==","target":{"pull":{}}}`, invalid: true, want: 400},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","target":{"pull":{}}}`, token: "-", want: 401},
		{op: createS, body: `{"app":"billing","key":"x","every":"1h","target":{"pull":{}}}`, token: shopToken, want: 403},
		{op: createS, body: `{"app":"shop","key":"x","every":"1h","payload_base64":"` + strings.Repeat("A", big) + `","target":{"pull":{}}}`, want: 413},

		{op: get, params: id(sc), token: shopToken, want: 200},
		{op: get, params: id(sweep), token: shopToken, want: 404},
		{op: get, params: absent, want: 404},
		{op: get, params: map[string]string{"id": "nope"}, want: 404},
		{op: get, params: id(sc), token: "-", want: 401},

		{op: next, params: id(sc), query: "n=3", want: 200},
		{op: next, params: id(over), want: 200},
		{op: next, params: id(sc), query: "n=0", invalid: true, want: 400},
		{op: next, params: id(sc), query: "n=101", invalid: true, want: 400},
		{op: next, params: id(sweep), token: shopToken, want: 404},
		{op: next, params: id(sc), token: "-", want: 401},

		// The occurrence pending for sc, with its schedule_id.
		{op: "GET /v1/apps/{app}/keys/{key}", params: byKey("shop", task.OccurrenceKey("daily-report", *sc.NextAt)), want: 200},

		{op: patch, params: id(sc), body: `{"every":"2h","deadline_after":null,"payload":{"report":"v2"}}`, want: 200},
		{op: patch, params: id(sc), body: `{"start_at":null,"end_at":"2098-01-01T00:00:00Z","timezone":"UTC","payload_base64":"aGk=","retry":{"max_attempts":5}}`, token: shopToken, want: 200},
		{op: patch, params: id(sc), body: `{}`, invalid: true, want: 400},
		{op: patch, params: id(sc), body: `{"cron":"* *"}`, want: 400},
		{op: patch, params: id(sc), body: `{"cron":"@daily","every":"1h"}`, invalid: true, want: 400},
		{op: patch, params: id(sc), body: `{"payload":1,"payload_base64":"AQ=="}`, invalid: true, want: 400},
		{op: patch, params: id(sc), body: `{"colour":1}`, invalid: true, want: 400},
		{op: patch, params: id(sweep), body: `{"every":"1h"}`, token: shopToken, want: 404},
		{op: patch, params: absent, body: `{"every":"1h"}`, want: 404},
		{op: patch, params: id(sc), body: `{"payload_base64":"` + strings.Repeat("A", big) + `"}`, want: 413},
		{op: patch, params: id(sc), body: `{"every":"1h"}`, token: "-", want: 401},

		{op: pause, params: id(sc), want: 200},
		{op: pause, params: id(sc), token: shopToken, want: 200},
		{op: pause, params: id(over), want: 409},
		{op: pause, params: id(sweep), token: shopToken, want: 404},
		{op: pause, params: id(sc), token: "-", want: 401},
		{op: resume, params: id(sc), want: 200},
		{op: resume, params: id(over), want: 409},
		{op: resume, params: id(sweep), token: shopToken, want: 404},
		{op: resume, params: id(sc), token: "-", want: 401},

		{op: list, params: shop, query: "limit=1", token: shopToken, want: 200},
		{op: list, params: map[string]string{"app": "nobody"}, want: 200},
		{op: list, params: shop, query: "limit=0", invalid: true, want: 400},
		{op: list, params: shop, query: "cursor=xyz", want: 400},
		{op: list, params: billing, token: shopToken, want: 403},
		{op: list, params: shop, token: "-", want: 401},

		{op: getKey, params: byKey("shop", "daily-report"), token: shopToken, want: 200},
		{op: getKey, params: byKey("shop", "nobody"), want: 404},
		{op: getKey, params: byKey("billing", "sweep"), token: shopToken, want: 404},
		{op: getKey, params: byKey("shop", "daily-report"), token: "-", want: 401},

		{op: delKey, params: byKey("billing", "sweep"), token: shopToken, want: 404},
		{op: delKey, params: byKey("shop", "nobody"), want: 404},
		{op: delKey, params: byKey("shop", "over"), token: "-", want: 401},
		{op: delKey, params: byKey("shop", "over"), want: 204},

		{op: del, params: id(sweep), token: shopToken, want: 404},
		{op: del, params: id(sc), token: "-", want: 401},
		{op: del, params: id(sc), token: shopToken, want: 204},
		{op: del, params: id(sc), want: 404},
	} {
		c.do(cl)
	}
	// The list's first page of two has a next_cursor.
	create(`{"app":"shop","key":"second","cron":"@daily","target":{"pull":{}}}`)
	create(`{"app":"shop","key":"third","cron":"@weekly","target":{"pull":{}}}`)
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(c.do(call{op: list, params: shop, query: "limit=1", want: 200}), &page); err != nil || page.NextCursor == "" {
		t.Fatalf("first page of schedules: %v, next_cursor %q", err, page.NextCursor)
	}
	c.do(call{op: list, params: shop, query: "limit=1000&cursor=" + page.NextCursor, want: 200})
}

// busyCheck sends calls to a second server over s's engine that serves one
// request at a time, while a create whose body never finishes holds that
// one: each call is answered 429. The statuses count for c.
//
// The create is known to hold the slot when the handler first reads its
// body (it reads it only inside the slot). Probing for a 429 instead was
// flaky under load: a probe that held the slot when the create arrived got
// the create refused, and nothing was left to hold it.
func busyCheck(t *testing.T, c *checker, s *stack, calls []call) {
	t.Helper()
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	api := httpapi.New(httpapi.Config{Engine: s.eng, Logger: log, Access: acc, MaxConcurrent: 1})
	inside := make(chan struct{})
	var once sync.Once
	busy := httptest.NewServer(reqlog.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/tasks" && r.Header.Get("X-Hold") != "" {
			r.Body = readSignal{r.Body, func() { once.Do(func() { close(inside) }) }}
		}
		api.ServeHTTP(w, r)
	}), log))
	defer busy.Close()
	body, hold := io.Pipe()
	req, err := http.NewRequest("POST", busy.URL+"/v1/tasks", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hold", "1")
	held := make(chan struct{})
	go func() {
		defer close(held)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	defer func() { hold.Close(); <-held }()
	select {
	case <-inside:
	case <-held:
		t.Fatal("the held create was answered before it read its body")
	case <-time.After(30 * time.Second):
		t.Fatal("the held create never reached its handler within 30s")
	}
	bc := &checker{t: t, doc: c.doc, base: busy.URL, seen: c.seen}
	for _, cl := range calls {
		bc.do(cl)
	}
}

// readSignal is a request body that calls read before each Read.
type readSignal struct {
	io.ReadCloser
	read func()
}

func (r readSignal) Read(p []byte) (int, error) {
	r.read()
	return r.ReadCloser.Read(p)
}

// TestRoutesInSpec checks that every route httpapi registers (read from
// httpapi.go's HandleFunc calls) and every route the server mounts is in the
// spec, and that the spec has no route the server lacks.
func TestRoutesInSpec(t *testing.T) {
	doc := loadSpec(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../httpapi/httpapi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		pattern, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(pattern, " ") { // "/" is the catch-all 404
			registered = append(registered, pattern)
		}
		return true
	})
	if len(registered) < 10 {
		t.Fatalf("found only %d routes in httpapi.go: %v; has the way routes are registered changed?", len(registered), registered)
	}
	routes := append(registered, mounted...)
	slices.Sort(routes)
	if diff := diffLists(routes, operations(doc)); diff != "" {
		t.Errorf("routes of the server vs operations of openapi.json:\n%s", diff)
	}
}

// diffLists reports what only a or only b has.
func diffLists(server, spec []string) string {
	var b strings.Builder
	for _, r := range server {
		if !slices.Contains(spec, r) {
			fmt.Fprintf(&b, "  %s: served but not in the spec\n", r)
		}
	}
	for _, r := range spec {
		if !slices.Contains(server, r) {
			fmt.Fprintf(&b, "  %s: in the spec but not served\n", r)
		}
	}
	return b.String()
}

// TestHandler checks that the spec is served as JSON.
func TestHandler(t *testing.T) {
	s := startStack(t)
	resp, err := http.Get(s.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, openapi.Spec()) {
		t.Errorf("GET /openapi.json: %s, %q, %d bytes", resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
}
