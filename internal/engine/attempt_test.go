package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// writeCounter counts the tasks each Update and UpdateMany stored, and the
// calls of each.
type writeCounter struct {
	store.Store
	mu     sync.Mutex
	writes map[task.ID]int
	calls  map[string]int // "Update", "UpdateMany"
}

// countWrites puts a writeCounter in front of c's store and returns it.
func countWrites(c *Config) *writeCounter {
	wc := &writeCounter{Store: c.Store, writes: map[task.ID]int{}}
	c.Store = wc
	return wc
}

func (c *writeCounter) called(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[method]++
}

// callsOf returns how many times method was called.
func (c *writeCounter) callsOf(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

func (c *writeCounter) count(t *task.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[t.ID]++
}

func (c *writeCounter) of(id task.ID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes[id]
}

func (c *writeCounter) Update(ctx context.Context, id task.ID, o *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	c.called("Update")
	t, err := c.Store.Update(ctx, id, o, fn)
	if err == nil {
		c.count(t)
	}
	return t, err
}

func (c *writeCounter) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	c.called("UpdateMany")
	ts, errs := c.Store.UpdateMany(ctx, ids, o, fn)
	for i, err := range errs {
		if err == nil {
			c.count(ts[i])
		}
	}
	return ts, errs
}

// setupCounted is setup with its store's writes counted and deliveries
// held by a blockingSink.
func setupCounted(t *testing.T) (*bundle, *writeCounter, *blockingSink) {
	snk := newBlockingSink()
	var wc *writeCounter
	b := setup(t, func(c *Config) {
		wc = countWrites(c)
		c.Sinks = map[string]sink.Sink{"http": snk}
	})
	return b, wc, snk
}

// blockingSink holds each delivery until the test lets it end with the
// error sent on release.
type blockingSink struct {
	started chan *task.Task
	release chan error
}

func newBlockingSink() *blockingSink {
	return &blockingSink{started: make(chan *task.Task, 16), release: make(chan error)}
}

func (s *blockingSink) Deliver(ctx context.Context, t *task.Task) error {
	s.started <- t
	select {
	case err := <-s.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestPushAttemptStoredOnce: a push attempt is not stored when it starts,
// only its outcome is (one write per fire); meanwhile the engine shows the
// task delivering and refuses to cancel or change it, and the outcome
// records the attempt.
func TestPushAttemptStoredOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, wc, snk := setupCounted(t)
		ctx := t.Context()
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
		got := <-snk.started
		if got.State != task.Delivering || got.Attempts != 1 || got.Lease == "" {
			t.Fatalf("the sink got %s, attempt %d, lease %q", got.State, got.Attempts, got.Lease)
		}
		stored, err := wc.Get(ctx, tk.ID)
		if err != nil || stored.State != task.Scheduled || stored.Attempts != 0 {
			t.Fatalf("stored during the attempt: %v %v (attempts %d), want scheduled, 0", stored.State, err, stored.Attempts)
		}
		if n := wc.of(tk.ID); n != 0 {
			t.Fatalf("%d writes before the outcome, want 0", n)
		}
		if shown := b.get(t, tk.ID); shown.State != task.Delivering || shown.Attempts != 1 || shown.Lease != got.Lease {
			t.Errorf("Get during the attempt: %s attempt %d, want delivering 1", shown.State, shown.Attempts)
		}
		var ce *ConflictError
		if _, err := b.eng.Cancel(ctx, tk.ID); !errors.As(err, &ce) || ce.Task.State != task.Delivering {
			t.Errorf("Cancel during the attempt: %v, want a conflict naming it delivering", err)
		}
		payload := []byte(`{"x":1}`)
		if _, err := b.eng.Patch(ctx, tk.ID, PatchParams{Payload: &payload}); !errors.As(err, &ce) {
			t.Errorf("Patch during the attempt: %v, want a conflict", err)
		}
		snk.release <- nil
		outcomesStored()
		done := b.get(t, tk.ID)
		if done.State != task.Delivered || done.Attempts != 1 || done.Lease != "" || done.LeaseExpiresAt != nil {
			t.Fatalf("after the outcome: %+v", done)
		}
		var whats []string
		for _, ev := range done.History {
			whats = append(whats, ev.What)
		}
		if want := []string{"created", "attempt", "delivered"}; !equalStrings(whats, want) {
			t.Errorf("history %v, want %v", whats, want)
		}
		if n := wc.of(tk.ID); n != 1 {
			t.Errorf("%d writes for one push fire, want 1", n)
		}
	})
}

// outcomesStored waits, in a synctest bubble, until the outcomes of the
// deliveries that just ended are stored: past the gather of their batch.
func outcomesStored() {
	synctest.Wait()
	time.Sleep(outcomeGather)
	synctest.Wait()
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOutcomeFenced: an outcome lands only on the task its attempt started
// from. A task cancelled, or moved, behind this process's back (another
// node's write) keeps what it has.
func TestOutcomeFenced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *task.Task, now time.Time)
		want   task.State
	}{
		{"cancelled", func(t *task.Task, now time.Time) { finish(t, task.Cancelled, now) }, task.Cancelled},
		{"moved", func(t *task.Task, now time.Time) {
			due := now.Add(time.Hour)
			t.DueAt = due
			requeue(t, due, now)
		}, task.Scheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				snk := newBlockingSink()
				b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": snk} })
				ctx := t.Context()
				tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
				<-snk.started
				if _, err := b.store.Update(ctx, tk.ID, nil, func(t *task.Task) error {
					tc.change(t, msNow())
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				snk.release <- errors.New("receiver said 500")
				outcomesStored()
				got, err := b.store.Get(ctx, tk.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != tc.want || got.Attempts != 0 || got.LastError != "" {
					t.Errorf("after a stale outcome: %s, attempts %d, error %q; want %s, 0, none", got.State, got.Attempts, got.LastError, tc.want)
				}
			})
		})
	}
}

// fakeIndex is the cluster index's claim, in memory: a member held until
// its lease end, claimable again after it. The Redis script it stands for
// has its own tests (redisindex); this one lets two engines race.
type fakeIndex struct {
	st       store.Store
	mu       sync.Mutex
	held     map[task.ID]time.Time
	attempts map[task.ID]int // the last attempt claimed
}

func (x *fakeIndex) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	return x.st.Wakeups(ctx, after, until, limit)
}
func (x *fakeIndex) Sync(context.Context, ...*task.Task) error { return nil }
func (x *fakeIndex) Ended(_ context.Context, ts ...*task.Task) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range ts {
		delete(x.held, t.ID)
	}
	return nil
}
func (x *fakeIndex) Claim(_ context.Context, ts []*task.Task, until []time.Time, now time.Time) ([]int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.attempts == nil {
		x.attempts = map[task.ID]int{}
	}
	got := make([]int, len(ts))
	for i, t := range ts {
		if end, ok := x.held[t.ID]; !ok || !end.After(now) {
			x.held[t.ID], got[i] = until[i], 1
			if t.State == task.Scheduled { // numbered as claim_many.lua does
				x.attempts[t.ID] = max(x.attempts[t.ID], t.Attempts) + 1
				got[i] = x.attempts[t.ID]
			}
		}
	}
	return got, nil
}
func (x *fakeIndex) Live(string) bool                { return true }
func (x *fakeIndex) Watches(*task.Task) bool         { return true }
func (x *fakeIndex) PullDue(context.Context, string) {}

// TestTwoNodesOneAttempt: two engines over one store both fire a task; the
// index gives the attempt to one. When that attempt outlives its lease, the
// other node makes the next attempt, numbered 2, and whichever outcome is
// stored first, the task ends delivered by it with both attempts in its
// history: the first attempt's late failure neither overwrites the success
// nor, landing first, makes the success be discarded (issue 22: a frozen
// node's late "no answer" made the success vanish and a third delivery).
func TestTwoNodesOneAttempt(t *testing.T) {
	for _, lateFirst := range []bool{false, true} {
		name := "late outcome after the success"
		if lateFirst {
			name = "late outcome before the success"
		}
		t.Run(name, func(t *testing.T) { twoNodesOneAttempt(t, lateFirst) })
	}
}

func twoNodesOneAttempt(t *testing.T, lateFirst bool) {
	synctest.Test(t, func(t *testing.T) {
		st := &writeCounter{writes: map[task.ID]int{}}
		a, b := newBlockingSink(), newBlockingSink()
		var x *fakeIndex
		first := setup(t, func(c *Config) {
			st.Store = c.Store
			x = &fakeIndex{st: st, held: map[task.ID]time.Time{}}
			c.Store, c.Index, c.LeaseGrace = st, x, time.Second
			c.Sinks = map[string]sink.Sink{"http": a}
		})
		second := setup(t, func(c *Config) {
			c.Store, c.Index, c.LeaseGrace = st, x, time.Second
			c.Sinks = map[string]sink.Sink{"http": b}
		})
		ctx := t.Context()
		due := time.Now().Add(time.Second)
		tk := first.schedule(t, CreateParams{DueAt: due, Target: task.Target{HTTP: &task.HTTPTarget{URL: "http://example.test/", Timeout: task.Duration(2 * time.Second)}}})
		second.eng.Cluster().Notify(tk.ID, due, "")
		time.Sleep(time.Until(due) + 10*time.Millisecond)
		synctest.Wait()
		if len(a.started)+len(b.started) != 1 {
			t.Fatalf("%d attempts started on two nodes, want 1", len(a.started)+len(b.started))
		}
		late, next := a, second
		if len(b.started) == 1 {
			late, next = b, first
		}
		if got := (<-late.started).Attempts; got != 1 {
			t.Errorf("the first attempt is numbered %d, want 1", got)
		}

		// The attempt outlives its lease (2s timeout + 1s grace): the
		// other node is told, claims it again and delivers.
		leaseEnd := due.Add(3*time.Second + time.Millisecond)
		next.eng.Cluster().Notify(tk.ID, leaseEnd, "")
		time.Sleep(time.Until(leaseEnd) + 10*time.Millisecond)
		nextSink := b
		if next == first {
			nextSink = a
		}
		if got := (<-nextSink.started).Attempts; got != 2 {
			t.Errorf("the second attempt is numbered %d, want 2 (Toc-Attempt must not repeat)", got)
		}
		if lateFirst {
			late.release <- errors.New("the first attempt failed, late")
			outcomesStored()
			nextSink.release <- nil
			outcomesStored()
		} else {
			nextSink.release <- nil
			outcomesStored()
			late.release <- errors.New("the first attempt failed, late")
			outcomesStored()
		}
		got, _ := st.Get(ctx, tk.ID)
		if got.State != task.Delivered || got.Attempts != 2 || got.LastError != "" {
			t.Errorf("after both outcomes: %s, attempts %d, error %q; want delivered after 2, no error", got.State, got.Attempts, got.LastError)
		}
		made := map[int]bool{}
		for _, ev := range got.History {
			if ev.What == "attempt" {
				made[ev.Attempt] = true
			}
		}
		if !made[1] || !made[2] {
			t.Errorf("history %+v: want attempts 1 and 2 in it (both reached the receiver)", got.History)
		}
	})
}

// TestStaleEntryDuringAttempt: a wheel entry of a task whose push attempt
// is under way here fires once and is dropped (the attempt's outcome
// tracks the task again). It used to be tracked again at once, the row
// being still due, and fired in a loop, reading the store, until the
// attempt ended: a hung webhook spun a core.
func TestStaleEntryDuringAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, wc, snk := setupCounted(t)
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
		<-snk.started
		synctest.Wait()
		before := wc.callsOf("UpdateMany")
		b.eng.tk.enqueue(tk.App, tk.ID) // a stale entry: the task is due in the store
		// Not synctest.Wait: with the loop it would never return. Yield
		// long enough for a loop to show.
		for range 20_000 {
			runtime.Gosched()
		}
		if n := wc.callsOf("UpdateMany") - before; n > 2 {
			t.Fatalf("the stale entry fired %d times during the attempt, want once", n)
		}
		synctest.Wait()
		if n := wc.callsOf("UpdateMany") - before; n != 1 {
			t.Errorf("the stale entry fired %d times during the attempt, want once", n)
		}
		snk.release <- nil
		outcomesStored()
		if done := b.get(t, tk.ID); done.State != task.Delivered || done.Attempts != 1 {
			t.Errorf("after the outcome: %s, %d attempts; want delivered after 1", done.State, done.Attempts)
		}
	})
}

// TestClusterAttemptsSpent: in a cluster the index numbers the attempts;
// when the number it gives is past max_attempts (the attempts before were
// started by nodes that died during them, with no outcome stored), the
// task is not delivered again but ends dead, "interrupted".
func TestClusterAttemptsSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snk := newBlockingSink()
		var x *fakeIndex
		b := setup(t, func(c *Config) {
			x = &fakeIndex{st: c.Store, held: map[task.ID]time.Time{}, attempts: map[task.ID]int{}}
			c.Index = x
			c.Sinks = map[string]sink.Sink{"http": snk}
		})
		due := time.Now().Add(time.Second)
		tk := b.schedule(t, CreateParams{DueAt: due, Retry: task.RetryPolicy{MaxAttempts: 3}})
		x.mu.Lock()
		x.attempts[tk.ID] = 3 // three attempts claimed, none recorded
		x.mu.Unlock()
		b.eng.Cluster().Notify(tk.ID, due, "")
		time.Sleep(time.Until(due) + 10*time.Millisecond)
		outcomesStored()
		if n := len(snk.started); n != 0 {
			t.Errorf("%d deliveries, want none: max_attempts (3) were made", n)
		}
		got := b.get(t, tk.ID)
		if got.State != task.Dead || got.Attempts != 3 || got.LastError != interruptedMsg {
			t.Errorf("%s after %d attempts, error %q; want dead after 3, %q", got.State, got.Attempts, got.LastError, interruptedMsg)
		}
	})
}

// unavailableStore fails the next fail UpdateManys with
// store.ErrUnavailable, as sqlstore does when its database restarts.
type unavailableStore struct {
	store.Store
	fail atomic.Int32
}

func (s *unavailableStore) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if s.fail.Add(-1) >= 0 {
		errs := make([]error, len(ids))
		for i := range errs {
			errs[i] = fmt.Errorf("update many: %w: terminating connection due to administrator command", store.ErrUnavailable)
		}
		return make([]*task.Task, len(ids)), errs
	}
	return s.Store.UpdateMany(ctx, ids, o, fn)
}

// TestOutcomeWrittenAgainWhenUnavailable: an outcome write that meets an
// unavailable store (a database restarting) is tried again after a pause,
// and lands: the task is delivered once. It used to be given up at once,
// and the task, still due, delivered again (issue 22).
func TestOutcomeWrittenAgainWhenUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &unavailableStore{}
		snk := newBlockingSink()
		b := setup(t, func(c *Config) {
			st.Store = c.Store
			c.Store = st
			c.Sinks = map[string]sink.Sink{"http": snk}
		})
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Second)})
		<-snk.started
		st.fail.Store(4) // the database is down for the next 4 writes
		snk.release <- nil
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(snk.started); n != 0 {
			t.Errorf("delivered %d more times, want once in all", n)
		}
		if got := b.get(t, tk.ID); got.State != task.Delivered || got.Attempts != 1 {
			t.Errorf("%s after %d attempts, want delivered after 1", got.State, got.Attempts)
		}
	})
}
