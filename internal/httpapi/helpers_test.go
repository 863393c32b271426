package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
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
	st := be.store
	cfg := engine.Config{
		Store:  st,
		Sinks:  map[string]sink.Sink{"http": httpsink.New(httpsink.Config{})},
		Logger: log,
	}
	if be.node != nil {
		cfg.Index, cfg.ShardFor = be.node, be.shardFor
		// As serve.go wires it: the node steps its shards' schedules.
		cfg.OwnsSchedule = func(id task.ID) bool { return be.node.OwnsShard(int(id.Shard())) }
	}
	if mod != nil {
		mod(&cfg)
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if be.node != nil {
		be.node.Attach(eng)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if be.node != nil {
		if err := be.node.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewServer(specChecked(t, httpapi.New(httpapi.Config{Engine: eng, Logger: log, MaxPayload: cfg.MaxPayload}), log))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			hs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if be.node != nil {
				if err := be.node.Stop(ctx); err != nil {
					t.Errorf("leave the cluster: %v", err)
				}
			}
			if err := eng.Stop(ctx); err != nil {
				t.Errorf("stop engine: %v", err)
			}
			if err := be.close(); err != nil {
				t.Errorf("close store: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &server{be: be, url: hs.URL, dir: dir, client: client.New(client.Config{BaseURL: hs.URL}), eng: eng, stop: stop}
}

type arrival struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint that records what toc sends it.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []arrival
	status int // answer; 0 means 200
	notify chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{notify: make(chan struct{}, 1)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, arrival{at: now, header: req.Header.Clone(), body: body})
		status := r.status
		r.mu.Unlock()
		select {
		case r.notify <- struct{}{}:
		default:
		}
		if status != 0 {
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setStatus(s int) {
	r.mu.Lock()
	r.status = s
	r.mu.Unlock()
}

func (r *receiver) arrivals() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.got...)
}

func (r *receiver) target() task.Target {
	return task.Target{HTTP: &task.HTTPTarget{URL: r.URL + "/hook"}}
}

// waitFor polls cond until it holds or the deadline passes.
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

func waitState(t *testing.T, s *server, id task.ID, want task.State, within time.Duration) *task.Task {
	t.Helper()
	var last *task.Task
	waitFor(t, within, "task "+id.String()+" to be "+string(want), func() bool {
		tk, err := s.client.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		last = tk
		return tk.State == want
	})
	return last
}
