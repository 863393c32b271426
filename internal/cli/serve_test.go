package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestWithoutDeadline: a shutdown whose timeout ran out is not the serve
// command's error (toc exits 0, as before the server package), but an
// error joined to it, like the store's close error, still is.
func TestWithoutDeadline(t *testing.T) {
	t.Parallel()
	closeErr := errors.New("close store: boom")
	ran := fmt.Errorf("shutdown: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		in, want error
	}{
		{nil, nil},
		{ran, nil},
		{errors.Join(ran, nil), nil},
		{errors.Join(ran, closeErr), closeErr},
		{closeErr, closeErr},
	} {
		got := withoutDeadline(tc.in)
		if (got == nil) != (tc.want == nil) || (got != nil && !errors.Is(got, tc.want)) {
			t.Errorf("withoutDeadline(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
