package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// claimPull schedules n pull tasks of app due now and claims them all, in
// a synctest bubble. It returns with the engine idle: the fire job of the
// tasks coming due (it writes them as waiting for a claim) is done before
// the claim, so that what a test does next has the engine to itself.
func (b *bundle) claimPull(t *testing.T, app string, n int, lease time.Duration) []*task.Task {
	t.Helper()
	ps := make([]CreateParams, n)
	for i := range ps {
		ps[i] = CreateParams{App: app, DueAt: time.Now(), Target: pull}
	}
	rs, err := b.eng.Create(t.Context(), ps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	synctest.Wait()
	got, err := b.eng.Lease(t.Context(), app, LeaseParams{Max: n, Lease: lease})
	if err != nil || len(got) != n {
		t.Fatalf("claim %d tasks of %s: got %d, %v", n, app, len(got), err)
	}
	synctest.Wait()
	return got
}

// TestAckManyOneWrite: a batch of acks is one UpdateMany and no Update;
// every task is delivered, leaves the wheel, stays delivered when its lease
// would have run out, and is counted finished once.
func TestAckManyOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wc *writeCounter
		var mu sync.Mutex
		finished := map[task.State]int{}
		b := setup(t, func(c *Config) {
			wc = countWrites(c)
			c.Hooks.Finished = func(app string, s task.State) {
				mu.Lock()
				defer mu.Unlock()
				finished[s]++
			}
		})
		const n = 200
		claimed := b.claimPull(t, "app", n, 5*time.Second)
		acks := make([]AckParams, n)
		for i, tk := range claimed {
			acks[i] = AckParams{ID: tk.ID, Lease: tk.Lease}
		}
		updates, manys := wc.callsOf("Update"), wc.callsOf("UpdateMany")
		errs, err := b.eng.AckMany(t.Context(), "app", acks)
		if err != nil {
			t.Fatal(err)
		}
		if got := wc.callsOf("UpdateMany") - manys; got != 1 {
			t.Errorf("%d UpdateMany calls for one AckMany, want 1", got)
		}
		if got := wc.callsOf("Update") - updates; got != 0 {
			t.Errorf("%d Update calls for one AckMany, want 0", got)
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("acks[%d]: %v", i, err)
			}
		}
		// The wheel drops the leases' timers at once (the write is
		// tracked), and past the leases nothing rolls back.
		synctest.Wait()
		if w := b.eng.Stats().Wheel; w != 0 {
			t.Errorf("%d tasks in the wheel after acking all, want 0", w)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		for _, tk := range claimed {
			if got := b.get(t, tk.ID); got.State != task.Delivered || got.Lease != "" || got.FinishedAt == nil {
				t.Fatalf("task %s after AckMany and its lease's end: %s, lease %q", tk.ID, got.State, got.Lease)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if finished[task.Delivered] != n {
			t.Errorf("Finished hook counted %d delivered, want %d", finished[task.Delivered], n)
		}
	})
}

// TestAckManyMixed: each ack of a batch has its own outcome, and only the
// good ones change anything.
func TestAckManyMixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		mine := b.claimPull(t, "app", 5, 5*time.Second)
		theirs := b.claimPull(t, "other", 1, 5*time.Second)[0]
		unknown := new(task.IDGenerator).New(time.Now(), 0)
		acks := []AckParams{
			{mine[0].ID, mine[0].Lease},
			{mine[1].ID, "not-the-lease"},
			{mine[2].ID, mine[2].Lease},
			{unknown, "x"},
			{theirs.ID, theirs.Lease},
			{mine[0].ID, mine[0].Lease},
			{mine[3].ID, ""},
			{mine[4].ID, mine[4].Lease},
		}
		errs, err := b.eng.AckMany(ctx, "app", acks)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) != len(acks) {
			t.Fatalf("%d errors for %d acks", len(errs), len(acks))
		}
		isNil := func(err error) bool { return err == nil }
		conflicted := func(err error) bool {
			var ce *ConflictError
			return errors.As(err, &ce) && ce.Op == "ack" && ce.Task.ID == mine[1].ID && ce.Task.State == task.Delivering
		}
		notFound := func(id task.ID) func(error) bool {
			return func(err error) bool {
				return errors.Is(err, store.ErrNotFound) && err.Error() == "toc: task not found: "+id.String()
			}
		}
		field := func(name string) func(error) bool {
			return func(err error) bool {
				var fe *task.FieldError
				return errors.As(err, &fe) && fe.Field == name
			}
		}
		want := []struct {
			what string
			ok   func(error) bool
		}{
			{"acked", isNil},
			{"a conflict", conflicted},
			{"acked", isNil},
			{"not found", notFound(unknown)},
			{"not found, as if absent", notFound(theirs.ID)},
			{"a field error on acks.5.id", field("acks.5.id")},
			{"a field error on acks.6.lease", field("acks.6.lease")},
			{"acked", isNil},
		}
		for i, w := range want {
			if !w.ok(errs[i]) {
				t.Errorf("acks[%d]: %v, want %s", i, errs[i], w.what)
			}
		}
		states := map[task.ID]task.State{
			mine[0].ID: task.Delivered, mine[1].ID: task.Delivering, mine[2].ID: task.Delivered,
			mine[3].ID: task.Delivering, mine[4].ID: task.Delivered, theirs.ID: task.Delivering,
		}
		for id, st := range states {
			if got := b.get(t, id).State; got != st {
				t.Errorf("task %s: %s, want %s", id, got, st)
			}
		}
		// The tasks not acked keep their leases, and an ack with the
		// right one still works, alone or in a batch.
		if err := b.eng.Ack(ctx, mine[1].ID, mine[1].Lease); err != nil {
			t.Errorf("single ack after a refused batch ack: %v", err)
		}
		if errs, err := b.eng.AckMany(ctx, "other", []AckParams{{theirs.ID, theirs.Lease}}); err != nil || errs[0] != nil {
			t.Errorf("the other app's own ack: %v, %v", errs, err)
		}
		// Acking again: the lease is gone.
		if errs, err := b.eng.AckMany(ctx, "app", []AckParams{{mine[0].ID, mine[0].Lease}}); err != nil || !errors.As(errs[0], new(*ConflictError)) {
			t.Errorf("a second ack: %v, %v; want a conflict", errs, err)
		}
	})
}

// TestAckManyRefusals: what fails the call as a whole.
func TestAckManyRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		tk := b.claimPull(t, "app", 1, 5*time.Second)[0]
		one := AckParams{tk.ID, tk.Lease}
		many := make([]AckParams, MaxClaim+1)
		for i := range many {
			many[i] = AckParams{new(task.IDGenerator).New(time.Now(), 0), "x"}
		}
		for _, c := range []struct {
			name  string
			app   string
			acks  []AckParams
			field string
		}{
			{"none", "app", nil, "acks"},
			{"empty", "app", []AckParams{}, "acks"},
			{"too many", "app", many, "acks"},
			{"bad app", "Not An App", []AckParams{one}, "app"},
		} {
			errs, err := b.eng.AckMany(ctx, c.app, c.acks)
			var fe *task.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || errs != nil {
				t.Errorf("%s: %v, %v; want a field error on %s", c.name, errs, err, c.field)
			}
		}
		if got := b.get(t, tk.ID).State; got != task.Delivering {
			t.Fatalf("after refused calls the task is %s", got)
		}
		if err := b.eng.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := b.eng.AckMany(ctx, "app", []AckParams{one}); !errors.Is(err, ErrNotReady) {
			t.Errorf("stopped: %v, want ErrNotReady", err)
		}
	})
}

// failingMany fails every task of UpdateMany once fail is set.
type failingMany struct {
	store.Store
	fail atomic.Bool
}

var errDisk = errors.New("disk on fire")

func (f *failingMany) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if !f.fail.Load() {
		return f.Store.UpdateMany(ctx, ids, o, fn)
	}
	errs := make([]error, len(ids))
	for i := range errs {
		errs[i] = fmt.Errorf("failingMany: %w", errDisk)
	}
	return make([]*task.Task, len(ids)), errs
}

// TestAckManyStoreFails: a store that fails every task fails the call; an
// item it never saw does not hide that.
func TestAckManyStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fm *failingMany
		b := setup(t, func(c *Config) {
			fm = &failingMany{Store: c.Store}
			c.Store = fm
		})
		tk := b.claimPull(t, "app", 1, 5*time.Second)[0]
		fm.fail.Store(true)
		errs, err := b.eng.AckMany(t.Context(), "app", []AckParams{{tk.ID, tk.Lease}, {tk.ID, ""}})
		if !errors.Is(err, errDisk) || errs != nil {
			t.Errorf("AckMany on a failing store: %v, %v; want the store's error", errs, err)
		}
	})
}
