package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// localIndex is the Index of a single node (Config.Index nil): there is
// no other node to mirror writes to, to claim tasks from or to tell of
// pull tasks due, so the engine runs one way in both modes and the
// differences live here and in the cluster's adapter (clusterindex.go over
// internal/cluster).
//
//   - Wakeups reads the store's wake order: the node times every task.
//   - Sync and Ended do nothing: the store is the only copy.
//   - Claim gives every task to this node; an attempt's number is one more
//     than the attempts stored, which start raised to count the attempts a
//     previous process made and did not finish (the attempt log); one
//     attempt of a task at a time (attempts.reserve).
//   - Live knows one process: this one.
//   - Watches is true for every task.
//   - PullDue has no other node to tell.
//   - start queues the push deliveries a previous process left under way
//     and counts its unfinished attempts; its attemptLog notes each attempt
//     in the attempt log as it starts; no fire batch gathers (fireGather).
type localIndex struct {
	store      store.Store
	boot       string      // this process's
	alog       *attemptLog // the store's attempt log (a no-op when it keeps none)
	enqueue    func(app string, ids ...task.ID)
	leaseGrace time.Duration
	log        *slog.Logger
}

var (
	_ Index  = (*localIndex)(nil)
	_ engIdx = (*localIndex)(nil)
)

func (x *localIndex) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	return x.store.Wakeups(ctx, after, until, limit)
}

func (x *localIndex) Sync(context.Context, ...*task.Task) error  { return nil }
func (x *localIndex) Ended(context.Context, ...*task.Task) error { return nil }

func (x *localIndex) Claim(_ context.Context, ts []*task.Task, _ []time.Time, _ time.Time) ([]int, error) {
	held := make([]int, len(ts))
	for i, t := range ts {
		held[i] = t.Attempts + 1
	}
	return held, nil
}

func (x *localIndex) Live(boot string) bool           { return boot == x.boot }
func (x *localIndex) Watches(*task.Task) bool         { return true }
func (x *localIndex) PullDue(context.Context, string) {}

func (x *localIndex) fireGather() time.Duration { return 0 }

func (x *localIndex) claimBatch(_ context.Context, ws []written, which []int, _ []firing, _ time.Time) ([]int, error) {
	return byStore(ws, which), nil
}

func (x *localIndex) mirror(context.Context, []written) error { return nil }
func (x *localIndex) mirrorEnded(context.Context, []written, []written, []*task.Task) error {
	return nil
}

func (x *localIndex) attemptLog() *attemptLog { return x.alog }

// pullSource: the pull tasks of one node are held in memory (pull.go),
// and those waiting in the store are found there.
func (x *localIndex) pullSource(p pullSourceParams) pullSource { return heldSource{p: p} }

func (x *localIndex) pullWaits(*task.Task, time.Time) bool { return false }

// start recovers the push deliveries a previous process left under way,
// then counts the attempts it started and did not finish.
func (x *localIndex) start(ctx context.Context, now time.Time) error {
	if err := x.recover(ctx, now); err != nil {
		return err
	}
	return x.alog.countInterrupted(ctx, now)
}

// recover queues push deliveries that a previous process had under way:
// their leases name a boot that is gone, so nobody will finish them. The
// firer rolls them back and delivers them again (at-least-once).
func (x *localIndex) recover(ctx context.Context, now time.Time) error {
	until := now.Add(task.MaxHTTPTimeout + x.leaseGrace + time.Second)
	var after store.Cursor
	n := 0
	for {
		ws, err := x.store.Wakeups(ctx, after, until, 1000)
		if err != nil {
			return fmt.Errorf("recover interrupted deliveries: %w", err)
		}
		for _, w := range ws {
			if w.State == task.Delivering && w.Kind != "pull" {
				x.enqueue(w.App, w.ID)
				n++
			}
		}
		if len(ws) < 1000 {
			break
		}
		after = store.Cursor{At: ws[len(ws)-1].At, ID: ws[len(ws)-1].ID}
	}
	if n > 0 {
		x.log.InfoContext(ctx, "redelivering tasks interrupted by a restart", slog.Int("tasks", n))
	}
	return nil
}
