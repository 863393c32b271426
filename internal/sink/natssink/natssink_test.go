package natssink

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const startServer = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"

// unreachable skips the test, or fails it when CI=true.
func unreachable(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// testBundle is one test's stream, capturing subject, deleted when the test
// ends, and the test's own connection to read it back.
type testBundle struct {
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	subject string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{url: cmp.Or(os.Getenv("TOC_NATS_URL"), "nats://127.0.0.1:4222")}
	var err error
	b.nc, err = nats.Connect(b.url, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		unreachable(t, fmt.Sprintf("NATS not reachable at %s: start it with `%s` (%v)", redact(b.url), startServer, err))
	}
	t.Cleanup(b.nc.Close)
	if b.js, err = jetstream.New(b.nc); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.AccountInfo(t.Context()); err != nil {
		unreachable(t, fmt.Sprintf("NATS at %s has no JetStream: start it with -js, as `%s` does (%v)", redact(b.url), startServer, err))
	}
	sfx := uniq()
	b.subject = "toc.test." + sfx
	b.stream, err = b.js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name:     "toc-test-" + sfx,
		Subjects: []string{b.subject},
		Storage:  jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.js.DeleteStream(context.Background(), b.stream.CachedInfo().Config.Name); err != nil {
			t.Errorf("delete stream: %v", err)
		}
	})
	return b
}

func uniq() string { return strings.ToLower(rand.Text()[:10]) }

// msgs returns the messages of the stream, in order.
func (b *testBundle) msgs(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	info, err := b.stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ms []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := b.stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		ms = append(ms, m)
	}
	return ms
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

func newTask(app string, target task.NATSTarget) *task.Task {
	return &task.Task{
		ID:       ids.New(time.Now(), 0),
		App:      app,
		DueAt:    time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC),
		Payload:  []byte(`{"n":1}`),
		Attempts: 1,
		Target:   task.Target{NATS: &target},
	}
}

type received struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

func TestDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url})

	tests := []struct {
		name string
		task func() *task.Task
		want func(tk *task.Task) received
	}{
		{
			name: "json payload with key, an occurrence of a schedule",
			task: func() *task.Task {
				tk := newTask("billing", task.NATSTarget{Subject: b.subject})
				tk.Key, tk.Attempts, tk.Payload = "order-42", 3, []byte(`{"order":42}`)
				tk.ScheduleID = task.ID{7}
				return tk
			},
			want: func(tk *task.Task) received {
				return received{
					Subject: b.subject,
					Header: nats.Header{
						"Nats-Msg-Id": {tk.ID.String()},
						HeaderTaskID:  {tk.ID.String()}, HeaderApp: {"billing"}, HeaderKey: {"order-42"},
						HeaderAttempt: {"3"}, HeaderDueAt: {"2030-01-02T03:04:05.006Z"},
						HeaderScheduleID: {tk.ScheduleID.String()},
					},
					Data: []byte(`{"order":42}`),
				}
			},
		},
		{
			name: "bytes, no key, URL from the target",
			task: func() *task.Task {
				tk := newTask("billing", task.NATSTarget{URL: b.url, Subject: b.subject})
				tk.Payload = []byte{0xff, 0x00, 'x'}
				return tk
			},
			want: func(tk *task.Task) received {
				return received{
					Subject: b.subject,
					Header: nats.Header{
						"Nats-Msg-Id": {tk.ID.String()},
						HeaderTaskID:  {tk.ID.String()}, HeaderApp: {"billing"},
						HeaderAttempt: {"1"}, HeaderDueAt: {"2030-01-02T03:04:05.006Z"},
					},
					Data: []byte{0xff, 0x00, 'x'},
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(b.msgs(t))
			tk := tt.task()
			if err := s.Deliver(t.Context(), tk); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			ms := b.msgs(t)
			if len(ms) != before+1 {
				t.Fatalf("stream holds %d messages, want %d", len(ms), before+1)
			}
			m := ms[len(ms)-1]
			if diff := gocmp.Diff(tt.want(tk), received{m.Subject, m.Header, m.Data}); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeliverDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url})

	tk := newTask("app", task.NATSTarget{Subject: b.subject})
	if err := s.Deliver(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	tk.Attempts++ // the engine's retry of an attempt whose ack was lost
	if err := s.Deliver(t.Context(), tk); err != nil {
		t.Fatalf("second Deliver of the same task: %v", err)
	}
	ms := b.msgs(t)
	if len(ms) != 1 {
		t.Fatalf("stream holds %d messages, want 1", len(ms))
	}
	if got := ms[0].Header.Get(HeaderAttempt); got != "1" {
		t.Errorf("stored %s %q, want the first attempt's", HeaderAttempt, got)
	}
}

func TestDeliverNoStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url})
	err := s.Deliver(t.Context(), newTask("app", task.NATSTarget{Subject: "toc.nostream." + uniq()}))
	if err == nil || !strings.Contains(err.Error(), "no stream captures the subject") {
		t.Fatalf("Deliver to a subject no stream captures: got %v, want an error that says so", err)
	}
}

func TestDeliverConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, Config{DefaultURL: b.url})

	const n, workers = 500, 32
	tasks := make(chan *task.Task, n)
	want := make(map[string]bool, n)
	for range n {
		tk := newTask("app", task.NATSTarget{Subject: b.subject})
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
	for _, m := range b.msgs(t) {
		got[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("messages in the stream (-want +got):\n%s", diff)
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
		err := s.Deliver(ctx, newTask("app", task.NATSTarget{Subject: b.subject}))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Deliver with a cancelled ctx: got %v, want context.Canceled", err)
		}
	})

	t.Run("no ack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A plain subscriber that never answers takes the place of a stream.
		subject, _ := silentSubject(t, b)
		for _, tt := range []struct {
			name    string
			cfg     Config
			timeout time.Duration // of ctx; 0 for none
		}{
			{"ctx", Config{DefaultURL: b.url}, 200 * time.Millisecond},
			{"Config.Timeout", Config{DefaultURL: b.url, Timeout: 200 * time.Millisecond}, 0},
		} {
			s := newSink(t, tt.cfg)
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			err := s.Deliver(ctx, newTask("app", task.NATSTarget{Subject: subject}))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: got %v, want context.DeadlineExceeded", tt.name, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s: Deliver returned after %s, want about 200ms", tt.name, d)
			}
		}
	})
}

// TestDisconnect cuts the sink's connection and keeps the server away: a
// Deliver fails within its ctx, and Delivers succeed once the client has
// reconnected.
func TestDisconnect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newProxy(t, b.url)
	s := newSink(t, Config{DefaultURL: p.url})
	target := task.NATSTarget{Subject: b.subject}
	if err := s.Deliver(t.Context(), newTask("app", target)); err != nil {
		t.Fatal(err)
	}

	p.down()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	err := s.Deliver(ctx, newTask("app", target))
	if err == nil {
		t.Errorf("Deliver while the server is away: got nil, want an error")
	}
	t.Logf("Deliver while the server is away: %v", err)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Deliver while the server is away returned after %s, want within its 1s ctx", d)
	}

	p.up(t)
	var (
		delivered *task.Task
		lastErr   error
	)
	deadline := time.Now().Add(15 * time.Second) // reconnects are ReconnectWait apart
	for delivered == nil && time.Now().Before(deadline) {
		tk := newTask("app", target)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if lastErr = s.Deliver(ctx, tk); lastErr == nil {
			delivered = tk
		} else {
			<-ctx.Done() // a failed Deliver may return at once; pace the retries
		}
		cancel()
	}
	if delivered == nil {
		t.Fatalf("no Deliver succeeded within 15s of the server's return; last error: %v", lastErr)
	}
	ms := b.msgs(t)
	if got := ms[len(ms)-1].Header.Get(jetstream.MsgIDHeader); got != delivered.ID.String() {
		t.Errorf("last message in the stream is %s, want %s", got, delivered.ID)
	}
}

// silentSubject returns a fresh subject and a plain subscriber on it that
// never answers: a publish to it waits for an ack that does not come.
func silentSubject(t *testing.T, b *testBundle) (string, *nats.Subscription) {
	t.Helper()
	subject := "toc.silent." + uniq()
	sub, err := b.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return subject, sub
}

// TestDisconnectDuringPublish: a publish waiting for its ack when the
// connection drops fails then, not at the end of its timeout (nats.go
// leaves such a request waiting until the connection is closed).
func TestDisconnectDuringPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A plain subscriber that never answers: the publish waits for an ack.
	subject, sub := silentSubject(t, b)
	p := newProxy(t, b.url)
	s := newSink(t, Config{DefaultURL: p.url, Timeout: 20 * time.Second})
	if err := s.Deliver(t.Context(), newTask("app", task.NATSTarget{Subject: b.subject})); err != nil {
		t.Fatal(err) // connected
	}
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- s.Deliver(t.Context(), newTask("app", task.NATSTarget{Subject: subject})) }()
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the publish did not arrive: %v", err)
	}
	p.down()
	select {
	case err := <-errc:
		if !errors.Is(err, errDropped) {
			t.Errorf("got %v, want errDropped", err)
		}
		t.Logf("failed %s after the publish, on the drop: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("the publish still waits 10s after its connection dropped")
	}
}

// proxy forwards TCP connections to a server, and can go away (down) and
// come back (up) on the same address, as a server or a network can.
type proxy struct {
	url    string // the server URL with the proxy's address
	addr   string
	target string
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		ln    net.Listener // nil while down
		conns []net.Conn
	}
}

func newProxy(t *testing.T, serverURL string) *proxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: u.Host}
	p.listen(t, "127.0.0.1:0")
	u.Host = p.addr
	p.url = u.String()
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) listen(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.mu.Lock()
	p.mu.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
}

func (p *proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.mu.ln != ln {
			p.mu.Unlock()
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.mu.conns = append(p.mu.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { pipe(u, c) })
		p.wg.Go(func() { pipe(c, u) })
	}
}

func pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down stops listening and closes every connection.
func (p *proxy) down() {
	p.mu.Lock()
	ln, conns := p.mu.ln, p.mu.conns
	p.mu.ln, p.mu.conns = nil, nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// up listens again on the same address.
func (p *proxy) up(t *testing.T) { p.listen(t, p.addr) }

func TestClose(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close before any Deliver: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := s.Deliver(t.Context(), newTask("app", task.NATSTarget{URL: "nats://127.0.0.1:1", Subject: "x"}))
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Deliver after Close: got %v, want ErrClosed", err)
	}

	b := setup(t)
	s = New(Config{DefaultURL: b.url, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err := s.Deliver(t.Context(), newTask("app", task.NATSTarget{Subject: b.subject})); err != nil {
		t.Fatal(err)
	}
	var nc *nats.Conn
	s.mu.Lock()
	for _, d := range s.mu.conns {
		nc = d.c.nc
	}
	s.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !nc.IsClosed() {
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
		{"no nats target", &task.Task{App: "a"}, "has no nats target"},
		{"no subject", newTask("a", task.NATSTarget{URL: "nats://127.0.0.1:1"}), "has no subject"},
		{"no URL", newTask("a", task.NATSTarget{Subject: "x"}), "has no server URL"},
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

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://toc:s3cret@a:4222,nats://toc:s3cret@b:4222", "nats://toc:xxxxx@a:4222,nats://toc:xxxxx@b:4222"},
		{"nats://s3cret@a:4222", "nats://xxxxx@a:4222"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
