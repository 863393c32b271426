package httpapi_test

import (
	"context"
	"encoding/json"
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
	// Answered all the same, never with an empty 200: as a long poll that
	// ended ({"tasks":[]}), or as a request cut short (503).
	if rec.Body.Len() == 0 {
		t.Errorf("a cancelled claim answered %d with an empty body", rec.Code)
	}
}

// TestCancelledRequestAnswered: a request whose context ends before its
// write (toc's server cancels every request's context at shutdown, with
// the client still there) is answered 503, not left unwritten: net/http
// then sent an empty 200, which a client took for success (a PATCH cut
// short at SIGTERM did, in e2e's disk-full test).
func TestCancelledRequestAnswered(t *testing.T) {
	h := tkstack.Start(t, tkstack.Options{Store: memstore.New()}).Handler
	req := httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader(`{"app":"shop","delay":"1h","target":{"pull":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &created); rec.Code != http.StatusCreated || err != nil {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req = httptest.NewRequestWithContext(ctx, http.MethodPatch, "/v1/tasks/"+created.ID, strings.NewReader(`{"delay":"2h"}`))
	req.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":"not_ready"`) {
		t.Errorf("a PATCH whose context ended answered %d %q, want 503 not_ready", rec.Code, rec.Body)
	}
}
