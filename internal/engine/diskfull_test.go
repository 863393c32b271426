package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// fullStore refuses its next refusals UpdateMany calls for lack of disk
// space, as the embedded store does once its reserve is used up.
type fullStore struct {
	store.Store
	refusals atomic.Int32
}

func (f *fullStore) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if f.refusals.Add(-1) >= 0 {
		errs := make([]error, len(ids))
		for i := range errs {
			errs[i] = fmt.Errorf("pebblestore: update many: %w", store.ErrDiskFull)
		}
		return make([]*task.Task, len(ids)), errs
	}
	return f.Store.UpdateMany(ctx, ids, o, fn)
}

// TestOutcomeWaitsForDiskSpace: an outcome the store refuses for lack of
// disk space is written again once it takes writes, and the task is not
// delivered again meanwhile.
func TestOutcomeWaitsForDiskSpace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fs *fullStore
		b := setup(t, func(c *Config) {
			fs = &fullStore{Store: c.Store}
			c.Store = fs
		})
		b.sink.mu.Lock()
		b.sink.fail = func(*task.Task) error {
			fs.refusals.Store(1 << 20) // the disk fills during the delivery
			return nil
		}
		b.sink.mu.Unlock()
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if n := len(b.sink.deliveries()); n != 1 {
			t.Fatalf("%d deliveries by the due time, want 1", n)
		}
		time.Sleep(10 * time.Second) // full all along: the outcome waits
		synctest.Wait()
		fs.refusals.Store(0)        // space is back
		time.Sleep(5 * time.Second) // diskFullWaitMax
		outcomesStored()
		if n := len(b.sink.deliveries()); n != 1 {
			t.Errorf("%d deliveries, want 1: the task was delivered again while its outcome waited for space", n)
		}
		if got := b.get(t, tk.ID); got.State != task.Delivered || got.Attempts != 1 {
			t.Errorf("task after the disk had space again: %s, %d attempts; want delivered, 1", got.State, got.Attempts)
		}
	})
}
