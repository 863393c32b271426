package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Creates from concurrent requests share one store write (a group commit):
// a request that finds a write slot free writes its tasks at once; the
// requests that come while the writes in flight run queue theirs, and the
// next write takes them all (up to createGatherMax tasks). A lone create waits for nothing; under load a
// PostgreSQL or MySQL transaction, or a Pebble batch, carries many
// requests' tasks. Duplicate keys across the gathered requests resolve as
// within one batch: the first creates, the others get it back.

// createWriters bounds the create writes in flight: with two, one gathers
// while the other commits. A store may ask for another bound
// ([store.CreateWriters]: pebblestore asks for one, as its log's syncs
// gather the writes themselves).
const createWriters = 2

// createGatherMax bounds the tasks one gathered write carries.
const createGatherMax = 4 * MaxBatch

// createQueue is the requests waiting for a create write.
type createQueue struct {
	sync.Mutex
	pending    []*createReq
	writers    int // create writes in flight
	maxWriters int // their bound: createWriters, or the store's
}

// createReq is one request's tasks, waiting to be written.
type createReq struct {
	tasks []*task.Task
	done  chan struct{} // closed once res or err is set
	res   []store.CreateResult
	err   error
	// turn hands the request a write slot a leaving writer gave up
	// (capacity 1); turned, under the queue's lock, says it was sent.
	turn   chan struct{}
	turned bool
}

// create writes tasks durably, gathered with other requests' (see above).
// It returns once its tasks are written, also when ctx ends meanwhile: the
// write is bounded by callTimeout, and a request that left its place would
// have to hand on a write slot it may be given.
func (e *Engine) create(ctx context.Context, tasks []*task.Task) ([]store.CreateResult, error) {
	r := &createReq{tasks: tasks, done: make(chan struct{}), turn: make(chan struct{}, 1)}
	c := &e.creates
	c.Lock()
	c.pending = append(c.pending, r)
	writer := c.writers < c.maxWriters
	if writer {
		c.writers++
	}
	c.Unlock()
	for {
		if writer {
			e.writeUntil(ctx, r)
			writer = false
		}
		select {
		case <-r.done:
			select {
			case <-r.turn:
				// Given a slot while another writer wrote our tasks:
				// hand it on.
				e.writeUntil(ctx, r)
			default:
			}
			return r.res, r.err
		case <-r.turn:
			writer = true
		}
	}
}

// writeUntil holds a write slot and writes the pending requests, oldest
// first, until r is written (by this slot or another). It then gives the
// slot to the oldest request still waiting, or frees it: a writer does not
// go on writing others' tasks after its own are written.
func (e *Engine) writeUntil(ctx context.Context, r *createReq) {
	c := &e.creates
	c.Lock()
	defer c.Unlock()
	for !isDone(r) && len(c.pending) > 0 {
		batch := c.takeLocked()
		c.Unlock()
		e.writeCreates(ctx, batch)
		c.Lock()
	}
	for _, next := range c.pending {
		if !next.turned {
			next.turned = true
			next.turn <- struct{}{}
			return
		}
	}
	c.writers--
}

func isDone(r *createReq) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// takeLocked takes the pending requests, oldest first, up to
// createGatherMax tasks (always at least one request).
func (c *createQueue) takeLocked() []*createReq {
	n, size := 0, 0
	for n < len(c.pending) && (n == 0 || size+len(c.pending[n].tasks) <= createGatherMax) {
		size += len(c.pending[n].tasks)
		n++
	}
	batch := c.pending[:n:n]
	c.pending = c.pending[n:]
	return batch
}

// writeCreates writes the tasks of batch in one store call and hands each
// request its results. The write runs to its end whatever becomes of the
// request that runs it: other requests wait on it.
func (e *Engine) writeCreates(ctx context.Context, batch []*createReq) {
	var all []*task.Task
	for _, r := range batch {
		all = append(all, r.tasks...)
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	rs, err := e.store.Create(wctx, all)
	if err == nil && len(rs) != len(all) {
		err = fmt.Errorf("store returned %d results for %d tasks", len(rs), len(all))
	}
	off := 0
	for _, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.res = rs[off : off+len(r.tasks) : off+len(r.tasks)]
		}
		off += len(r.tasks)
		close(r.done)
	}
}
