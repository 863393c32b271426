package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// The broker restart tests crash a broker of the test's own (SIGKILL) while
// toc delivers a stream of tasks to it, start it again on the same ports and
// data after an outage, and check that no task is lost: every task ends
// delivered and its message is in the queue or stream at least once.
// Duplicates are allowed (at least once) and logged.
const (
	restartTasks  = 400
	restartSpread = 3 * time.Second // the tasks are due over this long
	restartOutage = time.Second     // from the kill to the new broker's start
)

// restartRetry keeps a task trying through the outage and the new broker's
// boot (RabbitMQ: up to 45 s), about once a second.
var restartRetry = &task.RetryPolicy{
	MaxAttempts: 100,
	MinBackoff:  task.Duration(100 * time.Millisecond),
	MaxBackoff:  task.Duration(time.Second),
}

// scheduleStream schedules restartTasks tasks of app to target, due evenly
// over restartSpread from shortly after now, and returns their ids in due
// order.
func scheduleStream(t *testing.T, cl *client.Client, app string, target task.Target) []task.ID {
	t.Helper()
	first := time.Now().Add(300 * time.Millisecond)
	reqs := make([]client.ScheduleRequest, restartTasks)
	for i := range reqs {
		due := first.Add(restartSpread * time.Duration(i) / restartTasks)
		reqs[i] = client.ScheduleRequest{
			App: app, Key: fmt.Sprintf("k-%03d", i), DueAt: &due,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Target: target, Retry: restartRetry,
		}
	}
	res, err := cl.ScheduleBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]task.ID, len(res))
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("task %d: created %v, %v", i, r.Created, r.Err)
		}
		ids[i] = r.Task.ID
	}
	return ids
}

// crashMidStream kills the broker once a quarter of the "restart" stream
// is delivered, keeps it down for restartOutage, starts it again on the
// same ports and data, and waits for every task to be delivered.
func crashMidStream(t *testing.T, c *child, broker string, kill, start func(*testing.T)) {
	t.Helper()
	waitDelivered(t, c, "restart", restartTasks/4, 20*time.Second)
	before := len(tasksOf(t, c.client(), "restart", task.Delivered))
	kill(t)
	checkMidStream(t, before)
	t.Logf("%s killed with %d of %d tasks delivered", broker, before, restartTasks)
	time.Sleep(restartOutage) // the outage: the broker is down
	start(t)
	waitDelivered(t, c, "restart", restartTasks, 40*time.Second)
}

// checkMidStream fails the test if the broker went down after the stream
// was over: the restart would have tested nothing.
func checkMidStream(t *testing.T, delivered int) {
	t.Helper()
	if delivered == restartTasks {
		t.Fatalf("all %d tasks were delivered before the broker was killed: the machine stalled", delivered)
	}
}

// tasksOf returns every task of app in state.
func tasksOf(t *testing.T, cl *client.Client, app string, state task.State) []*task.Task {
	t.Helper()
	var all []*task.Task
	opts := &client.ListOptions{Limit: 1000}
	for {
		page, err := cl.List(context.Background(), app, state, opts)
		if err != nil {
			t.Fatalf("list %s tasks: %v", state, err)
		}
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			return all
		}
		opts.Cursor = page.NextCursor
	}
}

// waitDelivered waits until at least n tasks of app are delivered.
func waitDelivered(t *testing.T, c *child, app string, n int, within time.Duration) {
	t.Helper()
	cl := c.client()
	deadline := time.Now().Add(within)
	for {
		got := len(tasksOf(t, cl, app, task.Delivered))
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			reportUndelivered(t, c, app, fmt.Sprintf("%d of %d tasks delivered after %s", got, n, within))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reportUndelivered fails the test with the tasks of app that are not
// delivered, by state, and the history of a few.
func reportUndelivered(t *testing.T, c *child, app, why string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", why)
	shown := 0
	for _, st := range []task.State{task.Scheduled, task.Delivering, task.Dead, task.Expired, task.Cancelled} {
		ts := tasksOf(t, c.client(), app, st)
		if len(ts) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%d tasks %s\n", len(ts), st)
		for _, tk := range ts {
			if shown == 5 {
				break
			}
			shown++
			full, err := c.client().Get(context.Background(), tk.ID)
			if err != nil {
				fmt.Fprintf(&b, "  GET %s: %v\n", tk.ID, err)
				continue
			}
			fmt.Fprintf(&b, "  task %s (%s): %s, %d attempts, last_error %q, next_attempt_at %s\n",
				full.ID, full.Key, full.State, full.Attempts, full.LastError, full.NextAttemptAt.Format(time.RFC3339Nano))
			for _, e := range full.History {
				fmt.Fprintf(&b, "    %s %s attempt %d %s\n", e.At.Format("15:04:05.000"), e.What, e.Attempt, e.Error)
			}
		}
	}
	fmt.Fprintf(&b, "toc stderr:\n%s", tail(c.stderr.String(), 4000))
	t.Fatal(b.String())
}

// checkNoneLost compares the tasks with the messages the broker holds
// (their task ids, once per message): every task must have one at least.
// It logs the duplicates and the attempts the restart cost.
func checkNoneLost(t *testing.T, c *child, app string, ids []task.ID, msgIDs []string) {
	t.Helper()
	count := map[string]int{}
	for _, id := range msgIDs {
		count[id]++
	}
	var lost []task.ID
	dups := 0
	for _, id := range ids {
		switch n := count[id.String()]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dups += n - 1
			t.Logf("task %s: %d messages", id, n)
		}
		delete(count, id.String())
	}
	if len(count) > 0 {
		t.Errorf("%d messages of no task of the test: %v", len(count), count)
	}
	attempts, retried, most := 0, 0, 0
	for _, tk := range tasksOf(t, c.client(), app, task.Delivered) {
		attempts += tk.Attempts
		if tk.Attempts > 1 {
			retried++
		}
		most = max(most, tk.Attempts)
	}
	t.Logf("%d tasks, %d messages: %d lost, %d duplicates; %d attempts, %d tasks retried, at most %d attempts",
		len(ids), len(msgIDs), len(lost), dups, attempts, retried, most)
	for _, id := range lost[:min(len(lost), 5)] {
		tk, err := c.client().Get(context.Background(), id)
		if err != nil {
			t.Errorf("lost task %s: %v", id, err)
			continue
		}
		var h strings.Builder
		for _, e := range tk.History {
			fmt.Fprintf(&h, "\n    %s %s attempt %d %s", e.At.Format("15:04:05.000"), e.What, e.Attempt, e.Error)
		}
		t.Errorf("lost task %s (%s): %s after %d attempts, but no message:%s", id, tk.Key, tk.State, tk.Attempts, h.String())
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d delivered tasks have no message in the broker", len(lost), len(ids))
	}
}

// TestAMQPBrokerRestart: a RabbitMQ node of the test's own is killed with
// SIGKILL while toc publishes a stream of tasks to a durable queue, and
// started again after an outage. Confirmed messages are persistent in a
// durable queue, so they survive the crash; the publishes the crash cut off
// fail and are retried. Every task ends delivered with its message in the
// queue.
func TestAMQPBrokerRestart(t *testing.T) {
	node := startRabbit(t)
	exchange, queue := "toc-e2e-restart", "toc-e2e-restart"
	setup := func(f func(ch *amqp.Channel) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := retryUntil(ctx, func() (*amqp.Connection, error) { return amqp.Dial(node.url) })
		if err != nil {
			t.Fatalf("connect to the node again: %v", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := f(ch); err != nil {
			t.Fatal(err)
		}
	}
	setup(func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, "restart", exchange, false, nil)
	})

	c := startChild(t, t.TempDir(), "--amqp", node.url)
	ids := scheduleStream(t, c.client(), "restart", task.Target{AMQP: &task.AMQPTarget{Exchange: exchange, RoutingKey: "restart"}})
	crashMidStream(t, c, "RabbitMQ", node.p.kill, node.start)

	var msgIDs []string
	setup(func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return err
		}
		for range q.Messages {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("queue emptied after %d of %d messages", len(msgIDs), q.Messages)
			}
			msgIDs = append(msgIDs, d.MessageId)
		}
		return nil
	})
	checkNoneLost(t, c, "restart", ids, msgIDs)
}

// TestNATSBrokerRestart: a nats-server of the test's own is killed with
// SIGKILL while toc publishes a stream of tasks to a file-backed JetStream
// stream, and started again after an outage on the same store. The client
// reconnects; publishes while it is down fail and are retried. Every task
// ends delivered with its message in the stream, and Nats-Msg-Id keeps a
// publish repeated after a lost ack from being stored twice.
func TestNATSBrokerRestart(t *testing.T) {
	srv := startNATS(t)
	const subject, streamName = "toc.e2e.restart", "toc-e2e-restart"
	withJS := func(f func(ctx context.Context, js jetstream.JetStream) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		nc, err := retryUntil(ctx, func() (*nats.Conn, error) { return nats.Connect(srv.url, nats.MaxReconnects(0)) })
		if err != nil {
			t.Fatalf("connect to the server: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := f(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	withJS(func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: streamName, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		})
		return err
	})

	c := startChild(t, t.TempDir(), "--nats", srv.url)
	ids := scheduleStream(t, c.client(), "restart", task.Target{NATS: &task.NATSTarget{Subject: subject}})
	crashMidStream(t, c, "nats-server", srv.p.kill, srv.start)

	var msgIDs []string
	withJS(func(ctx context.Context, js jetstream.JetStream) error {
		// The stream, recovered from its files: right after a start the
		// server may still answer that JetStream is not ready.
		s, err := retryUntil(ctx, func() (jetstream.Stream, error) { return js.Stream(ctx, streamName) })
		if err != nil {
			return fmt.Errorf("stream %s after the restart: %w", streamName, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				return fmt.Errorf("message %d: %w", seq, err)
			}
			msgIDs = append(msgIDs, m.Header.Get("Nats-Msg-Id"))
		}
		return nil
	})
	checkNoneLost(t, c, "restart", ids, msgIDs)
}
