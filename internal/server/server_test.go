package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/server"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start starts an embedded server on a temporary directory and a free
// loopback port; the test shuts it down.
func start(t *testing.T) (*server.Server, *testsvc.LockedBuffer) {
	t.Helper()
	o := server.DefaultOptions()
	o.Data, o.Listen = t.TempDir(), "127.0.0.1:0"
	stdout := new(testsvc.LockedBuffer)
	o.Stdout = stdout
	s, err := server.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, stdout
}

// schedule creates a task due now that is pushed to url.
func schedule(t *testing.T, s *server.Server, url string) {
	t.Helper()
	cl := client.New(client.Config{BaseURL: s.URL()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Payload: json.RawMessage(`{}`),
		Target: task.Target{HTTP: &task.HTTPTarget{URL: url}}}); err != nil {
		t.Fatal(err)
	}
}

// TestServerLifecycle: a started server says where it listens, serves the
// API and delivers; Shutdown stops it, and a second Shutdown returns the
// first one's result.
func TestServerLifecycle(t *testing.T) {
	delivered := make(chan struct{}, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case delivered <- struct{}{}:
		default:
		}
	}))
	defer recv.Close()
	s, stdout := start(t)
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || s.Addr() == nil {
		t.Errorf("URL %q, Addr %v: want a loopback address", s.URL(), s.Addr())
	}
	if want := "toc listening on " + s.URL() + "\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	schedule(t, s, recv.URL)
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Error("the task was not delivered within 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// TestShutdownReturnsContextError: a delivery that outlasts the shutdown's
// context makes Shutdown return that context's error, the server stopped
// all the same.
func TestShutdownReturnsContextError(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // hangs until the attempt is given up or the test ends
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer recv.Close()
	defer close(release)
	s, _ := start(t)
	schedule(t, s, recv.URL)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery did not start within 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a delivery under way past its context: %v, want context.DeadlineExceeded", err)
	}
}
