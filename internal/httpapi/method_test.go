package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/httpapi"
)

// A known route asked with the wrong method answers 405 with Allow, in the
// API's JSON error form; an unknown path still answers 404.
func TestWrongMethod(t *testing.T) {
	s := startServer(t, "", nil)
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/tasks", http.StatusMethodNotAllowed, "POST"},
		{"PUT", "/v1/tasks/01JD8X5C2M0000ABCDEFGHJKMN", http.StatusMethodNotAllowed, "GET, HEAD, PATCH, DELETE"},
		{"GET", "/v1/tasks/01JD8X5C2M0000ABCDEFGHJKMN/retry", http.StatusMethodNotAllowed, "POST"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/no-such-thing", http.StatusNotFound, ""},
		{"DELETE", "/v1/apps/shop/tasks", http.StatusMethodNotAllowed, "GET, HEAD"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, s.url+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.status || res.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q (body %s)", tt.method, tt.path, res.StatusCode, res.Header.Get("Allow"), tt.status, tt.allow, body.String())
		}
		if tt.status == http.StatusMethodNotAllowed && !strings.Contains(body.String(), `"method_not_allowed"`) {
			t.Errorf("%s %s: body %s, want the JSON error method_not_allowed", tt.method, tt.path, body.String())
		}
	}
}

// Route names the pattern a request goes to (the request span's name):
// the API's own route, not the public mux's catch-all "/" that hands the
// API its requests.
func TestRoute(t *testing.T) {
	h := httpapi.New(httpapi.Config{Public: map[string]http.Handler{"GET /openapi.json": http.NotFoundHandler()}})
	for _, tt := range []struct{ method, path, want string }{
		{"POST", "/v1/tasks", "POST /v1/tasks"},
		{"GET", "/v1/tasks/01JD8X5C2M0000ABCDEFGHJKMN", "GET /v1/tasks/{id}"},
		{"GET", "/openapi.json", "GET /openapi.json"},
		{"GET", "/healthz", "GET /healthz"},
	} {
		r, err := http.NewRequest(tt.method, "http://toc"+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Route(r); got != tt.want {
			t.Errorf("Route(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}
