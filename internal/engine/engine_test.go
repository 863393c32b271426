package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// These tests run inside synctest bubbles: time is fake, so a task due in an
// hour fires after an instant of real time, and "fired at its due time" can
// be checked to the millisecond.

type delivery struct {
	id      task.ID
	at      time.Time
	attempt int
}

type recorder struct {
	mu   sync.Mutex
	got  []delivery
	fail func(t *task.Task) error // nil: succeed
}

func (r *recorder) Deliver(ctx context.Context, t *task.Task) error {
	r.mu.Lock()
	r.got = append(r.got, delivery{id: t.ID, at: time.Now(), attempt: t.Attempts})
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail(t)
	}
	return nil
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

type bundle struct {
	eng   *Engine
	store store.Store
	sink  *recorder
}

func setup(t *testing.T, mod func(*Config)) *bundle {
	t.Helper()
	b := &bundle{store: memstore.New(), sink: &recorder{}}
	cfg := Config{
		Store:  b.store,
		Sinks:  map[string]sink.Sink{"http": b.sink},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.eng = eng
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return b
}

var httpTarget = task.Target{HTTP: &task.HTTPTarget{URL: "http://example.test/hook"}}

func (b *bundle) schedule(t *testing.T, p CreateParams) *task.Task {
	t.Helper()
	if p.App == "" {
		p.App = "app"
	}
	if p.Target.Kind() == "" {
		p.Target = httpTarget
	}
	rs, err := b.eng.Create(t.Context(), []CreateParams{p})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil {
		t.Fatal(rs[0].Err)
	}
	return rs[0].Task
}

func (b *bundle) get(t *testing.T, id task.ID) *task.Task {
	t.Helper()
	tk, err := b.eng.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestFiresAtDueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now()
		dues := []time.Duration{5 * time.Millisecond, 3 * time.Second, 90 * time.Second, 26 * time.Hour}
		var ids []task.ID
		for _, d := range dues {
			ids = append(ids, b.schedule(t, CreateParams{DueAt: start.Add(d)}).ID)
		}
		time.Sleep(27 * time.Hour)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != len(dues) {
			t.Fatalf("got %d deliveries, want %d", len(got), len(dues))
		}
		for i, d := range got {
			if d.id != ids[i] {
				t.Errorf("delivery %d is task %s, want %s", i, d.id, ids[i])
			}
			if want := start.Add(dues[i]); !d.at.Equal(want) {
				t.Errorf("task due at +%s fired at +%s", dues[i], d.at.Sub(start))
			}
			if s := b.get(t, ids[i]).State; s != task.Delivered {
				t.Errorf("task %d is %s, want delivered", i, s)
			}
		}
	})
}

func TestPastDueFiresAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now()
		b.schedule(t, CreateParams{DueAt: start.Add(-time.Hour)})
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 1 || !got[0].at.Equal(start) {
			t.Fatalf("deliveries %+v, want one at once", got)
		}
	})
}

func TestCancelAndReschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now()
		a := b.schedule(t, CreateParams{DueAt: start.Add(time.Second)})
		c := b.schedule(t, CreateParams{DueAt: start.Add(time.Second)})
		if _, err := b.eng.Cancel(t.Context(), a.ID); err != nil {
			t.Fatal(err)
		}
		later := start.Add(time.Hour)
		if _, err := b.eng.Patch(t.Context(), c.ID, PatchParams{DueAt: &later}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 1 || got[0].id != c.ID || !got[0].at.Equal(later) {
			t.Fatalf("deliveries %+v, want only %s at +1h", got, c.ID)
		}
		if s := b.get(t, a.ID).State; s != task.Cancelled {
			t.Errorf("cancelled task is %s", s)
		}
		// Cancelling again is fine; cancelling a delivered task is a conflict.
		if _, err := b.eng.Cancel(t.Context(), a.ID); err != nil {
			t.Errorf("second cancel: %v", err)
		}
		var ce *ConflictError
		if _, err := b.eng.Cancel(t.Context(), c.ID); !errors.As(err, &ce) {
			t.Errorf("cancel of a delivered task: %v, want a ConflictError", err)
		}
	})
}

func TestBackoffThenDeadThenRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		failing := true
		b.sink.fail = func(*task.Task) error {
			if failing {
				return errors.New("503 from receiver")
			}
			return nil
		}
		start := time.Now()
		tk := b.schedule(t, CreateParams{DueAt: start, Retry: task.RetryPolicy{
			MaxAttempts: 4, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(3 * time.Second),
		}})
		time.Sleep(time.Minute)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != 4 {
			t.Fatalf("got %d attempts, want 4", len(got))
		}
		for i := 1; i < len(got); i++ {
			gap := got[i].at.Sub(got[i-1].at)
			if gap < time.Second || gap > 3*time.Second {
				t.Errorf("gap before attempt %d is %s, want within [1s, 3s]", i+1, gap)
			}
			if got[i].attempt != i+1 {
				t.Errorf("attempt header %d, want %d", got[i].attempt, i+1)
			}
		}
		dead := b.get(t, tk.ID)
		if dead.State != task.Dead || dead.Attempts != 4 || dead.LastError != "503 from receiver" || dead.FinishedAt == nil {
			t.Fatalf("after the last attempt: %+v", dead)
		}
		var whats []string
		for _, ev := range dead.History {
			whats = append(whats, fmt.Sprintf("%s/%d", ev.What, ev.Attempt))
		}
		if got, want := strings.Join(whats, " "), "created/0 attempt/1 failed/1 attempt/2 failed/2 attempt/3 failed/3 attempt/4 failed/4 dead/4"; got != want {
			t.Errorf("history %q, want %q", got, want)
		}
		if !dead.DueAt.Equal(tk.DueAt) {
			t.Errorf("due_at moved from %s to %s", tk.DueAt, dead.DueAt)
		}

		failing = false
		if _, err := b.eng.Retry(t.Context(), tk.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		done := b.get(t, tk.ID)
		if done.State != task.Delivered || done.Attempts != 1 {
			t.Fatalf("after retry: state %s attempts %d", done.State, done.Attempts)
		}
		var ce *ConflictError
		if _, err := b.eng.Retry(t.Context(), tk.ID); !errors.As(err, &ce) {
			t.Errorf("retry of a delivered task: %v, want ConflictError", err)
		}
	})
}

func TestDeadlineExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.sink.fail = func(*task.Task) error { return errors.New("down") }
		start := time.Now()
		deadline := start.Add(5 * time.Second)
		tk := b.schedule(t, CreateParams{DueAt: start.Add(time.Second), Deadline: &deadline,
			Retry: task.RetryPolicy{MinBackoff: task.Duration(2 * time.Second)}})
		time.Sleep(time.Minute)
		synctest.Wait()
		got := b.get(t, tk.ID)
		if got.State != task.Expired {
			t.Fatalf("state %s, want expired", got.State)
		}
		for _, d := range b.sink.deliveries() {
			if d.at.After(deadline) {
				t.Errorf("attempt at +%s, after the deadline", d.at.Sub(start))
			}
		}
		if !got.FinishedAt.After(deadline) || got.FinishedAt.After(deadline.Add(time.Second)) {
			t.Errorf("expired at +%s, want just after the deadline (+5s)", got.FinishedAt.Sub(start))
		}

		// A pull task nobody claims expires too.
		pt := b.schedule(t, CreateParams{DueAt: time.Now(), Deadline: ptr(time.Now().Add(time.Second)), Target: task.Target{Pull: &task.PullTarget{}}})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if s := b.get(t, pt.ID).State; s != task.Expired {
			t.Errorf("unclaimed pull task is %s, want expired", s)
		}
	})
}

func ptr[T any](v T) *T { return &v }

var pull = task.Target{Pull: &task.PullTarget{}}

func TestPullClaimAckNackLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ctx := t.Context()
		start := time.Now()
		tk := b.schedule(t, CreateParams{DueAt: start.Add(2 * time.Second), Target: pull})

		// Nothing due yet: an immediate claim is empty; a long poll waits
		// until the task is due and returns it then.
		got, err := b.eng.Lease(ctx, "app", LeaseParams{Max: 10, Lease: 5 * time.Second})
		if err != nil || len(got) != 0 {
			t.Fatalf("early claim: %v %v", got, err)
		}
		got, err = b.eng.Lease(ctx, "app", LeaseParams{Max: 10, Lease: 5 * time.Second, Wait: 10 * time.Second})
		if err != nil || len(got) != 1 || got[0].ID != tk.ID {
			t.Fatalf("long poll: %v %v", got, err)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Errorf("long poll answered after %s, want 2s", waited)
		}
		first := got[0]
		if first.Attempts != 1 || first.Lease == "" || first.State != task.Delivering {
			t.Fatalf("claimed task: %+v", first)
		}

		// Nack with retry_in: back in 3s with the error recorded.
		retryIn := 3 * time.Second
		if err := b.eng.Nack(ctx, tk.ID, first.Lease, "busy", &retryIn); err != nil {
			t.Fatal(err)
		}
		if s := b.get(t, tk.ID); s.State != task.Scheduled || s.LastError != "busy" {
			t.Fatalf("after nack: %s %q", s.State, s.LastError)
		}
		got, _ = b.eng.Lease(ctx, "app", LeaseParams{Max: 10, Lease: 5 * time.Second, Wait: 30 * time.Second})
		if len(got) != 1 || time.Since(start) != 5*time.Second || got[0].Attempts != 2 {
			t.Fatalf("claim after nack: %d tasks at +%s", len(got), time.Since(start))
		}
		second := got[0]

		// Let the lease run out: the task rolls back as a failed attempt and
		// a late ack is a conflict.
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		if s := b.get(t, tk.ID); s.State != task.Scheduled || s.LastError == "" {
			t.Fatalf("after the lease ran out: %s %q", s.State, s.LastError)
		}
		var ce *ConflictError
		if err := b.eng.Ack(ctx, tk.ID, second.Lease); !errors.As(err, &ce) {
			t.Fatalf("late ack: %v, want ConflictError", err)
		}
		got, _ = b.eng.Lease(ctx, "app", LeaseParams{Max: 10, Lease: 5 * time.Second, Wait: 30 * time.Second})
		if len(got) != 1 || got[0].Attempts != 3 {
			t.Fatalf("claim after lease expiry: %+v", got)
		}
		if err := b.eng.Ack(ctx, tk.ID, got[0].Lease); err != nil {
			t.Fatal(err)
		}
		if s := b.get(t, tk.ID); s.State != task.Delivered {
			t.Fatalf("after ack: %s", s.State)
		}
		// Another app sees nothing.
		if got, _ := b.eng.Lease(ctx, "other", LeaseParams{Max: 10, Lease: time.Second}); len(got) != 0 {
			t.Errorf("other app claimed %d tasks", len(got))
		}
	})
}

// TestCapLoadsInOrder: with room for 16 tasks in memory, 500 tasks due
// within one window still fire, in due order, none lost or early.
func TestCapLoadsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxLoaded = 16; c.MaxInFlight = 4 })
		start := time.Now()
		const n = 500
		want := map[task.ID]time.Time{}
		var ps []CreateParams
		for i := range n {
			// Interleave so creation order is not due order.
			due := start.Add(time.Second + time.Duration((i*7919)%n)*time.Millisecond)
			ps = append(ps, CreateParams{App: "app", DueAt: due, Target: httpTarget})
		}
		rs, err := b.eng.Create(t.Context(), ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			want[r.Task.ID] = r.Task.DueAt
		}
		peak := 0
		for range 200 {
			time.Sleep(5 * time.Millisecond)
			synctest.Wait()
			if s := b.eng.Stats(); s.Wheel+s.Ready > peak {
				peak = s.Wheel + s.Ready
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		got := b.sink.deliveries()
		if len(got) != n {
			t.Fatalf("got %d deliveries, want %d", len(got), n)
		}
		seen := map[task.ID]bool{}
		for _, d := range got {
			if seen[d.id] {
				t.Errorf("duplicate delivery of %s", d.id)
			}
			seen[d.id] = true
			if d.at.Before(want[d.id]) {
				t.Errorf("task fired %s early", want[d.id].Sub(d.at))
			}
		}
		if peak > 16+16/4 {
			t.Errorf("peak in memory %d, cap 16", peak)
		}
	})
}

// TestFarFutureStaysOnDisk: tasks beyond the window are not in memory until
// the window reaches them.
func TestFarFutureStaysOnDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		start := time.Now()
		var ps []CreateParams
		for i := range 1000 {
			ps = append(ps, CreateParams{App: "app", DueAt: start.Add(24*time.Hour + time.Duration(i)*time.Millisecond), Target: httpTarget})
		}
		if _, err := b.eng.Create(t.Context(), ps); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if s := b.eng.Stats(); s.Wheel != 0 {
			t.Errorf("%d far-future tasks in memory", s.Wheel)
		}
		time.Sleep(25 * time.Hour)
		synctest.Wait()
		if n := len(b.sink.deliveries()); n != 1000 {
			t.Errorf("%d delivered, want 1000", n)
		}
	})
}

func TestIdempotentCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		due := time.Now().Add(time.Hour)
		ps := []CreateParams{
			{App: "app", Key: "order-1", DueAt: due, Target: httpTarget, Payload: []byte(`1`)},
			{App: "app", Key: "order-1", DueAt: due.Add(time.Hour), Target: httpTarget, Payload: []byte(`2`)},
			{App: "other", Key: "order-1", DueAt: due, Target: httpTarget},
			{App: "BAD", DueAt: due, Target: httpTarget},
		}
		rs, err := b.eng.Create(t.Context(), ps)
		if err != nil {
			t.Fatal(err)
		}
		if !rs[0].Created || rs[1].Created || rs[1].Task.ID != rs[0].Task.ID || string(rs[1].Task.Payload) != "1" {
			t.Errorf("same key in one batch: %+v / %+v", rs[0], rs[1])
		}
		if !rs[2].Created || rs[2].Task.ID == rs[0].Task.ID {
			t.Errorf("same key in another app must be a new task")
		}
		var fe *task.FieldError
		if !errors.As(rs[3].Err, &fe) || fe.Field != "app" {
			t.Errorf("bad app: %v", rs[3].Err)
		}
		again := b.schedule(t, CreateParams{App: "app", Key: "order-1", DueAt: due})
		if again.ID != rs[0].Task.ID {
			t.Errorf("repeated create made a new task")
		}
	})
}

func TestValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxPayload = 10 })
		now := time.Now()
		cases := []struct {
			p     CreateParams
			field string
		}{
			{CreateParams{App: "", DueAt: now, Target: httpTarget}, "app"},
			{CreateParams{App: "a", DueAt: now, Target: task.Target{}}, "target"},
			{CreateParams{App: "a", DueAt: now, Target: task.Target{HTTP: &task.HTTPTarget{URL: "ftp://x"}}}, "target.http.url"},
			{CreateParams{App: "a", DueAt: now.Add(time.Hour), Deadline: ptr(now.Add(time.Minute)), Target: httpTarget}, "deadline"},
			{CreateParams{App: "a", DueAt: now.Add(-time.Hour), Deadline: ptr(now.Add(-time.Minute)), Target: httpTarget}, "deadline"},
			{CreateParams{App: "a", DueAt: now, Target: httpTarget, Retry: task.RetryPolicy{MaxAttempts: -1}}, "retry.max_attempts"},
			{CreateParams{App: "a", DueAt: now, Target: httpTarget, Key: string([]byte{0xff})}, "key"},
		}
		for i, c := range cases {
			rs, err := b.eng.Create(t.Context(), []CreateParams{c.p})
			if err != nil {
				t.Fatal(err)
			}
			var fe *task.FieldError
			if !errors.As(rs[0].Err, &fe) || fe.Field != c.field {
				t.Errorf("case %d: %v, want a FieldError on %s", i, rs[0].Err, c.field)
			}
		}
		rs, _ := b.eng.Create(t.Context(), []CreateParams{{App: "a", DueAt: now, Target: httpTarget, Payload: make([]byte, 11)}})
		if !errors.Is(rs[0].Err, ErrTooLarge) {
			t.Errorf("oversized payload: %v", rs[0].Err)
		}
	})
}

// TestRecoverPushLease: a task left delivering by a process that died is
// delivered again by the next one, at once.
func TestRecoverPushLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		now := time.Now().UTC().Truncate(time.Millisecond)
		exp := now.Add(10 * time.Second)
		var g task.IDGenerator
		tk := &task.Task{ID: g.New(now, 0), App: "app", DueAt: now, NextAttemptAt: now, Target: httpTarget,
			State: task.Delivering, Attempts: 1, Lease: "deadbeef00000000", LeaseExpiresAt: &exp, WakeAt: exp,
			CreatedAt: now, UpdatedAt: now}
		if _, err := st.Create(t.Context(), []*task.Task{tk}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		eng, err := New(Config{Store: st, Sinks: map[string]sink.Sink{"http": rec}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer eng.Stop(context.Background())
		synctest.Wait()
		got := rec.deliveries()
		if len(got) != 1 || !got[0].at.Equal(now) {
			t.Fatalf("deliveries %+v, want one at once", got)
		}
		if s, _ := st.Get(t.Context(), tk.ID); s.State != task.Delivered {
			t.Errorf("state %s", s.State)
		}
	})
}

// TestStopReleasesInFlight: a delivery still running when Stop's grace
// runs out is put back to scheduled, not counted as a failure, and Stop
// says that it had to interrupt it.
func TestStopReleasesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.sink.fail = func(*task.Task) error { return nil }
		block := make(chan struct{})
		b.eng.cfg.Sinks["http"] = sink.Func(func(ctx context.Context, t *task.Task) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-block:
				return nil
			}
		})
		tk := b.schedule(t, CreateParams{DueAt: time.Now()})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.eng.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want an error saying the grace ran out", err)
		}
		got, _ := b.store.Get(context.Background(), tk.ID)
		if got.State != task.Scheduled || got.Attempts != 0 {
			t.Fatalf("after stop: %s, %d attempts", got.State, got.Attempts)
		}
		close(block)
	})
}

func TestBackoffBounds(t *testing.T) {
	p := task.RetryPolicy{MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(10 * time.Minute)}.WithDefaults()
	for n := 1; n < 40; n++ {
		for range 50 {
			d := backoff(n, p)
			if d < time.Second || d > 10*time.Minute {
				t.Fatalf("backoff(%d) = %s, outside [1s, 10m]", n, d)
			}
		}
	}
	_ = fmt.Sprint
}

// TestRetentionSweep: finished tasks are removed after the retention period,
// and their key is free again; live tasks are kept.
func TestRetentionSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.Retention = time.Hour })
		done := b.schedule(t, CreateParams{Key: "k", DueAt: time.Now()})
		live := b.schedule(t, CreateParams{Key: "far", DueAt: time.Now().Add(48 * time.Hour)})
		synctest.Wait()
		if s := b.get(t, done.ID).State; s != task.Delivered {
			t.Fatalf("state %s", s)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if _, err := b.eng.Get(t.Context(), done.ID); err != nil {
			t.Fatalf("removed before the retention period: %v", err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if _, err := b.eng.Get(t.Context(), done.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after retention: %v, want not found", err)
		}
		if _, err := b.eng.Get(t.Context(), live.ID); err != nil {
			t.Fatalf("live task swept: %v", err)
		}
		again := b.schedule(t, CreateParams{Key: "k", DueAt: time.Now().Add(time.Hour)})
		if again.ID == done.ID {
			t.Error("the key of a swept task still returns the old task")
		}
	})
}

// TestTrackIgnoresStaleCopies: two writers of one task finish their writes
// in one order and track in the other (a fire that found a pull task due,
// then a claim of it): the older copy must not drop or move the newer
// copy's wheel entry. Under load this lost the lease expiry of a claimed
// task, so it was never woken again.
func TestTrackIgnoresStaleCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		tk := b.schedule(t, CreateParams{DueAt: time.Now().Add(time.Hour), Target: pull})
		synctest.Wait() // the loader has read the window
		newer, older := written{t: tk.Clone()}, written{t: tk.Clone()}
		newer.t.WakeAt, newer.seq = time.Now().Add(5*time.Second), b.eng.writer.seq.Add(2)
		older.t.WakeAt, older.seq = time.Time{}, newer.seq-1

		at := func() (time.Time, bool) { return b.eng.tk.contains(tk.ID) }
		b.eng.writer.track(newer)
		if got, ok := at(); !ok || !got.Equal(newer.t.WakeAt) {
			t.Fatalf("after the newer copy: entry %v (%v), want %v", got, ok, newer.t.WakeAt)
		}
		b.eng.writer.track(older) // stale: would drop the entry
		if got, ok := at(); !ok || !got.Equal(newer.t.WakeAt) {
			t.Fatalf("after a stale copy without a wake: entry %v (%v), want %v", got, ok, newer.t.WakeAt)
		}
		older.t.WakeAt = time.Now().Add(time.Minute)
		b.eng.writer.track(older) // stale: would move it later
		if got, ok := at(); !ok || !got.Equal(newer.t.WakeAt) {
			t.Fatalf("after a stale copy waking later: entry %v (%v), want %v", got, ok, newer.t.WakeAt)
		}
		// A newer copy still moves it.
		newest := written{t: newer.t.Clone(), seq: b.eng.writer.seq.Add(1)}
		newest.t.WakeAt = time.Now().Add(7 * time.Second)
		b.eng.writer.track(newest)
		if got, ok := at(); !ok || !got.Equal(newest.t.WakeAt) {
			t.Fatalf("after a newer copy: entry %v (%v), want %v", got, ok, newest.t.WakeAt)
		}
	})
}

// TestStartStopStress: Stop is safe before Start, and twice, and from
// several goroutines at once while tasks fire; Start twice is refused;
// every service's goroutine has ended when Stop returns (goleak in
// TestMain checks none is left).
func TestStartStopStress(t *testing.T) {
	for i := range 10 {
		st := memstore.New()
		eng, err := New(Config{Store: st, Sinks: map[string]sink.Sink{"http": &recorder{}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Stop(t.Context()); err != nil {
			t.Fatalf("round %d: Stop before Start: %v", i, err)
		}
		if err := eng.Start(t.Context()); err != nil {
			t.Fatalf("round %d: Start: %v", i, err)
		}
		if err := eng.Start(t.Context()); err == nil {
			t.Fatalf("round %d: a second Start was not refused", i)
		}
		b := &bundle{store: st, eng: eng}
		for k := range 20 {
			b.schedule(t, CreateParams{Key: fmt.Sprint(k), DueAt: time.Now()})
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if err := eng.Stop(context.Background()); err != nil {
					t.Errorf("round %d: Stop: %v", i, err)
				}
			})
		}
		wg.Wait()
		if eng.Ready() {
			t.Fatalf("round %d: ready after Stop", i)
		}
	}
}
