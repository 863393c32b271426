package e2e_test

import (
	"cmp"
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestAMQPThroughTheEngine: a task with an amqp target is published with
// publisher confirms and lands in the bound queue; a task whose message is
// unroutable (no queue bound) fails each attempt, is retried, and ends dead
// with the broker's reason.
func TestAMQPThroughTheEngine(t *testing.T) {
	url := cmp.Or(os.Getenv("TOC_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Missing(t, "RabbitMQ", "127.0.0.1:5672", "rabbitmq-server -detached", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	exchange, queue := "toc-e2e-"+testsvc.Token(), "toc-e2e-"+testsvc.Token()
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(exchange, false, false)
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(queue, false, false, false)
	if err := ch.QueueBind(queue, "orders", exchange, false, nil); err != nil {
		t.Fatal(err)
	}

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
	waitFor(t, 20*time.Second, "the routed task to be delivered", func() bool {
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
	waitFor(t, 20*time.Second, "the unroutable task to be dead", func() bool {
		dead, err = cl.Get(ctx, lost.ID)
		return err == nil && dead.State == task.Dead
	})
	if dead.Attempts != 3 || dead.LastError == "" {
		t.Errorf("dead after %d attempts, last_error %q", dead.Attempts, dead.LastError)
	}
	t.Logf("unroutable: %d attempts, last_error %q", dead.Attempts, dead.LastError)
}
