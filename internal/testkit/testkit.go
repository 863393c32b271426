// Package testkit holds what the tests of several packages share: WaitFor,
// which polls a condition until a deadline, and Receiver, a webhook
// endpoint that records what toc sends it. Package stack builds a whole
// toc (store, engine, API) on a test server.
//
// It imports task and the standard library only, so that any package's
// tests can use it, the engine's internal ones included.
package testkit

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// PollInterval is how often WaitFor and Until look at their condition.
const PollInterval = 10 * time.Millisecond

// WaitFor polls cond until it holds, and fails the test (naming what it
// waited for) when it does not hold within the given time.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(PollInterval)
	}
}

// Until polls cond until it holds or ctx ends, and reports whether it
// held: for a caller that goes on to report what it found instead of
// failing at the deadline.
func Until(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Delivery is one request a Receiver got.
type Delivery struct {
	At     time.Time // when it arrived
	Host   string    // the Host header, which Header leaves out
	Header http.Header
	Body   []byte
}

// Receiver is a webhook endpoint on 127.0.0.1 that records every request
// it gets (arrival time, headers, body) and answers with the status it was
// told (200 by default), or hangs until told otherwise. It counts the
// connections it accepts. It is closed when the test ends.
type Receiver struct {
	*httptest.Server
	arrived chan struct{} // a value after each delivery, capacity 1
	handle  func(w http.ResponseWriter, r *http.Request, body []byte)

	mu struct {
		sync.Mutex
		got    []Delivery
		conns  int           // connections accepted
		status int           // 0: 200
		body   string        // the answer's body, if any
		hang   chan struct{} // non-nil: requests wait until it is closed
	}
}

// ReceiverConfig is what NewReceiverWith starts. The zero value is
// NewReceiver's receiver.
type ReceiverConfig struct {
	// Handle, if set, answers every request in place of the status and
	// body set by SetStatus and Answer, once the request is recorded (and
	// released, if it hung). body is the request's body, read in full.
	Handle func(w http.ResponseWriter, r *http.Request, body []byte)
	// TLS serves HTTPS, offering HTTP/2 as well as HTTP/1.1, with a
	// certificate that the embedded Server's Client trusts.
	TLS bool
}

// NewReceiver starts a Receiver that answers 200.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	return NewReceiverWith(t, ReceiverConfig{})
}

// NewReceiverWith starts a Receiver as cfg says.
func NewReceiverWith(t testing.TB, cfg ReceiverConfig) *Receiver {
	t.Helper()
	r := &Receiver{arrived: make(chan struct{}, 1), handle: cfg.Handle}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.mu.Lock()
			r.mu.conns++
			r.mu.Unlock()
		}
	}
	if cfg.TLS {
		r.EnableHTTP2 = true
		r.StartTLS()
	} else {
		r.Start()
	}
	t.Cleanup(func() {
		r.Hang(false) // hung requests answer, so that Close does not wait for them
		r.Close()
	})
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.mu.got = append(r.mu.got, Delivery{At: now, Host: req.Host, Header: req.Header.Clone(), Body: body})
	hang := r.mu.hang
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
			return
		}
	}
	if r.handle != nil {
		r.handle(w, req, body)
		return
	}
	r.mu.Lock()
	status, text := r.mu.status, r.mu.body
	r.mu.Unlock()
	if text != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	if status != 0 {
		w.WriteHeader(status)
	}
	if text != "" {
		_, _ = io.WriteString(w, text)
	}
}

// SetStatus makes the receiver answer status (0: 200) from now on.
func (r *Receiver) SetStatus(status int) { r.Answer(status, "") }

// Answer makes the receiver answer status (0: 200) with body from now on.
func (r *Receiver) Answer(status int, body string) {
	r.mu.Lock()
	r.mu.status, r.mu.body = status, body
	r.mu.Unlock()
}

// Hang makes requests wait without an answer (recorded all the same) until
// Hang(false), their client gives up, or the test ends.
func (r *Receiver) Hang(hang bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case hang && r.mu.hang == nil:
		r.mu.hang = make(chan struct{})
	case !hang && r.mu.hang != nil:
		close(r.mu.hang)
		r.mu.hang = nil
	}
}

// Deliveries returns a copy of what the receiver got so far, in order of
// arrival.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.mu.got...)
}

// Count returns how many requests the receiver got.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.got)
}

// Conns returns how many connections the receiver accepted.
func (r *Receiver) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.conns
}

// Arrived receives a value after a request arrives (several arrivals
// between two receives leave one value): an event to wait on instead of
// polling.
func (r *Receiver) Arrived() <-chan struct{} { return r.arrived }

// WaitCount waits until the receiver got at least n requests, and fails
// the test after within.
func (r *Receiver) WaitCount(t testing.TB, n int, within time.Duration) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for r.Count() < n {
		select {
		case <-r.arrived:
		case <-timer.C:
			t.Fatalf("timed out after %s waiting for %d deliveries (got %d)", within, n, r.Count())
		}
	}
}

// Nth waits until the receiver got its i-th request (counting from 0),
// returns it, and fails the test after within.
func (r *Receiver) Nth(t testing.TB, i int, within time.Duration) Delivery {
	t.Helper()
	r.WaitCount(t, i+1, within)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.got[i]
}

// HookURL is the URL tasks are delivered to.
func (r *Receiver) HookURL() string { return r.URL + "/hook" }

// Target is an HTTP target delivering to the receiver.
func (r *Receiver) Target() task.Target {
	return task.Target{HTTP: &task.HTTPTarget{URL: r.HookURL()}}
}
