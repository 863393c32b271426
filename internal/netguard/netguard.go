package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// kind is what an address is, from the point of view of a policy.
type kind uint8

const (
	public   kind = iota
	private       // refused unless AllowPrivate or AllowedHosts
	metadata      // refused unless AllowedHosts, even with AllowPrivate
)

type blockedRange struct {
	prefix netip.Prefix
	reason string
	kind   kind
}

func r(cidr, reason string, k kind) blockedRange {
	return blockedRange{netip.MustParsePrefix(cidr), reason, k}
}

// The first range that contains an address decides, so the narrow ranges
// come before the wide ones that contain them.
var (
	blocked4 = []blockedRange{
		r("169.254.169.254/32", "cloud metadata", metadata), // AWS, GCP, Azure, OCI, …
		r("0.0.0.0/8", "this network", private),             // 0.0.0.0 reaches the local host
		r("10.0.0.0/8", "RFC 1918", private),
		r("100.64.0.0/10", "shared address space", private), // carrier-grade NAT
		r("127.0.0.0/8", "loopback", private),
		r("169.254.0.0/16", "link-local", private),
		r("172.16.0.0/12", "RFC 1918", private),
		r("192.0.0.0/24", "IETF protocol assignments", private),
		r("192.0.2.0/24", "documentation", private),
		r("192.88.99.0/24", "6to4 relay anycast", private),
		r("192.168.0.0/16", "RFC 1918", private),
		r("198.18.0.0/15", "benchmarking", private),
		r("198.51.100.0/24", "documentation", private),
		r("203.0.113.0/24", "documentation", private),
		r("224.0.0.0/4", "multicast", private),
		r("255.255.255.255/32", "broadcast", private),
		r("240.0.0.0/4", "reserved", private),
	}
	blocked6 = []blockedRange{
		r("::/128", "unspecified", private),
		r("::1/128", "loopback", private),
		r("fd00:ec2::254/128", "cloud metadata", metadata), // AWS over IPv6
		r("::/96", "IPv4-compatible", private),             // deprecated; ::a.b.c.d
		r("64:ff9b:1::/48", "local-use NAT64", private),
		r("100::/64", "discard-only", private),
		r("2001:db8::/32", "documentation", private),
		r("fc00::/7", "unique local", private),
		r("fe80::/10", "link-local", private),
		r("fec0::/10", "site-local", private),
		r("ff00::/8", "multicast", private),
	}
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Blocked reports whether ip is an address toc must not call unless a
// policy allows it, and why: "loopback", "RFC 1918", "link-local", "cloud
// metadata" and so on. An IPv6 address that embeds an IPv4 address
// (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) is
// judged by the embedded address. The zero Addr is blocked.
func Blocked(ip netip.Addr) (reason string, blocked bool) {
	reason, k := classify(ip)
	return reason, k != public
}

func classify(ip netip.Addr) (string, kind) {
	if !ip.IsValid() {
		return "invalid address", private
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		return lookup(blocked4, ip)
	}
	var embedded netip.Addr
	var via string
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		embedded, via = netip.AddrFrom4([4]byte(b[12:16])), "NAT64"
	case sixTo4.Contains(ip):
		embedded, via = netip.AddrFrom4([4]byte(b[2:6])), "6to4"
	}
	if embedded.IsValid() {
		if reason, k := lookup(blocked4, embedded); k != public {
			return via + " of " + reason, k
		}
		return "", public
	}
	return lookup(blocked6, ip)
}

func lookup(ranges []blockedRange, ip netip.Addr) (string, kind) {
	for _, br := range ranges {
		if br.prefix.Contains(ip) {
			return br.reason, br.kind
		}
	}
	return "", public
}

// Policy says which non-public addresses one app may call. The zero value
// allows public addresses only.
type Policy struct {
	// AllowPrivate permits every address [Blocked] refuses, except the
	// cloud metadata endpoints (169.254.169.254, fd00:ec2::254), which only
	// AllowedHosts permits.
	AllowPrivate bool
	// AllowedHosts are host names and IP addresses permitted whatever they
	// are. A name matches the URL's host exactly (case-insensitively, a
	// trailing dot ignored), so "billing.internal" does not permit
	// "x.billing.internal"; an address matches what a host resolves to.
	AllowedHosts []string
}

// Key returns a string that is the same for policies with the same fields,
// whatever the order and case of AllowedHosts: use it to key a cache of
// per-policy connection pools.
func (p Policy) Key() string {
	hosts := make([]string, 0, len(p.AllowedHosts))
	for _, h := range p.AllowedHosts {
		hosts = append(hosts, strconv.Quote(normalizeHost(h))) // quoted: no separator inside
	}
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	return strconv.FormatBool(p.AllowPrivate) + " " + strings.Join(hosts, ",")
}

// normalizeHost lowercases a host name and drops a trailing dot and IPv6
// brackets; an address is put in its canonical form.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostAllowed reports whether AllowedHosts names host.
func (p Policy) hostAllowed(host string) bool {
	if len(p.AllowedHosts) == 0 {
		return false
	}
	host = normalizeHost(host)
	for _, h := range p.AllowedHosts {
		if normalizeHost(h) == host {
			return true
		}
	}
	return false
}

// Check returns nil when p permits connecting to ip, which host (a name or
// an address, without a port) resolved to, and a [*BlockedError] when it
// does not.
func (p Policy) Check(host string, ip netip.Addr) error {
	reason, k := classify(ip)
	switch {
	case k == public:
		return nil
	case k == private && p.AllowPrivate:
		return nil
	case p.hostAllowed(host), ip.IsValid() && p.hostAllowed(ip.WithZone("").String()):
		return nil
	}
	return &BlockedError{Target: host, IP: ip, Reason: reason, Metadata: k == metadata}
}

// BlockedError is a connection a [Policy] refused.
type BlockedError struct {
	// Target is what was dialed: a host:port, or a host for [Policy.Check].
	Target string
	// IP is the refused address Target resolved to.
	IP netip.Addr
	// Reason says what kind of address IP is, as [Blocked] does.
	Reason string
	// Metadata is set for a cloud metadata endpoint, which AllowPrivate
	// does not permit.
	Metadata bool
}

func (e *BlockedError) Error() string {
	if e.Metadata {
		return fmt.Sprintf("connect to %s: address %s is a cloud metadata endpoint (%s); add the host to allowed_hosts for the app to call it", e.Target, e.IP, e.Reason)
	}
	return fmt.Sprintf("connect to %s: address %s is private (%s); set allow_private_targets for the app or the server to call internal addresses", e.Target, e.IP, e.Reason)
}

// Resolver looks up a host's addresses; [net.DefaultResolver] is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer makes a connection to an address; [*net.Dialer] is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// DialContext returns a dial function for [net/http.Transport.DialContext]
// that connects only where p permits. For each connection it resolves the
// host once with resolver (default [net.DefaultResolver]; an IP address is
// not resolved), refuses with a [*BlockedError] if p does not permit any of
// the addresses, and otherwise dials the checked addresses with dialer
// (default a zero [net.Dialer]) in the order resolved, until one answers.
// Only TCP and UDP networks are supported.
func (p Policy) DialContext(resolver Resolver, dialer Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var ipNetwork string
		switch network {
		case "tcp", "udp":
			ipNetwork = "ip"
		case "tcp4", "udp4":
			ipNetwork = "ip4"
		case "tcp6", "udp6":
			ipNetwork = "ip6"
		default:
			return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("netguard: cannot check network %q", network)}
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else {
			if ips, err = resolver.LookupNetIP(ctx, ipNetwork, host); err != nil {
				return nil, err
			}
			if len(ips) == 0 {
				return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
			}
		}
		// Check them all before dialing any: a name with one internal
		// address among public ones is refused outright.
		checked := make([]netip.Addr, len(ips))
		for i, ip := range ips {
			if err := p.Check(host, ip); err != nil {
				err.(*BlockedError).Target = addr
				return nil, err
			}
			checked[i] = ip.Unmap()
		}
		var first error
		for _, ip := range checked {
			c, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			if err == nil {
				return c, nil
			}
			if first == nil {
				first = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		return nil, first
	}
}
