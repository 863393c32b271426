package e2e_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestAMQPThroughTheEngine: a task with an amqp target is published with
// publisher confirms and lands in the bound queue; a task whose message is
// unroutable (no queue bound) fails each attempt, is retried, and ends dead
// with the broker's reason.
func TestAMQPThroughTheEngine(t *testing.T) {
	url := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	ch, exchange, queue := rabbitQueue(t, url, "orders")

	c := startChild(t, t.TempDir(), "--amqp", url)
	cl := c.client()
	ctx := context.Background()
	ok, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "orders", Key: "o-1", Payload: []byte(`{"order":1}`),
		Target: task.Target{AMQP: &task.AMQPTarget{Exchange: exchange}}}) // routing key: the app
	if err != nil {
		t.Fatal(err)
	}
	lost, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "orders", Key: "o-2",
		Target: task.Target{AMQP: &task.AMQPTarget{Exchange: exchange, RoutingKey: "nowhere"}},
		Retry:  &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(20 * time.Millisecond), MaxBackoff: task.Duration(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the routed task to be delivered", func() bool {
		got, err := cl.Get(ctx, ok.ID)
		return err == nil && got.State == task.Delivered
	})
	msg, found, err := ch.Get(queue, true)
	if err != nil || !found {
		t.Fatalf("no message in the queue: %v", err)
	}
	if msg.MessageId != ok.ID.String() || string(msg.Body) != `{"order":1}` || msg.Headers["Toc-App"] != "orders" {
		t.Errorf("message: id %q body %q headers %v", msg.MessageId, msg.Body, msg.Headers)
	}
	var dead *task.Task
	testkit.WaitFor(t, 20*time.Second, "the unroutable task to be dead", func() bool {
		dead, err = cl.Get(ctx, lost.ID)
		return err == nil && dead.State == task.Dead
	})
	if dead.Attempts != 3 || dead.LastError == "" {
		t.Errorf("dead after %d attempts, last_error %q", dead.Attempts, dead.LastError)
	}
	t.Logf("unroutable: %d attempts, last_error %q", dead.Attempts, dead.LastError)
}

// TestNATSThroughTheEngine: a task with a nats target is published to
// JetStream and stored by the stream that captures its subject, with
// Nats-Msg-Id = task id and the Toc-* headers; a task whose subject no
// stream captures gets no ack ("no responders"), is retried, and ends dead
// saying so.
func TestNATSThroughTheEngine(t *testing.T) {
	url := cmp.Or(os.Getenv("TOC_NATS_URL"), "nats://127.0.0.1:4222")
	stream, subject := natsStream(t)
	ctx := context.Background()

	c := startChild(t, t.TempDir(), "--nats", url)
	cl := c.client()
	ok, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "orders", Key: "n-1", Payload: []byte(`{"order":1}`),
		Target: task.Target{NATS: &task.NATSTarget{Subject: subject}}})
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "toc.e2e.nowhere." + testsvc.Token()
	lost, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "orders", Key: "n-2",
		Target: task.Target{NATS: &task.NATSTarget{Subject: nowhere}},
		Retry:  &task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(20 * time.Millisecond), MaxBackoff: task.Duration(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	var got *task.Task
	testkit.WaitFor(t, 20*time.Second, "the task to be delivered", func() bool {
		got, err = cl.Get(ctx, ok.ID)
		return err == nil && got.State == task.Delivered
	})
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("no message in the stream: %v", err)
	}
	want := nats.Header{
		"Nats-Msg-Id":      {ok.ID.String()},
		sink.HeaderTaskID:  {ok.ID.String()},
		sink.HeaderApp:     {"orders"},
		sink.HeaderKey:     {"n-1"},
		sink.HeaderAttempt: {"1"},
		sink.HeaderDueAt:   {ok.DueAt.UTC().Format(time.RFC3339Nano)},
	}
	if diff := gocmp.Diff(want, msg.Header); diff != "" {
		t.Errorf("message headers (-want +got):\n%s", diff)
	}
	if string(msg.Data) != `{"order":1}` || msg.Sequence != 1 {
		t.Errorf("message %d: body %q", msg.Sequence, msg.Data)
	}

	var dead *task.Task
	testkit.WaitFor(t, 20*time.Second, "the task without a stream to be dead", func() bool {
		dead, err = cl.Get(ctx, lost.ID)
		return err == nil && dead.State == task.Dead
	})
	if dead.Attempts != 3 || !strings.Contains(dead.LastError, "no stream captures the subject") || !strings.Contains(dead.LastError, nowhere) {
		t.Errorf("dead after %d attempts, last_error %q", dead.Attempts, dead.LastError)
	}
	t.Logf("no stream: %d attempts, last_error %q", dead.Attempts, dead.LastError)
}

// rabbitQueue declares an exchange and a queue of the test's own on the
// broker at url, the queue bound to the exchange by routingKey, and
// returns them with a channel to read the queue; all are deleted when the
// test ends. It skips (fails under CI) when RabbitMQ does not answer.
func rabbitQueue(t *testing.T, url, routingKey string) (ch *amqp.Channel, exchange, queue string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Missing(t, "RabbitMQ", "127.0.0.1:5672", "rabbitmq-server -detached", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	exchange, queue = "toc-e2e-"+testsvc.Token(), "toc-e2e-"+testsvc.Token()
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.QueueBind(queue, routingKey, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return ch, exchange, queue
}

// TestConfigTargetOnOperatorsBroker: an app's default target in the config
// file names an AMQP broker that is not the server's --amqp. The file is
// the operator's own, so toc starts with it and delivers through that
// broker (#23: it refused to start).
func TestConfigTargetOnOperatorsBroker(t *testing.T) {
	url := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	ch, exchange, queue := rabbitQueue(t, url, "orders")
	// The same broker under another URL than --amqp's.
	own := strings.Replace(url, "127.0.0.1", "localhost", 1)
	if own == url {
		t.Skipf("TOC_AMQP_URL %s has no 127.0.0.1 to write another way", url)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("apps:\n  orders:\n    target: {amqp: {url: %q, exchange: %q}}\n", own, exchange)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg, "--amqp", "amqp://guest:guest@127.0.0.1:5999/")
	cl := c.client()
	ctx := context.Background()
	tk, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "orders", Key: "o-1", Payload: []byte(`{"order":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the task to be delivered through the file's broker", func() bool {
		got, err := cl.Get(ctx, tk.ID)
		return err == nil && got.State == task.Delivered
	})
	msg, found, err := ch.Get(queue, true)
	if err != nil || !found || msg.MessageId != tk.ID.String() {
		t.Fatalf("queue: found %v, err %v, message id %q, want %s", found, err, msg.MessageId, tk.ID)
	}
}
