package engine

import (
	"context"
	"sync"
)

// waiters are the leases waiting for an app's pull tasks to fall due (a
// long poll: Lease with a wait). Its mu guards the channels; nothing is
// taken under it.
type waiters struct {
	tell func(ctx context.Context, app string) // Index.PullDue: tells the other nodes; nil on one node
	mu   struct {
		sync.Mutex
		m map[string]chan struct{}
	}
}

func newWaiters(tell func(ctx context.Context, app string)) *waiters {
	w := &waiters{tell: tell}
	w.mu.m = make(map[string]chan struct{})
	return w
}

// due wakes the leases waiting on app, on every node. On one node it
// makes no context: it runs for every pull task falling due.
func (w *waiters) due(app string) {
	w.notify(app)
	if w.tell == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	w.tell(ctx, app)
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
