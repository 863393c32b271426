package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestClusterRedisKeysLost: one node, tasks due over 3 s, and every key of
// the cluster deleted from Redis 13 s before the first is due (as a Redis
// restarted without persistence, or flushed, would lose them), before the
// nodes' loaders (a 10 s window) have read the tasks from it. The nodes see
// the cluster's epoch key gone at their next heartbeat, promote the hot
// window again from SQL and rescan at once (with several nodes, the lost
// membership key also looks like a change of members, which re-promotes;
// one node sees the same members before and after, hence one here): every task is delivered, none
// early, and none seconds late. Before, the tasks waited for the periodic
// repair scan (every 30 s), 10 s late or more here.
func TestClusterRedisKeysLost(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	env := newClusterEnv(t)
	rdb := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	defer rdb.Close()
	rcv := newHooks(t)
	dir := t.TempDir()
	nodes := []*child{startChild(t, dir+"/n0", env.flags()...)}
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook"}}

	const n = 300
	spread := 3 * time.Second
	start := time.Now().Add(14 * time.Second)
	var reqs []client.ScheduleRequest
	for i := range n {
		due := start.Add(time.Duration(i) * spread / n)
		reqs = append(reqs, client.ScheduleRequest{App: "faults", Key: fmt.Sprint(i), DueAt: &due, Target: target})
	}
	ctx := context.Background()
	rs, err := nodes[0].client().ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.Task.ID.String()
	}
	if time.Until(start) < 12*time.Second {
		t.Fatalf("scheduling took too long: the first task is due in %s", time.Until(start))
	}

	deleted := 0
	iter := rdb.Scan(ctx, 0, env.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted the cluster's %d Redis keys %s before the first task was due", deleted, time.Until(start).Round(time.Millisecond))

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	waitUntil(wctx, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.first) >= n
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	missing, dups := 0, 0
	var worst time.Duration
	for i, id := range ids {
		at, ok := rcv.first[id]
		if !ok {
			missing++
			continue
		}
		dups += rcv.count[id] - 1
		due := task.Ms(start.Add(time.Duration(i) * spread / n))
		if at.Before(due) {
			t.Errorf("task %d delivered %s early", i, due.Sub(at))
		}
		worst = max(worst, at.Sub(due))
	}
	t.Logf("%d tasks: %d missing, %d duplicate deliveries, worst lateness %s", n, missing, dups, worst.Round(time.Millisecond))
	if missing > 0 {
		for i, c := range nodes {
			out := c.stderr.String()
			t.Logf("node %d log (last 2000 bytes):\n%s", i, out[max(0, len(out)-2000):])
		}
		t.Fatalf("%d of %d tasks never delivered", missing, n)
	}
	// Loose: a heartbeat (0.5 s) and a promotion of the window; the
	// periodic repair alone makes it 10 s or more.
	if worst > 5*time.Second {
		out := nodes[0].stderr.String()
		t.Logf("node log (last 2000 bytes):\n%s", out[max(0, len(out)-2000):])
		t.Errorf("worst lateness %s after the keys were lost, want the repair at once", worst)
	}
}
