package engine

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/toc-dev/toc/task"
)

// localAdmission is admission on one node: an app's deliveries_per_second
// is a rate limiter in this process, paced before the store read with a
// reservation per task (a burst of N tasks costs N reservations, not N
// store transactions), and its max_in_flight a count of its attempts
// under way here, at most shares.max.
type localAdmission struct {
	policy  func(app string) AppPolicy // the policy in force (apps.of)
	shares  shares
	enqueue func(app string, ids ...task.ID)
	freed   func() // nil: none

	// mu guards every app's rate limiter, reservations, in-flight count
	// and parked tasks: admit decides on all of them at once.
	mu struct {
		sync.Mutex
		apps map[string]*localApp
	}
}

// localApp is one app's limits on one node. Guarded by localAdmission.mu.
type localApp struct {
	appSlots
	deliver  *rate.Limiter         // nil: unlimited
	reserved map[task.ID]time.Time // due, holding a rate reservation for this time
}

var _ admission = (*localAdmission)(nil)

func newLocalAdmission(p admissionParams) *localAdmission {
	a := &localAdmission{policy: p.Policy, shares: p.Shares, enqueue: p.Enqueue, freed: p.Freed}
	a.mu.apps = map[string]*localApp{}
	return a
}

func (a *localAdmission) start(context.Context) {} // nothing runs
func (a *localAdmission) stop()                 {}

// getLocked returns app's limits, made under the policy in force when
// first asked for. a.mu is held.
func (a *localAdmission) getLocked(app string) *localApp {
	st, ok := a.mu.apps[app]
	if !ok {
		st = &localApp{}
		a.applyLocked(app, st)
		a.mu.apps[app] = st
	}
	return st
}

func (a *localAdmission) applyLocked(app string, st *localApp) {
	p := a.policy(app)
	st.max = a.shares.node(p)
	st.deliver = setLimit(st.deliver, p.DeliveriesPerSecond, p.Burst)
}

func (a *localAdmission) policiesChanged() {
	unpark := map[string][]task.ID{}
	a.mu.Lock()
	for app, st := range a.mu.apps {
		a.applyLocked(app, st)
		if next := st.unparkFree(); len(next) > 0 {
			unpark[app] = next
		}
	}
	a.mu.Unlock()
	for app, ids := range unpark {
		a.enqueue(app, ids...)
	}
	if a.freed != nil {
		a.freed() // a raised cap is room for the tasks held in the ready queues
	}
}

// isRated: on one node only a delivery rate is paced before the store
// read; the in-flight cap is admit's.
func (a *localAdmission) isRated(app string) bool {
	return app != "" && a.policy(app).DeliveriesPerSecond > 0
}

// pace takes the task's rate reservation, which admit then honours
// instead of taking another. It never gates.
func (a *localAdmission) pace(app string, id task.ID, now time.Time) (gated bool, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if at, held := st.reserved[id]; held {
		if at.After(now) {
			return false, at
		}
		return false, time.Time{} // its reservation came due: admit honours it
	}
	if st.deliver == nil {
		return false, time.Time{}
	}
	at = st.reserve(id, now)
	if at.After(now) {
		return false, at
	}
	return false, time.Time{}
}

// reserve takes a rate reservation for id and holds it in reserved
// (admit sees it and does not take another): at is when it comes due.
// The admission's lock is held.
func (st *localApp) reserve(id task.ID, now time.Time) (at time.Time) {
	d := st.deliver.ReserveN(now, 1).DelayFrom(now)
	if st.reserved == nil {
		st.reserved = map[task.ID]time.Time{}
	}
	at = now
	if d > 0 {
		at = task.Ms(now.Add(d))
	}
	st.reserved[id] = at
	return at
}

func (a *localAdmission) admit(app string, id task.ID, now time.Time) (admitted, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	at, held := st.reserved[id]
	if held && at.After(now) {
		return admitLater, at
	}
	if st.full() {
		if held {
			delete(st.reserved, id) // it will reserve again when unparked
		}
		st.park(id)
		return admitPark, time.Time{}
	}
	if !held && st.deliver != nil {
		if at := st.reserve(id, now); at.After(now) {
			return admitLater, at
		}
	}
	delete(st.reserved, id)
	st.inFlight++
	return admitNow, time.Time{}
}

// enterGate: admit never sends a task to a gate on one node.
func (a *localAdmission) enterGate(string, task.ID) {}

func (a *localAdmission) release(app string, _ task.ID) {
	a.mu.Lock()
	st := a.getLocked(app)
	next := st.release()
	freed := st.readRoom() > 0
	a.mu.Unlock()
	a.enqueue(app, next...)
	if freed && a.freed != nil {
		a.freed()
	}
}

// room: an app's free in-flight slots, none from when its attempts filled
// them until its hold is free again (appSlots.readRoom). The unknown app
// "" has no bound.
func (a *localAdmission) room(app string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if app == "" {
		return 0, false // not known before the read
	}
	return a.getLocked(app).readRoom(), true
}

func (a *localAdmission) taking(app string, n int) {
	if app == "" {
		return // never bounded (room)
	}
	a.mu.Lock()
	st := a.getLocked(app)
	st.taking += n
	freed := n < 0 && st.readRoom() > 0
	a.mu.Unlock()
	if freed && a.freed != nil {
		a.freed()
	}
}

// dropGrant: there are no grants on one node.
func (a *localAdmission) dropGrant(string, task.ID) {}

func (a *localAdmission) kickParked(app string) {
	a.mu.Lock()
	var next []task.ID
	if st, ok := a.mu.apps[app]; ok {
		next = st.unparkFree()
	}
	a.mu.Unlock()
	a.enqueue(app, next...)
}

// slotFreed: there are no cluster slots on one node.
func (a *localAdmission) slotFreed(string) {}

// inFlightCap: on one node an app holds at most shares.max whatever its
// policy says.
func (a *localAdmission) inFlightCap(p AppPolicy) int { return a.shares.node(p) }

func (a *localAdmission) counts(app string) (inFlight, parked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	return st.inFlight, len(st.parked)
}
