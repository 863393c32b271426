package testsvc

import (
	"net"
	"testing"
	"time"
)

// QuietListener listens on a loopback port that nothing should connect to:
// a stand-in for an address toc must refuse to reach. It closes when the
// test ends.
func QuietListener(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.(*net.TCPListener)
}

// NoConnection fails the test if ln has a connection waiting, or gets one
// within wait.
func NoConnection(t testing.TB, ln *net.TCPListener, wait time.Duration) {
	t.Helper()
	if err := ln.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err == nil {
		_ = c.Close()
		t.Fatalf("something connected to %s", ln.Addr())
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("accept on %s: %v, want a timeout", ln.Addr(), err)
	}
}
