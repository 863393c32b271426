package pebblestore

import (
	"time"

	"github.com/toc-dev/toc/task"
)

// The fire path reads each task back soon after it was written: created a
// few seconds before it is due, leased when it fires, and read again to
// record the attempt's outcome. A Pebble point read (iterator setup,
// memtables and L0 files) costs more than decoding the record. So each id
// stripe keeps the
// tasks last written under it that wake soon, decoded, and Update reads
// them from there.
//
// An entry is only ever written or read with its id stripe locked, after the
// commit that wrote the same task returned, so it is the record in the
// database. Only live tasks that wake within recentHorizon are kept: far-
// future tasks are not read back soon, and keeping them would make memory
// grow with the number pending.

const (
	recentPerStripe = 64               // 512 stripes: 32 768 tasks at most
	recentHorizon   = 30 * time.Second // wake within this: kept
)

// recentSet is one id stripe's recently written tasks. Guarded by the
// stripe's lock. A linear scan of at most recentPerStripe ids is cheaper
// than a map here and keeps the eviction choice simple. The ids and the
// times each task is needed are kept beside the tasks, in arrays of their
// own, so that the scans (one per write; two once the set is full) read
// contiguous memory instead of following a pointer per task.
type recentSet struct {
	ids   []task.ID
	need  []instant    // needed(tasks[i])
	tasks []*task.Task // never modified: cloned when handed out
}

// instant is a time as two integers, which compare faster than
// time.Time's After (its wall and ext words decoded at every call).
type instant struct {
	sec  int64
	nsec int64
}

func instantOf(t time.Time) instant { return instant{t.Unix(), int64(t.Nanosecond())} }

func (a instant) before(b instant) bool { return a.sec < b.sec || a.sec == b.sec && a.nsec < b.nsec }

// needed is when t will next be read: its wake time while it waits, now
// while an attempt is under way (its outcome is written when the attempt
// ends, usually within milliseconds).
func needed(t *task.Task) time.Time {
	if t.State == task.Delivering {
		return t.UpdatedAt
	}
	return t.WakeAt
}

// keep records t (just committed) as the latest version of its id, or
// forgets the id when t is nil, finished or not waking soon. When the set
// is full, the task needed last gives way: firing order, unlike the order
// of writes, is what predicts the next read (first in, first out evicted
// each task just before it fired, when more were due than fit).
func (r *recentSet) keep(id task.ID, t *task.Task, now time.Time) {
	if i := r.place(id, t, now); i >= 0 {
		r.tasks[i] = t
	}
}

// keepCopy is keep for a task the caller goes on holding (a create's,
// handed back as its result): a copy of t is made only when it is kept.
func (r *recentSet) keepCopy(t *task.Task, now time.Time) {
	if i := r.place(t.ID, t, now); i >= 0 {
		r.tasks[i] = t.Clone()
	}
}

// place is keep's choice: it returns where t goes, with its id and need
// set there, or -1 when it is not kept (its id forgotten).
func (r *recentSet) place(id task.ID, t *task.Task, now time.Time) int {
	i := r.index(id)
	if t == nil || t.State.Final() || t.WakeAt.IsZero() || t.WakeAt.After(now.Add(recentHorizon)) {
		if i >= 0 {
			last := len(r.tasks) - 1
			r.ids[i], r.need[i], r.tasks[i] = r.ids[last], r.need[last], r.tasks[last]
			r.tasks[last] = nil
			r.ids, r.need, r.tasks = r.ids[:last], r.need[:last], r.tasks[:last]
		}
		return -1
	}
	n := instantOf(needed(t))
	switch {
	case i >= 0:
		r.need[i] = n
		return i
	case len(r.tasks) < recentPerStripe:
		r.ids, r.need, r.tasks = append(r.ids, id), append(r.need, n), append(r.tasks, nil)
		return len(r.tasks) - 1
	}
	latest := 0
	for j := range r.need {
		if r.need[latest].before(r.need[j]) {
			latest = j
		}
	}
	if !n.before(r.need[latest]) {
		return -1
	}
	r.ids[latest], r.need[latest] = id, n
	return latest
}

// get returns the kept version of id, which the caller must not modify.
func (r *recentSet) get(id task.ID) (*task.Task, bool) {
	if i := r.index(id); i >= 0 {
		return r.tasks[i], true
	}
	return nil, false
}

func (r *recentSet) index(id task.ID) int {
	for i := range r.ids {
		if r.ids[i] == id {
			return i
		}
	}
	return -1
}
