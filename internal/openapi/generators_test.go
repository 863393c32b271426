package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestComponentNames checks that no two components share a name once a
// generator makes a type name of it (oapi-codegen capitalizes and drops
// separators: the parameter "key" and the schema "Key" were both type Key,
// and it refused the spec with "duplicate typename 'Key'").
func TestComponentNames(t *testing.T) {
	var raw struct {
		Components map[string]map[string]json.RawMessage `json:"components"`
	}
	if err := json.Unmarshal(openapi.Spec(), &raw); err != nil {
		t.Fatal(err)
	}
	typeName := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", ".", "").Replace(s))
	}
	seen := map[string]string{}
	for _, section := range []string{"schemas", "parameters", "responses", "headers", "requestBodies", "callbacks", "securitySchemes"} {
		for name := range raw.Components[section] {
			k := typeName(name)
			if other, ok := seen[k]; ok {
				t.Errorf("components/%s/%s and %s make the same type name", section, name, other)
			}
			seen[k] = "components/" + section + "/" + name
		}
	}
}

// TestSpecForClients checks rules a client generated from the spec relies
// on: every answer declares X-Request-Id, every operation has a default
// (error) answer, and a server without tokens is described (security has
// an empty alternative).
func TestSpecForClients(t *testing.T) {
	doc := loadSpec(t)
	if !slices.ContainsFunc(doc.Security, func(r openapi3.SecurityRequirement) bool { return len(r) == 0 }) {
		t.Errorf("security %v has no anonymous alternative ({}): a server without tokens takes requests without one", doc.Security)
	}
	for _, o := range operations(doc) {
		method, path, _ := strings.Cut(o, " ")
		op := doc.Paths.Value(path).GetOperation(method)
		if op.Responses.Default() == nil {
			t.Errorf("%s: no default answer", o)
		}
		for code, r := range op.Responses.Map() {
			if r.Value.Headers["X-Request-Id"] == nil {
				t.Errorf("%s: answer %s does not declare X-Request-Id", o, code)
			}
		}
	}
}

// TestMethodNotAllowed sends a method no route has to every path of the
// spec: each answers 405 with Allow naming exactly the spec's methods of
// the path (and HEAD with GET), and a body its operations' default answer
// describes.
func TestMethodNotAllowed(t *testing.T) {
	doc := loadSpec(t)
	s := startStack(t)
	for path, item := range doc.Paths.Map() {
		var want []string
		for method := range item.Operations() {
			want = append(want, method)
			if method == http.MethodGet {
				want = append(want, http.MethodHead)
			}
		}
		slices.Sort(want)
		// Any value for a path parameter reaches the route.
		concrete := path
		for _, p := range []string{"{id}", "{app}", "{key}"} {
			concrete = strings.ReplaceAll(concrete, p, "x")
		}
		req, err := http.NewRequest(http.MethodPut, s.url+concrete, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("PUT %s: status %d, want 405: %s", path, resp.StatusCode, body)
			continue
		}
		var got []string
		for m := range strings.SplitSeq(resp.Header.Get("Allow"), ",") {
			got = append(got, strings.TrimSpace(m))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("PUT %s: Allow %v, want the spec's methods %v", path, got, want)
		}
		for method, op := range item.Operations() {
			route := &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
				Status:                 resp.StatusCode,
				Header:                 resp.Header,
				Body:                   io.NopCloser(bytes.NewReader(body)),
				Options:                &openapi3filter.Options{IncludeResponseStatus: true},
			})
			if err != nil {
				t.Errorf("PUT %s: the 405 does not match %s's default answer: %v", path, method, err)
			}
		}
	}
}

// TestPushCallbacks delivers tasks with httpsink, signed both ways, to a
// receiver, and checks each push against the spec's callbacks: every
// header toc sent is declared, every required one was sent, values match
// their schemas, and the body's Content-Type is one the callback lists.
func TestPushCallbacks(t *testing.T) {
	doc := loadSpec(t)
	rcv := testkit.NewReceiver(t)
	rcv.SetStatus(http.StatusNoContent)
	sk := httpsink.New(httpsink.Config{Secrets: func(string) []string { return []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "old-secret"} }})
	defer sk.CloseIdleConnections()

	due := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	tasks := map[string]*task.Task{ // by callback
		"createTask": {ID: mustID(t, "01M80F90RN0004F54V5R69H3J2"), App: "shop", Key: "order-1", DueAt: due, Attempts: 2,
			Payload: []byte(`{"order":1}`), Target: task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL, Headers: map[string]string{"X-Team": "pay"}}}},
		"createSchedule": {ID: mustID(t, "01M80F90RN0004F54V5R69H3J3"), App: "shop", Key: "daily@2030-01-02T03:04:05.006Z", ScheduleID: mustID(t, "01M80F90RN0004F54V5R69H3J4"), DueAt: due, Attempts: 1,
			Payload: []byte{0, 1, 2}, Target: task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL}}},
	}
	ops := map[string]string{"createTask": "POST /v1/tasks", "createSchedule": "POST /v1/schedules"}
	for name, tk := range tasks {
		if err := sk.Deliver(context.Background(), tk); err != nil {
			t.Fatalf("%s: deliver: %v", name, err)
		}
		got := rcv.Deliveries()
		p := got[len(got)-1]
		method, path, _ := strings.Cut(ops[name], " ")
		cbs := doc.Paths.Value(path).GetOperation(method).Callbacks
		if len(cbs) != 1 {
			t.Fatalf("%s: %d callbacks, want 1", name, len(cbs))
		}
		var cb *openapi3.Operation
		for _, c := range cbs {
			for _, item := range c.Value.Map() {
				cb = item.Post
			}
		}
		if cb == nil {
			t.Fatalf("%s: the callback has no POST", name)
		}
		declared := map[string]*openapi3.Parameter{}
		for _, pr := range cb.Parameters {
			declared[http.CanonicalHeaderKey(pr.Value.Name)] = pr.Value
		}
		// Headers net/http adds on its own.
		transport := []string{"Content-Length", "Accept-Encoding", "Content-Type"}
		for h, vs := range p.Header {
			if slices.Contains(transport, h) || tk.Target.HTTP.Headers[h] != "" {
				continue
			}
			pr := declared[h]
			if pr == nil {
				t.Errorf("%s: the push sent %s: %q, which the callback does not declare", name, h, vs)
				continue
			}
			var v any = vs[0]
			if pr.Schema.Value.Type.Is("integer") {
				n, err := strconv.Atoi(vs[0])
				if err != nil {
					t.Errorf("%s: %s: %q is not an integer", name, h, vs[0])
				}
				v = n
			}
			if err := pr.Schema.Value.VisitJSON(v); err != nil {
				t.Errorf("%s: %s: %q does not match its schema: %v", name, h, vs[0], err)
			}
		}
		for h, pr := range declared {
			if pr.Required && p.Header.Get(h) == "" {
				t.Errorf("%s: the callback requires %s; the push did not send it", name, h)
			}
		}
		for _, h := range []string{"Toc-Signature", "Webhook-Signature", "Toc-Key"} {
			if p.Header.Get(h) == "" {
				t.Errorf("%s: no %s: the push was meant to carry it", name, h)
			}
		}
		ct := p.Header.Get("Content-Type")
		if cb.RequestBody.Value.Content.Get(ct) == nil || !slices.Contains([]string{"application/json", "application/octet-stream"}, ct) {
			t.Errorf("%s: Content-Type %q is not one the callback names", name, ct)
		}
		if !bytes.Equal(p.Body, tk.Payload) {
			t.Errorf("%s: body %q, want the payload %q", name, p.Body, tk.Payload)
		}
	}
}

func mustID(t *testing.T, s string) task.ID {
	t.Helper()
	id, err := task.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
