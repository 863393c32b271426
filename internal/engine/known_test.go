package engine

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// knownCounter counts a store's reading writes (UpdateMany) and its
// writes over known versions (UpdateKnown), per task.
type knownCounter struct {
	store.Store
	known store.KnownUpdater
	mu    sync.Mutex
	reads map[task.ID]int // UpdateMany calls that named it
	blind map[task.ID]int // UpdateKnown calls that named it
}

func countKnown(t *testing.T, sinks ...sink.Sink) (*knownCounter, *Engine) {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := &knownCounter{Store: st, known: st, reads: map[task.ID]int{}, blind: map[task.ID]int{}}
	cfg := Config{Store: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if len(sinks) > 0 {
		cfg.Sinks = map[string]sink.Sink{"http": sinks[0]}
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return c, eng
}

func (c *knownCounter) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	c.mu.Lock()
	for _, id := range ids {
		c.reads[id]++
	}
	c.mu.Unlock()
	return c.Store.UpdateMany(ctx, ids, opts, fn)
}

func (c *knownCounter) UpdateKnown(ctx context.Context, olds []*task.Task, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	c.mu.Lock()
	for _, t := range olds {
		c.blind[t.ID]++
	}
	c.mu.Unlock()
	return c.known.UpdateKnown(ctx, olds, opts, fn)
}

func (c *knownCounter) of(id task.ID) (reads, blind int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[id], c.blind[id]
}

// claimHeld schedules n pull tasks of app due now, and leases them from
// memory once they are held.
func claimHeld(t *testing.T, eng *Engine, app string, n int) []*task.Task {
	t.Helper()
	ps := make([]CreateParams, n)
	for i := range ps {
		ps[i] = CreateParams{App: app, DueAt: time.Now(), Target: pull}
	}
	if _, err := eng.Create(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	var got []*task.Task
	testkit.WaitFor(t, 30*time.Second, "the pull tasks leased", func() bool {
		ts, err := eng.Lease(t.Context(), app, LeaseParams{Max: n - len(got), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ts...)
		return len(got) == n
	})
	return got
}

// TestAckWritesOverHeldCopy: the ack of a pull lease held in memory writes
// its outcome over the task as held (UpdateKnown), without reading it
// again (no UpdateMany names it after the lease), and the task is stored
// delivered; a nack likewise, the task stored scheduled with its attempt.
func TestAckWritesOverHeldCopy(t *testing.T) {
	c, eng := countKnown(t)
	got := claimHeld(t, eng, "app", 3)
	reads := make([]int, len(got))
	for i, tk := range got {
		reads[i], _ = c.of(tk.ID)
	}
	errs, err := eng.AckMany(t.Context(), "app", []AckParams{{ID: got[0].ID, Lease: got[0].Lease}, {ID: got[1].ID, Lease: got[1].Lease}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("ack: %v %v", err, errs)
	}
	if err := eng.Nack(t.Context(), got[2].ID, got[2].Lease, "later", ptr(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i, tk := range got {
		r, b := c.of(tk.ID)
		if r != reads[i] || b != 1 {
			t.Errorf("task %d: %d reading writes and %d over the held copy for its ack; want 0 and 1", i, r-reads[i], b)
		}
		stored, err := c.Store.Get(t.Context(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := task.Delivered
		if i == 2 {
			want = task.Scheduled
		}
		if stored.State != want || stored.Attempts != 1 {
			t.Errorf("task %d stored %s after %d attempts; want %s after 1", i, stored.State, stored.Attempts, want)
		}
	}
}

// TestAckAfterWriteReadsAgain is the fence: a task written after the copy
// its lease started from was read has its ack's outcome written from a
// fresh read, so the write stays. The API refuses to change a task leased,
// so the write here is the engine's own, made at the worst instant: the
// lease is taken from the held copy while the write is under way (in its
// callback, before it commits). Without the fence the ack would write
// over the held copy and undo the write. A task changed while held, before
// its lease, is dropped from memory and leased from a copy read after the
// change: its ack keeps the change too.
func TestAckAfterWriteReadsAgain(t *testing.T) {
	c, eng := countKnown(t)
	ctx := t.Context()
	rs, err := eng.Create(ctx, []CreateParams{{App: "app", DueAt: time.Now(), Target: pull}, {App: "app", DueAt: time.Now(), Target: pull}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := rs[0].Task.ID, rs[1].Task.ID
	testkit.WaitFor(t, 30*time.Second, "both tasks held", func() bool { return eng.held.queued(a) && eng.held.queued(b) })

	// b is changed while held: its copy is dropped, and it is held again.
	payload := []byte(`"patched"`)
	if _, err := eng.Patch(ctx, b, PatchParams{Payload: &payload}); err != nil {
		t.Fatal(err)
	}
	// a is leased during a write of it.
	var leased []*task.Task
	w, err := eng.writer.update(ctx, a, nil, func(tk *task.Task) error {
		tk.Payload = []byte(`"written"`)
		leased = eng.held.lease(ctx, "app", LeaseParams{Max: 1, Lease: time.Minute})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.writer.wrote(ctx, w)
	if len(leased) != 1 || leased[0].ID != a {
		t.Fatalf("leased %v during the write; want task a", leased)
	}
	var lb []*task.Task
	testkit.WaitFor(t, 30*time.Second, "b leased", func() bool {
		lb, err = eng.Lease(ctx, "app", LeaseParams{Max: 1, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(lb) == 1
	})
	if string(lb[0].Payload) != string(payload) {
		t.Errorf("b leased with payload %s; want %s", lb[0].Payload, payload)
	}
	readsA, _ := c.of(a)
	readsB, _ := c.of(b)
	if err := eng.Ack(ctx, a, leased[0].Lease); err != nil {
		t.Errorf("ack a: %v", err)
	}
	if err := eng.Ack(ctx, b, lb[0].Lease); err != nil {
		t.Errorf("ack b: %v", err)
	}
	if r, _ := c.of(a); r == readsA {
		t.Error("a's ack did not read it again")
	}
	if r, _ := c.of(b); r != readsB {
		t.Error("b's ack read it again; its held copy was current")
	}
	for id, want := range map[task.ID]string{a: `"written"`, b: `"patched"`} {
		s, err := c.Store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != task.Delivered || string(s.Payload) != want {
			t.Errorf("task %s stored %s with payload %s after its ack; want delivered with %s", id, s.State, s.Payload, want)
		}
	}
}

// TestPushOutcomeFence: a push attempt's outcome is written over the task
// as its fire job's look read it (UpdateKnown), without a read, unless the
// task was written during the attempt (the API refuses to, so the write is
// the engine's own here): then it is written from a fresh read, and the
// write stays. Without the fence (the slot's write count) the outcome
// would undo it.
func TestPushOutcomeFence(t *testing.T) {
	release := make(chan struct{})
	started := make(chan task.ID, 2)
	c, eng := countKnown(t, sink.Func(func(ctx context.Context, tk *task.Task) error {
		started <- tk.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	ctx := t.Context()
	rs, err := eng.Create(ctx, []CreateParams{{App: "app", DueAt: time.Now(), Target: httpTarget}, {App: "app", DueAt: time.Now(), Target: httpTarget}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := rs[0].Task.ID, rs[1].Task.ID
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the attempts did not start")
		}
	}
	w, err := eng.writer.update(ctx, a, nil, func(tk *task.Task) error {
		tk.Payload = []byte(`"written"`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.writer.wrote(ctx, w)
	readsA, _ := c.of(a)
	readsB, _ := c.of(b)
	close(release)
	testkit.WaitFor(t, 30*time.Second, "both delivered", func() bool {
		for _, id := range []task.ID{a, b} {
			if s, err := c.Store.Get(ctx, id); err != nil || s.State != task.Delivered {
				return false
			}
		}
		return true
	})
	if r, _ := c.of(a); r == readsA {
		t.Error("a's outcome did not read it again")
	}
	if r, k := c.of(b); r != readsB || k != 1 {
		t.Errorf("b's outcome: %d reads, %d writes over its base; want 0 and 1", r-readsB, k)
	}
	s, err := c.Store.Get(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Payload) != `"written"` || s.Attempts != 1 {
		t.Errorf("a stored with payload %s after %d attempts; want \"written\" after 1", s.Payload, s.Attempts)
	}
}
