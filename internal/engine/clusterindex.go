package engine

import (
	"context"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// engIdx is the index as the engine's services use it: an Index, and what
// the mode adds at start and per attempt. Its two adapters are
// localIndex (one node) and clusterIndex (Config.Index).
type engIdx interface {
	Index
	// start runs before anything fires: on one node it finds what a
	// previous process left under way; in a cluster, Live tells whose
	// leases are orphaned and the slots' owners roll them back.
	start(ctx context.Context, now time.Time) error
	// attemptLog notes the push attempts (and pull leases) as they start:
	// on one node the store's attempt log; in a cluster one that notes
	// nothing, since the index numbered them when it claimed them.
	attemptLog() *attemptLog
	// fireGather is how long a fire job under load waits for more due
	// tasks (dispatcher.go): worth it where each batch costs round trips.
	fireGather() time.Duration
	// mirror is Sync of the tasks of ws, and mirrorEnded Ended of the
	// tasks of the attempts that ended (their groups in turn), each run to
	// its end (detached from ctx's cancellation). On one node they do
	// nothing, and cost nothing.
	mirror(ctx context.Context, ws []written) error
	// claimBatch is Claim for the tasks ws[i].t of the indexes in which,
	// each held until fs[i].until, the fire job's (firer.claim).
	claimBatch(ctx context.Context, ws []written, which []int, fs []firing, now time.Time) ([]int, error)
	mirrorEnded(ctx context.Context, stored, moved []written, released []*task.Task) error
	// pullSource is where leases find the pull tasks due
	// (leasesource.go): one node's held in memory, or the cluster index's.
	pullSource(p pullSourceParams) pullSource
	// pullWaits reports whether a pull task t due since its
	// NextAttemptAt, found due again at now, waits for a lease without a
	// store write (fire.go's vPullWait): in a cluster whose index keeps
	// the pull tasks due, for pullWaitGrace; never on one node, where it
	// comes to the ready queue.
	pullWaits(t *task.Task, now time.Time) bool
}

// pullIndex is a cluster index that keeps the pull tasks due and waiting
// for a lease (cluster.Node, in its slots' PullQueues): a lease takes them
// from it instead of scanning SQL for them.
type pullIndex interface {
	// TakePull takes up to max of app's pull tasks due at now, each held
	// for the caller until holdUntil: no other lease takes it meanwhile.
	// The caller leases them in the store and mirrors what it wrote
	// (Sync), or gives them back with Untake.
	TakePull(ctx context.Context, app string, max int, now, holdUntil time.Time) ([]task.ID, error)
	// Untake gives back tasks TakePull took and the caller did not lease:
	// back (due and waiting, as read) are taken again from now on; stale
	// (as read: not waiting for a lease) and gone (not stored) leave the
	// index's pull tasks due.
	Untake(ctx context.Context, app string, back, stale []*task.Task, gone []task.ID, now time.Time) error
}

// fencedKnown is a store whose UpdateKnown checks each old against the
// version stored itself, for the writes it says (sqlstore on PostgreSQL:
// the fire path's optimistic no-sync writes, fenced by the record), so
// that a cluster's nodes, none of which sees every write of a task, can
// write outcomes over what their fire jobs read: a task another node
// wrote meanwhile comes back with store.ErrConflict and is read again.
type fencedKnown interface {
	store.KnownUpdater
	KnownFenced() bool
}

// clusterKnown is the write over known versions a cluster's engine uses:
// the store's, where it fences them itself (nil otherwise).
func clusterKnown(s store.Store) store.KnownUpdater {
	if k, ok := store.As[fencedKnown](s); ok && k.KnownFenced() {
		return k
	}
	return nil
}

// clusterIndex is the cluster's Index (Config.Index) as an engIdx.
type clusterIndex struct{ Index }

var _ engIdx = clusterIndex{}

func (clusterIndex) start(context.Context, time.Time) error { return nil }
func (clusterIndex) attemptLog() *attemptLog                { return &attemptLog{} }
func (clusterIndex) fireGather() time.Duration              { return fireGather }

func (x clusterIndex) pulls() pullIndex {
	p, _ := x.Index.(pullIndex)
	return p
}

func (x clusterIndex) pullSource(p pullSourceParams) pullSource {
	return &indexSource{p: p, pulls: x.pulls()}
}

func (x clusterIndex) pullWaits(t *task.Task, now time.Time) bool {
	return x.pulls() != nil && now.Sub(t.NextAttemptAt) < pullWaitGrace
}

func (x clusterIndex) claimBatch(ctx context.Context, ws []written, which []int, fs []firing, now time.Time) ([]int, error) {
	claim := make([]*task.Task, len(which))
	until := make([]time.Time, len(which))
	for k, i := range which {
		claim[k], until[k] = ws[i].t, fs[i].until
	}
	return x.Claim(ctx, claim, until, now)
}

func (x clusterIndex) mirror(ctx context.Context, ws []written) error {
	ts := make([]*task.Task, len(ws))
	for i, w := range ws {
		ts[i] = w.t
	}
	sctx, cancel := detached(ctx)
	defer cancel()
	return x.Sync(sctx, ts...)
}

func (x clusterIndex) mirrorEnded(ctx context.Context, stored, moved []written, released []*task.Task) error {
	ts := make([]*task.Task, 0, len(stored)+len(moved)+len(released))
	for _, w := range stored {
		ts = append(ts, w.t)
	}
	for _, w := range moved {
		ts = append(ts, w.t)
	}
	ts = append(ts, released...)
	if len(ts) == 0 {
		return nil
	}
	sctx, cancel := detached(ctx)
	defer cancel()
	return x.Ended(sctx, ts...)
}
