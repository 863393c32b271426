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
// than a map here and keeps the eviction choice simple.
type recentSet struct {
	tasks []*task.Task // never modified: cloned when handed out
}

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
	i := r.index(id)
	if t == nil || t.State.Final() || t.WakeAt.IsZero() || t.WakeAt.After(now.Add(recentHorizon)) {
		if i >= 0 {
			last := len(r.tasks) - 1
			r.tasks[i], r.tasks[last] = r.tasks[last], nil
			r.tasks = r.tasks[:last]
		}
		return
	}
	switch {
	case i >= 0:
		r.tasks[i] = t
	case len(r.tasks) < recentPerStripe:
		r.tasks = append(r.tasks, t)
	default:
		latest := 0
		for j, x := range r.tasks {
			if needed(x).After(needed(r.tasks[latest])) {
				latest = j
			}
		}
		if needed(t).Before(needed(r.tasks[latest])) {
			r.tasks[latest] = t
		}
	}
}

// get returns the kept version of id, which the caller must not modify.
func (r *recentSet) get(id task.ID) (*task.Task, bool) {
	if i := r.index(id); i >= 0 {
		return r.tasks[i], true
	}
	return nil, false
}

func (r *recentSet) index(id task.ID) int {
	for i, t := range r.tasks {
		if t.ID == id {
			return i
		}
	}
	return -1
}
