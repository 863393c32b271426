package loadgen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
)

// TestTocRoundRobin: with the nodes of a cluster, each Schedule call goes to
// the next node in turn, single requests and batches alike.
func TestTocRoundRobin(t *testing.T) {
	t.Parallel()
	hc := loadgen.NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	var got [3]atomic.Int64
	var clients []*client.Client
	for i := range got {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got[i].Add(1)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/tasks:batch" {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(`{"results":[{"task":{},"created":true},{"task":{},"created":true}]}`))
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{}`))
		}))
		defer srv.Close()
		clients = append(clients, client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc}))
	}
	sys, err := loadgen.NewToc(loadgen.TocConfig{Clients: clients, Delivery: loadgen.DeliveryNone})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	due := time.Now().Add(time.Hour)
	ctx := context.Background()
	for seq := range 6 {
		if err := sys.Schedule(ctx, []loadgen.Job{{Seq: seq, DueAt: due}}); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 6; seq < 12; seq += 2 {
		if err := sys.Schedule(ctx, []loadgen.Job{{Seq: seq, DueAt: due}, {Seq: seq + 1, DueAt: due}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range got {
		if n := got[i].Load(); n != 3 {
			t.Errorf("node %d got %d requests, want 3 (2 single, 1 batch)", i, n)
		}
	}
}

func TestTocConfigClients(t *testing.T) {
	t.Parallel()
	for _, cs := range [][]*client.Client{nil, {nil}} {
		if _, err := loadgen.NewToc(loadgen.TocConfig{Clients: cs, Delivery: loadgen.DeliveryNone}); err == nil {
			t.Errorf("NewToc with Clients %v: no error", cs)
		}
	}
}
