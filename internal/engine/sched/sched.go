// Package sched is the engine's scheduling core: which tasks are due when.
// It owns the timing wheel, the loader's cursor, the ready queues and the
// bookkeeping kept per wheel entry, and keeps them in step, behind one
// small API. It is a pure data structure in the manner of the timing wheel
// it wraps: time comes in as an argument, it starts no goroutines, does no
// I/O and takes no locks. Its owner (the engine) holds one mutex around
// every call and does the waking, reading and writing.
//
// # Invariant
//
// Every task whose wake time is at or before the cursor is in the wheel, in
// a ready queue, or in the hands of the owner (taken, being fired).
// Tasks after the cursor are only in the store, until a scan moves the
// cursor past them. Writes reach the core through [Core.Track], which
// checks each against the cursor; a write that lands beyond the old cursor
// while a scan runs is noted and added when the scan ends, so that none
// falls between the scan and the cursor's move.
//
// # Stale copies
//
// Two writers of one task can finish their writes in one order and call
// Track in the other (a fire that found a pull task due, and a claim of
// it). Each write carries a sequence number taken under the task's store
// lock; Track ignores a copy older than the one its entry came from, so
// that the older copy cannot move or drop the newer one's entry.
//
// # Fair turns
//
// Due tasks wait in one ready queue per app, and [Core.Take] serves the
// apps that have due tasks in turn (round-robin), an app taking as many
// tasks in its turn as its weight ([Config.Weight]), so that one app's
// backlog delays only that app. An app whose queue empties leaves the
// turns; when it has due tasks again it joins them last, so that no app
// waits for more than one turn of each of the others. The core learns a
// task's app from [Entry.App] (a write, a notice, a scan of a store that
// keeps the app in its wake order); tasks whose app it does not know share
// the queue of the app "".
package sched

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/timingwheel"
	"github.com/toc-dev/toc/task"
)

// Entry is what Track learns of a task just written to (or read from) the
// store.
type Entry struct {
	ID task.ID
	// WakeAt is when the task must next be looked at; zero when nothing is
	// pending, or when this process does not time the task (in a cluster,
	// another node owns its slot): either way it leaves the wheel.
	WakeAt time.Time
	// Seq numbers the write the copy comes from; 0 for a copy read back
	// from storage, which is taken as it is.
	Seq uint64
	// App is the task's app; "" when unknown (its ready queue is then the
	// one of the app "").
	App string
}

// Taken is a ready task handed to the owner to fire.
type Taken struct {
	ID task.ID
	// App is the app whose ready queue the task came from: its app, or ""
	// when the core did not know it.
	App string
}

// Config configures a Core.
type Config struct {
	// MaxLoaded caps the tasks held (wheel and ready queues): the loader
	// stops at it, and direct inserts past 5/4 of it trim the wheel back
	// to 3/4. At least 1.
	MaxLoaded int
	// Weight returns how many tasks an app takes in its turn (see Fair
	// turns in the package doc); a result below 1 counts as 1. It is asked
	// at the start of each turn and must not block. Nil: 1 for every app.
	Weight func(app string) int
}

// Core is the scheduling core. The zero value is not usable: call New.
type Core struct {
	cfg    Config
	wheel  *timingwheel.Wheel[task.ID]
	cursor store.Cursor // everything with a wake up to here is loaded
	armed  int64        // the wheel's next instant as last reported by Advance; -1: none

	// The ready queues: due tasks waiting to be taken, per app, and the
	// apps with due tasks in the order of their turns. ring[turn] takes
	// next; its credit is what is left of its turn.
	queues map[string]*readyQueue
	ring   []*readyQueue
	turn   int
	nready int // tasks in all queues

	scanning bool
	gen      uint64               // bumped when the cursor moves back (Rescan, trim): a scan begun before reads stale
	noted    []store.Wakeup       // tracked during a scan, beyond the cursor
	touched  map[task.ID]struct{} // tracked during a scan: maybe newer than what it read
	capped   bool                 // the loader stopped for lack of room

	// Per wheel entry: its app when known (the entry's wheel tag names it
	// in apps, at no memory of its own), the Seq of the copy it came from,
	// and whether the owner deferred it (its wheel time is later than the
	// store's).
	apps     appTable
	seq      map[task.ID]uint64
	deferred map[task.ID]struct{}
}

// appTable numbers the apps of the wheel's entries for their wheel tags,
// counting each app's entries so that an app no entry names is forgotten.
// Tag 0 is the unknown app "".
type appTable struct {
	tags  map[string]uint32
	names []string // by tag
	refs  []int    // entries by tag
	free  []uint32 // tags to reuse
}

// ref returns app's tag, counting one more entry of it; 0 for "".
func (t *appTable) ref(app string) uint32 {
	if app == "" {
		return 0
	}
	tag, ok := t.tags[app]
	if !ok {
		if t.tags == nil {
			t.tags, t.names, t.refs = map[string]uint32{}, []string{""}, []int{0}
		}
		if n := len(t.free); n > 0 {
			tag, t.free = t.free[n-1], t.free[:n-1]
			t.names[tag] = strings.Clone(app) // not the buffer a record was decoded from
		} else {
			tag = uint32(len(t.names))
			t.names, t.refs = append(t.names, strings.Clone(app)), append(t.refs, 0)
		}
		t.tags[app] = tag
	}
	t.refs[tag]++
	return tag
}

// unref counts one entry of tag's app less.
func (t *appTable) unref(tag uint32) {
	if tag == 0 {
		return
	}
	if t.refs[tag]--; t.refs[tag] == 0 {
		delete(t.tags, t.names[tag])
		t.names[tag] = ""
		t.free = append(t.free, tag)
	}
}

// name is tag's app.
func (t *appTable) name(tag uint32) string {
	if tag == 0 {
		return ""
	}
	return t.names[tag]
}

// readyQueue is one app's due tasks, in the order they came due.
type readyQueue struct {
	app    string
	ids    []task.ID
	credit int // tasks left to take in the app's current turn
}

// New returns a core whose clock starts at now.
func New(now time.Time, cfg Config) *Core {
	cfg.MaxLoaded = max(cfg.MaxLoaded, 1)
	if cfg.Weight == nil {
		cfg.Weight = func(string) int { return 1 }
	}
	return &Core{
		cfg:      cfg,
		wheel:    timingwheel.New[task.ID](now.UnixMilli()),
		armed:    -1,
		queues:   make(map[string]*readyQueue),
		seq:      make(map[task.ID]uint64),
		deferred: make(map[task.ID]struct{}),
		touched:  make(map[task.ID]struct{}),
	}
}

// Track brings the wheel in line with a task just written to or read from
// the store, and reports whether it now holds an entry earlier than the
// instant Advance last armed for (the owner's timer must be reset).
func (c *Core) Track(e Entry) (earlier bool) {
	last, known := c.seq[e.ID]
	if known && e.Seq != 0 && e.Seq < last {
		return false // a newer copy was tracked already
	}
	if c.scanning {
		c.touched[e.ID] = struct{}{}
	}
	unnumbered := false
	if !known && e.Seq != 0 {
		if at, in := c.wheel.Contains(e.ID); in {
			// The entry came from a scan or a notice, which may have read
			// a newer write than this copy's: the copy may move it earlier,
			// not later or out, and the entry stays unnumbered. An entry
			// too early fires, finds the task moved, and is tracked again
			// from the store.
			if e.WakeAt.IsZero() || e.WakeAt.UnixMilli() >= at {
				return false
			}
			unnumbered = true
		}
	}
	if e.WakeAt.IsZero() {
		c.forget(e.ID)
		return false
	}
	if c.cursor.Less(store.Cursor{At: e.WakeAt, ID: e.ID}) {
		// Beyond what is loaded: a scan brings it in. One under way may
		// have read the store before this write; note it for its end.
		c.forget(e.ID)
		if c.scanning {
			c.noted = append(c.noted, store.Wakeup{ID: e.ID, At: e.WakeAt, App: e.App})
		}
		return false
	}
	at := e.WakeAt.UnixMilli()
	c.add(e.ID, at, e.App)
	if e.Seq != 0 && !unnumbered {
		c.seq[e.ID] = e.Seq
	}
	earlier = c.earlier(at)
	if c.wheel.Len()+c.nready > c.cfg.MaxLoaded+c.cfg.MaxLoaded/4 {
		c.trim()
	}
	return earlier
}

// Wake is Track for a task known only by its id, wake time and app (a
// cluster node's notice of another node's write).
func (c *Core) Wake(id task.ID, at time.Time, app string) (earlier bool) {
	return c.Track(Entry{ID: id, WakeAt: at, App: app})
}

// Defer puts id in the wheel at `at` whatever the cursor: the store still
// has it due earlier, and the owner holds it back (a rate reservation, a
// failed write tried again later).
func (c *Core) Defer(id task.ID, at time.Time, app string) (earlier bool) {
	ms := at.UnixMilli()
	c.add(id, ms, app)
	c.deferred[id] = struct{}{}
	return c.earlier(ms)
}

// Untrack forgets id: it leaves the wheel with its bookkeeping. A copy of
// it already in a ready queue is left there; firing it finds the task as
// stored.
func (c *Core) Untrack(id task.ID) { c.forget(id) }

// Enqueue makes ids, tasks of app ("" when unknown), ready at once,
// bypassing the wheel (recovered deliveries, tasks a gate let through or a
// free in-flight slot unparked).
func (c *Core) Enqueue(app string, ids ...task.ID) {
	if len(ids) == 0 {
		return
	}
	q := c.queue(app)
	q.ids = append(q.ids, ids...)
	c.nready += len(ids)
}

// Advance moves what is due at now from the wheel to the ready queues. It
// returns how many moved and the wheel's next instant (zero when it is
// empty), which it remembers as armed.
func (c *Core) Advance(now time.Time) (moved int, next time.Time) {
	n := c.nready
	c.wheel.AdvanceTags(now.UnixMilli(), func(id task.ID, _ int64, tag uint32) {
		q := c.queue(c.apps.name(tag))
		c.apps.unref(tag)
		q.ids = append(q.ids, id)
		c.nready++
		delete(c.deferred, id)
	})
	ms, ok := c.wheel.Next()
	if !ok {
		c.armed = -1
		return c.nready - n, time.Time{}
	}
	c.armed = ms
	return c.nready - n, time.UnixMilli(ms)
}

// Take hands up to limit ready tasks to the owner, the apps taking turns
// (see Fair turns in the package doc), each app's tasks in the order they
// came due.
func (c *Core) Take(limit int) []Taken {
	taken, _ := c.TakeWithin(limit, nil)
	return taken
}

// ReadyApps appends to apps the apps with tasks waiting to be taken, in
// the order of their turns from the one whose turn it is: what an owner
// asks room for before TakeWithin.
func (c *Core) ReadyApps(apps []string) []string {
	for i := range c.ring {
		apps = append(apps, c.ring[(c.turn+i)%len(c.ring)].app)
	}
	return apps
}

// roomFor is how many of n tasks TakeWithin can take with room: the sum
// of the ready apps' rooms, or n. Its result is sized by it, not by n: an
// app at its in-flight cap is given a few slots at a time, and a result
// of 128 made for a few tasks was a third of the scheduler's garbage per
// push fire in a burst (500 bytes).
func (c *Core) roomFor(n int, room map[string]int) int {
	if room == nil {
		return n
	}
	sum := 0
	for _, q := range c.ring {
		r, bounded := room[q.app]
		if !bounded {
			return n
		}
		if sum += min(max(r, 0), len(q.ids)); sum >= n {
			return n
		}
	}
	return sum
}

// TakeWithin is Take with room for each app: at most room[app] of app's
// tasks are taken (an app that is not in room has no bound). An app with
// no room left is passed over without losing its turn's credit: its tasks
// stay ready, in their order, until a later call finds room for them.
// heldBack reports whether a bound left tasks that limit would have taken.
func (c *Core) TakeWithin(limit int, room map[string]int) (taken []Taken, heldBack bool) {
	n := min(c.nready, limit)
	if n <= 0 {
		return nil, false
	}
	out := make([]Taken, 0, c.roomFor(n, room))
	passed := 0 // apps passed over in a row for want of room
	for len(out) < n && passed < len(c.ring) {
		q := c.ring[c.turn]
		if q.credit <= 0 {
			q.credit = max(1, c.cfg.Weight(q.app))
		}
		k := min(q.credit, len(q.ids), n-len(out))
		if r, bounded := room[q.app]; bounded {
			k = min(k, max(r, 0))
			room[q.app] = r - k
		}
		if k == 0 {
			heldBack = true
			passed++
			c.turn = (c.turn + 1) % len(c.ring)
			continue
		}
		passed = 0
		for _, id := range q.ids[:k] {
			out = append(out, Taken{ID: id, App: q.app})
		}
		clear(q.ids[:k])
		q.ids = q.ids[k:]
		q.credit -= k
		c.nready -= k
		switch {
		case len(q.ids) == 0:
			// Out of the turns until it has due tasks again; the next
			// app's turn is at the same index now.
			delete(c.queues, q.app)
			c.ring = slices.Delete(c.ring, c.turn, c.turn+1)
			if c.turn >= len(c.ring) {
				c.turn = 0
			}
		case q.credit == 0:
			c.turn = (c.turn + 1) % len(c.ring)
		}
	}
	return out, heldBack
}

// queue returns app's ready queue, which joins the turns last (just
// before the app whose turn it is) when it was not in them.
func (c *Core) queue(app string) *readyQueue {
	if q, ok := c.queues[app]; ok {
		return q
	}
	q := &readyQueue{app: app}
	c.queues[app] = q
	c.ring = slices.Insert(c.ring, c.turn, q)
	if len(c.ring) > 1 {
		c.turn++ // still the same app's turn
	}
	return q
}

// Scan is the part of the store's wake order a loader scan must read next.
type Scan struct {
	From  store.Cursor // read after this
	Until time.Time    // up to this wake time
	Limit int          // at most this many
	room  int          // what the core had room for when the scan began
	gen   uint64       // the core's gen when the scan began
}

// BeginScan starts a scan of what is due up to until, or reports false when
// there is nothing to read: loaded up to until already, or no room (the
// core is then capped until [Core.NeedsLoad]).
func (c *Core) BeginScan(until time.Time, page int) (Scan, bool) {
	room := c.cfg.MaxLoaded - c.wheel.Len() - c.nready
	if room <= 0 {
		c.capped = true
		return Scan{}, false
	}
	if !c.cursor.Less(store.Cursor{At: until, ID: MaxID}) {
		return Scan{}, false
	}
	c.scanning = true
	c.noted = c.noted[:0]
	clear(c.touched)
	return Scan{From: c.cursor, Until: until, Limit: min(room, page), room: room, gen: c.gen}, true
}

// EndScan takes the result of the scan s: ws, the wakeups read (in wake
// order), or failed. It reports whether the wheel now holds an earlier
// entry than armed, and whether to scan again at once (a full page, or a
// trim moved the cursor during the scan).
func (c *Core) EndScan(s Scan, ws []store.Wakeup, failed bool) (earlier, again bool) {
	c.scanning = false
	noted := c.noted
	c.noted = c.noted[:0]
	defer clear(c.touched)
	if failed {
		return false, false
	}
	if c.gen != s.gen || c.cursor != s.From {
		// A rescan or a trim moved the cursor back while the scan read:
		// what it read may be older than what was tracked meanwhile and
		// then forgotten. Read again from the new cursor.
		return false, true
	}
	earliest := int64(-1)
	add := func(w store.Wakeup) {
		at := w.At.UnixMilli()
		c.add(w.ID, at, w.App)
		delete(c.seq, w.ID) // which write the entry reflects is unknown now
		if earliest < 0 || at < earliest {
			earliest = at
		}
	}
	for _, w := range ws {
		if _, ok := c.touched[w.ID]; ok {
			// Tracked during the scan, from a copy that may be newer or
			// older than this read: keep the earlier of the two. An entry
			// too early fires, finds the task moved and is tracked again;
			// one too late would fire the task late.
			if at, in := c.wheel.Contains(w.ID); in && at <= w.At.UnixMilli() {
				delete(c.seq, w.ID)
				continue
			}
		}
		add(w)
	}
	full := len(ws) == s.Limit
	if full {
		last := ws[len(ws)-1]
		c.cursor = store.Cursor{At: last.At, ID: last.ID}
	} else {
		c.cursor = store.Cursor{At: s.Until, ID: MaxID}
	}
	for _, w := range noted {
		if c.cursor.Less(store.Cursor{At: w.At, ID: w.ID}) {
			continue
		}
		// Noted copies of one task may come in any order: keep the
		// earliest, as above.
		if at, in := c.wheel.Contains(w.ID); !in || at > w.At.UnixMilli() {
			add(w)
		}
	}
	c.capped = full && s.Limit == s.room // stopped by room, not by the page
	return earliest >= 0 && c.earlier(earliest), full
}

// NeedsLoad reports whether the loader stopped for lack of room and there
// is room again.
func (c *Core) NeedsLoad() bool {
	return c.capped && c.wheel.Len()+c.nready < c.cfg.MaxLoaded/2
}

// Rescan moves the cursor back to the start, so that the next scan reads
// the whole window again; the wheel ignores what it already has. With
// forget, the wheel is emptied first (in a cluster, after slot ownership
// changed: the tasks of slots another node now owns must stop firing here).
func (c *Core) Rescan(forget bool) {
	c.cursor = store.Cursor{}
	c.gen++
	if forget {
		c.wheel = timingwheel.New[task.ID](c.wheel.Now())
		c.apps = appTable{}
		clear(c.seq)
		clear(c.deferred)
	}
}

// Contains reports whether id has a wheel entry, and when.
func (c *Core) Contains(id task.ID) (time.Time, bool) {
	at, ok := c.wheel.Contains(id)
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(at), true
}

// Stats is a snapshot of the core.
type Stats struct {
	Wheel  int       // entries in the wheel
	Ready  int       // tasks waiting to be taken
	Apps   int       // apps with tasks waiting to be taken
	Cursor time.Time // loaded up to here
}

// Stats returns a snapshot.
func (c *Core) Stats() Stats {
	return Stats{Wheel: c.wheel.Len(), Ready: c.nready, Apps: len(c.ring), Cursor: c.cursor.At}
}

// MaxID is the largest task id: a cursor at (t, MaxID) is past every task
// that wakes at t.
var MaxID = task.ID{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// add puts id in the wheel at `at`, remembering app if it is known (an
// entry added without one keeps the app it had). The entry is no longer
// deferred: Defer marks it again after.
func (c *Core) add(id task.ID, at int64, app string) {
	if app == "" {
		c.wheel.Add(id, at)
	} else {
		c.apps.unref(c.wheel.AddTagged(id, at, c.apps.ref(app)))
	}
	delete(c.deferred, id)
}

// forget removes id from the wheel and its bookkeeping: the one place that
// keeps the three in step when an entry goes.
func (c *Core) forget(id task.ID) {
	if tag, ok := c.wheel.Tag(id); ok {
		c.wheel.Remove(id)
		c.apps.unref(tag)
	}
	delete(c.seq, id)
	delete(c.deferred, id)
}

// earlier reports whether at is before the instant Advance last armed for.
func (c *Core) earlier(at int64) bool { return c.armed < 0 || at < c.armed }

// trim shrinks the wheel to 3/4 of MaxLoaded when direct inserts pushed it
// well past the cap: it keeps the earliest entries and moves the cursor
// back to the last one kept, so that scans reload the rest in order. Rare,
// and O(n log n) when it happens.
//
// Deferred entries stay: the store has them due earlier than their wheel
// time, maybe before the new cursor, where no scan would read them again.
func (c *Core) trim() {
	type ent struct {
		id task.ID
		at int64
	}
	all := make([]ent, 0, c.wheel.Len())
	c.wheel.All(func(id task.ID, at int64) {
		if _, ok := c.deferred[id]; !ok {
			all = append(all, ent{id, at})
		}
	})
	slices.SortFunc(all, func(a, b ent) int {
		if d := cmp.Compare(a.at, b.at); d != 0 {
			return d
		}
		return slices.Compare(a.id[:], b.id[:])
	})
	keep := c.cfg.MaxLoaded * 3 / 4
	if keep >= len(all) || keep == 0 {
		return
	}
	for _, x := range all[keep:] {
		c.forget(x.id)
	}
	last := all[keep-1]
	c.cursor = store.Cursor{At: time.UnixMilli(last.at), ID: last.id}
	c.gen++
	c.capped = true
}
