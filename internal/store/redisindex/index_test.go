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

// newIndex is an index over the test Redis under a prefix of its own,
// whose keys are deleted when the test or benchmark ends.
func newIndex(t testing.TB) *redisindex.Index {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestKeysShareHashTag(t *testing.T) {
	x, err := redisindex.New(redisindex.Options{Client: nilClient(), Slots: 64})
	if err != nil {
		t.Fatal(err)
	}
	q := x.Queues("shop", 17)
	tag := func(k string) string { return k[strings.Index(k, "{"):strings.Index(k, "}")] }
	if tag(q.Store) != tag(q.Prepare) || tag(q.Store) != tag(q.Dead) || tag(q.Store) != "{toc:shop:17" {
		t.Errorf("queues %+v do not share one hash tag", q)
	}
	if _, err := redisindex.New(redisindex.Options{Client: nilClient(), Slots: 48}); err == nil {
		t.Error("48 slots accepted; must be a power of two")
	}
	var g task.IDGenerator
	id := g.New(time.Now(), 0)
	if a, b := x.Slot("order-1", id), x.Slot("order-1", g.New(time.Now(), 0)); a != b {
		t.Errorf("the slot of a keyed task depends on its id: %d vs %d", a, b)
	}
}

func TestQueueMoves(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	due, later := g.New(now, 0), g.New(now, 0)
	if ok, err := x.Add(ctx, "a", 3, due, now.Add(-time.Second)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := x.Add(ctx, "a", 3, later, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := x.Claim(ctx, "a", 3, now, now.Add(30*time.Second), 10)
	if err != nil || len(got) != 1 || got[0] != due {
		t.Fatalf("claim: %v %v, want only the due task", got, err)
	}
	// A claimed member is not added back by a racing promotion.
	if ok, _ := x.Add(ctx, "a", 3, due, now); ok {
		t.Error("add put a claimed member back in the store queue")
	}
	if ok, _ := x.ClaimOne(ctx, "a", 3, due, now, now.Add(time.Minute)); ok {
		t.Error("claim_one took a member whose lease has not run out")
	}
	// The lease runs out: rollback makes it claimable again.
	back, err := x.Rollback(ctx, "a", 3, now.Add(31*time.Second), 10)
	if err != nil || len(back) != 1 {
		t.Fatalf("rollback: %v %v", back, err)
	}
	if ok, _ := x.ClaimOne(ctx, "a", 3, due, now.Add(31*time.Second), now.Add(time.Minute)); !ok {
		t.Error("claim_one after rollback failed")
	}
	if err := x.Settle(ctx, "a", 3, due, redisindex.Dead, now); err != nil {
		t.Fatal(err)
	}
	s, p, d, _ := x.Count(ctx, "a", 3)
	if s != 1 || p != 0 || d != 1 {
		t.Errorf("queues store=%d prepare=%d dead=%d, want 1 0 1", s, p, d)
	}
	es, err := x.Range(ctx, "a", 3, now, now.Add(2*time.Hour), 100)
	if err != nil || len(es) != 1 || es[0].ID != later || es[0].Prepared {
		t.Errorf("range: %+v %v", es, err)
	}
	if apps, _ := x.Apps(ctx); len(apps) != 1 || apps[0] != "a" {
		t.Errorf("apps %v", apps)
	}
}

// TestConcurrentClaims: many claimers race over one slot; every member is
// claimed exactly once.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now()
	const n = 500
	for range n {
		if _, err := x.Add(ctx, "a", 0, g.New(now, 0), now.Add(-time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[task.ID]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ids, err := x.Claim(ctx, "a", 0, time.Now(), time.Now().Add(time.Minute), 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ids) == 0 {
					return
				}
				mu.Lock()
				for _, id := range ids {
					seen[id]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d distinct members claimed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s claimed %d times", id, c)
		}
	}
}

func TestSettleMany(t *testing.T) {
	t.Parallel()
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The first pipeline after a SCRIPT FLUSH meets NOSCRIPT and must load.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var g task.IDGenerator
	now := time.Now()
	var ops []redisindex.Op
	for i := range 30 {
		a := []redisindex.Action{redisindex.Retry, redisindex.Lease, redisindex.Dead}[i%3]
		ops = append(ops, redisindex.Op{App: "a", Slot: i % 4, ID: g.New(now, 0), Action: a, Score: now})
	}
	if err := x.SettleMany(ctx, ops); err != nil {
		t.Fatal(err)
	}
	var s, p, d int64
	for slot := range 4 {
		a, b, c, err := x.Count(ctx, "a", slot)
		if err != nil {
			t.Fatal(err)
		}
		s, p, d = s+a, p+b, d+c
	}
	if s != 10 || p != 10 || d != 10 {
		t.Errorf("store=%d prepare=%d dead=%d, want 10 each", s, p, d)
	}
	for i := range ops {
		ops[i].Action = redisindex.Drop
	}
	if err := x.SettleMany(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for slot := range 4 {
		if a, b, c, _ := x.Count(ctx, "a", slot); a+b+c != 0 {
			t.Errorf("slot %d not empty after drop: %d %d %d", slot, a, b, c)
		}
	}
}

// TestClaimMany: one pipeline claims the due members of several slots and
// apps, and reports as not held what is not due, held elsewhere or absent.
func TestClaimMany(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	a0, a5, b1, notDue, taken, absent := g.New(now, 0), g.New(now, 0), g.New(now, 0), g.New(now, 0), g.New(now, 0), g.New(now, 0)
	for _, m := range []struct {
		app  string
		slot int
		id   task.ID
		at   time.Time
	}{{"a", 0, a0, now}, {"a", 5, a5, now.Add(-time.Second)}, {"b", 1, b1, now}, {"a", 0, notDue, now.Add(time.Hour)}, {"b", 1, taken, now}} {
		if _, err := x.Add(ctx, m.app, m.slot, m.id, m.at); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := x.ClaimOne(ctx, "b", 1, taken, now, now.Add(time.Minute)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	until := now.Add(30 * time.Second)
	held, err := x.ClaimMany(ctx, []redisindex.Claim{
		{"a", 0, a0, until}, {"a", 5, a5, until}, {"b", 1, b1, until},
		{"a", 0, notDue, until}, {"b", 1, taken, until}, {"a", 2, absent, until},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, false, false, false}; !slices.Equal(held, want) {
		t.Errorf("ClaimMany held %v, want %v", held, want)
	}
	for _, q := range []struct {
		app         string
		slot        int
		store, prep int64
	}{{"a", 0, 1, 1}, {"a", 5, 0, 1}, {"b", 1, 0, 2}} {
		s, p, _, err := x.Count(ctx, q.app, q.slot)
		if err != nil || s != q.store || p != q.prep {
			t.Errorf("%s/%d: store=%d prepare=%d (%v), want %d %d", q.app, q.slot, s, p, err, q.store, q.prep)
		}
	}
	if held, err := x.ClaimMany(ctx, nil, now); err != nil || held != nil {
		t.Errorf("empty ClaimMany = %v, %v", held, err)
	}
}
