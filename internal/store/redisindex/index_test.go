package redisindex_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// newIndex is an index over the test Redis under a prefix of its own,
// whose keys are deleted when the test or benchmark ends.
func newIndex(t testing.TB) *redisindex.Index {
	x, _ := newIndexClient(t)
	return x
}

// newIndexClient is newIndex with its Redis client, to look at its keys.
func newIndexClient(t testing.TB) (*redisindex.Index, redis.UniversalClient) {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	return x, c
}

// count returns the sizes of a slot's three queues, read with c.
func count(t testing.TB, c redis.UniversalClient, x *redisindex.Index, app string, slot int) (store, prepare, dead int64) {
	t.Helper()
	ctx := context.Background()
	q := x.Queues(app, slot)
	var n [3]int64
	for i, k := range []string{q.Store, q.Prepare, q.Dead} {
		v, err := c.ZCard(ctx, k).Result()
		if err != nil {
			t.Fatalf("count %s: %v", k, err)
		}
		n[i] = v
	}
	return n[0], n[1], n[2]
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
	x, c := newIndexClient(t)
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
	claim := func(id task.ID, at time.Time) int {
		t.Helper()
		held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 3, ID: id, LeaseUntil: at.Add(30 * time.Second)}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return held[0]
	}
	if claim(later, now) != 0 {
		t.Error("claimed a member that is not due")
	}
	if claim(due, now) == 0 {
		t.Fatal("the due member was not claimed")
	}
	// A claimed member is not added back by a racing promotion.
	if ok, _ := x.Add(ctx, "a", 3, due, now); ok {
		t.Error("add put a claimed member back in the store queue")
	}
	if claim(due, now.Add(time.Second)) != 0 {
		t.Error("claimed a member whose lease has not run out")
	}
	// The lease runs out: the member is claimable again.
	if claim(due, now.Add(31*time.Second)) == 0 {
		t.Error("a member whose lease ran out was not claimed again")
	}
	if err := x.Settle(ctx, "a", 3, due, redisindex.Dead, now); err != nil {
		t.Fatal(err)
	}
	s, p, d := count(t, c, x, "a", 3)
	if s != 1 || p != 0 || d != 1 {
		t.Errorf("queues store=%d prepare=%d dead=%d, want 1 0 1", s, p, d)
	}
	es, err := x.RangeSlots(ctx, []redisindex.SlotRef{{App: "a", Slot: 3}}, now, task.ID{}, now.Add(2*time.Hour), 100)
	if err != nil || len(es) != 1 || es[0].ID != later || es[0].Prepared || es[0].App != "a" {
		t.Errorf("range: %+v %v", es, err)
	}
	if apps, _ := x.Apps(ctx); len(apps) != 1 || apps[0] != "a" {
		t.Errorf("apps %v", apps)
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
		a, b, e := count(t, c, x, "a", slot)
		s, p, d = s+a, p+b, d+e
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
		if a, b, e := count(t, c, x, "a", slot); a+b+e != 0 {
			t.Errorf("slot %d not empty after drop: %d %d %d", slot, a, b, e)
		}
	}
}

// TestClaimMany: one pipeline claims the due members of several slots and
// apps, and reports as not held what is not due, held elsewhere or absent.
func TestClaimMany(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
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
	if held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "b", Slot: 1, ID: taken, LeaseUntil: now.Add(time.Minute)}}, now); err != nil || held[0] == 0 {
		t.Fatal(held, err)
	}
	until := now.Add(30 * time.Second)
	held, err := x.ClaimMany(ctx, []redisindex.Claim{
		{App: "a", Slot: 0, ID: a0, LeaseUntil: until}, {App: "a", Slot: 5, ID: a5, LeaseUntil: until}, {App: "b", Slot: 1, ID: b1, LeaseUntil: until},
		{App: "a", Slot: 0, ID: notDue, LeaseUntil: until}, {App: "b", Slot: 1, ID: taken, LeaseUntil: until}, {App: "a", Slot: 2, ID: absent, LeaseUntil: until},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 1, 1, 0, 0, 0}; !slices.Equal(held, want) {
		t.Errorf("ClaimMany held %v, want %v", held, want)
	}
	for _, q := range []struct {
		app         string
		slot        int
		store, prep int64
	}{{"a", 0, 1, 1}, {"a", 5, 0, 1}, {"b", 1, 0, 2}} {
		s, p, _ := count(t, c, x, q.app, q.slot)
		if s != q.store || p != q.prep {
			t.Errorf("%s/%d: store=%d prepare=%d, want %d %d", q.app, q.slot, s, p, q.store, q.prep)
		}
	}
	if held, err := x.ClaimMany(ctx, nil, now); err != nil || held != nil {
		t.Errorf("empty ClaimMany = %v, %v", held, err)
	}
}

// TestClaimManyPastTheHead: claim_many pops the head of a StoreQueue
// first; a member asked for behind another (due or not) is claimed all the
// same, one asked for at the head but not due is not, and what the pop took
// and was not claimed is back with its score.
func TestClaimManyPastTheHead(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	other, asked, later := g.New(now, 0), g.New(now, 0), g.New(now, 0)
	for _, m := range []struct {
		id task.ID
		at time.Time
	}{{other, now.Add(-time.Minute)}, {asked, now.Add(-time.Second)}, {later, now.Add(time.Hour)}} {
		if _, err := x.Add(ctx, "a", 2, m.id, m.at); err != nil {
			t.Fatal(err)
		}
	}
	held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 2, ID: asked, LeaseUntil: now.Add(time.Minute), Attempt: true}}, now)
	if err != nil || !slices.Equal(held, []int{1}) {
		t.Fatalf("claim behind the head: %v %v, want [1]", held, err)
	}
	// The head is later now, and asked for: not due, so not claimed.
	held, err = x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 2, ID: later, LeaseUntil: now.Add(time.Minute), Attempt: true}}, now)
	if err != nil || !slices.Equal(held, []int{0}) {
		t.Fatalf("claim of a member not due: %v %v, want [0]", held, err)
	}
	q := x.Queues("a", 2)
	got, err := c.ZRangeWithScores(ctx, q.Store, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []redis.Z{{Score: float64(now.Add(-time.Minute).UnixMilli()), Member: other.String()}, {Score: float64(now.Add(time.Hour).UnixMilli()), Member: later.String()}}
	if !slices.Equal(got, want) {
		t.Errorf("StoreQueue after the claims = %v, want %v", got, want)
	}
	if p, err := c.ZRange(ctx, q.Prepare, 0, -1).Result(); err != nil || !slices.Equal(p, []string{asked.String()}) {
		t.Errorf("PrepareQueue = %v, %v, want [%s]", p, err, asked)
	}
}

// TestClaimManyLeases: a member whose lease ran out is claimed again (the
// rollback goes to one caller), one still leased is not, and two callers
// claiming the same members at once never both hold one.
func TestClaimManyLeases(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	ran, running := g.New(now, 0), g.New(now, 0)
	for _, id := range []task.ID{ran, running} {
		if _, err := x.Add(ctx, "a", 3, id, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	early := now.Add(-time.Minute)
	held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 3, ID: ran, LeaseUntil: now.Add(-time.Second)}, {App: "a", Slot: 3, ID: running, LeaseUntil: now.Add(time.Minute)}}, early)
	if err != nil || !slices.Equal(held, []int{1, 1}) {
		t.Fatalf("first claim: %v %v", held, err)
	}
	held, err = x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 3, ID: ran, LeaseUntil: now.Add(time.Minute)}, {App: "a", Slot: 3, ID: running, LeaseUntil: now.Add(time.Minute)}}, now)
	if err != nil || !slices.Equal(held, []int{1, 0}) {
		t.Fatalf("claim after one lease ran out: %v %v, want [true false]", held, err)
	}

	// Racing callers over 200 due members: each member goes to exactly one.
	var ids []task.ID
	for range 200 {
		id := g.New(now, 0)
		ids = append(ids, id)
		if _, err := x.Add(ctx, "race", int(id[15])%4, id, now); err != nil {
			t.Fatal(err)
		}
	}
	cs := make([]redisindex.Claim, len(ids))
	for i, id := range ids {
		cs[i] = redisindex.Claim{App: "race", Slot: int(id[15]) % 4, ID: id, LeaseUntil: now.Add(time.Minute)}
	}
	results := make([][]int, 4)
	var wg sync.WaitGroup
	for c := range results {
		wg.Go(func() {
			h, err := x.ClaimMany(ctx, cs, now)
			if err != nil {
				t.Error(err)
			}
			results[c] = h
		})
	}
	wg.Wait()
	for i := range ids {
		n := 0
		for c := range results {
			if len(results[c]) > i && results[c][i] > 0 {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("member %d held by %d callers, want 1", i, n)
		}
	}
}

// TestEnded: the outcomes of claimed members leave the PrepareQueue for
// where they belong.
func TestEnded(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	acked, retried, dead, leased := g.New(now, 0), g.New(now, 0), g.New(now, 0), g.New(now, 0)
	var cs []redisindex.Claim
	for _, id := range []task.ID{acked, retried, dead, leased} {
		if _, err := x.Add(ctx, "a", 1, id, now); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, redisindex.Claim{App: "a", Slot: 1, ID: id, LeaseUntil: now.Add(time.Minute)})
	}
	if held, err := x.ClaimMany(ctx, cs, now); err != nil || slices.Contains(held, 0) {
		t.Fatal(held, err)
	}
	err := x.Ended(ctx, []redisindex.Op{
		{App: "a", Slot: 1, ID: acked, Action: redisindex.Ack},
		{App: "a", Slot: 1, ID: retried, Action: redisindex.Retry, Score: now.Add(time.Second)},
		{App: "a", Slot: 1, ID: dead, Action: redisindex.Dead, Score: now},
		{App: "a", Slot: 1, ID: leased, Action: redisindex.Lease, Score: now.Add(time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, p, d := count(t, c, x, "a", 1)
	if s != 1 || p != 1 || d != 1 {
		t.Fatalf("store=%d prepare=%d dead=%d, want 1 1 1", s, p, d)
	}
	es, err := x.RangeSlots(ctx, []redisindex.SlotRef{{App: "a", Slot: 1}}, now, task.ID{}, now.Add(2*time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[task.ID]redisindex.Entry{}
	for _, e := range es {
		got[e.ID] = e
	}
	if e := got[retried]; e.Prepared || !e.At.Equal(now.Add(time.Second)) {
		t.Errorf("retried: %+v", e)
	}
	if e := got[leased]; !e.Prepared || !e.At.Equal(now.Add(time.Hour)) {
		t.Errorf("leased: %+v", e)
	}
	if _, ok := got[acked]; ok {
		t.Error("acked member still in the slot")
	}
}

// TestClaimManyNumbersAttempts: a claim for an attempt numbers it one past
// the last attempt claimed of the member, or past its stored count when
// that is more, so an attempt whose node stopped during it (its lease ran
// out, no outcome stored) still counts; a rollback's claim numbers
// nothing; a member that leaves for good forgets its number.
func TestClaimManyNumbersAttempts(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	id := g.New(now, 0)
	if _, err := x.Add(ctx, "a", 1, id, now); err != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time, attempt bool, stored int) int {
		t.Helper()
		held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 1, ID: id, LeaseUntil: at.Add(time.Second), Attempt: attempt, Attempts: stored}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return held[0]
	}
	if n := claim(now, true, 2); n != 3 {
		t.Errorf("first claim with 2 attempts stored: attempt %d, want 3", n)
	}
	if n := claim(now, true, 2); n != 0 {
		t.Errorf("claim while leased: %d, want 0", n)
	}
	// The lease runs out without an outcome: the next claim is attempt 4.
	if n := claim(now.Add(2*time.Second), true, 2); n != 4 {
		t.Errorf("claim after a lease ran out: attempt %d, want 4", n)
	}
	if n := claim(now.Add(4*time.Second), false, 0); n != 1 {
		t.Errorf("rollback claim: %d, want 1", n)
	}
	if n := claim(now.Add(6*time.Second), true, 9); n != 10 {
		t.Errorf("claim with 9 attempts stored: attempt %d, want 10", n)
	}
	if err := x.Ended(ctx, []redisindex.Op{{App: "a", Slot: 1, ID: id, Action: redisindex.Ack, Score: now}}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Add(ctx, "a", 1, id, now); err != nil {
		t.Fatal(err)
	}
	if n := claim(now.Add(8*time.Second), true, 0); n != 1 {
		t.Errorf("claim after the member was acked: attempt %d, want 1 (its number forgotten)", n)
	}
}

// TestSettleManyInOrder: a member written twice in one call ends where its
// last write puts it, as if each were its own call.
func TestSettleManyInOrder(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	a, b := g.New(now, 0), g.New(now, 0)
	err := x.SettleMany(ctx, []redisindex.Op{
		{App: "a", Slot: 2, ID: a, Action: redisindex.Retry, Score: now},
		{App: "a", Slot: 2, ID: b, Action: redisindex.Lease, Score: now},
		{App: "a", Slot: 2, ID: a, Action: redisindex.Ack},
		{App: "a", Slot: 2, ID: b, Action: redisindex.Retry, Score: now},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, p, d := count(t, c, x, "a", 2); s != 1 || p != 0 || d != 0 {
		t.Fatalf("store=%d prepare=%d dead=%d, want 1 0 0", s, p, d)
	}
}

// TestClaimManyNumbersMany: attempts claimed together in one slot are
// numbered each from its own count.
func TestClaimManyNumbersMany(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	ids := []task.ID{g.New(now, 0), g.New(now, 0), g.New(now, 0)}
	for _, id := range ids {
		if _, err := x.Add(ctx, "a", 5, id, now); err != nil {
			t.Fatal(err)
		}
	}
	// The first has an attempt claimed before (its node stopped during it).
	if _, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 5, ID: ids[0], LeaseUntil: now, Attempt: true, Attempts: 4}}, now); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Second)
	held, err := x.ClaimMany(ctx, []redisindex.Claim{
		{App: "a", Slot: 5, ID: ids[0], LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 4},
		{App: "a", Slot: 5, ID: ids[1], LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 0},
		{App: "a", Slot: 5, ID: ids[2], LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 7},
	}, later)
	if err != nil || !slices.Equal(held, []int{6, 1, 8}) {
		t.Fatalf("held %v, %v; want [6 1 8]", held, err)
	}
}

// TestClaimManyNumbersAcrossSlots: attempts claimed in one call over
// several slots (one attempts hash on a standalone Redis) are numbered each
// from its own count and number held, a member claimed twice in the call
// in order.
func TestClaimManyNumbersAcrossSlots(t *testing.T) {
	t.Parallel()
	x := newIndex(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	a, b, c := g.New(now, 0), g.New(now, 0), g.New(now, 0)
	for _, m := range []struct {
		id   task.ID
		slot int
	}{{a, 1}, {b, 2}, {c, 3}} {
		if _, err := x.Add(ctx, "a", m.slot, m.id, now); err != nil {
			t.Fatal(err)
		}
	}
	// a's first attempt: its node stops during it, the lease runs out.
	if held, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 1, ID: a, LeaseUntil: now, Attempt: true, Attempts: 2}}, now); err != nil || held[0] != 3 {
		t.Fatalf("first claim of a: %v, %v; want [3]", held, err)
	}
	later := now.Add(time.Second)
	held, err := x.ClaimMany(ctx, []redisindex.Claim{
		{App: "a", Slot: 1, ID: a, LeaseUntil: later, Attempt: true, Attempts: 2},
		{App: "a", Slot: 2, ID: b, LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 5},
		{App: "a", Slot: 3, ID: c, LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 0},
		// a again, its lease of this call run out already: the next number.
		{App: "a", Slot: 1, ID: a, LeaseUntil: later.Add(time.Minute), Attempt: true, Attempts: 2},
	}, later)
	if err != nil || !slices.Equal(held, []int{4, 6, 1, 5}) {
		t.Fatalf("held %v, %v; want [4 6 1 5]", held, err)
	}
}

// TestAddManyAnswers: AddMany over several slots (one script call) answers
// for each member in order, leaving out those being delivered.
func TestAddManyAnswers(t *testing.T) {
	t.Parallel()
	x, c := newIndexClient(t)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	ids := []task.ID{g.New(now, 0), g.New(now, 0), g.New(now, 0), g.New(now, 0)}
	if err := x.Settle(ctx, "a", 1, ids[1], redisindex.Lease, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	added, err := x.AddMany(ctx, []redisindex.Added{
		{App: "a", Slot: 0, ID: ids[0], At: now},
		{App: "a", Slot: 1, ID: ids[1], At: now},
		{App: "a", Slot: 1, ID: ids[2], At: now},
		{App: "b", Slot: 0, ID: ids[3], At: now},
	})
	if err != nil || !slices.Equal(added, []bool{true, false, true, true}) {
		t.Fatalf("added %v, %v; want [true false true true]", added, err)
	}
	if s, p, _ := count(t, c, x, "a", 1); s != 1 || p != 1 {
		t.Errorf("slot a/1: store=%d prepare=%d, want 1 1", s, p)
	}
}
