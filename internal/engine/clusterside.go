package engine

import (
	"time"

	"github.com/toc-dev/toc/task"
)

// ClusterSide is what a cluster node tells its engine (the node's
// cluster.Engine): other nodes' notices and the changes of slot
// ownership. Engine.Cluster returns it; on a single node nothing calls it.
type ClusterSide struct {
	e *Engine
}

// Cluster returns the engine's side for a cluster node to call.
func (e *Engine) Cluster() *ClusterSide { return &ClusterSide{e: e} }

// Boot returns this process's id, the prefix of its lease tokens (a
// cluster uses it as the node's member name).
func (c *ClusterSide) Boot() string { return c.e.boot }

// Notify tells the engine that a task it did not write itself wakes at
// `at` (a cluster node's notice of another node's write). It enters the
// wheel if it falls within what is loaded.
func (c *ClusterSide) Notify(id task.ID, at time.Time, app string) { c.e.tk.wake(id, at, app) }

// NotifyPull wakes this node's leases waiting on app (another node's
// PullDue).
func (c *ClusterSide) NotifyPull(app string) { c.e.waiters.notify(app) }

// SlotFreed tells the engine that one of app's in-flight slots was given
// back somewhere in the cluster: its gate, if waiting, asks again.
func (c *ClusterSide) SlotFreed(app string) { c.e.admit.slotFreed(app) }

// Rescan makes the loader read the whole window again from the start (the
// index holds tasks the loader has not seen: a new app's). The wheel
// ignores what it already has.
func (c *ClusterSide) Rescan() { c.e.tk.rescan(false) }

// Reown is Rescan after the cluster's slot ownership changed: the wheel is
// emptied first, so that the tasks of slots another node now owns stop
// firing here (each would cost a store transaction and, for a limited app,
// a token, only to lose the claim). Everything in the wheel came from the
// index, which the loader reads again.
func (c *ClusterSide) Reown() { c.e.tk.rescan(true) }
