package reqlog_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/reqlog"
)

// logLines decodes JSON log lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(reqlog.NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	var seen string
	h := reqlog.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = reqlog.ID(r.Context())
		log.WarnContext(r.Context(), "inside", slog.String("x", "y")) // a handler's own line
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("short and stout"))
	}), log)

	for _, tc := range []struct {
		name, sent string
		keep       bool
	}{
		{"none", "", false},
		{"kept", "abc-123_x.y:z", true},
		{"unsafe", "bad id\n", false},
		{"too long", strings.Repeat("a", 129), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			req := httptest.NewRequest("POST", "/v1/tasks", nil)
			if tc.sent != "" {
				req.Header.Set(reqlog.Header, tc.sent)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			id := rec.Header().Get(reqlog.Header)
			if id == "" || id != seen {
				t.Fatalf("response id %q, context id %q: want the same, not empty", id, seen)
			}
			if tc.keep != (id == tc.sent) {
				t.Errorf("id = %q with %q sent; want kept: %v", id, tc.sent, tc.keep)
			}
			lines := logLines(t, &buf)
			if len(lines) != 2 {
				t.Fatalf("got %d log lines, want 2: %s", len(lines), buf.String())
			}
			if lines[0]["msg"] != "inside" || lines[0]["request_id"] != id {
				t.Errorf("handler's line = %v, want request_id %q", lines[0], id)
			}
			l := lines[1]
			if l["msg"] != "request" || l["level"] != "INFO" || l["method"] != "POST" || l["path"] != "/v1/tasks" ||
				l["status"] != float64(http.StatusTeapot) || l["request_id"] != id || l["bytes"] != float64(15) {
				t.Errorf("request line = %v", l)
			}
			if _, ok := l["duration"]; !ok {
				t.Errorf("request line has no duration: %v", l)
			}
		})
	}
}

func TestHealthAtDebug(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := reqlog.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), log)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))
	if buf.Len() != 0 {
		t.Errorf("GET /healthz logged at Info: %s", buf.String())
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/tasks/x", nil))
	if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["status"] != float64(200) {
		t.Errorf("GET with an empty answer logged %v, want one line with status 200", lines)
	}
}
