// Package storetest is the conformance suite every [store.Store] runs.
//
// A backend's test calls [Run] with a function that opens a fresh, empty
// store; a backend that keeps data on disk also calls [RunDurability]:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir()})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite builds tasks the way the engine does (every field filled, times
// at millisecond precision in UTC) and compares what it reads back at
// millisecond precision, so a store may return times in UTC without a
// monotonic reading. After most changes it checks every order the store
// keeps (wake time, claimable, list) against a model computed from the tasks
// it expects to be stored.
package storetest

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Run runs the conformance suite. Each subtest calls open for a fresh, empty
// store, runs in parallel with the others, and closes the store when it ends
// (a Close that returns ErrClosed is fine: some subtests close it first).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"Create/New", testCreateNew},
		{"Create/DuplicateKey", testCreateDuplicateKey},
		{"Create/DuplicateKeyInBatch", testCreateDuplicateKeyInBatch},
		{"Create/Keyless", testCreateKeyless},
		{"Create/ManyInOneBatch", testCreateMany},
		{"Create/EmptyBatch", testCreateEmpty},
		{"Get/NotFound", testGetNotFound},
		{"GetByKey", testGetByKey},
		{"Copies", testCopies},
		{"Update/Persists", testUpdatePersists},
		{"Update/FnError", testUpdateFnError},
		{"Update/NotFound", testUpdateNotFound},
		{"Update/Concurrent", testUpdateConcurrent},
		{"Update/MovesList", testUpdateMovesList},
		{"Update/MovesWakeups", testUpdateMovesWakeups},
		{"Update/Claimable", testUpdateClaimable},
		{"UpdateMany/Mixed", testUpdateManyMixed},
		{"UpdateMany/Checks", testUpdateManyChecks},
		{"UpdateMany/Concurrent", testUpdateManyConcurrent},
		{"UpdateMany/Optimistic", testUpdateManyOptimistic},
		{"Wakeups/Order", testWakeupsOrder},
		{"Wakeups/Kinds", testWakeupsKinds},
		{"Wakeups/Cursor", testWakeupsCursor},
		{"Wakeups/Until", testWakeupsUntil},
		{"Wakeups/Limit", testWakeupsLimit},
		{"Claimable", testClaimable},
		{"Reads/SeeReturnedWrites", testReadsSeeReturnedWrites},
		{"List", testList},
		{"Sweep", testSweep},
		{"Sweep/Limit", testSweepLimit},
		{"Close", testClose},
		{"Close/DuringUpdates", testCloseDuringUpdates},
		{"Random", testRandom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, setup(t, open(t)))
		})
	}
}

// Sharder is implemented by a store that keeps a task in the shard its id
// names and a keyed task in the shard of its key (sqlstore). The suite then
// gives a keyed task's id the shard ShardFor returns, in the id's shard
// field, as the engine of such a store must. Keyless tasks keep shard 0,
// which such a store must accept as it accepts any of its shards: that way
// ids made in one millisecond still sort in the order they were made, which
// the suite's expectations rely on. Other stores get ids with shard 0.
type Sharder interface {
	ShardFor(app, key string, id task.ID) uint16
}

// epoch is the "now" of every subtest: tasks are made around it.
var epoch = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// farFuture is an until that every wake time in the suite is before.
var farFuture = epoch.AddDate(10, 0, 0)

// bundle is what a subtest works with.
type bundle struct {
	s   store.Store
	ctx context.Context
	gen *task.IDGenerator
	now time.Time // epoch: ms precision, UTC
}

// setup wraps s and closes it when the test ends.
func setup(t *testing.T, s store.Store) *bundle {
	t.Helper()
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return &bundle{s: s, ctx: context.Background(), gen: new(task.IDGenerator), now: epoch}
}

// cmpOpts compare tasks and wakeups at millisecond precision, whatever the
// location, and treat nil and empty maps and slices alike.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b time.Time) bool {
		return a.IsZero() == b.IsZero() && a.UnixMilli() == b.UnixMilli()
	}),
	cmpopts.EquateEmpty(),
	// A wakeup's App and Key are filled by the stores that have them at
	// hand: empty, or the task's.
	cmp.Comparer(func(a, b store.Wakeup) bool {
		opt := func(x, y string) bool { return x == y || x == "" || y == "" }
		return a.ID == b.ID && a.At.UnixMilli() == b.At.UnixMilli() && a.State == b.State && a.Kind == b.Kind &&
			opt(a.App, b.App) && opt(a.Key, b.Key)
	}),
}

// newTask returns a task filled the way the engine makes one: scheduled, due
// at now+due (rounded up to the millisecond) with NextAttemptAt and WakeAt
// equal to DueAt, an HTTP target, a deadline an hour after it, and a JSON
// payload. opts change it further.
func (b *bundle) newTask(app string, due time.Duration, opts ...func(*task.Task)) *task.Task {
	dueAt := task.Ms(b.now.Add(due))
	deadline := dueAt.Add(time.Hour)
	t := &task.Task{
		ID:            b.gen.New(b.now, 0),
		App:           app,
		DueAt:         dueAt,
		NextAttemptAt: dueAt,
		Deadline:      &deadline,
		Payload:       []byte(`{"n":1}`),
		Target: task.Target{HTTP: &task.HTTPTarget{
			URL:     "https://example.com/hook",
			Headers: map[string]string{"X-Trace": "abc"},
			Timeout: task.Duration(5 * time.Second),
		}},
		Retry:     task.RetryPolicy{}.WithDefaults(),
		State:     task.Scheduled,
		CreatedAt: b.now,
		UpdatedAt: b.now,
		WakeAt:    dueAt,
	}
	for _, o := range opts {
		o(t)
	}
	if sh, ok := b.s.(Sharder); ok && t.Key != "" {
		binary.BigEndian.PutUint16(t.ID[6:8], sh.ShardFor(t.App, t.Key, t.ID))
	}
	return t
}

// withKey gives the task a key.
func withKey(key string) func(*task.Task) { return func(t *task.Task) { t.Key = key } }

// withPull gives the task a pull target.
// withTrace gives the task a W3C trace context, which every store must keep.
func withTrace(t *task.Task) {
	t.Trace = &task.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE"}
}

func withPull(t *task.Task) { t.Target = task.Target{Pull: &task.PullTarget{}} }

// withHTTP gives the task an HTTP target.
func withHTTP(t *task.Task) {
	t.Target = task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/other"}}
}

// withWake sets WakeAt (zero for none).
func withWake(at time.Time) func(*task.Task) { return func(t *task.Task) { t.WakeAt = at } }

// withNext sets NextAttemptAt.
func withNext(at time.Time) func(*task.Task) { return func(t *task.Task) { t.NextAttemptAt = at } }

// delivering makes the task delivering with a lease that ends at until, as
// the dispatcher does: WakeAt becomes the end of the lease.
func delivering(until time.Time) func(*task.Task) {
	return func(t *task.Task) {
		t.State = task.Delivering
		t.Attempts++
		t.Lease = "lease-" + t.ID.String()
		t.LeaseExpiresAt = &until
		t.WakeAt = until
	}
}

// finished puts the task in a final state at at, as the engine does: no
// lease and nothing pending.
func finished(state task.State, at time.Time) func(*task.Task) {
	return func(t *task.Task) {
		t.State = state
		t.FinishedAt = &at
		t.UpdatedAt = at
		t.Lease = ""
		t.LeaseExpiresAt = nil
		t.WakeAt = time.Time{}
	}
}

// apply returns a copy of t changed by opts, for use as an Update's fn and
// as the expected result.
func apply(t *task.Task, opts ...func(*task.Task)) *task.Task {
	c := t.Clone()
	for _, o := range opts {
		o(c)
	}
	return c
}

// create stores tasks that must all be new.
func (b *bundle) create(t *testing.T, tasks ...*task.Task) {
	t.Helper()
	res, err := b.s.Create(b.ctx, tasks)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(res) != len(tasks) {
		t.Fatalf("Create returned %d results for %d tasks", len(res), len(tasks))
	}
	for i, r := range res {
		if !r.Created {
			t.Fatalf("Create: task %d (%s) not created", i, tasks[i].ID)
		}
	}
}

// update runs Update with fn = opts and checks what it returns.
func (b *bundle) update(t *testing.T, old *task.Task, opts ...func(*task.Task)) *task.Task {
	t.Helper()
	want := apply(old, opts...)
	got, err := b.s.Update(b.ctx, old.ID, nil, func(c *task.Task) error {
		for _, o := range opts {
			o(c)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update(%s): %v", old.ID, err)
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("Update(%s) returned (-want +got):\n%s", old.ID, diff)
	}
	return want
}

// get returns the stored task.
func (b *bundle) get(t *testing.T, id task.ID) *task.Task {
	t.Helper()
	got, err := b.s.Get(b.ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return got
}

// wakeups returns the whole wake-time order up to until.
func (b *bundle) wakeups(t *testing.T, after store.Cursor, until time.Time) []store.Wakeup {
	t.Helper()
	got, err := b.s.Wakeups(b.ctx, after, until, 1<<20)
	if err != nil {
		t.Fatalf("Wakeups: %v", err)
	}
	return got
}

// ids returns the ids of tasks.
func ids(tasks []*task.Task) []task.ID {
	out := make([]task.ID, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}
