package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// TestStoreErrorNilAllocatesNothing: the ack path asks storeError of each
// ack's answer, nil for nearly all of them; that answer costs no
// allocation (its errors.As targets escaped to the heap before the nil
// check, two per task acked).
func TestStoreErrorNilAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = storeError(nil) }); n != 0 {
		t.Errorf("storeError(nil) allocates %v times, want 0", n)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("read: %w", store.ErrNotFound), false},
		{&ConflictError{}, false},
		{&task.FieldError{Field: "lease"}, false},
		{errors.New("disk on fire"), true},
	} {
		if got := storeError(c.err); got != c.want {
			t.Errorf("storeError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestHoldCountsLooks: a due pull task two fire jobs' looks hold at once is
// held until both let go (unhold: their jobs failed), and counted once for
// its app; a third look after that holds it afresh.
func TestHoldCountsLooks(t *testing.T) {
	h := &held{attempts: newAttempts(), max: 16}
	h.mu.init()
	var gen task.IDGenerator
	tk := &task.Task{ID: gen.New(time.Now(), 0), App: "a", State: task.Scheduled, Target: task.Target{Pull: &task.PullTarget{}}}
	for look := range 2 {
		if hold, over := h.hold(tk); !hold || over {
			t.Fatalf("look %d: hold = %v, over = %v; want held", look, hold, over)
		}
	}
	if n := h.mu.perApp["a"]; n != 1 {
		t.Errorf("held twice: counted %d for its app, want 1", n)
	}
	h.unhold(tk.ID)
	if !h.queued(tk.ID) {
		t.Fatal("one of two looks let go: no longer held, want held by the other")
	}
	h.unhold(tk.ID)
	if h.queued(tk.ID) || h.mu.perApp["a"] != 0 {
		t.Fatalf("both looks let go: held %v, counted %d; want neither", h.queued(tk.ID), h.mu.perApp["a"])
	}
	if hold, _ := h.hold(tk); !hold {
		t.Fatal("a look after both let go: not held")
	}
}

// TestFireCopies: the attempt's copy of a task and its outcome's share the
// payload with the task they copy, have histories of their own with room
// for the events they add, and are one allocation each for a first
// attempt (the attempt's lease token aside; its lease's end and the
// outcome's finish time are in that allocation).
func TestFireCopies(t *testing.T) {
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, events := range []int{1, 2, 5} {
		base := &task.Task{App: "a", State: task.Scheduled, Payload: []byte(`{}`)}
		for range events {
			base.Record(now, "created", 0, "")
		}
		was := append([]task.Event(nil), base.History...)

		a, exp := attemptCopy(base)
		startAttempt(a, now, time.Minute, "boot0000", exp)
		if !a.LeaseExpiresAt.Equal(now.Add(time.Minute)) || !a.WakeAt.Equal(now.Add(time.Minute)) {
			t.Errorf("%d events: lease ends %v, wakes %v; want both %v", events, a.LeaseExpiresAt, a.WakeAt, now.Add(time.Minute))
		}
		o, at := outcomeCopy(base)
		o.Attempts = 1
		o.Record(now, "attempt", 1, "")
		finishIn(o, task.Delivered, now, at)
		for _, c := range []*task.Task{a, o} {
			if &c.Payload[0] != &base.Payload[0] {
				t.Errorf("%d events: the copy has a payload of its own", events)
			}
		}
		if !slices.Equal(base.History, was) {
			t.Errorf("%d events: the base's history changed to %v", events, base.History)
		}
		if len(a.History) != events+1 || a.History[events].What != "attempt" || a.State != task.Delivering {
			t.Errorf("%d events: attempt's copy %s with history %v", events, a.State, a.History)
		}
		if len(o.History) != events+2 || o.History[events+1].What != "delivered" || o.State != task.Delivered || !o.FinishedAt.Equal(now) {
			t.Errorf("%d events: outcome's copy %s (finished %v) with history %v", events, o.State, o.FinishedAt, o.History)
		}
	}
	first := &task.Task{App: "a", State: task.Scheduled}
	first.Record(now, "created", 0, "")
	if n := testing.AllocsPerRun(100, func() { _, _ = attemptCopy(first) }); n != 1 {
		t.Errorf("attemptCopy of a first attempt allocates %v times, want 1", n)
	}
	// The copy with its lease's end, and the lease's token: a claim
	// makes this per pull task, the fire path per push. (The token's
	// allocations are counted apart: the race detector adds to them.)
	token := testing.AllocsPerRun(100, func() { _ = newLease("boot0000") })
	if n := testing.AllocsPerRun(100, func() {
		a, exp := attemptCopy(first)
		startAttempt(a, now, time.Minute, "boot0000", exp)
	}); n != 1+token {
		t.Errorf("a first attempt's copy started allocates %v times, want %v (the copy, the lease token)", n, 1+token)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = outcomeCopy(first) }); n != 1 {
		t.Errorf("outcomeCopy of a first attempt allocates %v times, want 1", n)
	}
}
