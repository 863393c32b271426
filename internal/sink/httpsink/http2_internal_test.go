package httpsink

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestHTTP2OverTLS: the default client speaks HTTP/2 to a receiver that
// offers it over TLS (one connection carries many pushes at once), under
// Guard too, whose pools copy the transport and dial for it.
func TestHTTP2OverTLS(t *testing.T) {
	t.Parallel()
	protos := make(chan int, 4)
	srv := testkit.NewReceiverWith(t, testkit.ReceiverConfig{TLS: true, Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
		protos <- r.ProtoMajor
		w.WriteHeader(http.StatusNoContent)
	}})
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

// TestHTTP2SharesOneConnection: over HTTP/2, pushes under way at once
// share one connection (counted by the receiver), under Guard too; and
// Guard's check applies to the TLS connections HTTP/2 rides on: a policy
// that refuses loopback gets no connection at all.
func TestHTTP2SharesOneConnection(t *testing.T) {
	t.Parallel()
	const inFlight = 16
	for _, tt := range []struct {
		name  string
		guard func(string) netguard.Policy
	}{
		{"default client", nil},
		{"guard", func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan int, inFlight)
			proceed := make(chan struct{}, inFlight)
			srv := testkit.NewReceiverWith(t, testkit.ReceiverConfig{TLS: true, Handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
				arrived <- r.ProtoMajor
				<-proceed
				w.WriteHeader(http.StatusNoContent)
			}})
			s := New(Config{Guard: tt.guard})
			t.Cleanup(s.CloseIdleConnections)
			s.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			push := func() error {
				tk := &task.Task{ID: task.ID{1}, App: "billing", Payload: []byte(`{}`), Target: task.Target{HTTP: &task.HTTPTarget{URL: srv.URL + "/hook"}}}
				return s.Deliver(context.Background(), tk)
			}
			// One push opens the connection; then inFlight at once.
			proceed <- struct{}{}
			if err := push(); err != nil {
				t.Fatal(err)
			}
			<-arrived
			errs := make(chan error, inFlight)
			for range inFlight {
				go func() { errs <- push() }()
			}
			for range inFlight {
				select {
				case p := <-arrived:
					if p != 2 {
						t.Errorf("a push came over HTTP/%d, want HTTP/2", p)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the pushes are not all under way at once after 10s")
				}
			}
			for range inFlight {
				proceed <- struct{}{}
			}
			for range inFlight {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			if conns := srv.Conns(); conns != 1 {
				t.Errorf("%d pushes, %d at once, took %d connections, want 1", inFlight+1, inFlight, conns)
			}
		})
	}
	t.Run("guard refuses", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewReceiverWith(t, testkit.ReceiverConfig{TLS: true, Handle: func(_ http.ResponseWriter, r *http.Request, _ []byte) {
			t.Errorf("a refused push arrived over HTTP/%d", r.ProtoMajor)
		}})
		s := New(Config{Guard: func(string) netguard.Policy { return netguard.Policy{} }})
		t.Cleanup(s.CloseIdleConnections)
		s.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tk := &task.Task{ID: task.ID{1}, App: "billing", Payload: []byte(`{}`), Target: task.Target{HTTP: &task.HTTPTarget{URL: srv.URL + "/hook"}}}
		var be *netguard.BlockedError
		if err := s.Deliver(context.Background(), tk); !errors.As(err, &be) {
			t.Fatalf("Deliver = %v, want a *netguard.BlockedError", err)
		}
	})
}

// TestPolicyFields: clientFor finds the pool of a policy without
// AllowedHosts by AllowPrivate alone (noHosts), which is right only while
// those are a policy's only fields. A field added to netguard.Policy
// fails this test: give it its place in that lookup.
func TestPolicyFields(t *testing.T) {
	t.Parallel()
	pt := reflect.TypeFor[netguard.Policy]()
	var names []string
	for i := range pt.NumField() {
		names = append(names, pt.Field(i).Name)
	}
	if want := []string{"AllowPrivate", "AllowedHosts"}; !slices.Equal(names, want) {
		t.Errorf("netguard.Policy has fields %v; clientFor's lookup knows %v", names, want)
	}
}
