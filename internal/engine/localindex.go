package engine

import (
	"context"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// localIndex is the Index of a single node (Config.Index nil): there is
// no other node to mirror writes to, to claim tasks from or to tell of
// pull tasks due, so the engine runs one way in both modes and the
// differences live here and in the cluster's adapter (internal/cluster).
//
//   - Wakeups reads the store's wake order: the node times every task.
//   - Sync and Settled do nothing: the store is the only copy.
//   - Claim gives every task to this node; an attempt's number is one more
//     than the attempts stored, which the attempt log raised at start to
//     count the attempts a previous process made and did not finish
//     (attemptlog.go); one attempt of a task at a time (attempts.reserve).
//   - Live knows one process: this one.
//   - Watches is true for every task.
//   - PullDue has no other node to tell.
type localIndex struct {
	store store.Store
	boot  string // this process's
}

var _ Index = (*localIndex)(nil)

func (x *localIndex) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	return x.store.Wakeups(ctx, after, until, limit)
}

func (x *localIndex) Sync(context.Context, ...*task.Task) error    { return nil }
func (x *localIndex) Settled(context.Context, ...*task.Task) error { return nil }

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
