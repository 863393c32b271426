package httpapi

import (
	"net"
	"testing"
)

func TestMaxConnsDefault(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{0, 16384}, {100, 64}, {1024, 512}, {20000, 10000}, {1 << 20, 16384}, {^uint64(0), 16384}} {
		if got := MaxConnsDefault(c.nofile); got != c.want {
			t.Errorf("MaxConnsDefault(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}

// TestClientOf: an IPv4 client is its address, an IPv6 client its /64.
func TestClientOf(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"127.0.0.1:4000", "127.0.0.1"},
		{"[::ffff:10.0.0.7]:4000", "10.0.0.7"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:4000", "2001:db8:1:2::"},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientOf(a).String(); got != c.want {
			t.Errorf("clientOf(%s) = %s, want %s", c.addr, got, c.want)
		}
	}
}
