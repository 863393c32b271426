package engine

import (
	"context"
	"log/slog"
	"math"
	"slices"
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

// gate is one app's queue of due tasks waiting for the cluster's limits.
// Guarded by apps.mu.
type gate struct {
	queue   []task.ID
	queued  map[task.ID]bool
	running bool
	freed   chan struct{} // capacity 1: a slot was freed, or the limits changed
}

// start sets the gates' context: they run until it ends (the engine's
// loops').
func (a *apps) start(ctx context.Context) {
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
}

// stop starts no gate from here on and waits for those running, which end
// with their context.
func (a *apps) stop() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.gates.Wait()
}

// gatedBy reports whether p's limits go through the cluster's limiter.
func (a *apps) gatedBy(p AppPolicy) bool {
	return a.limiter != nil && (p.DeliveriesPerSecond > 0 || p.MaxInFlight > 0)
}

// grant is the gate's pass for one task.
type grant struct {
	slot  bool // it holds a cluster in-flight slot
	taken bool // a fire of the task went on to the store with it
}

// enterGate queues a due task of app behind the app's gate and reports true,
// or reports false when the task may go on to the store: the gate let it
// through, or the app has no cluster limits. A second fire of a task that
// is on its way with its pass (the wheel and the gate both sent it) is
// dropped: the first one's store write decides what comes next.
func (a *apps) enterGate(app string, id task.ID) bool {
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
	if !a.gatedBy(a.pol.of(app)) {
		return false
	}
	if a.closed {
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
		ctx := a.ctx
		go func() {
			defer a.gates.Done()
			a.runGate(ctx, app, g)
		}()
	}
	return true
}

// runGate lets app's queued tasks through as the limiter grants them, until
// the queue is empty or the engine stops.
func (a *apps) runGate(ctx context.Context, app string, g *gate) {
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
		a.mu.Lock()
		p := a.pol.of(app)
		if len(g.queue) == 0 || ctx.Err() != nil || !a.gatedBy(p) {
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
			if ctx.Err() == nil {
				a.letThrough(app, rest)
			}
			return
		}
		n := min(len(g.queue), gateBatch)
		if p.MaxInFlight > 0 {
			// The cluster's slots are shared by the nodes, but this node
			// holds at most its share of them (appState.maxInFlight: its
			// workers are not all for one app): ask for no more than the
			// share has room for, and wait for a slot of it to free.
			n = min(n, a.nodeRoomLocked(a.getLocked(app)))
			if n <= 0 {
				a.mu.Unlock()
				wait = time.Second // or until a slot frees (g.freed)
				continue
			}
		}
		ids := slices.Clone(g.queue[:n])
		a.mu.Unlock()

		n, slots, w := a.askLimiter(ctx, app, p, ids)
		wait = w
		if n == 0 {
			continue
		}
		a.mu.Lock()
		st := a.getLocked(app)
		for _, id := range ids[:n] {
			st.granted[id] = grant{slot: slots}
			delete(g.queued, id)
		}
		// Only this goroutine takes from the queue, so ids is still its head.
		clear(g.queue[:n])
		g.queue = g.queue[n:]
		a.mu.Unlock()
		a.letThrough(app, ids[:n])
	}
}

// nodeRoomLocked is how many more of the app's attempts this node may
// hold cluster slots for: its share, less the attempts under way and the
// tasks let through with a slot that have not started yet. apps.mu is held.
func (a *apps) nodeRoomLocked(st *appState) int {
	n := st.maxInFlight - st.inFlight
	for _, g := range st.granted {
		if g.slot {
			n--
		}
	}
	return n
}

// letThrough hands granted tasks to the workers. Their app stays known, so
// fire finds their grant before reading the store.
func (a *apps) letThrough(app string, ids []task.ID) {
	if len(ids) == 0 {
		return
	}
	a.enqueue(app, ids...)
}

// askLimiter asks for delivery tokens, then in-flight slots, for ids in
// order. It returns how many of ids (a prefix) may go, whether they hold
// cluster slots, and how long to wait before asking again when not all may.
// Tokens are taken first: a token taken for a task that then finds no slot
// is spent, so when both limits bind the rate comes out lower, never higher.
// When the limiter fails the tasks go anyway (a Redis outage must not stop
// every limited app); the node's own in-flight cap still holds.
func (a *apps) askLimiter(ctx context.Context, app string, p AppPolicy, ids []task.ID) (n int, slots bool, wait time.Duration) {
	n = len(ids)
	if p.DeliveriesPerSecond > 0 {
		burst := p.Burst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(p.DeliveriesPerSecond/10)))
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		got, w, err := a.limiter.Take(cctx, app, p.DeliveriesPerSecond, burst, n)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, false, 0
		case err != nil:
			a.log.Warn("shared rate limiter failed; delivering without it", slog.String("app", app), slog.String("error", err.Error()))
		case got == 0:
			return 0, false, max(w, time.Millisecond)
		default:
			n = got
		}
	}
	if p.MaxInFlight > 0 {
		holders := make([]string, n)
		for i, id := range ids[:n] {
			holders[i] = a.holder(id)
		}
		now := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		got, next, err := a.limiter.Acquire(cctx, app, holders, p.MaxInFlight, now.Add(task.DefaultHTTPTimeout+a.leaseGrace))
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, false, 0
		case err != nil:
			a.log.Warn("shared in-flight limit failed; holding the node's own", slog.String("app", app), slog.String("error", err.Error()))
			return n, false, 0
		case got < n:
			// Wait for a SlotFreed notice, or for the first held slot to
			// run out (its node may be gone), whichever comes first.
			wait = min(max(next.Sub(now), time.Millisecond), time.Second)
		}
		return got, true, wait
	}
	return n, false, 0
}

// SlotFreed tells the engine that one of app's in-flight slots was given
// back somewhere in the cluster: its gate, if waiting, asks again.
func (e *Engine) SlotFreed(app string) { e.apps.slotFreed(app) }

func (a *apps) slotFreed(app string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.state[app]; ok && st.gate != nil {
		signal(st.gate.freed)
	}
}

// dropGrant forgets a grant that fire did not use (the task needed no
// attempt after all) and gives back its slot. Without a Limiter there are
// no grants.
func (a *apps) dropGrant(app string, id task.ID) {
	if a.limiter == nil {
		return
	}
	a.mu.Lock()
	st, ok := a.state[app]
	var g grant
	if ok {
		g = st.granted[id]
		delete(st.granted, id)
	}
	max := a.pol.of(app).MaxInFlight
	a.mu.Unlock()
	if g.slot {
		a.releaseSlot(app, id, max)
	}
}

// releaseSlot gives back a cluster in-flight slot.
func (a *apps) releaseSlot(app string, id task.ID, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := a.limiter.Release(ctx, app, a.holder(id), max); err != nil {
		// The slot runs out on its own at the end of its hold.
		a.log.Warn("give back an in-flight slot", slog.String("app", app), slog.String("task", id.String()), slog.String("error", err.Error()))
	}
	a.slotFreed(app) // this node's gate need not wait for the notice
}

// holder names this process's hold of a slot for task id. Two nodes can
// both let the same task through (a wheel entry left on a slot's previous
// owner); each must hold, and give back, a slot of its own.
func (a *apps) holder(id task.ID) string { return a.boot + "/" + id.String() }
