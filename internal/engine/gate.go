package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/toc-dev/toc/task"
)

// In cluster mode an app's deliveries_per_second and explicit max_in_flight
// hold across every node (Config.Limiter). Asking the limiter once per task
// from inside fire's store transaction made every denied task cost a store
// transaction and come back at the limiter's retry-after, again and again:
// a burst of one limited app kept the store and the workers busy with
// denials, and the other apps' tasks waited behind them.
//
// A gate queues one app's due tasks on this node, in due order, before their
// store read. One goroutine per app with queued tasks asks the limiter for
// as many tokens (then slots) as it has tasks, hands the granted tasks to
// the workers, and otherwise sleeps for the limiter's retry-after, or until
// a slot of the app is freed somewhere in the cluster. A limited app costs
// about one limiter call per grant and one store transaction per attempt,
// and no other app's task waits behind it.

// gateBatch bounds how many tasks one limiter call asks for.
const gateBatch = 256

// clusterAdmission is admission in a cluster: an app with a
// deliveries_per_second or an explicit max_in_flight (gated) queues its
// due tasks at its gate, which asks the shared Limiter (sharedLimits) and
// lets them through as it grants them; every app's attempts are also held
// to the node's own in-flight cap (shares.node), counted here.
type clusterAdmission struct {
	policy  func(app string) AppPolicy // the policy in force (apps.of)
	shares  shares
	enqueue func(app string, ids ...task.ID)
	limits  sharedLimits
	gates   sync.WaitGroup // the gates running

	// mu guards every app's gate, grants, cluster slots held, in-flight
	// count and parked tasks, and the gates' lifetime (ctx, closed). It is
	// never held across a limiter call.
	mu struct {
		sync.Mutex
		apps   map[string]*clusterApp
		ctx    context.Context // the engine's loops': gates run until it ends (set by start)
		closed bool            // the engine is stopping: no gate starts
	}
}

// clusterApp is one app's admission on this node. Guarded by
// clusterAdmission.mu.
type clusterApp struct {
	appSlots
	gate    *gate
	granted map[task.ID]grant // let through by the gate
	// slots counts, per task, the admissions holding its cluster slot.
	// The limiter's holder is this process's and the task's
	// (sharedLimits.holder), so a task let through again while its attempt
	// is under way here (the cluster index announced it again) shares the
	// attempt's slot: the slot is given back only when neither an
	// admission nor a grant of the task holds it (holdsSlotLocked), or the
	// attempt would run on without one, over the app's cap.
	slots map[task.ID]int
}

// gate is one app's queue of due tasks waiting for the cluster's limits.
// Guarded by clusterAdmission.mu.
type gate struct {
	queue   []task.ID
	queued  map[task.ID]bool
	running bool
	freed   chan struct{} // capacity 1: a slot was freed, or the limits changed
}

// grant is the gate's pass for one task.
type grant struct {
	slot  bool // it holds a cluster in-flight slot
	taken bool // a fire of the task went on to the store with it
}

var _ admission = (*clusterAdmission)(nil)

func newClusterAdmission(p admissionParams, limits sharedLimits) *clusterAdmission {
	a := &clusterAdmission{policy: p.Policy, shares: p.Shares, enqueue: p.Enqueue, limits: limits}
	a.mu.apps = map[string]*clusterApp{}
	return a
}

// gated reports whether p's limits go through the cluster's limiter.
func gated(p AppPolicy) bool { return p.DeliveriesPerSecond > 0 || p.MaxInFlight > 0 }

func (a *clusterAdmission) start(ctx context.Context) {
	a.mu.Lock()
	a.mu.ctx = ctx
	a.mu.Unlock()
}

// stop starts no gate from here on and waits for those running, which end
// with their context.
func (a *clusterAdmission) stop() {
	a.mu.Lock()
	a.mu.closed = true
	a.mu.Unlock()
	a.gates.Wait()
}

// getLocked returns app's admission, its node cap made under the policy
// in force when first asked for. a.mu is held.
func (a *clusterAdmission) getLocked(app string) *clusterApp {
	st, ok := a.mu.apps[app]
	if !ok {
		st = &clusterApp{granted: map[task.ID]grant{}, slots: map[task.ID]int{}}
		st.max = a.shares.node(a.policy(app))
		a.mu.apps[app] = st
	}
	return st
}

func (a *clusterAdmission) policiesChanged() {
	unpark := map[string][]task.ID{}
	a.mu.Lock()
	for app, st := range a.mu.apps {
		st.max = a.shares.node(a.policy(app))
		if next := st.unparkFree(); len(next) > 0 {
			unpark[app] = next
		}
		if st.gate != nil {
			signal(st.gate.freed) // the gate asks again under the new limits
		}
	}
	a.mu.Unlock()
	for app, ids := range unpark {
		a.enqueue(app, ids...)
	}
}

// isRated: in a cluster an explicit in-flight cap is paced before the
// store read too, at the gate.
func (a *clusterAdmission) isRated(app string) bool {
	return app != "" && gated(a.policy(app))
}

// pace queues a due task of app behind the app's gate (gated), or lets it
// go on to the store: the gate let it through, or the app has no cluster
// limits. A second fire of a task that is on its way with its pass (the
// wheel and the gate both sent it) is dropped: the first one's store write
// decides what comes next.
func (a *clusterAdmission) pace(app string, id task.ID, _ time.Time) (gated bool, at time.Time) {
	return a.queue(app, id), time.Time{}
}

func (a *clusterAdmission) enterGate(app string, id task.ID) { a.queue(app, id) }

// queue is pace and enterGate: it reports whether the task is queued (or
// dropped) rather than let through.
func (a *clusterAdmission) queue(app string, id task.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if g, ok := st.granted[id]; ok {
		if g.taken {
			return true
		}
		g.taken = true
		st.granted[id] = g
		return false
	}
	if !gated(a.policy(app)) {
		return false
	}
	if a.mu.closed {
		return true // stopping: the task stays due in the store
	}
	g := st.gate
	if g == nil {
		g = &gate{queued: map[task.ID]bool{}, freed: make(chan struct{}, 1)}
		st.gate = g
	}
	if !g.queued[id] {
		g.queued[id] = true
		g.queue = append(g.queue, id)
	}
	if !g.running {
		g.running = true
		a.gates.Add(1)
		ctx := a.mu.ctx
		go func() {
			defer a.gates.Done()
			a.runGate(ctx, app, g)
		}()
	}
	return true
}

// admit: a task the gate let through goes (it holds its token, and its
// cluster slot unless the limiter was down); a task of an app with cluster
// limits that did not pass the gate is sent to it; any other task is held
// to the node's own in-flight cap.
func (a *clusterAdmission) admit(app string, id task.ID, _ time.Time) (admitted, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	g, granted := st.granted[id]
	if granted {
		delete(st.granted, id)
		if g.slot {
			st.slots[id]++
			st.inFlight++
			return admitNow, time.Time{}
		}
	} else if gated(a.policy(app)) {
		return admitGate, time.Time{}
	}
	if st.full() {
		st.park(id)
		return admitPark, time.Time{}
	}
	st.inFlight++
	return admitNow, time.Time{}
}

// room: no bound in a cluster, where the gates hold an app's tasks back
// (a task over the node's cap parks after its read, as before).
func (a *clusterAdmission) room(string) (int, bool) { return 0, false }

func (a *clusterAdmission) taking(string, int) {}

func (a *clusterAdmission) release(app string, id task.ID) {
	a.mu.Lock()
	st := a.getLocked(app)
	slot := false // the last hold of id's slot: give it back
	if n := st.slots[id]; n > 0 {
		st.slots[id] = n - 1
		if n == 1 {
			delete(st.slots, id)
		}
		slot = !st.holdsSlotLocked(id)
	}
	next := st.release()
	a.mu.Unlock()
	if slot {
		a.releaseSlot(app, id)
	}
	a.enqueue(app, next...)
}

func (a *clusterAdmission) dropGrant(app string, id task.ID) {
	a.mu.Lock()
	slot := false
	if st, ok := a.mu.apps[app]; ok {
		g := st.granted[id]
		delete(st.granted, id)
		slot = g.slot && !st.holdsSlotLocked(id)
	}
	a.mu.Unlock()
	if slot {
		a.releaseSlot(app, id)
	}
}

// holdsSlotLocked reports whether an admission or a grant of id holds its
// cluster slot (see clusterApp.slots). The admission's lock is held.
func (st *clusterApp) holdsSlotLocked(id task.ID) bool {
	return st.slots[id] > 0 || st.granted[id].slot
}

// releaseSlot gives back a cluster in-flight slot, and has this node's
// gate ask again without waiting for the cluster's notice.
func (a *clusterAdmission) releaseSlot(app string, id task.ID) {
	a.limits.release(app, id, a.policy(app).MaxInFlight)
	a.slotFreed(app)
}

func (a *clusterAdmission) kickParked(app string) {
	a.mu.Lock()
	var next []task.ID
	if st, ok := a.mu.apps[app]; ok {
		next = st.unparkFree()
	}
	a.mu.Unlock()
	a.enqueue(app, next...)
}

func (a *clusterAdmission) slotFreed(app string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.mu.apps[app]; ok && st.gate != nil {
		signal(st.gate.freed)
	}
}

// inFlightCap: in a cluster an explicit MaxInFlight holds across the
// nodes, and may be more than a node's share.
func (a *clusterAdmission) inFlightCap(p AppPolicy) int { return a.shares.explicit(p) }

func (a *clusterAdmission) counts(app string) (inFlight, parked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	return st.inFlight, len(st.parked)
}

// runGate lets app's queued tasks through as the limiter grants them, until
// the queue is empty or the engine stops.
func (a *clusterAdmission) runGate(ctx context.Context, app string, g *gate) {
	var wait time.Duration
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			case <-g.freed:
			}
			t.Stop()
		}
		p := a.policy(app)
		a.mu.Lock()
		if len(g.queue) == 0 || ctx.Err() != nil || !gated(p) {
			// Done, stopping (the tasks stay due in the store), or a
			// reload lifted the limits: whatever is left goes on.
			rest := g.queue
			g.queue, g.running = nil, false
			clear(g.queued)
			st := a.getLocked(app)
			if ctx.Err() == nil {
				for _, id := range rest {
					st.granted[id] = grant{}
				}
			}
			a.mu.Unlock()
			if ctx.Err() == nil && len(rest) > 0 {
				a.enqueue(app, rest...) // their app stays known: fire finds their grant before the store read
			}
			return
		}
		n := min(len(g.queue), gateBatch)
		if p.MaxInFlight > 0 {
			// The cluster's slots are shared by the nodes, but this node
			// holds at most its share of them (appSlots.max: its workers
			// are not all for one app): ask for no more than the share
			// has room for, and wait for a slot of it to free.
			n = min(n, a.getLocked(app).nodeRoom())
			if n <= 0 {
				a.mu.Unlock()
				wait = time.Second // or until a slot frees (g.freed)
				continue
			}
		}
		ids := slices.Clone(g.queue[:n])
		a.mu.Unlock()

		n, slots, w := a.limits.ask(ctx, app, p, ids)
		wait = w
		if n == 0 {
			continue
		}
		a.mu.Lock()
		st := a.getLocked(app)
		for _, id := range ids[:n] {
			// A grant that held the slot keeps holding it (the holder is
			// the same: see clusterApp.slots).
			st.granted[id] = grant{slot: slots || st.granted[id].slot}
			delete(g.queued, id)
		}
		// Only this goroutine takes from the queue, so ids is still its head.
		clear(g.queue[:n])
		g.queue = g.queue[n:]
		a.mu.Unlock()
		a.enqueue(app, ids[:n]...)
	}
}

// nodeRoom is how many more of the app's attempts this node may hold
// cluster slots for: its share, less the attempts under way and the tasks
// let through with a slot that have not started yet. The admission's lock
// is held.
func (st *clusterApp) nodeRoom() int {
	n := st.max - st.inFlight
	for _, g := range st.granted {
		if g.slot {
			n--
		}
	}
	return n
}
