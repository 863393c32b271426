package e2e_test

// Broker targets on a secured server (tokens, so the address guard refuses
// private addresses): a task may name only a broker the operator allowed
// its app, and a stored task whose broker is no longer allowed connects only
// through the guard. Every address here is on loopback.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

func tokenDigest(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// brokerTrap is a raw TCP listener on a loopback port, standing for a
// service a tenant must not make toc connect to.
type brokerTrap struct {
	ln *net.TCPListener
}

func newBrokerTrap(t *testing.T) *brokerTrap {
	return &brokerTrap{ln: testsvc.QuietListener(t)}
}

func (b *brokerTrap) addr() string { return b.ln.Addr().String() }

// untouched fails the test if anything connected to the trap: a connection
// made earlier waits in the backlog, so a short deadline is enough.
func (b *brokerTrap) untouched(t *testing.T) {
	t.Helper()
	testsvc.NoConnection(t, b.ln, 300*time.Millisecond)
}

func writeConfig(t *testing.T, path, yaml string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantFieldError checks that err is a 400 naming field.
func wantFieldError(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Field != field {
		t.Errorf("%s: got %v, want a 400 naming %s", what, err, field)
		return
	}
	if strings.Contains(ce.Message, "guest:guest") {
		t.Errorf("%s: the message shows a broker password: %q", what, ce.Message)
	}
}

// TestBrokerTargetRefusedAtCreate: an app's amqp or nats target may name
// only the server's default broker or one its allowed_brokers lists; any
// other URL or name is a 400 naming the field, and toc connects nowhere.
func TestBrokerTargetRefusedAtCreate(t *testing.T) {
	amqpTrap, natsTrap := newBrokerTrap(t), newBrokerTrap(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	writeConfig(t, cfg, "admin_tokens: ["+tokenDigest("admin-tok")+"]\n"+
		"brokers:\n"+
		"  rabbit: amqp://guest:guest@127.0.0.1:5672/\n"+
		"apps:\n"+
		"  shop:\n    tokens: ["+tokenDigest("shop-tok")+"]\n")
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg)
	shop := client.New(client.Config{BaseURL: c.url, Token: "shop-tok"})
	ctx := context.Background()

	for _, tt := range []struct {
		name   string
		target task.Target
		field  string
	}{
		{"amqp URL", task.Target{AMQP: &task.AMQPTarget{URL: "amqp://guest:guest@" + amqpTrap.addr() + "/", Exchange: "x"}}, "target.amqp.url"},
		{"nats URL", task.Target{NATS: &task.NATSTarget{URL: "nats://" + natsTrap.addr(), Subject: "x"}}, "target.nats.url"},
		{"broker not allowed to the app", task.Target{AMQP: &task.AMQPTarget{URL: "rabbit", Exchange: "x"}}, "target.amqp.url"},
		{"unknown broker name", task.Target{NATS: &task.NATSTarget{URL: "nowhere", Subject: "x"}}, "target.nats.url"},
	} {
		_, _, err := shop.Schedule(ctx, client.ScheduleRequest{App: "shop", Target: tt.target})
		wantFieldError(t, tt.name, err, tt.field)
	}
	amqpTrap.untouched(t)
	natsTrap.untouched(t)
}

// TestBrokerNoLongerAllowedIsGuarded: tasks created while their brokers
// were allowed, which the configuration no longer allows when they fire,
// connect only through the address guard: it refuses the loopback address
// before connecting, and last_error says how to allow the broker.
func TestBrokerNoLongerAllowedIsGuarded(t *testing.T) {
	amqpTrap, natsTrap := newBrokerTrap(t), newBrokerTrap(t)
	amqpURL := "amqp://guest:guest@" + amqpTrap.addr() + "/"
	natsURL := "nats://" + natsTrap.addr()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	base := "admin_tokens: [" + tokenDigest("admin-tok") + "]\n" +
		"apps:\n" +
		"  shop:\n    tokens: [" + tokenDigest("shop-tok") + "]\n"
	writeConfig(t, cfg, base+"    allowed_brokers: [\""+amqpURL+"\", \""+natsURL+"\"]\n")
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg, "--config-check", "1h")
	shop := client.New(client.Config{BaseURL: c.url, Token: "shop-tok"})
	ctx := context.Background()

	once := &task.RetryPolicy{MaxAttempts: 1}
	var ids []task.ID
	for _, target := range []task.Target{
		{AMQP: &task.AMQPTarget{URL: amqpURL, Exchange: "x"}},
		{NATS: &task.NATSTarget{URL: natsURL, Subject: "x"}},
	} {
		tk, _, err := shop.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Target: target, Retry: once})
		if err != nil {
			t.Fatalf("create while the broker is allowed: %v", err)
		}
		ids = append(ids, tk.ID)
	}

	// The operator takes the brokers back; max_payload marks the reload.
	writeConfig(t, cfg, base+"    max_payload: 4321\n")
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the reload", func() bool {
		req, _ := http.NewRequest("GET", c.url+"/v1/apps/shop", nil)
		req.Header.Set("Authorization", "Bearer admin-tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v appView
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&v) == nil && v.MaxPayload == 4321
	})

	now := time.Now()
	for _, id := range ids {
		if _, err := shop.Patch(ctx, id, client.PatchRequest{DueAt: &now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		var dead *task.Task
		testkit.WaitFor(t, 20*time.Second, "the refused attempt", func() bool {
			var err error
			dead, err = shop.Get(ctx, id)
			return err == nil && dead.State == task.Dead
		})
		if !strings.Contains(dead.LastError, "private") || !strings.Contains(dead.LastError, "allowed_brokers") || strings.Contains(dead.LastError, "guest:guest") {
			t.Errorf("last_error %q: want the guard's refusal, a pointer to allowed_brokers and no password", dead.LastError)
		}
	}
	amqpTrap.untouched(t)
	natsTrap.untouched(t)
}

// TestAllowedBrokersDeliver: on a secured server the default brokers and a
// broker an app's allowed_brokers names are operator infrastructure, reached
// without the address guard though they are on loopback; another app may
// not name that broker.
func TestAllowedBrokersDeliver(t *testing.T) {
	amqpURL := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	natsURL := cmp.Or(os.Getenv("TOC_NATS_URL"), "nats://127.0.0.1:4222")
	const natsStart = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"
	ctx := context.Background()

	ch, exchange, queue := rabbitQueue(t, amqpURL, "k")

	nc, err := nats.Connect(natsURL, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		testsvc.Missing(t, "NATS", natsURL, natsStart, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		testsvc.Missing(t, "NATS JetStream", natsURL, natsStart+" (with -js)", err)
	}
	tok := testsvc.Token()
	subject := "toc.e2e.guard." + tok
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "toc-e2e-guard-" + tok, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), "toc-e2e-guard-"+tok) }()

	// The named brokers are the same servers under URLs other than the
	// defaults', so that only allowed_brokers lets an app use them.
	namedAMQP := withQuery(t, amqpURL, "heartbeat=10")
	namedNATS := withQuery(t, natsURL, "named=1")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	writeConfig(t, cfg, "admin_tokens: ["+tokenDigest("admin-tok")+"]\n"+
		"amqp: \""+amqpURL+"\"\n"+
		"nats: \""+natsURL+"\"\n"+
		"brokers:\n"+
		"  rabbit: \""+namedAMQP+"\"\n"+
		"  events: \""+namedNATS+"\"\n"+
		"apps:\n"+
		"  ops:\n    tokens: ["+tokenDigest("ops-tok")+"]\n    allowed_brokers: [rabbit, events]\n"+
		"  shop:\n    tokens: ["+tokenDigest("shop-tok")+"]\n")
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg)
	ops := client.New(client.Config{BaseURL: c.url, Token: "ops-tok"})
	shop := client.New(client.Config{BaseURL: c.url, Token: "shop-tok"})

	type created struct {
		cl *client.Client
		id task.ID
	}
	var tasks []created
	for _, tc := range []struct {
		cl     *client.Client
		app    string
		target task.Target
	}{
		{ops, "ops", task.Target{AMQP: &task.AMQPTarget{URL: "rabbit", Exchange: exchange, RoutingKey: "k"}}},
		{ops, "ops", task.Target{AMQP: &task.AMQPTarget{URL: namedAMQP, Exchange: exchange, RoutingKey: "k"}}},
		{ops, "ops", task.Target{NATS: &task.NATSTarget{URL: "events", Subject: subject}}},
		{shop, "shop", task.Target{AMQP: &task.AMQPTarget{Exchange: exchange, RoutingKey: "k"}}},
		{shop, "shop", task.Target{NATS: &task.NATSTarget{Subject: subject}}},
	} {
		tk, _, err := tc.cl.Schedule(ctx, client.ScheduleRequest{App: tc.app, Target: tc.target, Payload: []byte(`{"n":1}`)})
		if err != nil {
			t.Fatalf("create %s %s: %v", tc.app, tc.target.Kind(), err)
		}
		tasks = append(tasks, created{tc.cl, tk.ID})
	}
	_, _, err = shop.Schedule(ctx, client.ScheduleRequest{App: "shop", Target: task.Target{AMQP: &task.AMQPTarget{URL: "rabbit", Exchange: exchange}}})
	wantFieldError(t, "shop naming ops's broker", err, "target.amqp.url")
	_, _, err = shop.Schedule(ctx, client.ScheduleRequest{App: "shop", Target: task.Target{NATS: &task.NATSTarget{URL: namedNATS, Subject: subject}}})
	wantFieldError(t, "shop naming ops's broker by URL", err, "target.nats.url")

	for _, tc := range tasks {
		testkit.WaitFor(t, 20*time.Second, "the task to be delivered", func() bool {
			got, err := tc.cl.Get(ctx, tc.id)
			if err == nil && got.State == task.Dead {
				t.Fatalf("task %s dead: %s", tc.id, got.LastError)
			}
			return err == nil && got.State == task.Delivered
		})
	}
	n := 0
	for {
		_, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d messages in the queue, want 3", n)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("%d messages in the stream, want 2", info.State.Msgs)
	}
}

// withQuery returns raw with q added to its query: the same server, another
// URL.
func withQuery(t *testing.T, raw, q string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.RawQuery != "" {
		q = u.RawQuery + "&" + q
	}
	u.RawQuery = q
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}
