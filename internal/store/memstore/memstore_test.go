package memstore_test

import (
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/internal/store/storetest"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memstore.New() })
}

func TestSchedules(t *testing.T) {
	storetest.RunSchedules(t, func(*testing.T) store.Store { return memstore.New() })
}

// TestSynctest uses the store inside a synctest bubble, as engine tests do:
// it must start no goroutine and block on nothing outside the bubble.
func TestSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New()
		now := task.Ms(time.Now())
		tk := &task.Task{
			ID: new(task.IDGenerator).New(now, 0), App: "app", State: task.Scheduled,
			DueAt: now.Add(time.Second), NextAttemptAt: now.Add(time.Second), WakeAt: now.Add(time.Second),
			Target: task.Target{Pull: &task.PullTarget{}}, CreatedAt: now, UpdatedAt: now,
		}
		if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // instant in the bubble
		ids, err := s.Claimable(ctx, "app", time.Now(), 10)
		if err != nil || len(ids) != 1 || ids[0] != tk.ID {
			t.Fatalf("Claimable = %v, %v; want [%s]", ids, err, tk.ID)
		}
		if _, err := s.Update(ctx, tk.ID, nil, func(t *task.Task) error {
			t.State = task.Delivering
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
