package natssink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// Headers toc sets on every message: package sink's names.
const (
	HeaderTaskID  = sink.HeaderTaskID
	HeaderApp     = sink.HeaderApp
	HeaderKey     = sink.HeaderKey
	HeaderAttempt = sink.HeaderAttempt
	HeaderDueAt   = sink.HeaderDueAt
	// HeaderScheduleID is set on occurrences of a schedule only.
	HeaderScheduleID = sink.HeaderScheduleID
)

// Defaults of [Config].
const (
	// TimeoutDefault bounds one Deliver. It matches the lease the engine
	// gives a push attempt without a timeout of its own.
	TimeoutDefault = task.DefaultHTTPTimeout
	// ConnectionNameDefault is the connection name the server shows.
	ConnectionNameDefault = "toc"
)

// ReconnectWait is how long a lost connection waits between attempts to
// reconnect (plus a little jitter). It reconnects for ever.
const ReconnectWait = time.Second

// ErrClosed is returned by Deliver after Close.
var ErrClosed = errors.New("natssink: closed")

// Config configures a Sink. Zero fields take the documented defaults.
type Config struct {
	// DefaultURL is the server of tasks whose target has no URL, like
	// nats://host:4222 (a comma-separated list for a cluster). Default none:
	// such tasks fail. It is the operator's: connections to it are never
	// guarded.
	DefaultURL string
	// Resolve turns the url of an app's target (a broker name or a URL; an
	// empty url is DefaultURL and never reaches it) into the server URL to
	// connect to, and says whether the operator allowed the app that
	// server. A server that is not allowed is connected to only through
	// Guard, reconnections included. Nil: a target's url is the URL to
	// connect to, and allowed.
	Resolve func(app, url string) (rawURL string, allowed bool, err error)
	// Guard returns the address policy of app's connections to servers
	// Resolve did not allow; the resolved address is checked at connect
	// time, as httpsink does. Default: the zero policy, public addresses
	// only. Used only with Resolve.
	Guard func(app string) netguard.Policy
	// Resolver looks up server hosts for guarded connections. Default
	// net.DefaultResolver.
	Resolver netguard.Resolver
	// Logger receives connection events (connected, disconnected,
	// reconnected). Default: slog.Default().
	Logger *slog.Logger
	// Timeout bounds one Deliver: connecting and waiting for the PubAck.
	// Default [TimeoutDefault].
	Timeout time.Duration
	// ConnectionName is shown by the server (its /connz monitoring).
	// Default [ConnectionNameDefault].
	ConnectionName string
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("natssink config: Timeout must not be negative, got %s", c.Timeout)
	}
	return nil
}

// Sink publishes tasks to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	cfg Config
	log *slog.Logger

	// connecting counts the goroutines that make connections; Close waits
	// for them. Add is called under mu, while not closed.
	connecting sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		conns  map[string]*dial // by server URL
	}
}

var _ sink.Sink = (*Sink)(nil)

// New returns a Sink. It connects to nothing until the first Deliver. It
// panics if cfg is invalid: call [Config.Validate] first to get an error.
func New(cfg Config) *Sink {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.ConnectionName = cmp.Or(cfg.ConnectionName, ConnectionNameDefault)
	s := &Sink{cfg: cfg, log: cfg.Logger}
	s.mu.conns = make(map[string]*dial)
	return s
}

// dial is the connection to one server URL, being made or made.
type dial struct {
	done chan struct{} // closed once c or err is set
	c    *conn
	err  error
}

// server is where a task's target sends it: the server URL, and the
// address policy its connections go through (nil for a server the operator
// allowed). Connections are shared by the Delivers with the same key.
type server struct {
	url   string
	guard *netguard.Policy
}

// key identifies the connection of v: a guarded connection is never shared
// with an unguarded one or one under another policy.
func (v server) key() string {
	if v.guard == nil {
		return v.url
	}
	return "guarded " + v.guard.Key() + " " + v.url
}

// server resolves app's target url ref.
func (s *Sink) server(app, ref string) (server, error) {
	if ref == "" {
		return server{url: s.cfg.DefaultURL}, nil
	}
	if s.cfg.Resolve == nil {
		return server{url: ref}, nil
	}
	rawURL, allowed, err := s.cfg.Resolve(app, ref)
	if err != nil || allowed {
		return server{url: rawURL}, err
	}
	var p netguard.Policy
	if s.cfg.Guard != nil {
		p = s.cfg.Guard(app)
	}
	return server{url: rawURL, guard: &p}, nil
}

// guardDialer connects only where its policy permits; nats.go calls it for
// the first connection and every reconnection.
type guardDialer struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration
}

func (d guardDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.dial(ctx, network, addr)
}

type conn struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu   sync.Mutex
	gone chan struct{} // closed when the connection drops; then replaced
}

// dropped returns a channel closed when the connection next drops.
func (c *conn) dropped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}

// drop fails the publishes waiting for an ack: nats.go releases requests
// in flight only on Close, so without this each would wait out its whole
// timeout after a broker crash, though its ack can no longer come.
func (c *conn) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.gone)
	c.gone = make(chan struct{})
}

// errDropped is the cause of a publish cancelled by a dropped connection.
var errDropped = errors.New("the connection dropped before the ack came")

// Deliver publishes t to its target's subject and returns nil once a
// JetStream stream acked it.
func (s *Sink) Deliver(ctx context.Context, t *task.Task) error {
	n := t.Target.NATS
	if n == nil {
		return fmt.Errorf("natssink: task %s has no nats target", t.ID)
	}
	if n.Subject == "" {
		return fmt.Errorf("natssink: task %s has no subject: set the target's subject", t.ID)
	}
	v, err := s.server(t.App, n.URL)
	if err != nil {
		return fmt.Errorf("natssink: task %s: target url: %w", t.ID, err)
	}
	rawURL := v.url
	if rawURL == "" {
		return fmt.Errorf("natssink: task %s has no server URL and the server has no default: set the target's url or start toc with a NATS URL", t.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	c, err := s.conn(ctx, v)
	if err != nil {
		if v.guard != nil {
			return fmt.Errorf("publish to subject %q: connect to %s, a server not allowed for app %s (list it in the app's allowed_brokers), through the address guard: %w",
				n.Subject, redact(rawURL), t.App, err)
		}
		return fmt.Errorf("publish to subject %q: connect to %s: %w", n.Subject, redact(rawURL), err)
	}

	h := nats.Header{}
	h.Set(HeaderTaskID, t.ID.String())
	h.Set(HeaderApp, t.App)
	if t.Key != "" {
		h.Set(HeaderKey, t.Key)
	}
	if !t.ScheduleID.IsZero() {
		h.Set(HeaderScheduleID, t.ScheduleID.String())
	}
	h.Set(HeaderAttempt, strconv.Itoa(t.Attempts))
	h.Set(HeaderDueAt, t.DueAt.UTC().Format(time.RFC3339Nano))
	if tp, ts := telemetry.Outgoing(ctx, t); tp != "" { // the attempt span's, or the create's
		h.Set(telemetry.HeaderTraceParent, tp)
		if ts != "" {
			h.Set(telemetry.HeaderTraceState, ts)
		}
	}
	msg := &nats.Msg{Subject: n.Subject, Header: h, Data: t.Payload}

	pctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	gone := c.dropped()
	go func() { // ends with the publish: stop is deferred
		select {
		case <-gone:
			stop(errDropped)
		case <-pctx.Done():
		}
	}()
	_, err = c.js.PublishMsg(pctx, msg, jetstream.WithMsgID(t.ID.String()))
	switch {
	case err == nil:
		return nil // a duplicate (PubAck.Duplicate) is stored already
	case errors.Is(context.Cause(pctx), errDropped):
		// Stored or not, it is published again: Nats-Msg-Id makes a stored
		// one a duplicate JetStream drops.
		return fmt.Errorf("publish to subject %q on %s: %w", n.Subject, redact(rawURL), errDropped)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("publish to subject %q on %s: no stream captures the subject (no responders): create a JetStream stream for it: %w",
			n.Subject, redact(rawURL), err)
	case errors.Is(err, nats.ErrReconnectBufExceeded) || c.nc.IsReconnecting():
		return fmt.Errorf("publish to subject %q: lost the connection to %s, reconnecting: %w", n.Subject, redact(rawURL), err)
	case ctx.Err() != nil:
		return fmt.Errorf("publish to subject %q on %s: no ack from JetStream: %w", n.Subject, redact(rawURL), ctx.Err())
	default:
		return fmt.Errorf("publish to subject %q on %s: %w", n.Subject, redact(rawURL), err)
	}
}

// conn returns the connection to v, connecting if there is none. The
// connection is made by a goroutine of the Sink, which nats.Connect (which
// takes no ctx) may hold past ctx; the Delivers wait for it up to their ctx.
func (s *Sink) conn(ctx context.Context, v server) (*conn, error) {
	key := v.key()
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		d := s.mu.conns[key]
		if d == nil {
			d = &dial{done: make(chan struct{})}
			s.mu.conns[key] = d
			s.connecting.Add(1)
			go func() {
				defer s.connecting.Done()
				d.c, d.err = s.connect(v)
				s.mu.Lock()
				if d.err != nil && s.mu.conns[key] == d {
					delete(s.mu.conns, key) // the next Deliver connects again
				}
				s.mu.Unlock()
				close(d.done) // Close waits for this and closes d.c
			}()
		}
		s.mu.Unlock()

		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if d.err != nil {
			return nil, d.err
		}
		if !d.c.nc.IsClosed() {
			return d.c, nil
		}
		// Closed by the client (it gave up, as after an authorization
		// error): connect again.
		s.mu.Lock()
		if s.mu.conns[key] == d {
			delete(s.mu.conns, key)
		}
		s.mu.Unlock()
	}
}

// connect connects to v: under its guard, when it has one, which checks
// the address of every connection and reconnection.
func (s *Sink) connect(v server) (*conn, error) {
	log := s.log.With(slog.String("url", redact(v.url)), slog.Bool("guarded", v.guard != nil))
	c := &conn{gone: make(chan struct{})}
	var guarded []nats.Option
	if v.guard != nil {
		guarded = []nats.Option{
			nats.SetCustomDialer(guardDialer{dial: v.guard.DialContext(s.cfg.Resolver, nil), timeout: nats.DefaultTimeout}),
			// The guard resolves the name itself, so that allowed_hosts
			// matches it.
			nats.SkipHostLookup(),
		}
	}
	nc, err := nats.Connect(v.url, append([]nats.Option{
		nats.Name(s.cfg.ConnectionName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		// Fail a publish while reconnecting rather than send it later,
		// after its Deliver may have given up.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected; reconnecting", slog.Any("error", err))
			c.drop()
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
		nats.ClosedHandler(func(*nats.Conn) { log.Warn("nats connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("nats error", slog.String("error", err.Error()))
		}),
	}, guarded...)...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	log.Info("nats connected")
	c.nc, c.js = nc, js
	return c, nil
}

// Close closes the connections, failing the Delivers in flight, after
// waiting for the connections being made. Deliver returns [ErrClosed]
// afterwards. Close is idempotent and safe before any Deliver.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	dials := s.mu.conns
	s.mu.conns = nil
	s.mu.Unlock()

	for _, d := range dials {
		<-d.done // nats.Connect ends within its dial timeout per server
		if d.c != nil {
			d.c.nc.Close()
		}
	}
	s.connecting.Wait()
	return nil
}

// redact hides the passwords and tokens in a NATS URL or comma-separated
// list of URLs.
func redact(rawURL string) string {
	parts := strings.Split(rawURL, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		if u.User != nil {
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("xxxxx") // nats://token@host
			}
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
