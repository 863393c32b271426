package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/task"
)

// attempt is an attempt under way in this process. It is not stored: the
// store keeps base, and the outcome is written over it (outcomes.write).
type attempt struct {
	base *task.Task // the task as stored when the attempt started; never changed
	t    *task.Task // base with the attempt started: what the sink gets, and what Get shows; never changed (it shares base's payload and target)
	pull bool       // a pull task leased in memory (pull.go), not a push attempt
	// ending: a pull attempt's outcome (an ack, a nack, its lease's end)
	// is on its way to the store; no other is taken. Guarded by
	// attempts.mu.
	ending bool
	// stale: the task was written since base was read (touch), so base is
	// no longer the version stored, and the outcome is written from a
	// fresh read. Guarded by attempts.mu.
	stale bool
	// gen: a push attempt's base was read by a fire job's look when its
	// slot's write count (writer.genOf) was gen-1 (0: not known).
	gen uint64
}

// attempts are the attempts under way in this process: push attempts from
// their reservation (reserve: nil, not started) to their outcome's write,
// and pull tasks leased in memory (pull.go) to theirs. They are not stored
// until they end (firer.go).
//
// Its mu guards the map and its counts. It is a leaf lock: the pull
// service takes it under its own (a pull task moves from its ready queue to
// a lease atomically), and nothing is taken under it.
type attempts struct {
	mu struct {
		sync.Mutex
		m     map[task.ID]*attempt
		pulls int // of m's attempts, pull leases
	}
	// pushes (push attempts, reserved or under way) and pulls (pull
	// leases) mirror the counts of mu, for readers that do not take it:
	// the outcomes batcher under its own lock, the fire path's fast path.
	pushes atomic.Int64
	pulls  atomic.Int64
}

func newAttempts() *attempts {
	a := &attempts{}
	a.mu.m = make(map[task.ID]*attempt)
	return a
}

// countedLocked publishes the counts after a change. a.mu is held.
func (a *attempts) countedLocked() {
	a.pushes.Store(int64(len(a.mu.m) - a.mu.pulls))
	a.pulls.Store(int64(a.mu.pulls))
}

// reserve marks an attempt of id under way in this process, before it
// starts; false when one is under way already (a task fired twice at once
// by two jobs: the first to reserve makes the attempt).
func (a *attempts) reserve(id task.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.mu.m[id]; ok {
		return false
	}
	a.mu.m[id] = nil
	a.countedLocked()
	return true
}

// unreserve drops a reservation whose attempt does not start.
func (a *attempts) unreserve(id task.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x, ok := a.mu.m[id]; ok && x == nil {
		delete(a.mu.m, id)
		a.countedLocked()
	}
}

// put records x, an attempt of id that starts: over its reservation (a
// push attempt) or new (a pull lease).
func (a *attempts) put(id task.ID, x *attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.mu.m[id]; old != nil && old.pull {
		a.mu.pulls--
	}
	a.mu.m[id] = x
	if x.pull {
		a.mu.pulls++
	}
	a.countedLocked()
}

// underway reports whether an attempt of id is reserved or under way here.
func (a *attempts) underway(id task.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.mu.m[id]
	return ok
}

// attemptOf returns a copy of the task as its attempt under way in this
// process shows it (delivering, its attempt counted, a lease), or nil.
func (a *attempts) attemptOf(id task.ID) *task.Task {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x := a.mu.m[id]; x != nil {
		return x.t.Clone()
	}
	return nil
}

// started returns the attempts under way (not those only reserved), for
// the attempt log.
func (a *attempts) started() ([]task.ID, []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]task.ID, 0, len(a.mu.m))
	ns := make([]int, 0, len(a.mu.m))
	for id, x := range a.mu.m {
		if x != nil {
			ids, ns = append(ids, id), append(ns, x.t.Attempts)
		}
	}
	return ids, ns
}

// of returns the attempt each outcome of os ends (nil: none under way
// under its lease).
func (a *attempts) of(os []outcome) []*attempt {
	as := make([]*attempt, len(os))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, o := range os {
		if x := a.mu.m[o.id]; x != nil && x.t.Lease == o.lease {
			as[i] = x
		}
	}
	return as
}

// end ends the attempts as of os once their outcomes were written, but for
// those keep marks (an ack whose write failed: its lease stays). It
// returns the ids and apps of the pull leases it ended.
func (a *attempts) end(os []outcome, as []*attempt, keep []bool) (pulls []task.ID, apps []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, o := range os {
		switch x := as[i]; {
		case x == nil:
		case keep[i]:
			x.ending = false
		default:
			delete(a.mu.m, o.id)
			if x.pull {
				a.mu.pulls--
				pulls, apps = append(pulls, o.id), append(apps, x.t.App)
			}
		}
	}
	a.countedLocked()
	return pulls, apps
}

// leasesDue takes out of taken the pull tasks leased here (their wheel
// entry is the lease's end), and returns the outcomes of the leases that
// ran out by now, each a failed attempt as if nacked, and the entries of
// those still running, due again at their end.
func (a *attempts) leasesDue(taken []sched.Taken, now time.Time) (keep []sched.Taken, ends []outcome, again []later) {
	if a.pulls.Load() == 0 {
		return taken, nil, nil
	}
	keep = taken[:0:0]
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tk := range taken {
		x := a.mu.m[tk.ID]
		switch {
		case x == nil || !x.pull:
			keep = append(keep, tk)
		case x.ending:
			// An ack's outcome is being written: it tracks the task.
		case x.t.LeaseExpiresAt.After(now):
			again = append(again, later{tk.ID, *x.t.LeaseExpiresAt, x.t.App})
		default:
			x.ending = true
			ends = append(ends, outcome{id: tk.ID, app: x.t.App, lease: x.t.Lease, err: errLeaseExpired})
		}
	}
	return keep, ends, again
}

// takeLeases finds which of acks (op: ack, nack) name a lease held in
// memory: those it marks as ending and returns; errs[k.i] is set for those
// it answers at once (a lease not current, a task of another app); the
// rest (not held here) go to the store path.
func (a *attempts) takeLeases(op, app string, acks []pullAck, errs []error) (mine, rest []pullAck) {
	if a.pulls.Load() == 0 {
		// None held (always so in a cluster): no lock. A lease an ack
		// names was counted before its claim was answered.
		return nil, acks
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range acks {
		x := a.mu.m[k.id]
		switch {
		case x == nil || !x.pull:
			rest = append(rest, k)
		case app != "" && x.t.App != app:
			errs[k.i] = errNoTask(k.id) // another app's task looks absent
		case x.ending || x.t.Lease != k.lease:
			errs[k.i] = conflict(op, x.t.Clone(), "the lease is no longer current (it ran out, or the task was claimed again)")
		default:
			x.ending = true
			mine = append(mine, k)
		}
	}
	return mine, rest
}

// touch marks id's attempt under way, if any, stale: the task is being
// written (writer), so its base is no longer the version stored. Called
// under the store's row lock of id, by the write's callback.
func (a *attempts) touch(id task.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x := a.mu.m[id]; x != nil {
		x.stale = true
	}
}

// current reports whether x is id's attempt under way and its base is
// still the version stored (no write touched it since it was read). Asked
// under the store's row lock of id, by the outcome's write (outcomes.go):
// a write of the task after it waits for that lock, and one before it
// marked x.
func (a *attempts) current(id task.ID, x *attempt) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.m[id] == x && !x.stale
}

// currentGen reports whether x is id's attempt under way and gen, its
// slot's write count now (under id's row lock), is the one its base was
// read at: no write of the task came since.
func (a *attempts) currentGen(id task.ID, x *attempt, gen uint64) bool {
	if x.gen == 0 || x.gen-1 != gen {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.m[id] == x
}

// busy reports whether an attempt is under way that the engine, not a
// consumer, ends: a push attempt (or its reservation), or a pull lease
// whose outcome is on its way. A pull lease held here otherwise waits for
// its consumer: it ends by an ack or by the clock.
func (a *attempts) busy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.mu.m {
		if x == nil || !x.pull || x.ending {
			return true
		}
	}
	return false
}

// count is how many attempts are under way or reserved (tests).
func (a *attempts) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.mu.m)
}
