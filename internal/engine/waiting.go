package engine

import (
	"slices"

	"github.com/toc-dev/toc/task"
)

// waitingDeliveries are push attempts that found no free worker when their
// fire job handed them out (deliverAll): each app's in the order they
// started, taken by the apps in turn, by whichever worker is free first.
// An attempt of one app thus never waits behind another app's delivery
// that hangs (it did when the firing worker ran the rest of its batch one
// after the other), only for a free worker. Guarded by dispatcher.mu.
type waitingDeliveries struct {
	by   map[string][]*task.Task // by app, non-empty
	ring []string                // the apps in by, in turn order
	turn int                     // ring[turn] goes next
}

func (w *waitingDeliveries) push(ts ...*task.Task) {
	if w.by == nil {
		w.by = map[string][]*task.Task{}
	}
	for _, t := range ts {
		q, ok := w.by[t.App]
		if !ok {
			// Joins the turns last: just before the app whose turn it is.
			w.ring = slices.Insert(w.ring, w.turn, t.App)
			if len(w.ring) > 1 {
				w.turn++
			}
		}
		w.by[t.App] = append(q, t)
	}
}

// pop returns the next app's oldest attempt, or nil.
func (w *waitingDeliveries) pop() *task.Task {
	if len(w.ring) == 0 {
		return nil
	}
	app := w.ring[w.turn]
	q := w.by[app]
	t := q[0]
	q[0] = nil
	if q = q[1:]; len(q) == 0 {
		delete(w.by, app)
		w.ring = slices.Delete(w.ring, w.turn, w.turn+1)
	} else {
		w.by[app] = q
		w.turn++
	}
	if w.turn >= len(w.ring) {
		w.turn = 0
	}
	return t
}
