package redisindex_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestTakePull: pull tasks put in their slots' PullQueues (SettleMany's
// QueuePull) are taken by lease calls, each by one of racing calls, held until
// the hold ends, then taken again; PutPull gives them back, DropPull and
// any other write of a pull task (Op.Pull) take them out; push tasks'
// members are never taken.
func TestTakePull(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)

	// 200 pull tasks due in 8 slots, one not due yet, and a push task due.
	var ops []redisindex.Op
	var due []task.ID
	for i := range 200 {
		id := g.New(now, 0)
		due = append(due, id)
		ops = append(ops,
			redisindex.Op{App: "a", Slot: i % 8, ID: id, Action: redisindex.Drop, Pull: true},
			redisindex.Op{App: "a", Slot: i % 8, ID: id, Action: redisindex.QueuePull, Score: now.Add(-time.Second), Pull: true})
	}
	later, push := g.New(now, 0), g.New(now, 0)
	ops = append(ops,
		redisindex.Op{App: "a", Slot: 1, ID: later, Action: redisindex.QueuePull, Score: now.Add(time.Hour), Pull: true},
		redisindex.Op{App: "a", Slot: 2, ID: push, Action: redisindex.Retry, Score: now.Add(-time.Second)})
	if err := x.SettleMany(ctx, ops); err != nil {
		t.Fatal(err)
	}

	// Four racing calls of 60: each task goes to one, the one not due to
	// none, the push task to none.
	got := make([][]redisindex.Taken, 4)
	var wg sync.WaitGroup
	for k := range got {
		wg.Go(func() {
			ts, err := x.TakePull(ctx, "a", 60, now, now.Add(time.Minute), k*3)
			if err != nil {
				t.Error(err)
			}
			got[k] = ts
		})
	}
	wg.Wait()
	seen := map[task.ID]int{}
	n := 0
	for _, ts := range got {
		n += len(ts)
		for _, tk := range ts {
			seen[tk.ID]++
			if want := slices.Index(due, tk.ID) % 8; tk.Slot != want {
				t.Errorf("%s taken from slot %d, want %d", tk.ID, tk.Slot, want)
			}
		}
	}
	if n != 200 || len(seen) != 200 {
		t.Fatalf("racing calls took %d tasks, %d distinct; want each of the 200 due once", n, len(seen))
	}
	if seen[later] > 0 || seen[push] > 0 {
		t.Fatalf("took a task not due (%d) or a push task (%d)", seen[later], seen[push])
	}

	// Held: none is taken again before the hold ends; all after it.
	if ts, err := x.TakePull(ctx, "a", 1000, now.Add(30*time.Second), now.Add(time.Hour), 0); err != nil || len(ts) != 0 {
		t.Fatalf("taken again during the hold: %d %v", len(ts), err)
	}
	all, err := x.TakePull(ctx, "a", 1000, now.Add(time.Minute), now.Add(2*time.Minute), 0)
	if err != nil || len(all) != 200 {
		t.Fatalf("after the hold: %d tasks taken, %v; want 200", len(all), err)
	}

	// Given back: taken again at once. Dropped, or written (a lease), and
	// not given back: gone from the PullQueue.
	if err := x.PutPull(ctx, "a", all[:10], now); err != nil {
		t.Fatal(err)
	}
	if err := x.DropPull(ctx, "a", all[10:20]); err != nil {
		t.Fatal(err)
	}
	var leased []redisindex.Op
	for _, tk := range all[20:] {
		leased = append(leased, redisindex.Op{App: "a", Slot: tk.Slot, ID: tk.ID, Action: redisindex.Lease, Score: now.Add(time.Hour), Pull: true})
	}
	if err := x.SettleMany(ctx, leased); err != nil {
		t.Fatal(err)
	}
	back, err := x.TakePull(ctx, "a", 1000, now.Add(time.Second), now.Add(time.Hour), 5)
	if err != nil || len(back) != 10 {
		t.Fatalf("after giving back 10: %d taken, %v", len(back), err)
	}
	var left int64
	for s := range 8 {
		left += c.ZCard(ctx, x.Queues("a", s).Pull).Val()
	}
	if left != 11 { // the 10 held again, and the one not due
		t.Fatalf("%d members left in the PullQueues, want 11", left)
	}
}

// TestTakePullCommands: a lease call's take is one script call in one round
// trip, with one ZRANGEBYSCORE per slot and one ZADD per slot it takes
// from, whatever the number of tasks.
func TestTakePullCommands(t *testing.T) {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	var ops []redisindex.Op
	for i := range 100 {
		ops = append(ops, redisindex.Op{App: "a", Slot: i % 4, ID: g.New(now, 0), Action: redisindex.QueuePull, Score: now, Pull: true})
	}
	if err := x.SettleMany(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if _, err := x.TakePull(ctx, "warm", 1, now, now, 0); err != nil { // loads the script
		t.Fatal(err)
	}
	rt := &roundTrips{}
	c.AddHook(rt)
	var got []redisindex.Taken
	cmds := commandsOf(t, c, prefix, func() { got, err = x.TakePull(ctx, "a", 1000, now, now.Add(time.Minute), 0) })
	if err != nil || len(got) != 100 {
		t.Fatalf("took %d, %v; want 100", len(got), err)
	}
	if trips := rt.n - 2; len(cmds) > 1+8+4 || trips != 1 {
		t.Errorf("take of 100 tasks in 4 of 8 slots: %d commands in %d round trips, want at most 13 in 1:\n%s", len(cmds), trips, strings.Join(cmds, "\n"))
	}
}
