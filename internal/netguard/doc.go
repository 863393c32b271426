// Package netguard keeps toc's outbound calls away from internal networks:
// a task's callback URL is chosen by whoever can create tasks, and without a
// check it could make toc call its own admin port, a database on the private
// network or the cloud's metadata service (server-side request forgery).
//
// # What is refused
//
// [Blocked] says which addresses are not public: loopback, private (RFC
// 1918, unique local), link-local, shared (CGNAT), unspecified and "this
// network", multicast, broadcast, reserved, benchmarking and documentation
// ranges, the cloud metadata endpoints, and IPv6 addresses that embed any of
// these (IPv4-mapped, NAT64, 6to4, IPv4-compatible).
//
// A [Policy] relaxes that for one app: AllowPrivate permits every address
// Blocked refuses except the cloud metadata endpoints, and AllowedHosts
// names hosts and addresses that are permitted whatever they are.
//
// # Where the check happens
//
// [Policy.DialContext] checks at connect time, on the addresses the
// connection will use: it resolves the host once, checks every address,
// and dials those checked addresses, never the name again. A name that
// resolves to a public address when it is checked and to a private one when
// it is dialed (DNS rebinding) therefore cannot get through, and a redirect,
// were it followed, would be checked like any other connection. Through an
// HTTP proxy the dialer sees the proxy's address, not the target's, so use
// the guard on connections made without a proxy.
//
// A refusal is a [*BlockedError], which says how to allow the address.
package netguard
