package redisindex_test

import (
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/task"
)

// BenchmarkAdd: one scheduled task into its slot (the add script).
func BenchmarkAdd(b *testing.B) {
	x := newIndex(b)
	ctx := b.Context()
	var g task.IDGenerator
	now := time.Now()
	for b.Loop() {
		id := g.New(now, 0)
		if _, err := x.Add(ctx, "bench", 0, id, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimOne: the fire path's claim of one due task, then its ack
// (claim_one and settle scripts: two round trips per task).
func BenchmarkClaimOne(b *testing.B) {
	x := newIndex(b)
	ctx := b.Context()
	var g task.IDGenerator
	now := time.Now()
	ids := make([]task.ID, b.N)
	for i := range ids {
		ids[i] = g.New(now, 0)
		if _, err := x.Add(ctx, "bench", 0, ids[i], now); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		ok, err := x.ClaimOne(ctx, "bench", 0, ids[i], now, now.Add(time.Minute))
		if err != nil || !ok {
			b.Fatalf("claim %s: %v %v", ids[i], ok, err)
		}
		if err := x.Settle(ctx, "bench", 0, ids[i], redisindex.Ack, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimBatch: the claim script taking 100 due tasks at a time;
// reported per task.
func BenchmarkClaimBatch(b *testing.B) {
	x := newIndex(b)
	ctx := b.Context()
	var g task.IDGenerator
	now := time.Now()
	for range b.N {
		if _, err := x.Add(ctx, "bench", 0, g.New(now, 0), now); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	claimed := 0
	for claimed < b.N {
		ids, err := x.Claim(ctx, "bench", 0, now.Add(time.Millisecond), now.Add(time.Minute), 100)
		if err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			b.Fatalf("claimed %d of %d, then none", claimed, b.N)
		}
		claimed += len(ids)
	}
}

// BenchmarkClaimManySettled: the fire path's Redis work for a batch of 100
// due tasks of one slot: ClaimMany (claim_many, which numbers the
// attempts), then Settled with their acks; reported per task.
func BenchmarkClaimManySettled(b *testing.B) {
	x := newIndex(b)
	ctx := b.Context()
	var g task.IDGenerator
	now := time.Now()
	const batch = 100
	for b.Loop() {
		b.StopTimer()
		cs := make([]redisindex.Claim, batch)
		ops := make([]redisindex.Op, batch)
		for i := range cs {
			id := g.New(now, 0)
			if _, err := x.Add(ctx, "bench", 0, id, now); err != nil {
				b.Fatal(err)
			}
			cs[i] = redisindex.Claim{App: "bench", Slot: 0, ID: id, LeaseUntil: now.Add(time.Minute), Attempt: true}
			ops[i] = redisindex.Op{App: "bench", Slot: 0, ID: id, Action: redisindex.Ack, Score: now}
		}
		b.StartTimer()
		if _, err := x.ClaimMany(ctx, cs, now.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		if err := x.Settled(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}
