package engine

import (
	"context"
	"sync"
)

// waiters are the leases waiting for an app's pull tasks to fall due (a
// long poll: Lease with a wait). Its mu guards the channels; nothing is
// taken under it.
type waiters struct {
	index Index // PullDue tells the other nodes (none on one node)
	mu    struct {
		sync.Mutex
		m map[string]chan struct{}
	}
}

func newWaiters(index Index) *waiters {
	w := &waiters{index: index}
	w.mu.m = make(map[string]chan struct{})
	return w
}

// due wakes the leases waiting on app, on every node.
func (w *waiters) due(app string) {
	w.notify(app)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	w.index.PullDue(ctx, app)
}

// notify wakes this process's leases waiting on app.
func (w *waiters) notify(app string) {
	w.mu.Lock()
	ch, ok := w.mu.m[app]
	if ok {
		delete(w.mu.m, app)
	}
	w.mu.Unlock()
	if ok {
		close(ch)
	}
}

// wait returns a channel closed at the next due or notify of app.
func (w *waiters) wait(app string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.mu.m[app]
	if !ok {
		ch = make(chan struct{})
		w.mu.m[app] = ch
	}
	return ch
}
