package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/httpapi"
)

// TestBrowserWrites checks that a web page cannot change a toc without
// tokens (issue 21, finding 5): a write must be JSON by its Content-Type,
// and a request a browser marks as coming from another origin is refused
// unless the operator allowed that origin. Reads, and clients that are not
// browsers, are unaffected.
func TestBrowserWrites(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", nil)
	// A second handler over the same engine that allows one more origin.
	allowed := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, AllowedOrigins: []string{"http://localhost:5173"}}))
	t.Cleanup(allowed.Close)
	acc, err := httpapi.NewAccess([]string{digest("admin-token")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	withTokens := httptest.NewServer(httpapi.New(httpapi.Config{Engine: s.eng, Access: acc}))
	t.Cleanup(withTokens.Close)

	create := func(key string) string {
		return `{"app":"web","key":"` + key + `","delay":"1h","target":{"http":{"url":"http://127.0.0.1:9/x"}}}`
	}
	cases := []struct {
		name, base, method, path, body string
		header                         map[string]string
		status                         int
		code                           string
	}{
		{"text/plain", s.url, "POST", "/v1/tasks", create("plain"), map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"a form", s.url, "POST", "/v1/tasks", create("form"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"no content type", s.url, "POST", "/v1/tasks", create("none"), nil, 415, "unsupported_media_type"},
		{"bodyless POST without one", s.url, "POST", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV/retry", ``, nil, 415, "unsupported_media_type"},
		{"PATCH as text", s.url, "PATCH", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", `{"delay":"1s"}`, map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"cross-site", s.url, "POST", "/v1/tasks", create("cross"), map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403, "cross_origin"},
		{"same site, other port", s.url, "POST", "/v1/tasks", create("samesite"), map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}, 403, "cross_origin"},
		{"old browser, other origin", s.url, "POST", "/v1/tasks", create("oldbrowser"), map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "cross_origin"},
		{"cross-site DELETE", s.url, "DELETE", "/v1/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", ``, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "cross_origin"},
		{"cross-site with a token", withTokens.URL, "POST", "/v1/tasks", create("tokencross"), map[string]string{"Content-Type": "application/json", "Authorization": "Bearer admin-token", "Sec-Fetch-Site": "cross-site"}, 403, "cross_origin"},
		{"origin not allowed here", s.url, "POST", "/v1/tasks", create("notallowed"), map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://localhost:5173"}, 403, "cross_origin"},

		{"JSON", s.url, "POST", "/v1/tasks", create("json"), map[string]string{"Content-Type": "application/json; charset=utf-8"}, 201, ""},
		{"same origin", s.url, "POST", "/v1/tasks", create("same"), map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin", "Origin": s.url}, 201, ""},
		{"own origin, old browser", s.url, "POST", "/v1/tasks", create("ownold"), map[string]string{"Content-Type": "application/json", "Origin": s.url}, 201, ""},
		{"allowed origin", allowed.URL, "POST", "/v1/tasks", create("allowed"), map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Origin": "http://localhost:5173"}, 201, ""},
		{"text with a token", withTokens.URL, "POST", "/v1/tasks", create("tokentext"), map[string]string{"Content-Type": "text/plain", "Authorization": "Bearer admin-token"}, 201, ""},
		{"cross-site read", s.url, "GET", "/v1/apps/web", ``, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 200, ""},
		{"DELETE without a content type", s.url, "DELETE", "/v1/apps/web/keys/no-such-key", ``, nil, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, c.base+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			m := decodeAnswer(t, resp)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, c.status, m)
			}
			if c.code == "" {
				return
			}
			e, _ := m["error"].(map[string]any)
			if e["code"] != c.code {
				t.Fatalf("code %v, want %s (%v)", e["code"], c.code, m)
			}
			msg, _ := e["message"].(string)
			switch c.code {
			case "unsupported_media_type":
				if !strings.Contains(msg, "Content-Type: application/json") {
					t.Errorf("message does not say what to send: %q", msg)
				}
			case "cross_origin":
				if !strings.Contains(msg, "allowed_origins") {
					t.Errorf("message does not say how to allow an origin: %q", msg)
				}
			}
		})
	}
	// Nothing refused was stored.
	for _, key := range []string{"plain", "form", "none", "cross", "samesite", "oldbrowser", "tokencross", "notallowed"} {
		if _, err := s.client.GetByKey(context.Background(), "web", key); err == nil {
			t.Errorf("the task of the refused request %q was created", key)
		}
	}

	h := httpapi.New(httpapi.Config{Engine: s.eng})
	if err := h.SetAllowedOrigins([]string{"http://ok.example", "http://bad.example/path"}); err == nil {
		t.Error("an origin with a path was accepted")
	}
}

func decodeAnswer(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	var m map[string]any
	if resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("answer %s is not JSON: %v", resp.Status, err)
		}
	}
	return m
}
