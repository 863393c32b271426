package engine

import (
	"errors"
	"fmt"
	"testing"

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
