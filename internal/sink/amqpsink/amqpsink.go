package amqpsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// Headers toc sets on every message: package sink's names.
// HeaderAttempt is an integer (AMQP long); the others are strings.
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
	// MaxChannelsDefault caps the publishes in flight on one connection.
	// RabbitMQ allows 2047 channels per connection by default.
	MaxChannelsDefault = 256
	// ConnectionNameDefault is the connection name the broker shows.
	ConnectionNameDefault = "toc"
)

// closeTimeout bounds the connection.close handshake in Close.
const closeTimeout = 5 * time.Second

// ErrClosed is returned by Deliver after Close.
var ErrClosed = errors.New("amqpsink: closed")

// Config configures a Sink. Zero fields take the documented defaults.
type Config struct {
	// DefaultURL is the broker of tasks whose target has no URL, like
	// amqp://user:pass@host:5672/vhost. Default none: such tasks fail. It
	// is the operator's: connections to it are never guarded.
	DefaultURL string
	// Resolve turns the url of an app's target (a broker name or a URL; an
	// empty url is DefaultURL and never reaches it) into the broker URL to
	// dial, and says whether the operator allowed the app that broker. A
	// broker that is not allowed is dialled only through Guard. Nil: a
	// target's url is the URL to dial, and allowed.
	Resolve func(app, url string) (rawURL string, allowed bool, err error)
	// Guard returns the address policy of app's connections to brokers
	// Resolve did not allow; the resolved address is checked at connect
	// time, as httpsink does. Default: the zero policy, public addresses
	// only. Used only with Resolve.
	Guard func(app string) netguard.Policy
	// Resolver looks up broker hosts for guarded connections. Default
	// net.DefaultResolver.
	Resolver netguard.Resolver
	// Logger receives connection events (dialled, lost). Default:
	// slog.Default().
	Logger *slog.Logger
	// Timeout bounds one Deliver: connecting, waiting for a channel,
	// publishing and waiting for the confirm. Default [TimeoutDefault].
	Timeout time.Duration
	// MaxChannels caps the publishes in flight on one connection, each on
	// a channel of its own. Default [MaxChannelsDefault].
	MaxChannels int
	// ConnectionName is shown by the broker (management UI, rabbitmqctl
	// list_connections). Default [ConnectionNameDefault].
	ConnectionName string
	// Clock dates the messages (Timestamp): the engine's, so that a test
	// clock's deliveries carry its time. Nil: the wall clock.
	Clock clock.Clock
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("amqpsink config: Timeout must not be negative, got %s", c.Timeout)
	case c.MaxChannels < 0:
		return fmt.Errorf("amqpsink config: MaxChannels must not be negative, got %d", c.MaxChannels)
	}
	if c.DefaultURL != "" {
		if _, err := amqp.ParseURI(c.DefaultURL); err != nil {
			return fmt.Errorf("amqpsink config: DefaultURL: %w", err)
		}
	}
	return nil
}

// Sink publishes tasks to RabbitMQ. It is safe for concurrent use.
type Sink struct {
	cfg Config
	log *slog.Logger

	// bg counts the channel closes Deliver leaves running (see discard);
	// Close waits for them. Add is called under mu, while not closed.
	bg sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		conns  map[string]*dial // by broker URL
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
	cfg.MaxChannels = cmp.Or(cfg.MaxChannels, MaxChannelsDefault)
	cfg.ConnectionName = cmp.Or(cfg.ConnectionName, ConnectionNameDefault)
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Sink{cfg: cfg, log: cfg.Logger}
	s.mu.conns = make(map[string]*dial)
	return s
}

// dial is the connection to one broker URL, being dialled or dialled.
type dial struct {
	url  string        // the broker URL
	done chan struct{} // closed once c or err is set
	c    *conn
	err  error
}

// broker is where a task's target sends it: the broker URL, and the address
// policy its connections go through (nil for a broker the operator
// allowed). Connections are shared by the Delivers with the same key.
type broker struct {
	url   string
	guard *netguard.Policy
}

// key identifies the connection of b: a guarded connection is never shared
// with an unguarded one or one under another policy.
func (b broker) key() string {
	if b.guard == nil {
		return b.url
	}
	return "guarded " + b.guard.Key() + " " + b.url
}

// broker resolves app's target url ref.
func (s *Sink) broker(app, ref string) (broker, error) {
	if ref == "" {
		return broker{url: s.cfg.DefaultURL}, nil
	}
	if s.cfg.Resolve == nil {
		return broker{url: ref}, nil
	}
	rawURL, allowed, err := s.cfg.Resolve(app, ref)
	if err != nil || allowed {
		return broker{url: rawURL}, err
	}
	var p netguard.Policy
	if s.cfg.Guard != nil {
		p = s.cfg.Guard(app)
	}
	return broker{url: rawURL, guard: &p}, nil
}

// conn is an open connection and its channels.
type conn struct {
	amqp   *amqp.Connection
	nc     net.Conn         // its socket, closed to abort a call (see guard)
	closes chan *amqp.Error // why the broker or the network closed it
	slots  chan struct{}    // one token per channel in use; cap MaxChannels

	mu struct {
		sync.Mutex
		idle []*channel // confirm mode, nothing in flight
	}
}

// channel is a confirm-mode channel that carries one publish at a time, so
// that a return and a confirm on it belong to the publish in flight. A
// channel goes back to the pool only once its publish is confirmed, and the
// broker sends a publish's return before its confirm, so a pooled channel
// has nothing pending.
type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return // cap 1: one publish in flight returns at most once
	closes  chan *amqp.Error // cap 1: why the channel closed
}

// Deliver publishes t to its target's exchange and returns nil once the
// broker confirmed it. A nack, a return (no queue is bound for the routing
// key), a closed channel or connection, or ctx ending first is an error.
func (s *Sink) Deliver(ctx context.Context, t *task.Task) error {
	a := t.Target.AMQP
	if a == nil {
		return fmt.Errorf("amqpsink: task %s has no amqp target", t.ID)
	}
	b, err := s.broker(t.App, a.URL)
	if err != nil {
		return fmt.Errorf("amqpsink: task %s: target url: %w", t.ID, err)
	}
	rawURL := b.url
	if rawURL == "" {
		return fmt.Errorf("amqpsink: task %s has no broker URL and the server has no default: set the target's url or start toc with an AMQP URL", t.ID)
	}
	key := cmp.Or(a.RoutingKey, t.App)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	c, err := s.conn(ctx, b)
	if err != nil {
		if b.guard != nil {
			return fmt.Errorf("publish to exchange %q: connect to %s, a broker not allowed for app %s (list it in the app's allowed_brokers), through the address guard: %w",
				a.Exchange, redact(rawURL), t.App, err)
		}
		return fmt.Errorf("publish to exchange %q: connect to %s: %w", a.Exchange, redact(rawURL), err)
	}
	ch, err := s.channel(ctx, c)
	if err != nil {
		return fmt.Errorf("publish to exchange %q on %s: open a channel: %w", a.Exchange, redact(rawURL), err)
	}
	dc, err := guard(ctx, c, func() (*amqp.DeferredConfirmation, error) {
		return ch.ch.PublishWithDeferredConfirm(a.Exchange, key, true, false, publishing(ctx, t, s.cfg.Clock.Now()))
	})
	if err != nil {
		// Nothing is pending on the channel: the library takes back a
		// publish it could not send.
		s.release(c, ch)
		return fmt.Errorf("publish to exchange %q on %s: %w", a.Exchange, redact(rawURL), withCtx(ctx, err))
	}

	select {
	case <-dc.Done():
	case <-ctx.Done():
	}
	select {
	case <-dc.Done():
	default:
		// The broker may still confirm or return this publish: the channel
		// cannot carry another one.
		s.discard(c, ch)
		return fmt.Errorf("publish to exchange %q on %s: no confirm from the broker: %w", a.Exchange, redact(rawURL), ctx.Err())
	}

	// The return of an unroutable message comes before its ack, and the
	// library hands both over in order from one goroutine: if there is one,
	// it is in ch.returns by now.
	var ret *amqp.Return
	select {
	case r, ok := <-ch.returns:
		if ok {
			ret = &r
		}
	default:
	}
	var closeErr *amqp.Error
	select {
	case e, ok := <-ch.closes:
		if ok {
			closeErr = e
		}
	default:
	}
	acked, closed := dc.Acked(), ch.ch.IsClosed()
	s.release(c, ch)

	switch {
	case ret != nil:
		return fmt.Errorf("publish to exchange %q with routing key %q: the broker returned it (%d %s): bind a queue to the exchange for that routing key",
			a.Exchange, key, ret.ReplyCode, ret.ReplyText)
	case acked:
		return nil
	case closeErr != nil:
		return fmt.Errorf("publish to exchange %q on %s: closed before the broker confirmed: %w", a.Exchange, redact(rawURL), closeErr)
	case closed:
		return fmt.Errorf("publish to exchange %q on %s: the channel closed before the broker confirmed", a.Exchange, redact(rawURL))
	default:
		return fmt.Errorf("publish to exchange %q on %s: the broker nacked the message (it could not take it)", a.Exchange, redact(rawURL))
	}
}

// publishing builds the message for t, with the trace context of ctx's
// attempt span, or the one t was created in (telemetry.Outgoing), as the
// traceparent and tracestate headers, dated now.
func publishing(ctx context.Context, t *task.Task, now time.Time) amqp.Publishing {
	ct := "application/octet-stream"
	if sink.IsJSON(t.Payload) {
		ct = "application/json"
	}
	h := amqp.Table{
		HeaderTaskID:  t.ID.String(),
		HeaderApp:     t.App,
		HeaderAttempt: int64(t.Attempts),
		HeaderDueAt:   t.DueAt.UTC().Format(time.RFC3339Nano),
	}
	if t.Key != "" {
		h[HeaderKey] = t.Key
	}
	if !t.ScheduleID.IsZero() {
		h[HeaderScheduleID] = t.ScheduleID.String()
	}
	if tp, ts := telemetry.Outgoing(ctx, t); tp != "" {
		h[telemetry.HeaderTraceParent] = tp
		if ts != "" {
			h[telemetry.HeaderTraceState] = ts
		}
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  ct,
		DeliveryMode: amqp.Persistent,
		MessageId:    t.ID.String(),
		Timestamp:    now.UTC(),
		Body:         t.Payload,
	}
}

// conn returns the open connection to b, dialling it if there is none or
// the one there is was closed. One Deliver dials; the others wait for it.
func (s *Sink) conn(ctx context.Context, b broker) (*conn, error) {
	rawURL, key := b.url, b.key()
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		d := s.mu.conns[key]
		if d == nil {
			d = &dial{url: rawURL, done: make(chan struct{})}
			s.mu.conns[key] = d
			s.mu.Unlock()

			d.c, d.err = s.dial(ctx, b)
			s.mu.Lock()
			if d.err != nil && s.mu.conns[key] == d {
				delete(s.mu.conns, key) // the next Deliver dials again
			}
			close(d.done) // Close waits for this and closes d.c
			s.mu.Unlock()
			return d.c, d.err
		}
		s.mu.Unlock()

		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if d.err != nil {
			if ctx.Err() == nil && (errors.Is(d.err, context.Canceled) || errors.Is(d.err, context.DeadlineExceeded)) {
				continue // the dial ended with its Deliver's ctx, not ours: dial again
			}
			return nil, d.err
		}
		if !d.c.amqp.IsClosed() {
			return d.c, nil
		}
		s.mu.Lock()
		if s.mu.conns[key] == d {
			delete(s.mu.conns, key)
			var reason string
			select {
			case e, ok := <-d.c.closes:
				if ok {
					reason = e.Error()
				}
			default:
			}
			s.log.WarnContext(ctx, "amqp connection lost; dialling again",
				slog.String("url", redact(rawURL)), slog.String("error", reason))
		}
		s.mu.Unlock()
	}
}

// dial opens a connection to b: under its guard, when it has one, which
// checks the address the socket connects to.
func (s *Sink) dial(ctx context.Context, b broker) (*conn, error) {
	var (
		nc   net.Conn
		stop func() bool
	)
	dialContext := (&net.Dialer{}).DialContext
	if b.guard != nil {
		dialContext = b.guard.DialContext(s.cfg.Resolver, nil)
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(s.cfg.ConnectionName)
	ac, err := amqp.DialConfig(b.url, amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The TLS and AMQP handshakes that follow take no ctx.
			stop = context.AfterFunc(ctx, func() { _ = c.Close() })
			nc = c
			return c, nil
		},
	})
	if stop != nil && !stop() && err == nil {
		// ctx ended as the handshake finished, and the socket is closed.
		_ = ac.Close()
		err = ctx.Err()
	}
	if err != nil {
		if nc != nil {
			_ = nc.Close() // a failed handshake may leave it open
		}
		return nil, withCtx(ctx, err)
	}
	c := &conn{
		amqp:   ac,
		nc:     nc,
		closes: ac.NotifyClose(make(chan *amqp.Error, 1)),
		slots:  make(chan struct{}, s.cfg.MaxChannels),
	}
	s.log.InfoContext(ctx, "amqp connected", slog.String("url", redact(b.url)), slog.Bool("guarded", b.guard != nil))
	return c, nil
}

// channel takes a channel of c for one publish, waiting for a free slot. The
// caller gives it back with release or discard.
func (s *Sink) channel(ctx context.Context, c *conn) (*channel, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("all %d channels busy: %w", cap(c.slots), ctx.Err())
	}
	c.mu.Lock()
	for len(c.mu.idle) > 0 {
		ch := c.mu.idle[len(c.mu.idle)-1]
		c.mu.idle = c.mu.idle[:len(c.mu.idle)-1]
		if !ch.ch.IsClosed() {
			c.mu.Unlock()
			return ch, nil
		}
	}
	c.mu.Unlock()

	ch, err := guard(ctx, c, func() (*channel, error) {
		ach, err := c.amqp.Channel()
		if err != nil {
			return nil, err
		}
		ch := &channel{
			ch:      ach,
			returns: ach.NotifyReturn(make(chan amqp.Return, 1)),
			closes:  ach.NotifyClose(make(chan *amqp.Error, 1)),
		}
		if err := ach.Confirm(false); err != nil {
			_ = ach.Close()
			return nil, fmt.Errorf("enable publisher confirms: %w", err)
		}
		return ch, nil
	})
	if err != nil {
		<-c.slots
		return nil, withCtx(ctx, err)
	}
	return ch, nil
}

// release gives back a channel with nothing in flight, to the pool if it is
// open.
func (s *Sink) release(c *conn, ch *channel) {
	if !ch.ch.IsClosed() {
		c.mu.Lock()
		c.mu.idle = append(c.mu.idle, ch)
		c.mu.Unlock()
	}
	<-c.slots
}

// discard closes a channel whose publish is still pending, in the
// background: closing waits for the broker. Its slot is freed once it is
// closed.
func (s *Sink) discard(c *conn, ch *channel) {
	s.mu.Lock()
	if s.mu.closed {
		// Close is closing the connection, and the channel with it.
		s.mu.Unlock()
		<-c.slots
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		_ = ch.ch.Close()
		<-c.slots
	}()
}

// guard runs f, a library call that takes no ctx (a socket write, or a
// request that waits for the broker's answer), and makes it return when ctx
// ends by closing the connection's socket then. That fails every call in
// flight on the connection, which is what a broker that stopped reading or
// answering leaves them with anyway; the next Deliver dials again.
func guard[T any](ctx context.Context, c *conn, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.Close() })
	defer stop()
	return f()
}

// withCtx says that err comes from ctx ending, when it does.
func withCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// Close closes the connections, failing the Delivers in flight, and waits
// for the channel closes Deliver started. Deliver returns [ErrClosed]
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

	// Shutdown order: connections first, which ends the channel closes
	// still waiting for the broker, then those.
	var errs []error
	for _, d := range dials {
		<-d.done // a dial in flight ends with its Deliver's ctx
		if d.c == nil {
			continue
		}
		if err := d.c.amqp.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
			errs = append(errs, fmt.Errorf("close connection to %s: %w", redact(d.url), err))
		}
	}
	s.bg.Wait()
	return errors.Join(errs...)
}

// redact hides the password in an AMQP URL.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
