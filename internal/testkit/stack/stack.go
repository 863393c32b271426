// Package stack builds a whole toc for a test, wired as the server wires
// it: a store (Pebble in a temp dir unless the test brings its own), an
// engine over it delivering to HTTP targets, and the API on an httptest
// server on 127.0.0.1; optionally the metrics, the dashboard and the
// OpenAPI document beside it, or a cluster node beside the engine.
package stack

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/ui"
)

// StopTimeout bounds Stop's wait for the engine and the node.
const StopTimeout = 5 * time.Second

// Node runs beside the engine, as a cluster node does: started after the
// engine, stopped before it.
type Node interface {
	Start(context.Context) error
	Stop(context.Context) error
}

// Options says what to build. The zero value is an engine over Pebble in
// a temp dir and the bare API, logging nowhere.
type Options struct {
	// Dir is Pebble's directory; "" is a new temp dir. Unused with Store.
	Dir string
	// Store replaces Pebble. The stack does not close it: its owner does,
	// after Stop.
	Store store.Store
	// Logger is the engine's and the API's; nil discards.
	Logger *slog.Logger
	// Engine, if set, adjusts the engine's config before engine.New. The
	// API's MaxPayload follows the engine's.
	Engine func(*engine.Config)
	// Attach, if set, is called with the engine after engine.New and
	// before it starts; Node, if set, is started after the engine and
	// stopped before it.
	Attach func(*engine.Engine)
	Node   Node
	// Metrics gives the engine the metrics' hooks and mounts GET /metrics.
	Metrics bool
	// Dashboard (with Metrics) also mounts GET /v1/stats, serves the
	// dashboard (GET /ui/) and GET /openapi.json, and puts the request-id
	// middleware in front, as the server (internal/server) does.
	Dashboard bool
	// Access is the API's tokens; nil: no tokens needed.
	Access *httpapi.Access
	// API, if set, adjusts the API's config before httpapi.New.
	API func(*httpapi.Config)
	// Handler, if set, wraps the API's handler (outermost).
	Handler func(http.Handler) http.Handler
}

// Stack is a running toc. Stop (also run when the test ends) takes it
// down.
type Stack struct {
	URL     string
	Engine  *engine.Engine
	Store   store.Store
	Metrics *metrics.Metrics // with Options.Metrics
	Handler http.Handler     // what the server serves
	Server  *httptest.Server

	t     testing.TB
	opts  Options
	close func() error // the store's, when the stack opened it
	once  sync.Once
}

// Start builds and starts a stack; the test fails if it cannot.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stack{t: t, opts: opts, Store: opts.Store}
	if s.Store == nil {
		dir := opts.Dir
		if dir == "" {
			dir = t.TempDir()
		}
		st, err := pebblestore.Open(pebblestore.Options{Dir: dir, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.Store, s.close = st, st.Close
	}
	// Registered before the steps that can fail, so that what started is
	// stopped.
	t.Cleanup(s.Stop)

	var eng *engine.Engine
	cfg := engine.Config{
		Store:  s.Store,
		Sinks:  map[string]sink.Sink{"http": httpsink.New(httpsink.Config{})},
		Logger: log,
	}
	if opts.Metrics {
		counts, ok := s.Store.(store.Counter)
		if !ok {
			t.Fatalf("stack: Options.Metrics needs a store that counts its tasks (store.Counter), not %T", s.Store)
		}
		// The hooks exist before the engine; the stats read it later.
		s.Metrics = metrics.New(prometheus.NewRegistry(), func() engine.Stats { return eng.Stats() }, counts)
		cfg.Hooks = s.Metrics.Hooks()
	}
	if opts.Engine != nil {
		opts.Engine(&cfg)
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Engine = eng
	if opts.Attach != nil {
		opts.Attach(eng)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if opts.Node != nil {
		if err := opts.Node.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	acfg := httpapi.Config{Engine: eng, Logger: log, Access: opts.Access, MaxPayload: cfg.MaxPayload}
	if opts.Metrics {
		acfg.Mount = map[string]http.Handler{"GET /metrics": s.Metrics.Handler()}
		if opts.Dashboard {
			acfg.Mount["GET /v1/stats"] = ui.StatsHandler(s.Metrics, s.Metrics, eng.Stats)
			acfg.Public = map[string]http.Handler{
				"GET /ui/":          ui.Handler(),
				"GET /openapi.json": openapi.Handler(),
			}
		}
	}
	if opts.API != nil {
		opts.API(&acfg)
	}
	var h http.Handler = httpapi.New(acfg)
	if opts.Dashboard {
		h = reqlog.RequestID(h, log)
	}
	if opts.Handler != nil {
		h = opts.Handler(h)
	}
	s.Handler = h
	s.Server = httptest.NewServer(h)
	s.URL = s.Server.URL
	return s
}

// Client is a client of the stack's API with token ("" for none).
func (s *Stack) Client(token string) *client.Client {
	return client.New(client.Config{BaseURL: s.URL, Token: token})
}

// Stop closes the server, stops the node and the engine, and closes the
// store if the stack opened it; errors fail the test. Calls after the
// first do nothing.
func (s *Stack) Stop() {
	s.once.Do(func() {
		if s.Server != nil {
			s.Server.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if s.opts.Node != nil && s.Engine != nil {
			if err := s.opts.Node.Stop(ctx); err != nil {
				s.t.Errorf("stop the node: %v", err)
			}
		}
		if s.Engine != nil {
			if err := s.Engine.Stop(ctx); err != nil {
				s.t.Errorf("stop engine: %v", err)
			}
		}
		if s.close != nil {
			if err := s.close(); err != nil {
				s.t.Errorf("close store: %v", err)
			}
		}
	})
}
