package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/cluster"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// scans is a store that counts its Claimable scans.
type scans struct {
	store.Store
	n atomic.Int64
}

func (s *scans) Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	s.n.Add(1)
	return s.Store.Claimable(ctx, app, now, limit)
}

func (s *scans) Unwrap() store.Store { return s.Store }

// pullNode is one node of a test cluster: an engine over the shared SQL
// library and Redis, with its cluster node.
type pullNode struct {
	eng   *engine.Engine
	node  *cluster.Node
	store *scans
}

// pullCluster starts n nodes over a fresh PostgreSQL database and a Redis
// prefix of the test's own, each stopped at the test's end.
func pullCluster(t *testing.T, n int) []*pullNode {
	t.Helper()
	rdb, prefix := testsvc.Redis(t)
	dsn := testsvc.PostgresDB(t)
	log := slog.New(slog.DiscardHandler)
	var nodes []*pullNode
	for range n {
		st, err := sqlstore.Open(t.Context(), sqlstore.Options{DSNs: []string{dsn}, Tables: 4, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		x, err := redisindex.New(redisindex.Options{Client: rdb, Prefix: prefix, Slots: 8, HotWindow: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		node, err := cluster.New(cluster.Config{Redis: rdb, Index: x, SQL: st, Prefix: prefix, Logger: log,
			Heartbeat: 100 * time.Millisecond, MemberTTL: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sc := &scans{Store: st}
		eng, err := engine.New(engine.Config{Store: sc, Index: node, ShardFor: st.ShardFor, Logger: log, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		node.Attach(eng)
		if err := eng.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := node.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = node.Stop(ctx)
			_ = eng.Stop(ctx)
		})
		nodes = append(nodes, &pullNode{eng: eng, node: node, store: sc})
	}
	return nodes
}

// createPull creates n pull tasks of app due at due on p.
func (p *pullNode) createPull(t *testing.T, app string, n int, due time.Time) map[task.ID]bool {
	t.Helper()
	ps := make([]engine.CreateParams, n)
	for i := range ps {
		ps[i] = engine.CreateParams{App: app, DueAt: due, Target: task.Target{Pull: &task.PullTarget{}}}
	}
	rs, err := p.eng.Create(t.Context(), ps)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[task.ID]bool{}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[r.Task.ID] = true
	}
	return ids
}

// leaseAll leases app's tasks on p until it has all of want, failing after
// 20 s; it returns the leases by task.
func (p *pullNode) leaseAll(t *testing.T, app string, want map[task.ID]bool, max int, lease time.Duration) map[task.ID]string {
	t.Helper()
	got := map[task.ID]string{}
	testkit.WaitFor(t, 20*time.Second, "every task leased", func() bool {
		ts, err := p.eng.Lease(t.Context(), app, engine.LeaseParams{Max: max, Lease: lease, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if !want[tk.ID] {
				t.Fatalf("leased %s, which is not one of the tasks", tk.ID)
			}
			if _, again := got[tk.ID]; again {
				t.Fatalf("%s leased twice while its lease ran", tk.ID)
			}
			got[tk.ID] = tk.Lease
		}
		return len(got) == len(want)
	})
	return got
}

// TestClusterLeaseFromRedis: pull tasks that fall due on their slots'
// owners are leased on another node from Redis, without a SQL scan per
// lease call, each once; acked on a third node; a lease that runs out makes
// the task claimable again.
func TestClusterLeaseFromRedis(t *testing.T) {
	nodes := pullCluster(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := t.Context()
	testkit.WaitFor(t, 10*time.Second, "three members", func() bool {
		_, _, members := a.node.Share()
		return len(members) == 3
	})

	want := a.createPull(t, "app", 300, time.Now().Add(300*time.Millisecond))
	scansBefore, start := b.store.n.Load(), time.Now()
	leases := b.leaseAll(t, "app", want, 5, time.Minute) // 60 calls at least
	// The lease calls that found tasks took them from Redis; the store is
	// scanned only by a call Redis did not fill, at most once a second.
	if n, most := b.store.n.Load()-scansBefore, int64(time.Since(start)/time.Second)+1; n > most {
		t.Errorf("%d SQL scans for the lease calls of 300 tasks in %s, want one a second at most", n, time.Since(start))
	}

	// Acks on another node than the lease's.
	acks := make([]engine.AckParams, 0, len(leases))
	for id, l := range leases {
		acks = append(acks, engine.AckParams{ID: id, Lease: l})
	}
	for i := 0; i < len(acks); i += 100 {
		errs, err := c.eng.AckMany(ctx, "app", acks[i:min(i+100, len(acks))])
		if err != nil {
			t.Fatal(err)
		}
		for j, err := range errs {
			if err != nil {
				t.Fatalf("ack %s: %v", acks[i+j].ID, err)
			}
		}
	}
	for id := range want {
		tk, err := a.eng.Get(ctx, id)
		if err != nil || tk.State != task.Delivered || tk.Attempts != 1 {
			t.Fatalf("%s after its ack: %+v %v", id, tk, err)
		}
	}

	// A lease that runs out: the task is claimable again, on any node.
	one := a.createPull(t, "app2", 1, time.Now())
	first := b.leaseAll(t, "app2", one, 1, time.Second)
	second := c.leaseAll(t, "app2", one, 1, time.Minute)
	for id := range one {
		if first[id] == second[id] {
			t.Fatalf("the same lease twice: %s", first[id])
		}
		var ce *engine.ConflictError
		if err := a.eng.Ack(ctx, id, first[id]); !errorsAs(err, &ce) {
			t.Fatalf("ack with the lease that ran out: %v, want a conflict", err)
		}
		if err := a.eng.Ack(ctx, id, second[id]); err != nil {
			t.Fatalf("ack with the new lease: %v", err)
		}
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
