package amqpsink

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// brokerURL returns the URL of the test broker, skipping the test when it
// cannot be reached (failing it when CI=true).
func brokerURL(t *testing.T) string {
	t.Helper()
	u := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		msg := fmt.Sprintf("RabbitMQ not reachable at %s: start it with `rabbitmq-server -detached` (%v)", redact(u), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	_ = c.Close()
	return u
}

// testBundle is one test's broker objects: an exchange with a queue bound
// to it under key, all deleted when the test ends.
type testBundle struct {
	url      string
	ch       *amqp.Channel // the test's own channel, to declare and read back
	exchange string
	queue    string
	key      string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{url: brokerURL(t)}
	conn, err := amqp.Dial(b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if b.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	b.exchange = b.declareExchange(t)
	b.queue = b.declareQueue(t, nil)
	b.key = uniq("key")
	b.bind(t, b.queue, b.exchange, b.key)
	return b
}

func uniq(prefix string) string {
	return "toc-test-" + prefix + "-" + strings.ToLower(rand.Text()[:10])
}

func (b *testBundle) declareExchange(t *testing.T) string {
	t.Helper()
	name := uniq("x")
	if err := b.ch.ExchangeDeclare(name, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.ch.ExchangeDelete(name, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", name, err)
		}
	})
	return name
}

func (b *testBundle) declareQueue(t *testing.T, args amqp.Table) string {
	t.Helper()
	q, err := b.ch.QueueDeclare(uniq("q"), false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := b.ch.QueueDelete(q.Name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", q.Name, err)
		}
	})
	return q.Name
}

func (b *testBundle) bind(t *testing.T, queue, exchange, key string) {
	t.Helper()
	if err := b.ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

// getAll takes every message in queue. A confirmed publish is in its queue
// already, so there is nothing to wait for.
func (b *testBundle) getAll(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	var ds []amqp.Delivery
	for {
		d, ok, err := b.ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return ds
		}
		ds = append(ds, d)
	}
}

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s := New(cfg)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

var ids task.IDGenerator

func newTask(app string, target task.AMQPTarget) *task.Task {
	return &task.Task{
		ID:       ids.New(time.Now(), 0),
		App:      app,
		DueAt:    time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC),
		Payload:  []byte(`{"n":1}`),
		Attempts: 1,
		Target:   task.Target{AMQP: &target},
	}
}

// received is what a test compares of a delivered message.
type received struct {
	Exchange     string
	RoutingKey   string
	ContentType  string
	DeliveryMode uint8
	MessageID    string
	Headers      amqp.Table
	Body         []byte
}

func receivedOf(d amqp.Delivery) received {
	return received{
		Exchange:     d.Exchange,
		RoutingKey:   d.RoutingKey,
		ContentType:  d.ContentType,
		DeliveryMode: d.DeliveryMode,
		MessageID:    d.MessageId,
		Headers:      d.Headers,
		Body:         d.Body,
	}
}

func TestDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url})

	tests := []struct {
		name   string
		task   func() *task.Task
		queue  string
		header func(tk *task.Task) amqp.Table
		want   func(tk *task.Task) received
	}{
		{
			name: "json payload with key, an occurrence of a schedule",
			task: func() *task.Task {
				tk := newTask("billing", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})
				tk.Key, tk.Attempts, tk.Payload = "order-42", 3, []byte(`{"order":42}`)
				tk.ScheduleID = task.ID{7}
				return tk
			},
			want: func(tk *task.Task) received {
				return received{
					Exchange: b.exchange, RoutingKey: b.key,
					ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageID: tk.ID.String(),
					Headers: amqp.Table{
						HeaderTaskID: tk.ID.String(), HeaderApp: "billing", HeaderKey: "order-42",
						HeaderAttempt: int64(3), HeaderDueAt: "2030-01-02T03:04:05.006Z",
						HeaderScheduleID: tk.ScheduleID.String(),
					},
					Body: []byte(`{"order":42}`),
				}
			},
		},
		{
			name: "bytes, no key, routing key from the app, URL from the target",
			task: func() *task.Task {
				tk := newTask(b.key, task.AMQPTarget{URL: b.url, Exchange: b.exchange})
				tk.Payload = []byte{0xff, 0x00, 'x'}
				return tk
			},
			want: func(tk *task.Task) received {
				return received{
					Exchange: b.exchange, RoutingKey: b.key,
					ContentType: "application/octet-stream", DeliveryMode: amqp.Persistent, MessageID: tk.ID.String(),
					Headers: amqp.Table{
						HeaderTaskID: tk.ID.String(), HeaderApp: b.key,
						HeaderAttempt: int64(1), HeaderDueAt: "2030-01-02T03:04:05.006Z",
					},
					Body: []byte{0xff, 0x00, 'x'},
				}
			},
		},
		{
			name: "default exchange",
			task: func() *task.Task {
				return newTask("billing", task.AMQPTarget{RoutingKey: b.queue})
			},
			want: func(tk *task.Task) received {
				return received{
					Exchange: "", RoutingKey: b.queue,
					ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageID: tk.ID.String(),
					Headers: amqp.Table{
						HeaderTaskID: tk.ID.String(), HeaderApp: "billing",
						HeaderAttempt: int64(1), HeaderDueAt: "2030-01-02T03:04:05.006Z",
					},
					Body: []byte(`{"n":1}`),
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := tt.task()
			start := time.Now()
			if err := s.Deliver(t.Context(), tk); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			ds := b.getAll(t, b.queue)
			if len(ds) != 1 {
				t.Fatalf("got %d messages in the queue, want 1", len(ds))
			}
			if diff := gocmp.Diff(tt.want(tk), receivedOf(ds[0])); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			// AMQP timestamps have whole seconds.
			if ts := ds[0].Timestamp; ts.Before(start.Truncate(time.Second)) || ts.After(time.Now()) {
				t.Errorf("Timestamp %s, want the publish time (%s)", ts, start)
			}
		})
	}
}

func TestDeliverUnroutable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unbound := b.declareExchange(t)
	// One channel: the next publish runs on the channel that saw the return.
	s := newSink(t, Config{DefaultURL: b.url, MaxChannels: 1})

	err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{Exchange: unbound, RoutingKey: "nowhere"}))
	if err == nil || !strings.Contains(err.Error(), "NO_ROUTE") {
		t.Fatalf("Deliver to an exchange without bindings: got %v, want an error about NO_ROUTE", err)
	}
	ok := newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})
	if err := s.Deliver(t.Context(), ok); err != nil {
		t.Fatalf("Deliver after a return: %v", err)
	}
	if ds := b.getAll(t, b.queue); len(ds) != 1 || ds[0].MessageId != ok.ID.String() {
		t.Errorf("queue holds %d messages, want only %s", len(ds), ok.ID)
	}
}

func TestDeliverMissingExchange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url, MaxChannels: 1})

	err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{Exchange: uniq("missing"), RoutingKey: "k"}))
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("Deliver to a missing exchange: got %v, want an error about NOT_FOUND", err)
	}
	// The broker closed that channel; the sink opens another.
	ok := newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})
	if err := s.Deliver(t.Context(), ok); err != nil {
		t.Fatalf("Deliver after the broker closed the channel: %v", err)
	}
	if ds := b.getAll(t, b.queue); len(ds) != 1 {
		t.Errorf("queue holds %d messages, want 1", len(ds))
	}
}

func TestDeliverNack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	full := b.declareQueue(t, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	b.bind(t, full, b.exchange, "full")
	s := newSink(t, Config{DefaultURL: b.url, MaxChannels: 1})

	err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: "full"}))
	if err == nil || !strings.Contains(err.Error(), "nacked") {
		t.Fatalf("Deliver to a full queue that rejects publishes: got %v, want a nack", err)
	}
	if err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})); err != nil {
		t.Fatalf("Deliver after a nack: %v", err)
	}
}

func TestDeliverConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url, MaxChannels: 8})

	const n, workers = 500, 32
	tasks := make(chan *task.Task, n)
	want := make(map[string]bool, n)
	for range n {
		tk := newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})
		want[tk.ID.String()] = true
		tasks <- tk
	}
	close(tasks)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for tk := range tasks {
				if err := s.Deliver(t.Context(), tk); err != nil {
					t.Errorf("Deliver %s: %v", tk.ID, err)
				}
			}
		})
	}
	wg.Wait()

	got := make(map[string]bool, n)
	for _, d := range b.getAll(t, b.queue) {
		got[d.MessageId] = true
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("messages in the queue (-want +got):\n%s", diff)
	}
}

func TestDeliverContext(t *testing.T) {
	t.Parallel()

	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := newSink(t, Config{DefaultURL: b.url})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := s.Deliver(ctx, newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key}))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Deliver with a cancelled ctx: got %v, want context.Canceled", err)
		}
	})

	t.Run("silent broker", func(t *testing.T) {
		t.Parallel()
		// A server that accepts connections and never says a word: the
		// handshake blocks in the library, which takes no ctx.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait)
		t.Cleanup(func() { _ = ln.Close() })
		accepted := make(chan struct{}, 100)
		wg.Go(func() {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns = append(conns, c)
				accepted <- struct{}{}
			}
		})
		silent := "amqp://guest:guest@" + ln.Addr().String() + "/"
		for _, tt := range []struct {
			name    string
			cfg     Config
			timeout time.Duration // of ctx; 0 for none
		}{
			{"ctx", Config{DefaultURL: silent}, 200 * time.Millisecond},
			{"Config.Timeout", Config{DefaultURL: silent, Timeout: 200 * time.Millisecond}, 0},
		} {
			s := newSink(t, tt.cfg)
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			err := s.Deliver(ctx, newTask("app", task.AMQPTarget{Exchange: "x"}))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: got %v, want context.DeadlineExceeded", tt.name, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s: Deliver returned after %s, want about 200ms", tt.name, d)
			}
			<-accepted
		}

		// A Deliver that waits for another's dial is not failed by the
		// other's ctx: it dials again and waits for its own.
		s := newSink(t, Config{DefaultURL: silent})
		short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		errShort := make(chan error, 1)
		go func() { errShort <- s.Deliver(short, newTask("app", task.AMQPTarget{Exchange: "x"})) }()
		<-accepted // the short Deliver is dialling
		long, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
		defer cancel()
		err = s.Deliver(long, newTask("app", task.AMQPTarget{Exchange: "x"}))
		if !errors.Is(err, context.DeadlineExceeded) || long.Err() == nil {
			t.Errorf("Deliver waiting for a dial whose ctx ended: got %v before its own ctx ended, want its own DeadlineExceeded", err)
		}
		if err := <-errShort; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("short Deliver: got %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("no confirm", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newProxy(t, b.url)
		s := newSink(t, Config{DefaultURL: p.url})
		target := task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key}
		if err := s.Deliver(t.Context(), newTask("app", target)); err != nil {
			t.Fatal(err)
		}

		p.freeze() // the broker's confirms stop reaching the sink
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := s.Deliver(ctx, newTask("app", target))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Deliver without a confirm: got %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Deliver returned after %s, want about 200ms", d)
		}
		p.thaw()

		if err := s.Deliver(t.Context(), newTask("app", target)); err != nil {
			t.Errorf("Deliver after the confirms flow again: %v", err)
		}
		// Close waits for the channel of the unconfirmed publish to close,
		// and the broker closes it after it took the publish.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The unconfirmed publish reached the queue all the same: delivery
		// is at least once, and the retry carries the same MessageId.
		if ds := b.getAll(t, b.queue); len(ds) != 3 {
			t.Errorf("queue holds %d messages, want 3", len(ds))
		}
	})
}

// TestConnectionDrop drops the sink's connection while Delivers stream, and
// checks that every Deliver that returned nil is in the queue and that
// Delivers succeed again on a new connection.
func TestConnectionDrop(t *testing.T) {
	t.Parallel()

	t.Run("broker closes it", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("rabbitmqctl"); err != nil {
			t.Skip("rabbitmqctl is not installed; the network drop case covers the sink's side")
		}
		b := setup(t)
		name := uniq("conn")
		s := newSink(t, Config{DefaultURL: b.url, ConnectionName: name})
		testDrop(t, b, s, func() { closeConnections(t, name) })
	})

	t.Run("network drops", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newProxy(t, b.url)
		s := newSink(t, Config{DefaultURL: p.url})
		testDrop(t, b, s, p.cut)
	})
}

func testDrop(t *testing.T, b *testBundle, s *Sink, drop func()) {
	const (
		workers    = 16
		beforeDrop = 300 // successes before the drop
		afterDrop  = 300 // successes of Delivers started after it
	)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var (
		mu        sync.Mutex
		delivered = make(map[string]bool)
		failed    atomic.Int64
		dropped   atomic.Bool
		after     atomic.Int64
		ready     = make(chan struct{})
		readyOnce sync.Once
		connAfter atomic.Pointer[amqp.Connection]
	)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				tk := newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})
				startedAfter := dropped.Load()
				if err := s.Deliver(ctx, tk); err != nil {
					failed.Add(1)
					continue
				}
				mu.Lock()
				delivered[tk.ID.String()] = true
				n := len(delivered)
				mu.Unlock()
				if n >= beforeDrop {
					readyOnce.Do(func() { close(ready) })
				}
				if startedAfter && after.Add(1) == afterDrop {
					// Read the connection before stopping: ending ctx
					// closes the connection under the Delivers in flight.
					connAfter.Store(s.currentConn())
					stop()
				}
			}
		})
	}

	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		stop()
		wg.Wait()
		t.Fatalf("only %d Delivers succeeded before the drop in 20s", len(delivered))
	}
	before := s.currentConn()
	drop()
	dropped.Store(true)
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Errorf("only %d Delivers succeeded in 30s after the drop", after.Load())
		stop()
	}
	wg.Wait()
	if after.Load() < afterDrop {
		return
	}
	if c := connAfter.Load(); c == nil || c == before {
		t.Errorf("the sink still uses the connection it had before the drop")
	}

	inQueue := make(map[string]bool)
	for _, d := range b.getAll(t, b.queue) {
		inQueue[d.MessageId] = true
	}
	var lost []string
	for id := range delivered {
		if !inQueue[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d delivered tasks are not in the queue: %v", len(lost), len(delivered), lost)
	}
	t.Logf("%d delivered, %d failed attempts, %d messages in the queue", len(delivered), failed.Load(), len(inQueue))
}

// currentConn returns the sink's connection, if it has one. The tests use
// one URL per sink.
func (s *Sink) currentConn() *amqp.Connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.mu.conns {
		select {
		case <-d.done:
			if d.c != nil {
				return d.c.amqp
			}
		default:
		}
	}
	return nil
}

// closeConnections makes the broker close the connections named name, as
// an operator or a failing node would.
func closeConnections(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_connections", "pid", "client_properties", "-q", "--no-table-headers").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	var n int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pid, props, ok := strings.Cut(sc.Text(), "\t")
		if !ok || !strings.Contains(props, fmt.Sprintf(`{"connection_name","%s"}`, name)) {
			continue
		}
		if out, err := exec.Command("rabbitmqctl", "close_connection", pid, "toc test: connection drop").CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl close_connection %s: %v\n%s", pid, err, out)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("rabbitmqctl lists no connection named %s: is it the broker at the test URL?", name)
	}
}

// proxy forwards TCP connections to a broker, and can hold back what the
// broker sends (freeze) or drop every connection (cut), as a network can.
type proxy struct {
	url    string // the broker URL with the proxy's address
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		closed bool
		conns  []net.Conn
		frozen chan struct{} // non-nil while frozen; closed by thaw
	}
}

func newProxy(t *testing.T, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: u.Host, ln: ln}
	u.Host = ln.Addr().String()
	p.url = u.String()
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.mu.closed = true
		p.mu.Unlock()
		p.thaw()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.mu.conns = append(p.mu.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(u, c, false) })
		p.wg.Go(func() { p.pipe(c, u, true) })
	}
}

// pipe copies src to dst until either fails, then closes both.
func (p *proxy) pipe(dst, src net.Conn, fromBroker bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromBroker {
				p.mu.Lock()
				frozen := p.mu.frozen
				p.mu.Unlock()
				if frozen != nil {
					<-frozen
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.frozen == nil {
		p.mu.frozen = make(chan struct{})
	}
}

func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.frozen != nil {
		close(p.mu.frozen)
		p.mu.frozen = nil
	}
}

// cut closes every connection made so far; new ones are still forwarded.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.mu.conns
	p.mu.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close before any Deliver: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{URL: "amqp://127.0.0.1:1/"}))
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Deliver after Close: got %v, want ErrClosed", err)
	}

	b := setup(t)
	s = New(Config{DefaultURL: b.url, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err := s.Deliver(t.Context(), newTask("app", task.AMQPTarget{Exchange: b.exchange, RoutingKey: b.key})); err != nil {
		t.Fatal(err)
	}
	c := s.currentConn()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !c.IsClosed() {
		t.Errorf("Close left the connection open")
	}
}

func TestDeliverBadTask(t *testing.T) {
	t.Parallel()
	s := newSink(t, Config{})
	tests := []struct {
		name string
		task *task.Task
		want string
	}{
		{"no amqp target", &task.Task{App: "a"}, "has no amqp target"},
		{"no URL", newTask("a", task.AMQPTarget{Exchange: "x"}), "has no broker URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Deliver(t.Context(), tt.task)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestErrorHidesPassword(t *testing.T) {
	t.Parallel()
	s := newSink(t, Config{DefaultURL: "amqp://toc:s3cret@127.0.0.1:1/"})
	err := s.Deliver(t.Context(), newTask("a", task.AMQPTarget{Exchange: "x"}))
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("got %v, want an error without the password", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{DefaultURL: "amqp://guest:guest@localhost:5672/", MaxChannels: 10, Timeout: time.Second}, ""},
		{Config{MaxChannels: -1}, "MaxChannels"},
		{Config{Timeout: -time.Second}, "Timeout"},
		{Config{DefaultURL: "http://localhost"}, "DefaultURL"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.cfg, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: got %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}

// A message is dated by the sink's clock: on a test clock, its time.
func TestPublishingDatedByClock(t *testing.T) {
	at := time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC)
	s := New(Config{Clock: clock.NewTest(at)})
	tk := &task.Task{ID: new(task.IDGenerator).New(at, 0), App: "billing", Payload: []byte(`{}`)}
	p := publishing(t.Context(), tk, s.cfg.Clock.Now())
	if !p.Timestamp.Equal(at) {
		t.Errorf("Timestamp %s, want the clock's %s", p.Timestamp, at)
	}
}
