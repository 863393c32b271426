package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/netguard"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBlocked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip      string
		blocked bool
		reason  string // checked when set
	}{
		// Public.
		{ip: "93.184.216.34"},
		{ip: "8.8.8.8"},
		{ip: "1.1.1.1"},
		{ip: "100.63.255.255"},
		{ip: "100.128.0.0"},
		{ip: "172.15.255.255"},
		{ip: "172.32.0.0"},
		{ip: "169.253.255.255"},
		{ip: "223.255.255.255"},
		{ip: "2606:2800:220:1:248:1893:25c8:1946"},
		{ip: "2001:4860:4860::8888"},
		{ip: "::ffff:93.184.216.34"},
		{ip: "64:ff9b::808:808"}, // NAT64 of 8.8.8.8
		{ip: "2002:808:808::1"},  // 6to4 of 8.8.8.8
		{ip: "fe00::1"},          // outside fe80::/10 and fc00::/7
		{ip: "2001:db9::1"},      // just past documentation

		// Loopback.
		{ip: "127.0.0.1", blocked: true, reason: "loopback"},
		{ip: "127.255.255.254", blocked: true, reason: "loopback"},
		{ip: "::1", blocked: true, reason: "loopback"},
		// Unspecified and this network.
		{ip: "0.0.0.0", blocked: true, reason: "this network"},
		{ip: "0.1.2.3", blocked: true, reason: "this network"},
		{ip: "::", blocked: true, reason: "unspecified"},
		// RFC 1918 and unique local.
		{ip: "10.0.0.1", blocked: true, reason: "RFC 1918"},
		{ip: "10.255.255.255", blocked: true, reason: "RFC 1918"},
		{ip: "172.16.0.1", blocked: true, reason: "RFC 1918"},
		{ip: "172.31.255.255", blocked: true, reason: "RFC 1918"},
		{ip: "192.168.1.1", blocked: true, reason: "RFC 1918"},
		{ip: "fc00::1", blocked: true, reason: "unique local"},
		{ip: "fd12:3456:789a::1", blocked: true, reason: "unique local"},
		{ip: "fec0::1", blocked: true, reason: "site-local"},
		// Link-local and metadata.
		{ip: "169.254.0.1", blocked: true, reason: "link-local"},
		{ip: "169.254.170.2", blocked: true, reason: "link-local"}, // ECS task metadata
		{ip: "169.254.169.254", blocked: true, reason: "cloud metadata"},
		{ip: "fe80::1", blocked: true, reason: "link-local"},
		{ip: "fe80::1%eth0", blocked: true, reason: "link-local"},
		{ip: "fd00:ec2::254", blocked: true, reason: "cloud metadata"},
		// Shared address space (CGNAT).
		{ip: "100.64.0.1", blocked: true, reason: "shared address space"},
		{ip: "100.127.255.255", blocked: true, reason: "shared address space"},
		// Multicast, broadcast, reserved.
		{ip: "224.0.0.1", blocked: true, reason: "multicast"},
		{ip: "239.255.255.250", blocked: true, reason: "multicast"},
		{ip: "ff02::1", blocked: true, reason: "multicast"},
		{ip: "255.255.255.255", blocked: true, reason: "broadcast"},
		{ip: "240.0.0.1", blocked: true, reason: "reserved"},
		{ip: "192.0.0.170", blocked: true, reason: "IETF protocol assignments"},
		{ip: "198.18.0.1", blocked: true, reason: "benchmarking"},
		{ip: "100::1", blocked: true, reason: "discard-only"},
		// Documentation.
		{ip: "192.0.2.1", blocked: true, reason: "documentation"},
		{ip: "198.51.100.7", blocked: true, reason: "documentation"},
		{ip: "203.0.113.9", blocked: true, reason: "documentation"},
		{ip: "2001:db8::1", blocked: true, reason: "documentation"},
		// IPv6 forms of blocked IPv4 addresses.
		{ip: "::ffff:127.0.0.1", blocked: true, reason: "loopback"},
		{ip: "::ffff:10.1.2.3", blocked: true, reason: "RFC 1918"},
		{ip: "::ffff:169.254.169.254", blocked: true, reason: "cloud metadata"},
		{ip: "::ffff:0.0.0.0", blocked: true, reason: "this network"},
		{ip: "::127.0.0.1", blocked: true, reason: "IPv4-compatible"},
		{ip: "64:ff9b::7f00:1", blocked: true, reason: "NAT64 of loopback"},
		{ip: "64:ff9b::a9fe:a9fe", blocked: true, reason: "NAT64 of cloud metadata"},
		{ip: "64:ff9b:1::1", blocked: true, reason: "local-use NAT64"},
		{ip: "2002:7f00:1::1", blocked: true, reason: "6to4 of loopback"},
		{ip: "2002:c0a8:101::1", blocked: true, reason: "6to4 of RFC 1918"},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		reason, blocked := netguard.Blocked(ip)
		if blocked != tt.blocked || tt.reason != "" && reason != tt.reason {
			t.Errorf("Blocked(%s) = %q, %v; want %q, %v", tt.ip, reason, blocked, tt.reason, tt.blocked)
		}
		if !blocked && reason != "" {
			t.Errorf("Blocked(%s) gives reason %q for a public address", tt.ip, reason)
		}
	}
	if _, blocked := netguard.Blocked(netip.Addr{}); !blocked {
		t.Error("the zero Addr is not blocked")
	}
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	loop := netip.MustParseAddr("127.0.0.1")
	meta := netip.MustParseAddr("169.254.169.254")
	pub := netip.MustParseAddr("93.184.216.34")
	tests := []struct {
		name   string
		p      netguard.Policy
		host   string
		ip     netip.Addr
		wantOK bool
	}{
		{"public under the zero policy", netguard.Policy{}, "example.com", pub, true},
		{"loopback under the zero policy", netguard.Policy{}, "localhost", loop, false},
		{"loopback with AllowPrivate", netguard.Policy{AllowPrivate: true}, "localhost", loop, true},
		{"metadata with AllowPrivate", netguard.Policy{AllowPrivate: true}, "169.254.169.254", meta, false},
		{"metadata allowed by address", netguard.Policy{AllowedHosts: []string{"169.254.169.254"}}, "169.254.169.254", meta, true},
		{"host allowed by name", netguard.Policy{AllowedHosts: []string{"billing.internal"}}, "billing.internal", loop, true},
		{"name matched case-insensitively, trailing dot ignored", netguard.Policy{AllowedHosts: []string{"Billing.Internal."}}, "billing.internal", loop, true},
		{"subdomain is not the name", netguard.Policy{AllowedHosts: []string{"billing.internal"}}, "x.billing.internal", loop, false},
		{"resolved address allowed", netguard.Policy{AllowedHosts: []string{"127.0.0.1"}}, "anything.internal", loop, true},
		{"mapped form of an allowed address", netguard.Policy{AllowedHosts: []string{"127.0.0.1"}}, "x", netip.MustParseAddr("::ffff:127.0.0.1"), true},
		{"bracketed IPv6 entry", netguard.Policy{AllowedHosts: []string{"[::1]"}}, "::1", netip.MustParseAddr("::1"), true},
		{"other address not allowed", netguard.Policy{AllowedHosts: []string{"127.0.0.2"}}, "x", loop, false},
	}
	for _, tt := range tests {
		err := tt.p.Check(tt.host, tt.ip)
		if (err == nil) != tt.wantOK {
			t.Errorf("%s: Check(%q, %s) = %v, want ok %v", tt.name, tt.host, tt.ip, err, tt.wantOK)
		}
		var be *netguard.BlockedError
		if err != nil && !errors.As(err, &be) {
			t.Errorf("%s: error %T is not a *BlockedError", tt.name, err)
		}
	}
}

func TestBlockedErrorSaysWhatToDo(t *testing.T) {
	t.Parallel()
	err := netguard.Policy{}.Check("localhost", netip.MustParseAddr("127.0.0.1"))
	want := "connect to localhost: address 127.0.0.1 is private (loopback); set allow_private_targets for the app or the server to call internal addresses"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant  %s", err, want)
	}
	err = netguard.Policy{AllowPrivate: true}.Check("169.254.169.254", netip.MustParseAddr("169.254.169.254"))
	if err == nil || !strings.Contains(err.Error(), "allowed_hosts") {
		t.Errorf("metadata error = %v, want it to point to allowed_hosts", err)
	}
}

func TestPolicyKey(t *testing.T) {
	t.Parallel()
	same := []netguard.Policy{
		{AllowedHosts: []string{"a.internal", "B.internal."}},
		{AllowedHosts: []string{"b.internal", "a.internal", "a.internal"}},
		{AllowedHosts: []string{"b.internal", "A.INTERNAL"}},
	}
	for _, p := range same[1:] {
		if p.Key() != same[0].Key() {
			t.Errorf("Key(%v) = %q, want %q", p, p.Key(), same[0].Key())
		}
	}
	differ := []netguard.Policy{
		{},
		{AllowPrivate: true},
		{AllowedHosts: []string{"a.internal"}},
		{AllowedHosts: []string{"a.internal|b.internal"}},
		{AllowedHosts: []string{"a.internal", "b.internal"}},
		{AllowPrivate: true, AllowedHosts: []string{"a.internal"}},
	}
	seen := map[string]int{}
	for i, p := range differ {
		if j, ok := seen[p.Key()]; ok {
			t.Errorf("policies %v and %v share the key %q", differ[j], p, p.Key())
		}
		seen[p.Key()] = i
	}
}

// fakeResolver answers lookups from a script, one answer per call; the
// last answer repeats.
type fakeResolver struct {
	mu       sync.Mutex
	answers  [][]netip.Addr
	calls    int
	networks []string
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.networks = append(r.networks, network)
	a := r.answers[min(r.calls, len(r.answers)-1)]
	r.calls++
	if a == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return a, nil
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

var errIntercepted = errors.New("dial intercepted by the test")

// fakeDialer records the addresses it is asked to dial and connects to
// none: it answers from dial, or errIntercepted.
type fakeDialer struct {
	mu     sync.Mutex
	dialed []string
	dial   func(address string) (net.Conn, error)
}

func (d *fakeDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	if d.dial != nil {
		return d.dial(address)
	}
	return nil, errIntercepted
}

// TestDNSRebinding: a name that resolves to a public address at one lookup
// and to loopback at the next is refused the second time, and the address
// dialed is always the one checked, never the name (which a second lookup
// inside the dialer could rebind). No real connection is made.
func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	res := &fakeResolver{answers: [][]netip.Addr{addrs("93.184.216.34"), addrs("127.0.0.1")}}
	d := &fakeDialer{}
	dial := netguard.Policy{}.DialContext(res, d)

	_, err := dial(context.Background(), "tcp", "rebind.example:443")
	if !errors.Is(err, errIntercepted) {
		t.Fatalf("first dial: %v, want it to reach the dialer", err)
	}
	if want := []string{"93.184.216.34:443"}; len(d.dialed) != 1 || d.dialed[0] != want[0] {
		t.Fatalf("dialed %q, want %q: the checked address, not the name", d.dialed, want)
	}

	_, err = dial(context.Background(), "tcp", "rebind.example:443")
	var be *netguard.BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("second dial: %v, want a *BlockedError", err)
	}
	if be.Target != "rebind.example:443" || be.IP != netip.MustParseAddr("127.0.0.1") || be.Reason != "loopback" {
		t.Errorf("BlockedError = %+v", be)
	}
	if len(d.dialed) != 1 {
		t.Errorf("dialed %q after the refusal; want nothing more", d.dialed)
	}
	if res.calls != 2 {
		t.Errorf("%d lookups, want one per dial", res.calls)
	}
}

func TestDialContextChecksEveryAddress(t *testing.T) {
	t.Parallel()
	for _, answer := range [][]netip.Addr{
		addrs("93.184.216.34", "10.0.0.1"),
		addrs("10.0.0.1", "93.184.216.34"),
		addrs("2606:2800:220:1:248:1893:25c8:1946", "::ffff:169.254.169.254"),
	} {
		d := &fakeDialer{}
		_, err := netguard.Policy{}.DialContext(&fakeResolver{answers: [][]netip.Addr{answer}}, d)(context.Background(), "tcp", "mixed.example:80")
		var be *netguard.BlockedError
		if !errors.As(err, &be) {
			t.Errorf("answer %v: %v, want a *BlockedError", answer, err)
		}
		if len(d.dialed) != 0 {
			t.Errorf("answer %v: dialed %q before refusing", answer, d.dialed)
		}
	}
}

func TestDialContextFallsBack(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	d := &fakeDialer{dial: func(address string) (net.Conn, error) {
		if address == "[2606:2800:220:1:248:1893:25c8:1946]:80" {
			return client, nil
		}
		return nil, errIntercepted
	}}
	// The mapped form is dialed as plain IPv4.
	res := &fakeResolver{answers: [][]netip.Addr{addrs("::ffff:93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")}}
	c, err := netguard.Policy{}.DialContext(res, d)(context.Background(), "tcp", "two.example:80")
	if err != nil || c != client {
		t.Fatalf("dial = %v, %v; want the second address's connection", c, err)
	}
	if want := "93.184.216.34:80,[2606:2800:220:1:248:1893:25c8:1946]:80"; strings.Join(d.dialed, ",") != want {
		t.Errorf("dialed %q, want %s", d.dialed, want)
	}
}

func TestDialContextErrors(t *testing.T) {
	t.Parallel()
	d := &fakeDialer{}
	res := &fakeResolver{answers: [][]netip.Addr{nil}}
	dial := netguard.Policy{}.DialContext(res, d)
	var dnsErr *net.DNSError
	if _, err := dial(context.Background(), "tcp", "nx.example:80"); !errors.As(err, &dnsErr) {
		t.Errorf("unknown host: %v, want the resolver's *net.DNSError", err)
	}
	empty := netguard.Policy{}.DialContext(&fakeResolver{answers: [][]netip.Addr{{}}}, d)
	if _, err := empty(context.Background(), "tcp", "empty.example:80"); !errors.As(err, &dnsErr) {
		t.Errorf("no addresses: %v, want a *net.DNSError", err)
	}
	if _, err := dial(context.Background(), "unix", "/tmp/sock"); err == nil || !strings.Contains(err.Error(), "cannot check") {
		t.Errorf("unix socket: %v, want a refusal", err)
	}
	if _, err := dial(context.Background(), "tcp", "no-port"); err == nil {
		t.Error("address without a port: no error")
	}
	if len(d.dialed) != 0 {
		t.Errorf("dialed %q", d.dialed)
	}
}

func TestDialContextResolvesPerFamily(t *testing.T) {
	t.Parallel()
	res := &fakeResolver{answers: [][]netip.Addr{addrs("93.184.216.34")}}
	dial := netguard.Policy{}.DialContext(res, &fakeDialer{})
	for _, network := range []string{"tcp", "tcp4", "tcp6", "udp"} {
		_, _ = dial(context.Background(), network, "x.example:80")
	}
	if got, want := strings.Join(res.networks, ","), "ip,ip4,ip6,ip"; got != want {
		t.Errorf("lookups for %s, want %s", got, want)
	}
}

// TestDialContextLoopback dials a real listener on 127.0.0.1, the only
// real address these tests connect to.
func TestDialContextLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	// "receiver.test" resolves to the listener, through the fake resolver.
	res := &fakeResolver{answers: [][]netip.Addr{addrs("127.0.0.1")}}
	tests := []struct {
		name   string
		p      netguard.Policy
		addr   string
		wantOK bool
	}{
		{"strict, by address", netguard.Policy{}, "127.0.0.1:" + port, false},
		{"strict, by name", netguard.Policy{}, "receiver.test:" + port, false},
		{"AllowPrivate", netguard.Policy{AllowPrivate: true}, "receiver.test:" + port, true},
		{"AllowedHosts by address", netguard.Policy{AllowedHosts: []string{"127.0.0.1"}}, "127.0.0.1:" + port, true},
		{"AllowedHosts by name", netguard.Policy{AllowedHosts: []string{"receiver.test"}}, "receiver.test:" + port, true},
		{"AllowedHosts, another name", netguard.Policy{AllowedHosts: []string{"other.test"}}, "receiver.test:" + port, false},
	}
	for _, tt := range tests {
		c, err := tt.p.DialContext(res, nil)(context.Background(), "tcp", tt.addr)
		if tt.wantOK {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			c.Close()
			continue
		}
		var be *netguard.BlockedError
		if !errors.As(err, &be) {
			t.Errorf("%s: %v, want a *BlockedError", tt.name, err)
		}
		if c != nil {
			c.Close()
		}
	}
}
