package sched

import (
	"bytes"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// FuzzCore drives a Core the way the engine does, from a byte string of
// operations, against a model of the store, and checks after every step the
// core's promise: every task whose latest write has been tracked, that is
// live, and whose wake time is at or before the cursor, is ready, in the
// owner's hands, or in the wheel at or before its wake time (an entry may
// fire early and find the task moved; it must never fire late). Writes are
// tracked out of order, scans race with writes, the cap forces trims, and
// the owner defers, enqueues and untracks tasks, as in the engine.
//
// It checks the fair turns too: a task taken comes from its own app's
// queue (or the queue of the unknown app ""), and while an app has ready
// tasks, the other apps take at most the sum of their weights between two
// of its tasks.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 1, 5, 6, 0, 0, 0, 2, 9, 7, 0, 0, 4, 0, 50, 5, 0, 9})
	f.Add([]byte{6, 0, 0, 0, 3, 40, 2, 3, 1, 7, 0, 0, 0, 3, 2, 1, 0, 0, 4, 0, 90, 5, 0, 3, 8, 3, 30})
	f.Add([]byte{0, 1, 200, 0, 2, 201, 0, 3, 202, 0, 4, 203, 6, 0, 0, 7, 0, 0, 0, 5, 1, 0, 6, 2, 0, 7, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newModel(t)
		for i := 0; i+2 < len(ops); i += 3 {
			m.step(ops[i], ops[i+1], ops[i+2])
			m.check(i / 3)
		}
	})
}

var trace = flag.Bool("trace", false, "log FuzzCore's steps")

// record is a task as the model's store holds it.
type record struct {
	wake time.Time // zero: finished (nothing pending)
	seq  uint64
	app  string
}

type model struct {
	t       *testing.T
	c       *Core
	now     time.Time
	seq     uint64
	store   map[task.ID]record
	pending []Entry          // written, not yet tracked
	tracked map[task.ID]bool // the latest write was tracked
	held    map[task.ID]bool // taken by the owner, or deferred by it
	scan    *Scan            // a scan under way
	read    []store.Wakeup   // what it read
	// waited counts, per app with ready tasks, the tasks other apps took
	// since it last took one or joined the turns.
	waited map[string]int
}

// weights are the model's apps' weights: shop takes two tasks a turn.
func weights(app string) int {
	if app == "shop" {
		return 2
	}
	return 1
}

// appOf is the app of task a (a function of its number, so that every
// write of a task names the same app).
func appOf(a byte) string {
	switch {
	case a&1 == 1:
		return "shop"
	case a%4 == 2:
		return "fund"
	}
	return "bank"
}

// modelApps are the apps a queue may have: the model's and the unknown one.
var modelApps = []string{"bank", "shop", "fund", ""}

func newModel(t *testing.T) *model {
	return &model{
		t:       t,
		c:       New(t0, Config{MaxLoaded: 16, Weight: weights}),
		now:     t0,
		store:   map[task.ID]record{},
		tracked: map[task.ID]bool{},
		held:    map[task.ID]bool{},
		waited:  map[string]int{},
	}
}

func (m *model) step(op, a, b byte) {
	tid := id(int(a % 32))
	if *trace {
		m.t.Logf("op %d task %d b %d (now %d, cursor %d)", op%10, a%32, b, m.now.Sub(t0).Milliseconds(), m.c.cursor.At.Sub(t0).Milliseconds())
	}
	switch op % 10 {
	case 0, 1: // a write: the task wakes b*4 ms from now, or finishes (b = 0)
		m.seq++
		r := record{seq: m.seq, app: appOf(a)}
		if b != 0 {
			r.wake = m.now.Add(time.Duration(b) * 4 * time.Millisecond)
		}
		m.store[tid] = r
		m.tracked[tid] = false
		m.pending = append(m.pending, Entry{ID: tid, WakeAt: r.wake, Seq: r.seq, App: r.app})
		if op%10 == 0 { // tracked at once; else later, maybe after newer ones
			m.trackPending(len(m.pending) - 1)
		}
	case 2: // a write's track, in any order
		if len(m.pending) > 0 {
			m.trackPending(int(b) % len(m.pending))
		}
	case 3: // time passes
		m.now = m.now.Add(time.Duration(b) * time.Millisecond)
		m.c.Advance(m.now)
	case 4: // the owner takes ready tasks
		m.take(int(b%8) + 1)
	case 5: // the owner fires a held task: writes and tracks it
		if hid, ok := m.firstHeld(); ok {
			delete(m.held, hid)
			m.step(0, hid[15], b)
		}
	case 6: // a scan begins and reads the store
		if m.scan != nil {
			return
		}
		s, ok := m.c.BeginScan(m.now.Add(time.Duration(b)*8*time.Millisecond), int(a%8)+1)
		if !ok {
			return
		}
		m.scan, m.read = &s, m.readStore(s)
	case 7: // the scan ends
		if m.scan == nil {
			return
		}
		m.c.EndScan(*m.scan, m.read, b%8 == 0)
		m.scan, m.read = nil, nil
	case 8: // the owner defers a held task (a rate reservation), or
		// enqueues it (a free in-flight slot unparked it), with its app or
		// without; it stays held until it comes back through Take
		if hid, ok := m.firstHeld(); ok {
			app := m.store[hid].app
			if b%4 == 3 {
				app = ""
			}
			if b%2 == 0 {
				m.c.Defer(hid, m.now.Add(time.Duration(b)*time.Millisecond), app)
			} else {
				m.c.Enqueue(app, hid)
			}
		}
	case 9: // the task is gone from the store (swept); the owner forgets it
		if a%4 == 0 {
			m.c.Rescan(b%2 == 0)
			return
		}
		delete(m.store, tid)
		delete(m.tracked, tid)
		delete(m.held, tid)
		m.pending = slices.DeleteFunc(m.pending, func(e Entry) bool { return e.ID == tid })
		m.c.Untrack(tid)
	}
}

// take has the owner take up to n ready tasks, and checks that each came
// from its app's queue and that every app with ready tasks got its turn.
func (m *model) take(n int) {
	left := map[string]int{}
	for app, q := range m.c.queues {
		left[app] = len(q.ids)
	}
	total := 0
	for _, app := range modelApps {
		total += weights(app)
	}
	for _, tk := range m.c.Take(n) {
		if r, ok := m.store[tk.ID]; ok && tk.App != "" && tk.App != r.app {
			m.t.Fatalf("taken %x from the queue of %q; its app is %q", tk.ID[12:], tk.App, r.app)
		}
		if left[tk.App] == 0 {
			m.t.Fatalf("taken %x from the queue of %q, which had no tasks", tk.ID[12:], tk.App)
		}
		left[tk.App]--
		m.waited[tk.App] = 0
		for app, l := range left {
			if app == tk.App || l == 0 {
				continue
			}
			m.waited[app]++
			if bound := total - weights(app); m.waited[app] > bound {
				m.t.Fatalf("app %q has ready tasks but the others took %d since its last, more than their weights (%d)", app, m.waited[app], bound)
			}
		}
		m.held[tk.ID] = true
	}
}

// firstHeld is the held task with the smallest id: a choice that does not
// depend on map order, so that a failing input fails again.
func (m *model) firstHeld() (task.ID, bool) {
	var ids []task.ID
	for hid := range m.held {
		ids = append(ids, hid)
	}
	if len(ids) == 0 {
		return task.ID{}, false
	}
	return slices.MinFunc(ids, func(a, b task.ID) int { return bytes.Compare(a[:], b[:]) }), true
}

func (m *model) trackPending(i int) {
	e := m.pending[i]
	m.pending = slices.Delete(m.pending, i, i+1)
	m.c.Track(e)
	if r, ok := m.store[e.ID]; ok && r.seq == e.Seq {
		m.tracked[e.ID] = true
	}
}

// readStore is a scan's read: the live tasks after s.From up to s.Until,
// in wake order, at most s.Limit.
func (m *model) readStore(s Scan) []store.Wakeup {
	var ws []store.Wakeup
	for tid, r := range m.store {
		c := store.Cursor{At: r.wake, ID: tid}
		if !r.wake.IsZero() && s.From.Less(c) && !r.wake.After(s.Until) {
			ws = append(ws, store.Wakeup{ID: tid, At: r.wake, App: r.app})
		}
	}
	slices.SortFunc(ws, func(a, b store.Wakeup) int {
		ca, cb := store.Cursor{At: a.At, ID: a.ID}, store.Cursor{At: b.At, ID: b.ID}
		switch {
		case ca.Less(cb):
			return -1
		case cb.Less(ca):
			return 1
		}
		return 0
	})
	if len(ws) > s.Limit {
		ws = ws[:s.Limit]
	}
	return ws
}

func (m *model) check(step int) {
	ready := map[task.ID]bool{}
	n := 0
	for app, q := range m.c.queues {
		if len(q.ids) == 0 || q.app != app || !slices.Contains(m.c.ring, q) {
			m.t.Fatalf("step %d: the ready queue of %q is empty (%d), misnamed (%q) or out of the turns", step, app, len(q.ids), q.app)
		}
		for _, rid := range q.ids {
			ready[rid] = true
		}
		n += len(q.ids)
	}
	if n != m.c.nready || len(m.c.ring) != len(m.c.queues) || (len(m.c.ring) > 0 && m.c.turn >= len(m.c.ring)) {
		m.t.Fatalf("step %d: %d ready, counted %d; %d apps in turn, %d queues; turn %d", step, n, m.c.nready, len(m.c.ring), len(m.c.queues), m.c.turn)
	}
	for app := range m.waited {
		if _, ok := m.c.queues[app]; !ok {
			delete(m.waited, app) // out of the turns: it joins them afresh
		}
	}
	for tid, r := range m.store {
		if r.wake.IsZero() || !m.tracked[tid] || m.held[tid] || ready[tid] {
			continue
		}
		if m.c.cursor.Less(store.Cursor{At: r.wake, ID: tid}) {
			continue // not loaded yet: a scan brings it
		}
		at, ok := m.c.wheel.Contains(tid)
		switch {
		case !ok:
			m.t.Fatalf("step %d: task %x wakes at %d, before the cursor %d, but is nowhere", step, tid[12:], r.wake.Sub(t0).Milliseconds(), m.c.cursor.At.Sub(t0).Milliseconds())
		case at > r.wake.UnixMilli():
			m.t.Fatalf("step %d: task %x wakes at %d but its wheel entry is at %d: it would fire late", step, tid[12:], r.wake.Sub(t0).Milliseconds(), at-t0.UnixMilli())
		}
	}
	// The wheel's entries name their apps, which the app table counts.
	refs := map[uint32]int{}
	m.c.wheel.All(func(tid task.ID, _ int64) {
		tag, _ := m.c.wheel.Tag(tid)
		if r, ok := m.store[tid]; ok && tag != 0 && m.c.apps.name(tag) != r.app {
			m.t.Fatalf("step %d: app %q kept for %x of %q", step, m.c.apps.name(tag), tid[12:], r.app)
		}
		if tag != 0 {
			refs[tag]++
		}
	})
	if len(refs) != len(m.c.apps.tags) {
		m.t.Fatalf("step %d: the wheel names %d apps, the table has %d: %v", step, len(refs), len(m.c.apps.tags), m.c.apps.tags)
	}
	for app, tag := range m.c.apps.tags {
		if m.c.apps.names[tag] != app || m.c.apps.refs[tag] != refs[tag] {
			m.t.Fatalf("step %d: app %q: tag %d names %q, counts %d entries, the wheel has %d", step, app, tag, m.c.apps.names[tag], m.c.apps.refs[tag], refs[tag])
		}
	}
	// The bookkeeping is only for entries in the wheel.
	for tid := range m.c.seq {
		if !m.c.has(tid) && !ready[tid] && !m.held[tid] {
			// Advance and Take leave seq behind for tasks on their way
			// through the owner; anything else must be in the wheel.
			if _, ok := m.store[tid]; !ok {
				m.t.Fatalf("step %d: seq kept for %x, which is gone", step, tid[12:])
			}
		}
	}
}
