package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// Redis faults during a wave of tasks on one cluster node: Redis loses the
// cluster's keys, or restarts (empty, as it keeps nothing on disk here),
// 13 s before the first task is due, before the node's loader (a 10 s
// window) has read the tasks from it. The node notices at its next
// heartbeat (the epoch key gone, or Redis answering again), promotes the hot
// window again from SQL and rescans at once: every task is delivered, none
// early, none seconds late. Before, the tasks waited for the periodic repair
// scan (every 30 s): 15–21 s late.
//
// On one node and on two: with two, the lost membership key also looks like
// a change of members, which re-promotes the window by another path, and
// the slots are shared, so each node must find its own share again.

// TestClusterRedisKeysLost: every key under the cluster's prefix deleted,
// under one node and under two.
func TestClusterRedisKeysLost(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) { redisKeysLost(t, nodes) })
	}
}

func redisKeysLost(t *testing.T, nodes int) {
	env := newClusterEnv(t)
	rdb := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	defer rdb.Close()
	redisFaultWave(t, nodes, env.flags(), func() {
		ctx := context.Background()
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
		t.Logf("deleted the cluster's %d Redis keys", deleted)
	})
}

// TestClusterRedisRestarted: the nodes' Redis (a private redis-server) is
// stopped for 2 s and started again, empty, under one node and under two.
func TestClusterRedisRestarted(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) { redisRestarted(t, nodes) })
	}
}

func redisRestarted(t *testing.T, nodes int) {
	env := newClusterEnv(t)
	r := testsvc.StartPrivateRedis(t)
	flags := append(env.flags(), "--redis", r.Addr) // the last --redis wins
	redisFaultWave(t, nodes, flags, func() {
		r.Stop()
		time.Sleep(2 * time.Second)
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted Redis at %s", r.Addr)
	})
}

// redisFaultWave runs nodes nodes with flags, schedules 300 tasks due over
// 3 s from 14 s on (on the first node), calls fault at once, and checks the
// deliveries, whichever node makes them.
func redisFaultWave(t *testing.T, nodes int, flags []string, fault func()) {
	t.Helper()
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	rcv := newHooks(t)
	var all []*child
	for range nodes {
		all = append(all, startChild(t, t.TempDir(), flags...))
	}
	node := all[0]
	w := scheduleWave(t, node, rcv, 300, time.Now().Add(14*time.Second), 3*time.Second)
	if time.Until(w.start) < 12*time.Second {
		t.Fatalf("scheduling took too long: the first task is due in %s", time.Until(w.start))
	}
	fault()
	t.Logf("the first task is due in %s", time.Until(w.start).Round(time.Millisecond))
	missing, dups, worst := w.await(t, time.Time{})
	t.Logf("%d tasks: %d missing, %d duplicate deliveries, worst lateness %s", w.n, missing, dups, worst.Round(time.Millisecond))
	// Loose: a heartbeat (0.5 s) and a promotion of the window; the
	// periodic repair alone makes it 10 s or more.
	if missing > 0 || worst > 5*time.Second {
		for i, c := range all {
			out := c.stderr.String()
			t.Logf("node %d log (last 2000 bytes):\n%s", i, out[max(0, len(out)-2000):])
		}
		t.Errorf("%d of %d tasks never delivered; worst lateness %s, want the repair at once", missing, w.n, worst)
	}
}

// wave is n tasks of app "faults" due evenly over spread from start,
// scheduled on one node and delivered to rcv.
type wave struct {
	n      int
	start  time.Time
	spread time.Duration
	ids    []string
	rcv    *hooks
}

func (w *wave) due(i int) time.Time {
	return w.start.Add(time.Duration(i) * w.spread / time.Duration(w.n))
}

// scheduleWave schedules a wave on node in one batch.
func scheduleWave(t *testing.T, node *child, rcv *hooks, n int, start time.Time, spread time.Duration) *wave {
	t.Helper()
	w := &wave{n: n, start: start, spread: spread, rcv: rcv, ids: make([]string, n)}
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook"}}
	reqs := make([]client.ScheduleRequest, n)
	for i := range n {
		due := w.due(i)
		reqs[i] = client.ScheduleRequest{App: "faults", Key: fmt.Sprint(i), DueAt: &due, Target: target}
	}
	rs, err := node.client().ScheduleBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		w.ids[i] = r.Task.ID.String()
	}
	return w
}

// await waits up to 60 s for every task of the wave and reports those
// never delivered, the duplicate deliveries, and the worst lateness,
// counted from each task's due time or from since, whichever is later. A
// delivery before its due time fails the test.
func (w *wave) await(t *testing.T, since time.Time) (missing, dups int, worst time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testkit.Until(ctx, func() bool {
		w.rcv.mu.Lock()
		defer w.rcv.mu.Unlock()
		return len(w.rcv.first) >= w.n
	})
	w.rcv.mu.Lock()
	defer w.rcv.mu.Unlock()
	for i, id := range w.ids {
		at, ok := w.rcv.first[id]
		if !ok {
			missing++
			continue
		}
		dups += w.rcv.count[id] - 1
		due := task.Ms(w.due(i))
		if at.Before(due) {
			t.Errorf("task %d delivered %s early", i, due.Sub(at))
		}
		from := due
		if since.After(due) {
			from = since
		}
		worst = max(worst, at.Sub(from))
	}
	return missing, dups, worst
}

// TestClusterRedisClusterKeysLost: the same wave over two nodes on a
// three-master Redis Cluster (of the test's own), every key of the cluster's
// prefix deleted on every master: the slots' queues and the membership,
// epoch and apps keys live on different masters, and each is found again.
func TestClusterRedisClusterKeysLost(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	env := newClusterEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, err := testsvc.StartRedisCluster(ctx, t.TempDir())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Redis Cluster: %v", err)
	}
	defer rc.Stop()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs})
	defer rdb.Close()
	flags := append(env.flags(), "--redis", strings.Join(rc.Addrs, ","))
	redisFaultWave(t, 2, flags, func() {
		var mu sync.Mutex
		deleted := 0
		err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, env.prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				if err := m.Del(ctx, iter.Val()).Err(); err != nil {
					return err
				}
				mu.Lock()
				deleted++
				mu.Unlock()
			}
			return iter.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("deleted the cluster's %d keys over %d masters", deleted, len(rc.Addrs))
	})
}
