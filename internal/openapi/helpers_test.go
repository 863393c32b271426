package openapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/ui"
)

// Tokens of the test server: an admin, and one that reaches app shop.
const (
	adminToken = "admin-token"
	shopToken  = "shop-token"
)

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// mounted are the routes serve.go adds to httpapi's own (Config.Mount and
// Config.Public), as wired here. The dashboard's assets (GET /ui/) are not
// API and not in the spec.
var mounted = []string{"GET /v1/stats", "GET /metrics", "GET /openapi.json"}

// stack is toc wired as serve.go wires it.
type stack struct {
	url  string
	eng  *engine.Engine
	stop func()
}

func startStack(t *testing.T) *stack {
	t.Helper()
	log := slog.New(reqlog.NewHandler(slog.NewTextHandler(io.Discard, nil)))
	st, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var eng *engine.Engine
	m := metrics.New(prometheus.NewRegistry(), func() engine.Stats { return eng.Stats() }, st)
	eng, err = engine.New(engine.Config{
		Store:  st,
		Sinks:  map[string]sink.Sink{"http": httpsink.New(httpsink.Config{})},
		Logger: log,
		Hooks:  m.Hooks(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Config{
		Engine: eng, Logger: log, Access: acc,
		Mount: map[string]http.Handler{
			"GET /v1/stats": ui.StatsHandler(m, m, eng.Stats),
			"GET /metrics":  m.Handler(),
		},
		Public: map[string]http.Handler{
			"GET /ui/":          ui.Handler(),
			"GET /openapi.json": openapi.Handler(),
		},
	})
	hs := httptest.NewServer(reqlog.RequestID(api, log))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := eng.Stop(ctx); err != nil {
				t.Errorf("stop engine: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		hs.Close()
		stop()
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &stack{url: hs.URL, eng: eng, stop: stop}
}

// receiver answers every push with status.
func receiver(t *testing.T, status int) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s.URL + "/hook"
}
