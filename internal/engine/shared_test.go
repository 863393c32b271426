package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// sharedWatch is a store that keeps the record of every task an
// UpdateMany with Shared (store.UpdateOpts) handed out (to its fn, or as
// its result), to check later that nobody changed them in place: the
// engine keeps them (a push attempt's base, a pull task held) and the
// store keeps them too (pebblestore's recent set, memstore's map).
type sharedWatch struct {
	store.Store
	mu     sync.Mutex
	seen   []sharedSeen
	shared atomic.Int64 // UpdateMany calls with Shared
	t      *testing.T
}

type sharedSeen struct {
	t   *task.Task
	rec []byte
}

func (w *sharedWatch) note(ts []*task.Task) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range ts {
		if x == nil {
			continue
		}
		rec, err := record.Encode(x)
		if err != nil {
			w.t.Errorf("encode %s: %v", x.ID, err)
			continue
		}
		w.seen = append(w.seen, sharedSeen{x, rec})
	}
}

// check fails t for each task handed out that is not as it was.
func (w *sharedWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		t.Fatal("no task was handed out shared")
	}
	for _, s := range w.seen {
		rec, err := record.Encode(s.t)
		if err != nil || !bytes.Equal(rec, s.rec) {
			t.Errorf("task %s handed out shared was changed in place (%v):\nwas %s\nnow %s", s.t.ID, err, s.rec, rec)
		}
	}
}

func watchShared(t *testing.T, c *Config) *sharedWatch {
	w := &sharedWatch{Store: c.Store, t: t}
	c.Store = w
	return w
}

// UpdateMany notes what it hands out shared.
func (w *sharedWatch) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if !opts.SharedTasks() {
		return w.Store.UpdateMany(ctx, ids, opts, fn)
	}
	w.shared.Add(1)
	res, errs := w.Store.UpdateMany(ctx, ids, opts, func(ts []*task.Task) []error {
		w.note(ts)
		return fn(ts)
	})
	w.note(res)
	return res, errs
}

// TestSharedTasksNeverWritten: the tasks the fire path and the outcomes
// read shared (uncopied: fireLook, outcomeOpts) are never changed in
// place, through every verdict that writes (an expiry, a failed push
// retried, a delivered one, a pull task acked, nacked, and whose lease ran
// out): the store's copies stay as stored, and each task ends as it should.
func TestSharedTasksNeverWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w *sharedWatch
		b := setup(t, func(c *Config) { w = watchShared(t, c) })
		b.sink.fail = func(tk *task.Task) error {
			if tk.Attempts == 1 && tk.Payload != nil && string(tk.Payload) == `"fail"` {
				return errors.New("boom")
			}
			return nil
		}
		now := time.Now()
		ok := b.schedule(t, CreateParams{DueAt: now.Add(time.Second)})
		retried := b.schedule(t, CreateParams{DueAt: now.Add(time.Second), Payload: []byte(`"fail"`), Retry: task.RetryPolicy{MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Second)}})
		expired := b.schedule(t, CreateParams{App: "unclaimed", Target: pull, DueAt: now.Add(time.Second), Deadline: ptr(now.Add(2 * time.Second))}) // held, never claimed
		time.Sleep(10 * time.Second)
		synctest.Wait()
		claimed := b.claimPull(t, "pulls", 3, 5*time.Second)
		if err := b.eng.Ack(t.Context(), claimed[0].ID, claimed[0].Lease); err != nil {
			t.Fatal(err)
		}
		if err := b.eng.Nack(t.Context(), claimed[1].ID, claimed[1].Lease, "no", ptr(time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // claimed[2]'s lease runs out
		synctest.Wait()
		for _, c := range []struct {
			id    task.ID
			state task.State
			n     int
		}{{ok.ID, task.Delivered, 1}, {retried.ID, task.Delivered, 2}, {expired.ID, task.Expired, 0}, {claimed[0].ID, task.Delivered, 1}, {claimed[1].ID, task.Scheduled, 1}, {claimed[2].ID, task.Scheduled, 1}} {
			if got := b.get(t, c.id); got.State != c.state || got.Attempts != c.n {
				t.Errorf("task %s: %s after %d attempts, want %s after %d", c.id, got.State, got.Attempts, c.state, c.n)
			}
		}
		if w.shared.Load() == 0 {
			t.Fatal("no UpdateMany with Shared")
		}
		w.check(t)
	})
}

// TestSharedTasksRace fires push and pull tasks on pebblestore (whose
// recent set hands out the same copies to every reader) while tasks are
// read all along: under the race detector, a write to a shared copy
// beside a read is reported; and the copies handed out stay as they were.
func TestSharedTasksRace(t *testing.T) {
	st, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var delivered atomic.Int64
	cfg := Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Sinks: map[string]sink.Sink{"http": sink.Func(func(_ context.Context, tk *task.Task) error {
		if delivered.Add(1)%3 == 0 {
			return errors.New("every third fails once")
		}
		return nil
	})}}
	w := watchShared(t, &cfg)
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eng.Stop(context.Background()) }()

	const n = 200
	ps := make([]CreateParams, 0, 2*n)
	for i := range 2 * n {
		p := CreateParams{App: "push", DueAt: time.Now(), Target: httpTarget, Retry: task.RetryPolicy{MinBackoff: task.Duration(time.Millisecond), MaxBackoff: task.Duration(time.Millisecond)}}
		if i%2 == 1 {
			p.App, p.Target = "pull", pull
		}
		ps = append(ps, p)
	}
	rs, err := eng.Create(t.Context(), ps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { // reads every task all along
		defer readers.Done()
		for ctx.Err() == nil {
			for _, r := range rs {
				if r.Task != nil {
					_, _ = eng.Get(ctx, r.Task.ID)
				}
			}
		}
	}()
	acked := 0
	testkit.WaitFor(t, time.Minute, "every pull task acked", func() bool {
		got, err := eng.Lease(t.Context(), "pull", LeaseParams{Max: 100, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		acks := make([]AckParams, len(got))
		for i, tk := range got {
			acks[i] = AckParams{ID: tk.ID, Lease: tk.Lease}
		}
		if len(acks) > 0 {
			errs, err := eng.AckMany(t.Context(), "pull", acks)
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range errs {
				if err == nil {
					acked++
				}
			}
		}
		return acked == n
	})
	testkit.WaitFor(t, time.Minute, "every push task delivered", func() bool {
		for _, r := range rs {
			if r.Task.App != "push" {
				continue
			}
			if tk, err := st.Get(t.Context(), r.Task.ID); err != nil || tk.State != task.Delivered {
				return false
			}
		}
		return true
	})
	cancel()
	readers.Wait()
	w.check(t)
}
