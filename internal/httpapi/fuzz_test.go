package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// FuzzCreateRequest feeds arbitrary bodies through the path of POST
// /v1/tasks up to the engine: decode, then createRequest.params. Whatever
// the body, nothing panics and every refusal is a 4xx, never a 500. Besides
// the raw body, a well-formed body is built from fuzzed field values, which
// the fuzzer rarely reaches through the raw bytes.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{"app":"billing","key":"order-42","delay":"30m","payload":{"order":42},"target":{"http":{"url":"https://billing/expire"}}}`,
		`{"app":"billing","due_at":"2026-01-02T15:04:05.123Z","deadline":"2026-01-03T00:00:00Z","payload_base64":"AP8=","target":{"pull":{}},"retry":{"max_attempts":3,"min_backoff":"1s"}}`,
		`{"app":"a","delay":"1s","due_at":"2026-01-02T15:04:05Z","target":{"pull":{}}}`,
		`{"app":"a","delay":"soon","target":{"pull":{}}}`,
		`{"app":"a","delay":"1s","payload":1,"payload_base64":"AA==","target":{"pull":{}}}`,
		`{"app":"a","delay":"1s","payload_base64":"%%%","target":{"pull":{}}}`,
		`{"app":"a","delay":"1s","deadline":"tomorrow"}`,
		`{"app":"a","key":"","delay":"1s"}`,
		`{"app":"A","delay":"1s"}`,
		`{"app":"a","delay":"1s","target":{"http":{"url":"x","timeout":"never"}}}`,
		`{"app":"a","delay":"1s","target":{"http":{"url":"x","timeout":5}}}`,
		`{"app":"a","delay":"1s","retry":{"max_attempts":"3"}}`,
		`{"app":"a","delay":"1s","target":{"http":{"headers":{"a":1}}}}`,
		`{"app":"a","delay":"1s","unknown":true}`,
		`{"app":"a","delay":"1s","target":null}`,
		`{"app":"a"} {"app":"b"}`,
		`{"app":"a"`,
		`{"app":1e999}`,
		`{"app":"\ud800"}`,
		`[]`,
		`null`,
		`"str"`,
		`  `,
		``,
		"\xff",
		`{"id":"x"}`,
		`{"target":{"http":{"url":"http://h"},"nats":{"subject":"s"}},"app":"a","delay":"-2562047h47m16.854775808s"}`,
		`{"app":"a","due_at":"0000-01-01T00:00:00Z","target":{"pull":{}}}`,
		`{"app":"a","due_at":"9999-12-31T23:00:00-05:00","target":{"pull":{}}}`,
		`{"app":"a","due_at":"0000-01-01T00:00:00+01:00","target":{"pull":{}}}`,
	} {
		f.Add([]byte(s), "billing", "order-42", "2026-01-02T15:04:05.123Z", "", "2026-01-03T00:00:00Z", "AP8=")
	}
	f.Add([]byte(`{}`), "a", "", "", "30m", "", "")
	f.Add([]byte(`{}`), "a", "\xff", "2026-13-01T00:00:00Z", "1h", "2026-01-02T15:04:05+25:00", "====")
	f.Add([]byte(`{}`), "a", "k", "", "-2562047h47m16.854775808s", "0000-01-01T00:00:00Z", "A")
	f.Add([]byte(`{}`), "a", "k", "", "9223372036854775807ns", "9999-12-31T23:59:59.999999999Z", "")
	h := New(Config{}) // only its limits: no request reaches the engine
	f.Fuzz(func(t *testing.T, raw []byte, app, key, due, delay, deadline, b64 string) {
		fields := map[string]any{"app": app, "target": map[string]any{"pull": map[string]any{}}}
		for name, v := range map[string]string{"key": key, "due_at": due, "delay": delay, "deadline": deadline, "payload_base64": b64} {
			if v != "" {
				fields[name] = v
			}
		}
		built, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range [][]byte{raw, built} {
			checkCreateBody(t, h.maxBody, body)
			checkCreateBody(t, 64, body)
		}
	})
}

// checkCreateBody runs body through decode (with this size limit) and
// params, as the create handler does, and checks the outcome.
func checkCreateBody(t *testing.T, limit int64, body []byte) {
	t.Helper()
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	r := httptest.NewRequest(http.MethodPost, "/v1/tasks", bytes.NewReader(body))
	var req createRequest
	err := decode(httptest.NewRecorder(), r, limit, &req)
	var p engine.CreateParams
	if err == nil {
		p, err = req.params(now)
	}
	if err == nil {
		// What params accepts has a valid app and key.
		if task.ValidateApp(p.App) != nil || p.Key != "" && task.ValidateKey(p.Key) != nil {
			t.Fatalf("body %q accepted with app %q, key %q", body, p.App, p.Key)
		}
		// Its times, kept to the millisecond in UTC as the engine keeps
		// them, can be stored and answered: JSON has years 0 to 9999 only.
		tk := task.Task{DueAt: task.Ms(p.DueAt)}
		if p.Deadline != nil {
			d := task.Ms(*p.Deadline)
			tk.Deadline = &d
		}
		if _, err := json.Marshal(tk); err != nil {
			t.Fatalf("body %q: accepted times that cannot be stored: %v", body, err)
		}
		return
	}
	status, code, _ := statusOf(err)
	if status < 400 || status > 499 || code == "" {
		t.Fatalf("body %q (limit %d): error %v (%T) answers %d %q, want a 4xx", body, limit, err, err, status, code)
	}
	st, out := errorJSON(err)
	b, merr := json.Marshal(out)
	if st != status || merr != nil || !json.Valid(b) {
		t.Fatalf("error answer for %v: %d %s, %v", err, st, b, merr)
	}
}

// FuzzBatchRequest feeds arbitrary bodies through the path of POST
// /v1/tasks:batch up to the engine: the batch is decoded, then each item
// (size check, decode, params). Whatever the body, nothing panics and every
// refusal, of the batch or of one item, is a 4xx.
func FuzzBatchRequest(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"app":"billing","key":"order-42","delay":"30m","payload":{"order":42},"target":{"http":{"url":"https://billing/expire","headers":{"A":"b"}}}}]}`,
		`{"tasks":[{"app":"a","delay":"1s","target":{"pull":{}}},{"app":"a","delay":"soon"}]}`,
		`{"tasks":[{"app":"a","key":"k","key":"k"}]}`,
		`{"tasks":[{"app":"a","APP":"b"}]}`,
		`{"tasks":[{"app":"a","target":{"http":{"url":"x","headers":{"a":"1","b":2}}}}]}`,
		`{"tasks":[{"app":"a","retry":{"min_backoff":"fast"}}]}`,
		`{"tasks":[{"app":"a","delay":"-1s"}]}`,
		`{"tasks":[[],null,1,"x",{}]}`,
		`{"tasks":null}`,
		`{"tasks":{}}`,
		`{"Tasks":[]}`,
		"{\"tasks\":[{\"app\":\"a\",\"key\":\"\xff\"}]}",
		`{"tasks":[{"payload":[[[[[[[[[[]]]]]]]]]]}]}`,
		`{"tasks":[]} x`,
		`{"tasks":[{"app":"b","payload":{"x":1},"delay":"1s","target":{"pull":{}}},{"payload":1,"app":"a","delay":"1s","target":{"pull":{}}}]}`,
	} {
		f.Add([]byte(s))
	}
	h := New(Config{})
	// An admin, and a token of app a (items of other apps are refused
	// before they are decoded).
	callers := []*principal{adminPrincipal, {apps: map[string]bool{"a": true}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
		for _, caller := range callers {
			es, err := readBatchBytes(h, body, caller, now)
			if err != nil {
				check4xx(t, body, err)
				continue
			}
			for _, e := range es {
				if e.err != nil {
					check4xx(t, body, e.err)
				} else if !caller.can(e.p.App) {
					t.Fatalf("body %q: an item of app %q passed a token of app a", body, e.p.App)
				}
			}
		}
	})
}

func check4xx(t *testing.T, body []byte, err error) {
	t.Helper()
	status, code, _ := statusOf(err)
	if status < 400 || status > 499 || code == "" {
		t.Fatalf("body %q: error %v (%T) answers %d %q, want a 4xx", body, err, err, status, code)
	}
}
