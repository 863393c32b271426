package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/cluster"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// engineStub is an engine that ignores what its node tells it.
type engineStub struct{ boot string }

func (e engineStub) Boot() string                    { return e.boot }
func (engineStub) Notify(task.ID, time.Time, string) {}
func (engineStub) NotifyPull(string)                 {}
func (engineStub) SlotFreed(string)                  {}
func (engineStub) Rescan()                           {}
func (engineStub) Reown()                            {}

// noShards is an SQL library with no shards: nothing to promote.
type noShards struct{}

func (noShards) Shards() int { return 0 }
func (noShards) ShardWakeups(context.Context, int, store.Cursor, time.Time, int) ([]store.Wakeup, error) {
	return nil, nil
}

// TestEndedDefersFinished: the entries of delivered tasks leave Redis in
// one batch later (here at Stop, as AckDelay is long), those of tasks
// retried at once.
func TestEndedDefersFinished(t *testing.T) {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cluster.Config{Redis: c, Index: x, SQL: noShards{}, Prefix: prefix, AckDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	n.Attach(engineStub{boot: "node-a"})
	ctx := t.Context()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop(context.Background())
		}
	})
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	var ts []*task.Task
	for range 40 {
		tk := &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, WakeAt: now}
		ts = append(ts, tk)
	}
	if err := n.Sync(ctx, ts...); err != nil {
		t.Fatal(err)
	}
	until := make([]time.Time, len(ts))
	for i := range until {
		until[i] = now.Add(time.Minute)
	}
	held, err := n.Claim(ctx, ts, until, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range held {
		if h != 1 {
			t.Fatalf("claim %d: %d, want attempt 1", i, h)
		}
	}
	prepared := func() (total int64) {
		for s := range x.Slots() {
			total += c.ZCard(ctx, x.Queues("a", s).Prepare).Val()
		}
		return total
	}
	// Half delivered, half retried in an hour.
	for i, tk := range ts {
		if i%2 == 0 {
			tk.State = task.Delivered
		} else {
			tk.WakeAt = now.Add(time.Hour)
		}
	}
	if err := n.Ended(ctx, ts...); err != nil {
		t.Fatal(err)
	}
	if got := prepared(); got != int64(len(ts)/2) {
		t.Fatalf("%d entries in the PrepareQueues after the outcomes, want the %d delivered (their removal waits)", got, len(ts)/2)
	}
	stopped = true
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := prepared(); got != 0 {
		t.Errorf("%d entries in the PrepareQueues after Stop, want 0", got)
	}
	// Once stopped, Ended writes at once.
	late := &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, WakeAt: now}
	if err := n.Sync(ctx, late); err != nil {
		t.Fatal(err)
	}
	if held, err := n.Claim(ctx, []*task.Task{late}, until[:1], now); err != nil || held[0] != 1 {
		t.Fatalf("claim after Stop: %v, %v", held, err)
	}
	late.State = task.Delivered
	if err := n.Ended(ctx, late); err != nil {
		t.Fatal(err)
	}
	if got := prepared(); got != 0 {
		t.Errorf("%d entries in the PrepareQueues after an outcome once stopped, want 0", got)
	}
}
