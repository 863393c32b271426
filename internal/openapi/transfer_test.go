package openapi_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/store/memstore"
)

func init() {
	// The bodies of the transfer routes that are not JSON documents.
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
}

// storeOnlyCheck sends calls to a server whose store has no backup of its
// own (memstore, like a cluster node's SQL store): the statuses count for
// c.
func storeOnlyCheck(t *testing.T, c *checker, calls []call) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	eng, err := engine.New(engine.Config{Store: memstore.New(), Logger: log})
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
	sc := &checker{t: t, doc: c.doc, base: hs.URL, seen: c.seen}
	for _, cl := range calls {
		sc.do(cl)
	}
}
