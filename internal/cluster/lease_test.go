package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

	mu     sync.Mutex
	writes int              // rows written (Update, UpdateMany)
	looked map[task.ID]bool // read by a fire job's look
}

func (s *scans) Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	s.n.Add(1)
	return s.Store.Claimable(ctx, app, now, limit)
}

func (s *scans) Unwrap() store.Store { return s.Store }

// UpdateMany counts the rows written, and the tasks a fire job's look
// read (its optimistic reads).
func (s *scans) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	ts, errs := s.Store.UpdateMany(ctx, ids, opts, fn)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, err := range errs {
		if err == nil && ts[i] != nil {
			s.writes++
		}
	}
	if opts != nil && opts.Optimistic {
		if s.looked == nil {
			s.looked = map[task.ID]bool{}
		}
		for _, id := range ids {
			s.looked[id] = true
		}
	}
	return ts, errs
}

func (s *scans) Update(ctx context.Context, id task.ID, opts *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	t, err := s.Store.Update(ctx, id, opts, fn)
	if err == nil {
		s.mu.Lock()
		s.writes++
		s.mu.Unlock()
	}
	return t, err
}

// counts returns the rows written so far and whether a fire job looked at
// every task of ids.
func (s *scans) counts(ids map[task.ID]bool) (writes int, looked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if !s.looked[id] {
			return s.writes, false
		}
	}
	return s.writes, true
}

// pullNode is one node of a test cluster: an engine over the shared SQL
// library and Redis, with its cluster node.
type pullNode struct {
	eng   *engine.Engine
	node  *cluster.Node
	store *scans
	x     *redisindex.Index
	rdb   redis.UniversalClient
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
			Heartbeat: 100 * time.Millisecond, MemberTTL: 500 * time.Millisecond, RepairEvery: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		sc := &scans{Store: st}
		eng, err := engine.New(engine.Config{Store: sc, Index: node, ShardFor: st.ShardFor, Logger: log, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		node.Attach(eng.Cluster())
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
		nodes = append(nodes, &pullNode{eng: eng, node: node, store: sc, x: x, rdb: rdb})
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

// ackAll acks every lease of leases on p, 100 per call.
func (p *pullNode) ackAll(t *testing.T, app string, leases map[task.ID]string) {
	t.Helper()
	acks := make([]engine.AckParams, 0, len(leases))
	for id, l := range leases {
		acks = append(acks, engine.AckParams{ID: id, Lease: l})
	}
	for i := 0; i < len(acks); i += 100 {
		errs, err := p.eng.AckMany(t.Context(), app, acks[i:min(i+100, len(acks))])
		if err != nil {
			t.Fatal(err)
		}
		for j, err := range errs {
			if err != nil {
				t.Fatalf("ack %s: %v", acks[i+j].ID, err)
			}
		}
	}
}

// TestClusterPullWrites: a pull task that falls due, is leased and acked
// is written twice to SQL after its create (the lease, the ack): its slot's
// owner, firing it, reads it and writes nothing.
func TestClusterPullWrites(t *testing.T) {
	a := pullCluster(t, 1)[0]
	const n = 200
	before, _ := a.store.counts(nil)
	want := a.createPull(t, "app", n, time.Now().Add(500*time.Millisecond))
	// Every task fell due and its owner's fire job looked at it (and,
	// before, wrote it).
	testkit.WaitFor(t, 20*time.Second, "a fire job's look at every task", func() bool {
		_, looked := a.store.counts(want)
		return looked
	})
	leases := a.leaseAll(t, "app", want, 100, time.Minute)
	a.ackAll(t, "app", leases)
	after, _ := a.store.counts(want)
	if got := float64(after-before) / n; got > 2 {
		t.Errorf("%.2f SQL row writes per pull task after its create (%d for %d), want 2: its lease and its ack", got, after-before, n)
	}
	for id := range want {
		if tk, err := a.eng.Get(t.Context(), id); err != nil || tk.State != task.Delivered || tk.Attempts != 1 {
			t.Fatalf("%s after its ack: %+v %v", id, tk, err)
		}
	}
}

// TestClusterPullNodeStops: a node stops (leaves the cluster) with pull
// tasks leased and not acked: each is claimable again on another node once
// its lease ran out, none lost.
func TestClusterPullNodeStops(t *testing.T) {
	nodes := pullCluster(t, 2)
	a, b := nodes[0], nodes[1]
	testkit.WaitFor(t, 10*time.Second, "two members", func() bool {
		_, _, members := a.node.Share()
		return len(members) == 2
	})
	want := a.createPull(t, "app", 100, time.Now())
	first := b.leaseAll(t, "app", want, 100, time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	second := a.leaseAll(t, "app", want, 100, time.Minute)
	for id, l := range second {
		if l == first[id] {
			t.Fatalf("%s: the same lease again", id)
		}
	}
	a.ackAll(t, "app", second)
	for id := range want {
		if tk, err := a.eng.Get(t.Context(), id); err != nil || tk.State != task.Delivered {
			t.Fatalf("%s after its second lease's ack: %+v %v", id, tk, err)
		}
	}
}

// TestClusterPullBacklog: a pull task nobody leases is written once as
// waiting (out of the wake order) after pullWaitGrace, and a lease still
// takes it from Redis then.
func TestClusterPullBacklog(t *testing.T) {
	a := pullCluster(t, 1)[0]
	before, _ := a.store.counts(nil)
	want := a.createPull(t, "app", 10, time.Now())
	testkit.WaitFor(t, 30*time.Second, "the tasks written as waiting", func() bool {
		w, _ := a.store.counts(nil)
		return w-before >= 10
	})
	scans := a.store.n.Load()
	ts, err := a.eng.Lease(t.Context(), "app", engine.LeaseParams{Max: 10, Lease: time.Minute})
	if err != nil || len(ts) != 10 {
		t.Fatalf("lease of the backlog: %d tasks, %v; want 10", len(ts), err)
	}
	if a.store.n.Load() != scans {
		t.Errorf("the lease scanned SQL: Redis did not have the tasks")
	}
	for _, tk := range ts {
		if !want[tk.ID] || tk.Attempts != 1 {
			t.Fatalf("leased %s, attempt %d", tk.ID, tk.Attempts)
		}
	}
}

// TestClusterPullRedisLost: Redis loses the PullQueues of pull tasks due;
// a lease that Redis does not fill finds them in SQL (at most once a
// second per app and node).
func TestClusterPullRedisLost(t *testing.T) {
	a := pullCluster(t, 1)[0]
	want := a.createPull(t, "lost", 20, time.Now())
	for s := range a.x.Slots() {
		if err := a.rdb.Del(t.Context(), a.x.Queues("lost", s).Pull).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := a.leaseAll(t, "lost", want, 100, time.Minute)
	if len(got) != len(want) {
		t.Fatalf("leased %d of %d", len(got), len(want))
	}
}
