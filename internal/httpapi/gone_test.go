package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/internal/testsvc"
)

// TestClientGoneIsNotAnError: a long-poll claim whose client gives up is
// not logged as a failed request (it was, as an ERROR with a 500).
func TestClientGoneIsNotAnError(t *testing.T) {
	var logs testsvc.LockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	eng, err := engine.New(engine.Config{Store: memstore.New(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer eng.Stop(context.Background())
	h := httpapi.New(httpapi.Config{Engine: eng, Logger: log})

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
}
