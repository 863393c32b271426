package httpapi_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/testkit"
)

// connServer is an HTTP server behind a ConnLimiter: GET /healthz answers
// at once, GET /hold waits until release is called.
func connServer(t *testing.T, limits httpapi.ConnLimits) (*httptest.Server, *httpapi.ConnLimiter, func()) {
	t.Helper()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("GET /hold", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "held")
	})
	if limits.Logger == nil {
		limits.Logger = slog.New(slog.DiscardHandler)
	}
	lim := httpapi.NewConnLimiter(limits)
	hs := httptest.NewUnstartedServer(mux)
	hs.Listener = lim.Listener(hs.Listener)
	hs.Config.ConnState = lim.ConnState // httptest chains its own hook to it
	hs.Start()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() {
		free()
		hs.Close()
	})
	return hs, lim, free
}

// rawConn is a client connection that sends requests by hand, so that the
// test decides when it is idle.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr, from string) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path and returns the answer's status, or the error that
// ended the connection.
func (c *rawConn) get(path string) (int, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: toc\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// send sends GET path without reading the answer.
func (c *rawConn) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: toc\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// closedByServer reports whether the server has closed c (a read ends
// with EOF or a reset) within the deadline, rather than leaving it open.
func (c *rawConn) closedByServer(within time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(within))
	_, err := c.br.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// refused reports whether a new connection from from is refused at once:
// reset while it is set up, or closed by the server right after.
func refused(t *testing.T, addr, from string) bool {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNRESET)
	}
	defer c.Close()
	return (&rawConn{Conn: c, br: bufio.NewReader(c)}).closedByServer(5 * time.Second)
}

func waitStats(t *testing.T, lim *httpapi.ConnLimiter, what string, cond func(httpapi.ConnStats) bool) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, what, func() bool { return cond(lim.Stats()) })
}

// TestConnLimitsReclaimIdle is issue 21's finding 2 at a small scale:
// clients that send one request and then keep their connections idle
// filled the server's file descriptors, and new clients got nothing. With
// a cap of 4 connections, 4 idle ones do not keep a fifth client out: the
// oldest idle connection is closed to make room.
func TestConnLimitsReclaimIdle(t *testing.T) {
	t.Parallel()
	hs, lim, _ := connServer(t, httpapi.ConnLimits{Max: 4, PerClient: 4})
	addr := hs.Listener.Addr().String()
	var idle []*rawConn
	for i := range 4 {
		c := dial(t, addr, "")
		if code, err := c.get("/healthz"); code != 200 {
			t.Fatalf("idle client %d: %d %v", i, code, err)
		}
		idle = append(idle, c)
		// Idle in this order (the server marks a connection idle after
		// its answer is written, in its own time).
		waitStats(t, lim, "idle connections", func(s httpapi.ConnStats) bool { return s.Open == i+1 && s.Waiting == i+1 })
	}

	// A new client gets its answer, on a fresh connection.
	fresh := &http.Client{Transport: &http.Transport{}}
	defer fresh.CloseIdleConnections()
	resp, err := fresh.Get(hs.URL + "/healthz")
	if err != nil {
		t.Fatalf("a new client at the cap: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a new client at the cap: %s", resp.Status)
	}
	// The oldest idle connection made room; the others are still served.
	if !idle[0].closedByServer(5 * time.Second) {
		t.Error("the oldest idle connection was not closed")
	}
	for i, c := range idle[1:] {
		if code, err := c.get("/healthz"); code != 200 {
			t.Errorf("idle client %d after the reclaim: %d %v", i+1, code, err)
		}
	}
	if s := lim.Stats(); s.Open > 4 || s.Reclaimed < 1 || s.Refused != 0 {
		t.Errorf("stats %+v, want at most 4 open, a reclaim, no refusal", s)
	}
}

// TestConnLimitsRefuse checks that past a cap with no connection to close a
// new connection is refused at once (closed, not left hanging), that one
// client's cap leaves room for another client, and that a connection that
// sent nothing is closed to make room only after its grace.
func TestConnLimitsRefuse(t *testing.T) {
	t.Parallel()
	hs, lim, release := connServer(t, httpapi.ConnLimits{Max: 4, PerClient: 2, FreshGrace: time.Hour})
	addr := hs.Listener.Addr().String()
	// Client A (127.0.0.1) holds two connections busy.
	var busy []*rawConn
	for range 2 {
		c := dial(t, addr, "127.0.0.1")
		c.send(t, "/hold")
		busy = append(busy, c)
	}
	waitStats(t, lim, "2 busy connections", func(s httpapi.ConnStats) bool { return s.Open == 2 && s.Waiting == 0 })
	// A third of A's is refused at once.
	if !refused(t, addr, "127.0.0.1") {
		t.Fatal("a connection past the per-client cap was left open")
	}
	// Client B (127.0.0.2) is served, and B's second connection, silent,
	// is young: it is kept.
	b := dial(t, addr, "127.0.0.2")
	if code, err := b.get("/healthz"); code != 200 {
		t.Fatalf("another client beside a full one: %d %v", code, err)
	}
	b.send(t, "/hold")
	silent := dial(t, addr, "127.0.0.2")
	waitStats(t, lim, "4 open, 1 waiting", func(s httpapi.ConnStats) bool { return s.Open == 4 && s.Waiting == 1 })
	// At the cap, with only a young silent connection waiting: refused.
	if !refused(t, addr, "127.0.0.3") {
		t.Fatal("a connection past the cap was left open")
	}
	if silent.closedByServer(100 * time.Millisecond) {
		t.Fatal("a silent connection within its grace was closed")
	}
	if s := lim.Stats(); s.Refused != 2 || s.Reclaimed != 0 {
		t.Errorf("stats %+v, want 2 refused, none reclaimed", s)
	}
	// Once the busy ones are answered and idle, new clients get answers.
	release()
	for _, c := range busy {
		if _, err := http.ReadResponse(c.br, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := http.ReadResponse(b.br, nil); err != nil {
		t.Fatal(err)
	}
	waitStats(t, lim, "4 waiting connections", func(s httpapi.ConnStats) bool { return s.Waiting == 4 })
	for _, from := range []string{"127.0.0.1", "127.0.0.3"} {
		if code, err := dial(t, addr, from).get("/healthz"); code != 200 {
			t.Fatalf("a client from %s after the load: %d %v", from, code, err)
		}
	}
}

// TestConnLimitsSilent checks that connections that were accepted and sent
// nothing are closed to make room once their grace has passed.
func TestConnLimitsSilent(t *testing.T) {
	t.Parallel()
	hs, lim, _ := connServer(t, httpapi.ConnLimits{Max: 2, PerClient: 2, FreshGrace: time.Nanosecond})
	addr := hs.Listener.Addr().String()
	s1, s2 := dial(t, addr, ""), dial(t, addr, "")
	waitStats(t, lim, "2 silent connections", func(s httpapi.ConnStats) bool { return s.Open == 2 && s.Waiting == 2 })
	if code, err := dial(t, addr, "").get("/healthz"); code != 200 {
		t.Fatalf("a new client beside silent connections: %d %v", code, err)
	}
	if !s1.closedByServer(5*time.Second) || s2.closedByServer(100*time.Millisecond) {
		t.Error("the older silent connection, and only it, should have been closed")
	}
}
