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

// TestWakeupsPagesThroughOneMillisecond: the loader pages through the
// node's slots 1000 at a time, its cursor the last (due time, id) read.
// Far more tasks than a page due in the same millisecond of one slot
// ("close every unpaid order at midnight") are all read, each once. Each
// page used to read every queue from the millisecond's first member: once
// the cursor had passed a slot's first 1000, that slot gave nothing after
// it, the page came back short, and the loader took the rest of the
// window as read, skipping every member after them.
func TestWakeupsPagesThroughOneMillisecond(t *testing.T) {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cluster.Config{Redis: c, Index: x, SQL: noShards{}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	n.Attach(engineStub{boot: "node-a"})
	ctx := t.Context()
	// Synced before Start, whose heartbeat reads the apps in Redis.
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	due := now.Add(time.Minute)
	const total = 5000
	var ts []*task.Task
	for i := range total {
		at := due
		if i%10 == 0 {
			at = due.Add(time.Millisecond) // a few a millisecond later
		}
		ts = append(ts, &task.Task{ID: g.New(now, 0), App: "a", State: task.Scheduled, WakeAt: at})
	}
	for i := 0; i < len(ts); i += 500 {
		if err := n.Sync(ctx, ts[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	// Start's first heartbeat gives the lone node every slot.
	if slots, _, _ := n.Share(); slots != x.Slots() {
		t.Fatalf("the node owns %d of %d slots after Start", slots, x.Slots())
	}

	seen := make(map[task.ID]int)
	var after store.Cursor
	for page := 0; ; page++ {
		if page > 2*total/1000+2 {
			t.Fatalf("still paging after %d pages", page)
		}
		ws, err := n.Wakeups(ctx, after, due.Add(time.Second), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			seen[w.ID]++
			if c := (store.Cursor{At: w.At, ID: w.ID}); !after.Less(c) {
				t.Fatalf("page %d: %s at %s is not after the cursor %s at %s", page, w.ID, w.At, after.ID, after.At)
			}
		}
		if len(ws) < 1000 {
			break
		}
		after = store.Cursor{At: ws[len(ws)-1].At, ID: ws[len(ws)-1].ID}
	}
	if len(seen) != total {
		t.Errorf("the pages read %d of the %d tasks", len(seen), total)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s read %d times", id, k)
			break
		}
	}
}
