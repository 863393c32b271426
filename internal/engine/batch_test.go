package engine

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// countingStore counts the engine's writes: Update calls, and UpdateMany
// calls with the sizes of their batches. Each UpdateMany takes a
// millisecond (of the bubble's fake time), as a real write takes a while:
// what arrives meanwhile waits for the next batch, whatever the scheduler
// does.
type countingStore struct {
	store.Store
	mu      sync.Mutex
	updates int
	batches []int
}

func (c *countingStore) Update(ctx context.Context, id task.ID, o *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	c.mu.Lock()
	c.updates++
	c.mu.Unlock()
	return c.Store.Update(ctx, id, o, fn)
}

func (c *countingStore) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	c.mu.Lock()
	c.batches = append(c.batches, len(ids))
	c.mu.Unlock()
	time.Sleep(time.Millisecond)
	return c.Store.UpdateMany(ctx, ids, o, fn)
}

// TestBatchedWrites: 500 tasks due at one instant are leased with a few
// store writes, not one per task, and their outcomes are stored in batches
// too; each is delivered once and ends delivered.
func TestBatchedWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cs *countingStore
		b := setup(t, func(c *Config) {
			cs = &countingStore{Store: c.Store}
			c.Store = cs
		})
		// The sink holds each delivery until all 500 are under way, so
		// their outcomes come in together.
		const n = 500
		var started sync.WaitGroup
		started.Add(n)
		release := make(chan struct{})
		b.sink.fail = func(*task.Task) error {
			started.Done()
			<-release
			return nil
		}
		due := time.Now().Add(time.Minute)
		params := make([]CreateParams, n)
		for i := range params {
			params[i] = CreateParams{App: "app", Target: httpTarget, DueAt: due}
		}
		rs, err := b.eng.Create(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		started.Wait()
		cs.mu.Lock()
		leases := append([]int(nil), cs.batches...)
		cs.batches = nil
		cs.mu.Unlock()
		close(release)
		time.Sleep(time.Second) // the outcomes' writes, a millisecond each
		synctest.Wait()

		total := 0
		for _, k := range leases {
			total += k
			if k > fireBatchMax {
				t.Errorf("a batch of %d tasks, more than %d", k, fireBatchMax)
			}
		}
		if total != n || len(leases) > 2*n/fireBatchMax {
			t.Errorf("leases written in %d batches %v (%d tasks), want %d tasks in at most %d", len(leases), leases, total, n, 2*n/fireBatchMax)
		}
		cs.mu.Lock()
		outcomes, updates := cs.batches, cs.updates
		cs.mu.Unlock()
		total = 0
		for _, k := range outcomes {
			total += k
		}
		if total != n || len(outcomes) > n/10 {
			t.Errorf("outcomes written in %d batches %v (%d tasks), want %d tasks in at most %d", len(outcomes), outcomes, total, n, n/10)
		}
		t.Logf("leases in batches %v, outcomes in batches %v", leases, outcomes)
		if updates != 0 {
			t.Errorf("%d single Updates on the delivery path, want none", updates)
		}
		if got := len(b.sink.deliveries()); got != n {
			t.Errorf("%d deliveries, want %d", got, n)
		}
		for _, r := range rs {
			if s := b.get(t, r.Task.ID).State; s != task.Delivered {
				t.Fatalf("task %s is %s, want delivered", r.Task.ID, s)
			}
		}
	})
}
