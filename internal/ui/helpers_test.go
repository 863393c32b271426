package ui_test

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

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/internal/ui"
	"github.com/toc-dev/toc/task"
)

// Tokens of the test servers: an admin, and one that reaches app shop.
const (
	adminToken = "admin-token"
	shopToken  = "shop-token"
)

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// stack is toc wired as serve.go wires it: engine over Pebble with the
// metrics' hooks, the API with the stats, metrics, dashboard and OpenAPI
// routes, behind the request-id middleware.
type stack struct {
	url  string
	eng  *engine.Engine
	m    *metrics.Metrics
	logs *testsvc.LockedBuffer
}

func startStack(t *testing.T, tokens bool) *stack {
	t.Helper()
	return startStackOn(t, tokens, nil)
}

// startStackOn is startStack on the clock clk (nil: the wall clock).
func startStackOn(t *testing.T, tokens bool, clk clock.Clock) *stack {
	t.Helper()
	logs := &testsvc.LockedBuffer{}
	log := slog.New(reqlog.NewHandler(slog.NewTextHandler(logs, nil)))
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
		Clock:  clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var acc *httpapi.Access
	if tokens {
		acc, err = httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
		if err != nil {
			t.Fatal(err)
		}
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
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &stack{url: hs.URL, eng: eng, m: m, logs: logs}
}

func (s *stack) client(token string) *client.Client {
	return client.New(client.Config{BaseURL: s.url, Token: token})
}

// receiver is a webhook endpoint that fails (500) until told otherwise.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	fail bool
}

func newReceiver(t *testing.T, fail bool) *receiver {
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		fail := r.fail
		r.mu.Unlock()
		if fail {
			http.Error(w, "receiver is down for maintenance", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setFail(fail bool) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

func (r *receiver) target() task.Target {
	return task.Target{HTTP: &task.HTTPTarget{URL: r.URL + "/hook"}}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState waits until the task is in state want.
func waitState(t *testing.T, c *client.Client, id task.ID, want task.State) {
	t.Helper()
	waitFor(t, 10*time.Second, "task "+id.String()+" to be "+string(want), func() bool {
		tk, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return tk.State == want
	})
}
