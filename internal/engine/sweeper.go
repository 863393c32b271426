package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/store"
)

// sweeper deletes finished tasks past the retention period, a page at a
// time, so that it never holds up the hot path for long. No state.
type sweeper struct {
	store     store.Store
	clock     clock.Clock
	retention time.Duration
	log       *slog.Logger
}

// run sweeps every tenth of the retention (at most every minute) until
// ctx ends (the engine's loop group owns it).
func (s *sweeper) run(ctx context.Context) {
	every := min(s.retention/10, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := s.clock.Now().Add(-s.retention)
		for {
			sctx, cancel := context.WithTimeout(ctx, callTimeout)
			n, err := s.store.Sweep(sctx, cutoff, 1000)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.ErrorContext(ctx, "sweep finished tasks", slog.String("error", err.Error()))
				}
				break
			}
			if n < 1000 {
				break
			}
		}
	}
}

// sweepTo deletes the finished tasks past the retention at now (an advance
// of the test clock: the run loop's ticker is the wall clock's).
func (s *sweeper) sweepTo(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-s.retention)
	for {
		n, err := s.store.Sweep(ctx, cutoff, 1000)
		if err != nil {
			return fmt.Errorf("sweep finished tasks: %w", err)
		}
		if n < 1000 {
			return nil
		}
	}
}
