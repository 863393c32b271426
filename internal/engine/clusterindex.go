package engine

import (
	"context"
	"time"

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
	// noteAttempts records that the push attempts (or pull leases) ts
	// start: on one node the attempt log notes them; in a cluster the
	// index numbered them when it claimed them.
	noteAttempts(ctx context.Context, ts ...*task.Task)
	// fireGather is how long a fire job under load waits for more due
	// tasks (dispatcher.go): worth it where each batch costs round trips.
	fireGather() time.Duration
}

// clusterIndex is the cluster's Index (Config.Index) as an engIdx.
type clusterIndex struct{ Index }

var _ engIdx = clusterIndex{}

func (clusterIndex) start(context.Context, time.Time) error      { return nil }
func (clusterIndex) noteAttempts(context.Context, ...*task.Task) {}
func (clusterIndex) fireGather() time.Duration                   { return fireGather }
