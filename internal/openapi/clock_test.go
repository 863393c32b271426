package openapi_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/store/memstore"
)

// clockCalls checks the clock routes: on c's server (the wall clock) and
// on a server on a test clock, whose statuses count for c.
func clockCalls(t *testing.T, c *checker) {
	t.Helper()
	c.do(call{op: "GET /v1/admin/clock", want: 200})
	c.do(call{op: "GET /v1/admin/clock", token: shopToken, want: 403})
	c.do(call{op: "POST /v1/admin/clock", body: `{"advance":"30m"}`, want: 409})

	log := slog.New(slog.DiscardHandler)
	eng, err := engine.New(engine.Config{Store: memstore.New(), Logger: log, Clock: clock.NewTest(time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Stop(ctx)
	}()
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(reqlog.RequestID(httpapi.New(httpapi.Config{Engine: eng, Logger: log, Access: acc}), log))
	defer hs.Close()
	tc := &checker{t: t, doc: c.doc, base: hs.URL, seen: c.seen}
	tc.do(call{op: "GET /v1/admin/clock", want: 200})
	tc.do(call{op: "POST /v1/admin/clock", body: `{"advance":"30m"}`, want: 200})
	tc.do(call{op: "POST /v1/admin/clock", body: `{"to":"2027-03-15T00:00:00Z"}`, want: 200})
	tc.do(call{op: "POST /v1/admin/clock", body: `{"to":"2027-03-14T09:00:00Z"}`, want: 400}) // back
	tc.do(call{op: "POST /v1/admin/clock", body: `{"advance":"soon"}`, want: 400})
	tc.do(call{op: "POST /v1/admin/clock", token: shopToken, body: `{"advance":"1m"}`, want: 403})
}
