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

// BenchmarkClaimManyEnded: the fire path's Redis work for a batch of 100
// due tasks of one slot: ClaimMany (claim_many, which numbers the
// attempts), then Ended with their acks; reported per task.
func BenchmarkClaimManyEnded(b *testing.B) {
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
		if err := x.Ended(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}

// BenchmarkRangeSlots: the loader's read of 1000 members of a slot
// (RangeSlots), reported per member.
func BenchmarkRangeSlots(b *testing.B) {
	x := newIndex(b)
	ctx := b.Context()
	var g task.IDGenerator
	now := time.Now()
	const n = 1000
	ops := make([]redisindex.Op, n)
	for i := range ops {
		ops[i] = redisindex.Op{App: "bench", Slot: 0, ID: g.New(now, 0), Action: redisindex.Retry, Score: now.Add(time.Duration(i) * time.Millisecond)}
	}
	if err := x.SettleMany(ctx, ops); err != nil {
		b.Fatal(err)
	}
	refs := []redisindex.SlotRef{{App: "bench", Slot: 0}}
	for b.Loop() {
		es, err := x.RangeSlots(ctx, refs, now, task.ID{}, now.Add(time.Hour), n)
		if err != nil || len(es) != n {
			b.Fatalf("%d members, %v", len(es), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/member")
}
