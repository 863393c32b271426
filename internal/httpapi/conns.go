package httpapi

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Connections are bounded so that clients cannot use up the process's
// file descriptors: 19 950 connections that each sent one request and then
// stayed idle once did (issue 21, finding 2), and then no client, nor the
// store, could open anything. A ConnLimiter caps the connections open at
// once, in all and per client address, and when a new connection would
// pass a cap it closes the oldest connection that waits for a request (an
// idle keep-alive one, or one accepted a while ago that has sent nothing)
// to make room, so idle connections can never lock new clients out. With
// none to close the new connection is refused: closed at once with a
// reset, never left waiting.
//
// netutil.LimitListener (golang.org/x/net) does not fit: past its cap it
// stops accepting, so new clients wait in the kernel's backlog while idle
// connections hold every slot, which is the lockout above. It knows
// nothing of the server's connection states either. net/http's ConnState
// hook gives those states; this file keeps the counts and the order.

// MaxConnsDefault is ConnLimits.Max's default for a process that may have
// nofile files open (its RLIMIT_NOFILE; 0 when unknown): half of them, so
// that the other half stays for the store's files, outbound deliveries
// (up to --max-in-flight connections, and their idle pools), the SQL and
// Redis pools and the logs; at least 64 and at most 16 384 (an unknown or
// unlimited limit gets 16 384). At the 20 000 of finding 2's machine:
// 10 000.
func MaxConnsDefault(nofile uint64) int {
	if nofile == 0 || nofile/2 > 16384 {
		return 16384
	}
	return max(64, int(nofile/2))
}

// FreshGraceDefault is ConnLimits.FreshGrace's default: net/http's own
// Shutdown treats a new connection that has sent nothing for 5 s as idle.
const FreshGraceDefault = 5 * time.Second

// IdleTimeoutDefault is how long toc serve keeps an idle keep-alive
// connection open (http.Server.IdleTimeout): 30 s, long enough for a
// client's next request in a burst, short enough that idle connections do
// not pile up; Go's client keeps its idle connections 90 s and opens a new
// one when the server has closed one.
const IdleTimeoutDefault = 30 * time.Second

// ConnLimits caps the connections a server holds open.
type ConnLimits struct {
	// Max is the most connections open at once. Default
	// MaxConnsDefault(0).
	Max int
	// PerClient is the most connections open at once from one client
	// address (one IPv4 address, or one IPv6 /64, which one client
	// usually holds whole). Default Max/4, so that three other clients
	// always find room. Behind a proxy every client has the proxy's
	// address: raise it to Max there.
	PerClient int
	// FreshGrace is how long a new connection may send nothing before it
	// may be closed to make room. Default FreshGraceDefault.
	FreshGrace time.Duration
	// Logger gets a warning, at most once a minute, while connections are
	// refused. Default slog.Default().
	Logger *slog.Logger
}

// ConnStats are a ConnLimiter's counts.
type ConnStats struct {
	Open      int    // connections open now
	Waiting   int    // of those, waiting for a request (idle or fresh)
	Refused   uint64 // connections closed at once, past a cap
	Reclaimed uint64 // waiting connections closed to make room
}

// ConnLimiter enforces ConnLimits. Listener wraps the server's listener
// and ConnState must be its http.Server.ConnState hook (TLS included: the
// hook unwraps a *tls.Conn).
type ConnLimiter struct {
	max, perClient int
	grace          time.Duration
	log            *slog.Logger
	mu             struct {
		sync.Mutex
		open      int
		clients   map[netip.Addr]*clientConns
		all       waitLists // every client's waiting connections
		refused   uint64
		reclaimed uint64
		warned    time.Time // last warning about refusals
	}
}

// waitLists hold connections waiting for a request, oldest first:
// idle ones (after a response) and fresh ones (since accepted).
type waitLists struct{ idle, fresh list.List }

type clientConns struct {
	open int
	waitLists
}

// NewConnLimiter returns a limiter with limits l, defaults filled.
func NewConnLimiter(l ConnLimits) *ConnLimiter {
	c := &ConnLimiter{max: l.Max, perClient: l.PerClient, grace: l.FreshGrace, log: l.Logger}
	if c.max <= 0 {
		c.max = MaxConnsDefault(0)
	}
	if c.perClient <= 0 {
		c.perClient = max(1, c.max/4)
	}
	if c.grace <= 0 {
		c.grace = FreshGraceDefault
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.mu.clients = map[netip.Addr]*clientConns{}
	return c
}

// Limits are the limits in force, defaults filled.
func (l *ConnLimiter) Limits() (maxConns, perClient int) { return l.max, l.perClient }

// Stats returns the counts.
func (l *ConnLimiter) Stats() ConnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ConnStats{Open: l.mu.open, Waiting: l.mu.all.idle.Len() + l.mu.all.fresh.Len(),
		Refused: l.mu.refused, Reclaimed: l.mu.reclaimed}
}

// Listener returns ln with the limits applied to what it accepts.
func (l *ConnLimiter) Listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l}
}

type limitedListener struct {
	net.Listener
	l *ConnLimiter
}

func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		conn, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := ln.l.admit(conn, time.Now()); c != nil {
			return c, nil
		}
	}
}

// limitedConn is an accepted connection. Its fields past client are
// guarded by its limiter's mu.
type limitedConn struct {
	net.Conn
	l      *ConnLimiter
	client netip.Addr
	// Where it waits for a request, if it does: its elements in the
	// limiter's lists and in its client's, and since when.
	all, own *list.Element
	fresh    bool
	since    time.Time
	gone     bool // counted out
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.forgetLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// clientOf is the address a connection is counted under.
func clientOf(a net.Addr) netip.Addr {
	var ip netip.Addr
	if ta, ok := a.(*net.TCPAddr); ok {
		ip = ta.AddrPort().Addr()
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// admit counts conn in, closing the oldest waiting connection to make room
// if a cap is reached; with none to close it refuses conn (nil).
func (l *ConnLimiter) admit(conn net.Conn, now time.Time) *limitedConn {
	client := clientOf(conn.RemoteAddr())
	l.mu.Lock()
	cc := l.mu.clients[client]
	var victim *limitedConn
	full := false
	switch {
	case cc != nil && cc.open >= l.perClient:
		victim, full = l.reclaimableLocked(&cc.waitLists, now), true
	case l.mu.open >= l.max:
		victim, full = l.reclaimableLocked(&l.mu.all, now), true
	}
	if full && victim == nil {
		l.mu.refused++
		warn := now.Sub(l.mu.warned) >= time.Minute
		if warn {
			l.mu.warned = now
		}
		l.mu.Unlock()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: the client learns at once
		}
		_ = conn.Close()
		if warn {
			l.log.Warn("refusing connections: at the cap of open connections, none of them idle",
				slog.Int("max_connections", l.max), slog.Int("max_connections_per_client", l.perClient),
				slog.String("client", client.String()))
		}
		return nil
	}
	if victim != nil {
		l.forgetLocked(victim)
		l.mu.reclaimed++
		if cc != nil && cc.open == 0 {
			cc = nil // forgetLocked dropped it
		}
	}
	if cc == nil {
		cc = &clientConns{}
		l.mu.clients[client] = cc
	}
	c := &limitedConn{Conn: conn, l: l, client: client}
	l.mu.open++
	cc.open++
	l.waitLocked(c, cc, true, now)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close() // its server goroutine sees the read fail and ends
	}
	return c
}

// reclaimableLocked is the connection of ws to close to make room: the
// oldest idle one, else the oldest fresh one if it has sent nothing for
// the grace; nil if none.
func (l *ConnLimiter) reclaimableLocked(ws *waitLists, now time.Time) *limitedConn {
	if e := ws.idle.Front(); e != nil {
		return e.Value.(*limitedConn)
	}
	if e := ws.fresh.Front(); e != nil {
		if c := e.Value.(*limitedConn); now.Sub(c.since) >= l.grace {
			return c
		}
	}
	return nil
}

// waitLocked puts c at the back of the waiting lists (fresh or idle).
func (l *ConnLimiter) waitLocked(c *limitedConn, cc *clientConns, fresh bool, now time.Time) {
	c.fresh, c.since = fresh, now
	if fresh {
		c.all, c.own = l.mu.all.fresh.PushBack(c), cc.fresh.PushBack(c)
	} else {
		c.all, c.own = l.mu.all.idle.PushBack(c), cc.idle.PushBack(c)
	}
}

// unwaitLocked takes c off the waiting lists, if it is on them.
func (l *ConnLimiter) unwaitLocked(c *limitedConn, cc *clientConns) {
	if c.all == nil {
		return
	}
	if c.fresh {
		l.mu.all.fresh.Remove(c.all)
		cc.fresh.Remove(c.own)
	} else {
		l.mu.all.idle.Remove(c.all)
		cc.idle.Remove(c.own)
	}
	c.all, c.own = nil, nil
}

// forgetLocked counts c out (once).
func (l *ConnLimiter) forgetLocked(c *limitedConn) {
	if c.gone {
		return
	}
	c.gone = true
	cc := l.mu.clients[c.client]
	l.unwaitLocked(c, cc)
	l.mu.open--
	if cc.open--; cc.open == 0 {
		delete(l.mu.clients, c.client)
	}
}

// ConnState is the server's ConnState hook: it tracks which connections
// wait for a request.
func (l *ConnLimiter) ConnState(nc net.Conn, state http.ConnState) {
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		nc = u.NetConn()
	}
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone {
		return
	}
	cc := l.mu.clients[c.client]
	switch state {
	case http.StateIdle:
		l.unwaitLocked(c, cc)
		l.waitLocked(c, cc, false, now)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		// Serving a request, or no longer the server's: not to be closed.
		// Still counted until closed.
		l.unwaitLocked(c, cc)
	}
}
