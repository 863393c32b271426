package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestGatherSharesRoundTrips: calls that come while a write is under way
// share the next write, and each returns once its ops are written.
func TestGatherSharesRoundTrips(t *testing.T) {
	var g gather
	var mu sync.Mutex
	var writes [][]redisindex.Op
	release := make(chan struct{})
	write := func(_ context.Context, ops []redisindex.Op, _ string) error {
		mu.Lock()
		first := len(writes) == 0
		writes = append(writes, ops)
		mu.Unlock()
		if first {
			<-release // the first write is under way while the others come
		}
		return nil
	}
	var ids task.IDGenerator
	const calls = 16
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			op := redisindex.Op{ID: ids.New(time.Now(), 0), Slot: i}
			if err := g.do(t.Context(), &gathered{ops: []redisindex.Op{op}}, write); err != nil {
				t.Error(err)
			}
		})
		if i == 0 {
			testkit.WaitFor(t, 10*time.Second, "the first write under way", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(writes) == 1
			})
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the other calls waiting", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.pending) == calls-1
	})
	close(release)
	wg.Wait()
	if len(writes) != 2 || len(writes[0]) != 1 || len(writes[1]) != calls-1 {
		t.Fatalf("%d writes of %v ops, want 2 of 1 and %d", len(writes), lens(writes), calls-1)
	}
	if g.busy || len(g.pending) > 0 {
		t.Errorf("gather left busy=%v with %d pending", g.busy, len(g.pending))
	}
}

func lens(ws [][]redisindex.Op) []int {
	n := make([]int, len(ws))
	for i, w := range ws {
		n[i] = len(w)
	}
	return n
}
