package openapi_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/store/memstore"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
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
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	hs := tkstack.Start(t, tkstack.Options{Store: memstore.New(), Logger: log, Access: acc,
		Handler: func(h http.Handler) http.Handler { return reqlog.RequestID(h, log) }})
	defer hs.Stop()
	sc := &checker{t: t, doc: c.doc, base: hs.URL, seen: c.seen}
	for _, cl := range calls {
		sc.do(cl)
	}
}
