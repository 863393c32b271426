package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/store/memstore"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
	"github.com/toc-dev/toc/internal/testsvc"
)

// TestClientGoneIsNotAnError: a long-poll claim whose client gives up is
// not logged as a failed request (it was, as an ERROR with a 500).
func TestClientGoneIsNotAnError(t *testing.T) {
	var logs testsvc.LockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	h := tkstack.Start(t, tkstack.Options{Store: memstore.New(), Logger: log}).Handler

	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/apps/workers/claim", strings.NewReader(`{"wait":"30s"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	cancel()
	<-done
	if s := logs.String(); strings.Contains(s, "level=ERROR") {
		t.Errorf("a claim cut short by its client was logged as an error:\n%s", s)
	}
	// Answered all the same: a request context also ends when toc shuts
	// down, with the client still there, and an empty 200 would read as
	// success (a PATCH cut short at SIGTERM did, in e2e's disk-full test).
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":"not_ready"`) {
		t.Errorf("a cancelled request answered %d %q, want 503 not_ready", rec.Code, rec.Body)
	}
}
