package testkit_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalTB records Fatalf instead of failing.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitFor(t *testing.T) {
	n := 0
	testkit.WaitFor(t, time.Second, "three looks", func() bool { n++; return n == 3 })

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.WaitFor(f, 30*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.msg, "waiting for never") {
		t.Errorf("WaitFor on a condition that never holds: %q, want a failure naming it", f.msg)
	}
}

func TestUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if testkit.Until(ctx, func() bool { return false }) {
		t.Error("Until reported a condition that never held")
	}
	if !testkit.Until(context.Background(), func() bool { return true }) {
		t.Error("Until missed a condition that held")
	}
}

func post(t *testing.T, c *http.Client, url, body string) int {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReceiver(t *testing.T) {
	r := testkit.NewReceiver(t)
	if s := post(t, http.DefaultClient, r.HookURL(), `{"a":1}`); s != http.StatusOK {
		t.Errorf("status %d, want 200 by default", s)
	}
	r.SetStatus(http.StatusServiceUnavailable)
	if s := post(t, http.DefaultClient, r.HookURL(), `{"a":2}`); s != http.StatusServiceUnavailable {
		t.Errorf("status %d, want the 503 it was told", s)
	}
	got := r.Deliveries()
	if len(got) != 2 || string(got[0].Body) != `{"a":1}` || string(got[1].Body) != `{"a":2}` ||
		got[0].Header.Get("Content-Type") != "application/json" || got[1].At.Before(got[0].At) {
		t.Errorf("deliveries %+v, want both bodies and headers in order", got)
	}

	// Hung: the request is recorded, its client waits, Hang(false) answers it.
	r.Hang(true)
	answered := make(chan int)
	go func() { answered <- post(t, http.DefaultClient, r.HookURL(), `{"a":3}`) }()
	r.WaitCount(t, 3, 5*time.Second)
	select {
	case s := <-answered:
		t.Fatalf("a hung receiver answered %d", s)
	case <-time.After(50 * time.Millisecond): // a window in which nothing may happen
	}
	r.Hang(false)
	if s := <-answered; s != http.StatusServiceUnavailable {
		t.Errorf("released: status %d, want 503", s)
	}
	if r.Target().HTTP.URL != r.HookURL() {
		t.Errorf("Target %+v, want the hook URL", r.Target())
	}
}

// TestReceiverHangsUntilTheEnd: a request still hanging when the test ends
// does not keep the receiver from closing.
func TestReceiverHangsUntilTheEnd(t *testing.T) {
	c := &http.Client{}
	defer c.CloseIdleConnections()
	done := make(chan int, 1)
	t.Run("hung", func(t *testing.T) {
		r := testkit.NewReceiver(t)
		r.Hang(true)
		go func() { done <- post(t, c, r.HookURL(), `{}`) }()
		r.WaitCount(t, 1, 5*time.Second)
	})
	<-done // the subtest's cleanup closed the receiver
}

// TestReceiverHandle: a handler answers in place of the set status, with
// the body already read, and the request is recorded all the same, Host
// included.
func TestReceiverHandle(t *testing.T) {
	bodies := make(chan string, 1)
	r := testkit.NewReceiverWith(t, testkit.ReceiverConfig{Handle: func(w http.ResponseWriter, _ *http.Request, body []byte) {
		bodies <- string(body)
		w.WriteHeader(http.StatusTeapot)
	}})
	r.SetStatus(http.StatusServiceUnavailable) // the handler answers instead
	if s := post(t, http.DefaultClient, r.HookURL(), `{"a":1}`); s != http.StatusTeapot {
		t.Errorf("status %d, want the handler's 418", s)
	}
	select { // the handler ran before the answer came
	case b := <-bodies:
		if b != `{"a":1}` {
			t.Errorf("handler got body %q", b)
		}
	default:
		t.Error("the handler did not run")
	}
	got := r.Deliveries()
	if len(got) != 1 || string(got[0].Body) != `{"a":1}` || got[0].Host != strings.TrimPrefix(r.URL, "http://") {
		t.Errorf("deliveries %+v, want the request with its body and host %s", got, r.URL)
	}
}

// TestReceiverConns: requests one after another on one client share a
// connection; another client's take one of their own.
func TestReceiverConns(t *testing.T) {
	r := testkit.NewReceiver(t)
	// One connection each at most: a transport puts a connection back in
	// its idle pool from its read loop, after the caller has read the
	// answer, so the next request may come first and dial another one (2
	// connections for 3 requests in a CI run). With MaxConnsPerHost 1 it
	// waits for the first instead.
	c1 := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	c2 := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer c1.CloseIdleConnections()
	defer c2.CloseIdleConnections()
	for range 3 {
		post(t, c1, r.HookURL(), `{}`)
	}
	if n := r.Conns(); n != 1 {
		t.Errorf("3 requests of one client: %d connections, want 1", n)
	}
	post(t, c2, r.HookURL(), `{}`)
	if n := r.Conns(); n != 2 {
		t.Errorf("another client: %d connections, want 2", n)
	}
}

// TestReceiverTLS: a TLS receiver speaks HTTP/2 to its own client, and
// counts its connections too.
func TestReceiverTLS(t *testing.T) {
	protos := make(chan int, 1)
	r := testkit.NewReceiverWith(t, testkit.ReceiverConfig{TLS: true, Handle: func(w http.ResponseWriter, req *http.Request, _ []byte) {
		protos <- req.ProtoMajor
	}})
	if !strings.HasPrefix(r.HookURL(), "https://") {
		t.Errorf("hook URL %s, want https", r.HookURL())
	}
	c := r.Client()
	defer c.CloseIdleConnections()
	if s := post(t, c, r.HookURL(), `{}`); s != http.StatusOK {
		t.Fatalf("status %d, want 200", s)
	}
	select { // the handler ran before the answer came
	case p := <-protos:
		if p != 2 {
			t.Errorf("HTTP/%d, want HTTP/2", p)
		}
	default:
		t.Error("the handler did not run")
	}
	if n, d := r.Conns(), r.Deliveries(); n != 1 || len(d) != 1 {
		t.Errorf("%d connections and %d deliveries, want 1 and 1", n, len(d))
	}
}

// TestReceiverNth: Nth returns a delivery that came, waits for one to
// come, and fails the test when none comes in time.
func TestReceiverNth(t *testing.T) {
	r := testkit.NewReceiver(t)
	post(t, http.DefaultClient, r.HookURL(), `{"a":0}`)
	if d := r.Nth(t, 0, time.Second); string(d.Body) != `{"a":0}` {
		t.Errorf("Nth(0) body %q", d.Body)
	}
	r.Hang(true) // the second request is recorded and its client waits
	answered := make(chan int, 1)
	go func() { answered <- post(t, http.DefaultClient, r.HookURL(), `{"a":1}`) }()
	if d := r.Nth(t, 1, 5*time.Second); string(d.Body) != `{"a":1}` {
		t.Errorf("Nth(1) body %q", d.Body)
	}
	r.Hang(false)
	<-answered

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Nth(f, 2, 30*time.Millisecond)
	}()
	<-done
	if !strings.Contains(f.msg, "waiting for 3 deliveries (got 2)") {
		t.Errorf("Nth of a delivery that never comes: %q, want a failure naming it", f.msg)
	}
}
