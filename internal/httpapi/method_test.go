package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
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
