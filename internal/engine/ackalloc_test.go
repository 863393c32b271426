package engine

import (
	"errors"
	"fmt"
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
