package engine

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// TestPullHeldUntilAck: a pull task becomes claimable at its due time, and
// nothing about it is written between its create and its ack (the fire job
// queues it in memory, the claim leases it in memory); the ack is its one
// write, synced. Get shows the claim's lease meanwhile, and the task as
// stored stays scheduled and due, so that a process that died would claim
// it again.
func TestPullHeldUntilAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wc *writeCounter
		b := setup(t, func(c *Config) {
			wc = countWrites(c)
		})
		ctx := t.Context()
		start := time.Now()
		const n = 50
		ps := make([]CreateParams, n)
		for i := range ps {
			ps[i] = CreateParams{App: "app", DueAt: start.Add(3 * time.Second), Target: pull}
		}
		rs, err := b.eng.Create(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, err := b.eng.Lease(ctx, "app", LeaseParams{Max: n, Lease: 10 * time.Second}); err != nil || len(got) != 0 {
			t.Fatalf("claim before the due time: %d tasks, %v", len(got), err)
		}
		// A long poll answers with the first tasks queued; the rest follow
		// within the instant.
		got, err := b.eng.Lease(ctx, "app", LeaseParams{Max: n, Lease: 10 * time.Second, Wait: 10 * time.Second})
		if err != nil || len(got) == 0 {
			t.Fatalf("long poll: %d tasks, %v", len(got), err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("claimable after %s, want at the due time, 3s", waited)
		}
		synctest.Wait()
		more, err := b.eng.Lease(ctx, "app", LeaseParams{Max: n, Lease: 10 * time.Second})
		if got = append(got, more...); err != nil || len(got) != n {
			t.Fatalf("claimed %d tasks at the due time, %v; want %d", len(got), err, n)
		}
		synctest.Wait()
		for _, r := range rs {
			if w := wc.of(r.Task.ID); w != 0 {
				t.Fatalf("task %s written %d times before its ack, want 0", r.Task.ID, w)
			}
		}
		acks := make([]AckParams, n)
		for i, tk := range got {
			exp := tk.LeaseExpiresAt
			if tk.State != task.Delivering || tk.Attempts != 1 || tk.Lease == "" || exp == nil || !exp.Equal(task.Ms(start.Add(13*time.Second))) {
				t.Fatalf("claimed: %s, attempts %d, lease %q until %v; want delivering, 1, a lease until +13s", tk.State, tk.Attempts, tk.Lease, exp)
			}
			shown := b.get(t, tk.ID)
			if shown.State != task.Delivering || shown.Lease != tk.Lease || !shown.LeaseExpiresAt.Equal(*exp) {
				t.Fatalf("Get during the claim: %s, lease %q until %v; want the claim's", shown.State, shown.Lease, shown.LeaseExpiresAt)
			}
			if st, err := wc.Store.Get(ctx, tk.ID); err != nil || st.State != task.Scheduled || st.NextAttemptAt.After(time.Now()) {
				t.Fatalf("stored during the claim: %v, %v; want scheduled and due", st, err)
			}
			acks[i] = AckParams{ID: tk.ID, Lease: tk.Lease}
		}
		manys := wc.callsOf("UpdateMany")
		errs, err := b.eng.AckMany(ctx, "app", acks)
		if err != nil {
			t.Fatal(err)
		}
		if c := wc.callsOf("UpdateMany") - manys; c != 1 {
			t.Errorf("%d store writes for one AckMany, want 1", c)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("acks[%d]: %v", i, err)
			}
		}
		for _, tk := range got {
			if w := wc.of(tk.ID); w != 1 {
				t.Errorf("task %s written %d times in all, want 1", tk.ID, w)
			}
			if st, _ := wc.Store.Get(ctx, tk.ID); st.State != task.Delivered || st.Attempts != 1 {
				t.Errorf("stored after the ack: %s, attempts %d; want delivered, 1", st.State, st.Attempts)
			}
		}
		// Acked: a second ack is a conflict, and past the lease nothing
		// rolls back.
		if errs, _ := b.eng.AckMany(ctx, "app", acks[:1]); !errors.As(errs[0], new(*ConflictError)) {
			t.Errorf("second ack: %v, want a conflict", errs[0])
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if s := b.get(t, got[0].ID); s.State != task.Delivered {
			t.Errorf("after the lease's end: %s", s.State)
		}
	})
}

// TestPullLeaseRunsOut: a lease held in memory that runs out is a failed
// attempt, stored once, and the task is claimable again after its backoff;
// a nack is stored once too, and its retry_in holds.
func TestPullLeaseRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wc *writeCounter
		b := setup(t, func(c *Config) {
			wc = countWrites(c)
		})
		ctx := t.Context()
		tk := b.claimPull(t, "app", 1, 2*time.Second)[0]
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		st := b.get(t, tk.ID)
		if st.State != task.Scheduled || st.Attempts != 1 || st.LastError != "lease expired without an ack" || wc.of(tk.ID) != 1 {
			t.Fatalf("after the lease: %s, attempts %d, %q, %d writes; want scheduled, 1, the lease's error, 1 write", st.State, st.Attempts, st.LastError, wc.of(tk.ID))
		}
		if err := b.eng.Ack(ctx, tk.ID, tk.Lease); !errors.As(err, new(*ConflictError)) {
			t.Fatalf("ack after the lease ran out: %v, want a conflict", err)
		}
		got, err := b.eng.Lease(ctx, "app", LeaseParams{Max: 1, Lease: time.Minute, Wait: 30 * time.Second})
		if err != nil || len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("claim after the backoff: %v, %v", got, err)
		}
		retry := 4 * time.Second
		if err := b.eng.Nack(ctx, tk.ID, got[0].Lease, "busy", &retry); err != nil {
			t.Fatal(err)
		}
		nacked := time.Now()
		if st := b.get(t, tk.ID); st.State != task.Scheduled || st.LastError != "busy" || wc.of(tk.ID) != 2 {
			t.Fatalf("after the nack: %s %q, %d writes", st.State, st.LastError, wc.of(tk.ID))
		}
		got, err = b.eng.Lease(ctx, "app", LeaseParams{Max: 1, Lease: time.Minute, Wait: 30 * time.Second})
		if err != nil || len(got) != 1 || got[0].Attempts != 3 || time.Since(nacked) != retry {
			t.Fatalf("claim after the nack: %d tasks, %v, after %s", len(got), err, time.Since(nacked))
		}
	})
}

// TestPullWaitingInStore: pull tasks an older version stored as waiting
// for a claim (due, with no wake time, or one only for their deadline)
// are not in the wheel's order, and are claimed from the store.
func TestPullWaitingInStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		now := time.Now().UTC().Truncate(time.Millisecond)
		var g task.IDGenerator
		deadline := now.Add(5 * time.Second)
		waiting := []*task.Task{
			{ID: g.New(now, 0), App: "app", DueAt: now.Add(-time.Minute), NextAttemptAt: now.Add(-time.Minute), Target: pull,
				State: task.Scheduled, CreatedAt: now, UpdatedAt: now},
			{ID: g.New(now, 0), App: "app", DueAt: now.Add(-time.Minute), NextAttemptAt: now.Add(-time.Minute), Target: pull,
				Deadline: &deadline, WakeAt: deadline.Add(time.Millisecond), State: task.Scheduled, CreatedAt: now, UpdatedAt: now},
		}
		if _, err := st.Create(t.Context(), waiting); err != nil {
			t.Fatal(err)
		}
		b := setup(t, func(c *Config) { c.Store = st })
		b.store = st
		synctest.Wait()
		got, err := b.eng.Lease(t.Context(), "app", LeaseParams{Max: 10, Lease: time.Minute})
		if err != nil || len(got) != 2 {
			t.Fatalf("claim: %d tasks, %v; want the 2 waiting in the store", len(got), err)
		}
		for _, tk := range got {
			if err := b.eng.Ack(t.Context(), tk.ID, tk.Lease); err != nil {
				t.Fatal(err)
			}
			if s, _ := st.Get(t.Context(), tk.ID); s.State != task.Delivered {
				t.Errorf("task %s after its ack: %s", tk.ID, s.State)
			}
		}
	})
}
