package httpsink

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/task"
)

// TestHTTP2OverTLS: the default client speaks HTTP/2 to a receiver that
// offers it over TLS (one connection carries many pushes at once), under
// Guard too, whose pools copy the transport and dial for it.
func TestHTTP2OverTLS(t *testing.T) {
	t.Parallel()
	protos := make(chan int, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.ProtoMajor
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for _, guard := range []func(string) netguard.Policy{
		nil,
		func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} },
	} {
		s := New(Config{Guard: guard})
		t.Cleanup(s.CloseIdleConnections)
		// Trust the test server's certificate, as a receiver's would be.
		s.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tk := &task.Task{ID: task.ID{1}, App: "billing", Payload: []byte(`{}`), Target: task.Target{HTTP: &task.HTTPTarget{URL: srv.URL + "/hook"}}}
		if err := s.Deliver(context.Background(), tk); err != nil {
			t.Fatalf("guard %v: %v", guard != nil, err)
		}
		if got := <-protos; got != 2 {
			t.Errorf("guard %v: the push came over HTTP/%d, want HTTP/2", guard != nil, got)
		}
	}
}

// TestIdlePoolSizedToInFlight: the default client keeps as many idle
// connections to a receiver as it is told pushes may run at once, in
// Guard's pools too.
func TestIdlePoolSizedToInFlight(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want int }{{0, MaxIdleConnsPerHostDefault}, {-1, MaxIdleConnsPerHostDefault}, {4096, 4096}} {
		s := New(Config{MaxIdleConnsPerHost: tt.in, Guard: func(string) netguard.Policy { return netguard.Policy{} }})
		for _, c := range []*http.Client{s.client, s.clientFor("billing")} {
			if got := c.Transport.(*http.Transport).MaxIdleConnsPerHost; got != tt.want {
				t.Errorf("MaxIdleConnsPerHost %d: the pool keeps %d idle connections per receiver, want %d", tt.in, got, tt.want)
			}
		}
	}
}
