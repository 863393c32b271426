package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
)

// loader keeps the wheel filled up to now+Window from the index's wake
// order (the store's on one node, the node's slots of the cluster index):
// its run loop scans when half the window has passed since its last scan,
// or when the timekeeper says room freed up or a rescan is due. It has no
// state of its own: the cursor is the timekeeper's.
type loader struct {
	tk     *timekeeper
	index  Index
	clock  clock.Clock
	window time.Duration
	log    *slog.Logger
}

// run loads until ctx ends (the engine's loop group owns it).
func (l *loader) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := l.window / 2
		if err := l.load(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			l.log.ErrorContext(ctx, "load due tasks", slog.String("error", err.Error()))
			wait = time.Second // the store is in trouble; try again soon
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-l.tk.loadKick:
		}
	}
}

const loadPage = 1000

// scan reads one page of the wake order.
func (l *loader) scan(ctx context.Context, s sched.Scan) ([]store.Wakeup, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return l.index.Wakeups(ctx, s.From, s.Until, s.Limit)
}

// load moves tasks due up to now+Window into the wheel, in wake order,
// while there is room.
func (l *loader) load(ctx context.Context) error {
	until := l.clock.Now().Add(l.window)
	for {
		scan, ok := l.tk.beginScan(until, loadPage)
		if !ok {
			return nil
		}
		ws, err := l.scan(ctx, scan)
		again := l.tk.endScan(scan, ws, err != nil)
		if err != nil {
			return fmt.Errorf("scan wakeups after %s: %w", scan.From.At.Format(time.RFC3339Nano), err)
		}
		if !again {
			return nil
		}
	}
}
