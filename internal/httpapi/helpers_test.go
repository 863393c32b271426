package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/testkit"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
	"github.com/toc-dev/toc/task"
)

// These tests run the real thing: the HTTP API over an engine over a Pebble
// store in a temp dir, delivering to a real webhook receiver.

type server struct {
	be     *backend
	url    string
	dir    string
	client *client.Client
	eng    *engine.Engine
	stop   func()
}

func startServer(t *testing.T, dir string, mod func(*engine.Config)) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	be := openBackend(t, dir, log)
	opts := tkstack.Options{
		Store:   be.store,
		Logger:  log,
		Engine:  mod,
		Handler: func(h http.Handler) http.Handler { return specChecked(t, h, log) },
	}
	if be.node != nil {
		opts.Engine = func(cfg *engine.Config) {
			cfg.Index, cfg.ShardFor = be.node, be.shardFor
			// As the server wires it: the node steps its shards' schedules.
			cfg.OwnsSchedule = func(id task.ID) bool { return be.node.OwnsShard(int(id.Shard())) }
			if mod != nil {
				mod(cfg)
			}
		}
		opts.Attach = func(eng *engine.Engine) { be.node.Attach(eng.Cluster()) }
		opts.Node = be.node
	}
	st := tkstack.Start(t, opts)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			st.Stop()
			if err := be.close(); err != nil {
				t.Errorf("close store: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &server{be: be, url: st.URL, dir: dir, client: st.Client(""), eng: st.Engine, stop: stop}
}

func waitState(t *testing.T, s *server, id task.ID, want task.State, within time.Duration) *task.Task {
	t.Helper()
	var last *task.Task
	testkit.WaitFor(t, within, "task "+id.String()+" to be "+string(want), func() bool {
		tk, err := s.client.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		last = tk
		return tk.State == want
	})
	return last
}
