package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// timekeeper keeps the scheduling core (package sched: the wheel, the
// loader's cursor and the per-app ready queues) and wakes the services
// that wait on it: its run loop moves what falls due into the ready
// queues and wakes the dispatcher (ready); an earlier entry wakes the run
// loop (kick); room freed or a rescan wakes the loader (loadKick). The
// channels have capacity 1 and are sent without blocking.
//
// Its mu guards the core and nothing else; no other lock is taken under
// it, and it is never held across a call out of the engine.
type timekeeper struct {
	clock     clock.Clock
	maxLoaded int
	weight    func(app string) int // the apps' turn weights (apps.weight)

	kick     chan struct{}
	ready    chan struct{}
	loadKick chan struct{}

	// room, set before start, says how many more of an app's due tasks
	// the fire path should take now (bounded false: no bound): the
	// admission's (room). Asked outside mu. heldBack says a take may have
	// left tasks ready for want of room: roomFreed then wakes the
	// dispatcher.
	room     func(app string) (n int, bounded bool)
	taking   func(app string, n int) // the admission's (taking): the tasks take hands out, by app
	heldBack atomic.Bool

	mu struct {
		sync.Mutex
		core *sched.Core // nil before start: every method is then a no-op
	}
}

// timekeeperParams are a timekeeper's dependencies.
type timekeeperParams struct {
	Clock     clock.Clock
	MaxLoaded int
	Weight    func(app string) int
}

func newTimekeeper(p timekeeperParams) *timekeeper {
	return &timekeeper{
		clock:     p.Clock,
		maxLoaded: p.MaxLoaded,
		weight:    p.Weight,
		kick:      make(chan struct{}, 1),
		ready:     make(chan struct{}, 1),
		loadKick:  make(chan struct{}, 1),
	}
}

// start makes the core, empty, its cursor at now.
func (k *timekeeper) start(now time.Time) {
	k.mu.Lock()
	k.mu.core = sched.New(now, sched.Config{MaxLoaded: k.maxLoaded, Weight: k.weight})
	k.mu.Unlock()
}

// signalReady wakes the dispatcher: tasks are ready.
func (k *timekeeper) signalReady() { signal(k.ready) }

// track brings the wheel in line with a task just written or read (e): the
// only way tasks enter the wheel besides the loader. A copy older than one
// tracked already is ignored (see package sched).
func (k *timekeeper) track(e sched.Entry) {
	k.mu.Lock()
	earlier := k.mu.core != nil && k.mu.core.Track(e)
	k.mu.Unlock()
	if earlier {
		signal(k.kick)
	}
}

// untrack drops ids from the wheel (the task is gone, another node has
// it, or its lease's entry is no longer wanted).
func (k *timekeeper) untrack(ids ...task.ID) {
	k.mu.Lock()
	if k.mu.core != nil {
		for _, id := range ids {
			k.mu.core.Untrack(id)
		}
	}
	k.mu.Unlock()
}

// enqueue hands app's due ids to the dispatcher, bypassing the wheel, in
// app's ready queue ("" when unknown). A rated app's tasks are paced again
// (the firer's pace), where a gate's grant is found before the store is
// read.
func (k *timekeeper) enqueue(app string, ids ...task.ID) {
	if len(ids) == 0 {
		return
	}
	k.mu.Lock()
	if k.mu.core != nil {
		k.mu.core.Enqueue(app, ids...)
	}
	k.mu.Unlock()
	k.signalReady()
}

// later is an entry put off to a time: the wheel has it then, whatever
// the loader's cursor.
type later struct {
	id  task.ID
	at  time.Time
	app string
}

// deferTo puts id back in the wheel at `at` (a rate reservation, a store
// write tried again later), whatever the loader's cursor: the store still
// says it is due now.
func (k *timekeeper) deferTo(id task.ID, at time.Time, app string) {
	k.deferAll(later{id, at, app})
}

// deferAll is deferTo for several entries, under one lock.
func (k *timekeeper) deferAll(ls ...later) {
	earlier := false
	k.mu.Lock()
	if k.mu.core != nil {
		for _, l := range ls {
			earlier = k.mu.core.Defer(l.id, l.at, l.app) || earlier
		}
	}
	k.mu.Unlock()
	if earlier {
		signal(k.kick)
	}
}

// wake enters a task another writer wrote (a cluster node's notice) into
// the wheel if it falls within what is loaded.
func (k *timekeeper) wake(id task.ID, at time.Time, app string) {
	k.mu.Lock()
	earlier := k.mu.core != nil && k.mu.core.Wake(id, at, app)
	k.mu.Unlock()
	if earlier {
		signal(k.kick)
	}
}

// rescan makes the loader read the whole window again; forget empties the
// wheel first.
func (k *timekeeper) rescan(forget bool) {
	k.mu.Lock()
	if k.mu.core != nil {
		k.mu.core.Rescan(forget)
	}
	k.mu.Unlock()
	signal(k.loadKick)
	signal(k.kick)
}

// stats is the core's snapshot; false before start.
func (k *timekeeper) stats() (sched.Stats, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mu.core == nil {
		return sched.Stats{}, false
	}
	return k.mu.core.Stats(), true
}

// contains returns id's wheel entry (tests).
func (k *timekeeper) contains(id task.ID) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.core.Contains(id)
}

// take takes up to n ready tasks, the apps in turn, each app's up to the
// room its admission has for them (room), and wakes the loader when that
// made room it stopped for lack of.
//
// An app at its in-flight cap leaves its tasks in its ready queue rather
// than have them read from the store only to park (admission.admit),
// then read again when a slot frees: in a burst of one app that was every
// task read twice, in fire jobs of a task or two.
func (k *timekeeper) take(n int) []sched.Taken {
	var rooms map[string]int
	if k.room != nil {
		// Set before the rooms are asked: a slot freed from here on wakes
		// the dispatcher to take again (roomFreed), so that none is missed.
		k.heldBack.Store(true)
		k.mu.Lock()
		apps := k.mu.core.ReadyApps(nil)
		k.mu.Unlock()
		for _, app := range apps {
			if r, bounded := k.room(app); bounded {
				if rooms == nil {
					rooms = make(map[string]int, len(apps))
				}
				rooms[app] = r
			}
		}
	}
	k.mu.Lock()
	taken, held := k.mu.core.TakeWithin(n, rooms)
	room := k.mu.core.NeedsLoad()
	k.mu.Unlock()
	k.heldBack.Store(held)
	if k.taking != nil && len(taken) > 0 {
		for _, c := range countByApp(taken).list {
			k.taking(c.app, c.n) // and out when the fire job ends (firer.fire)
		}
	}
	if room && len(taken) > 0 {
		signal(k.loadKick)
	}
	return taken
}

// countByApp counts taken by app, the unknown app "" left out: a list,
// not a map, as the fire path's tasks are mostly of an app or two
// (appCounts).
func countByApp(taken []sched.Taken) appCounts {
	var c appCounts
	for _, tk := range taken {
		if tk.App != "" {
			c.add(tk.App, 1)
		}
	}
	return c
}

// roomFreed hears that an app has room for its due tasks again (admission):
// the dispatcher takes again if a take left tasks for want of room.
func (k *timekeeper) roomFreed() {
	if k.heldBack.Load() {
		k.signalReady()
	}
}

// beginScan and endScan bracket the loader's read of one page of the wake
// order (package sched).
func (k *timekeeper) beginScan(until time.Time, page int) (sched.Scan, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.core.BeginScan(until, page)
}

func (k *timekeeper) endScan(s sched.Scan, ws []store.Wakeup, failed bool) (again bool) {
	k.mu.Lock()
	earlier, again := k.mu.core.EndScan(s, ws, failed)
	k.mu.Unlock()
	if earlier {
		signal(k.kick)
	}
	return again
}

// advance moves what is due by now into the ready queues, wakes the
// dispatcher when it moved any, and returns the wheel's next instant and
// the core's stats after it (ok false before start).
func (k *timekeeper) advance(now time.Time) (moved int, next time.Time, st sched.Stats, ok bool) {
	k.mu.Lock()
	if k.mu.core == nil {
		k.mu.Unlock()
		return 0, time.Time{}, sched.Stats{}, false
	}
	moved, next = k.mu.core.Advance(now)
	st = k.mu.core.Stats()
	k.mu.Unlock()
	if moved > 0 {
		k.signalReady()
	}
	return moved, next, st, true
}

// run fires what is due and sleeps until the wheel's next bucket, until
// ctx ends (the engine's loop group owns it).
func (k *timekeeper) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := k.clock.Now()
		_, next, _, _ := k.advance(now)
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-k.kick:
		}
	}
}

// retryLater puts a task whose store write failed back into the wheel a
// second from now, so a store hiccup delays it instead of losing it from
// memory until the next restart.
func (k *timekeeper) retryLater(id task.ID) {
	k.deferTo(id, k.clock.Now().Add(time.Second), "")
}
