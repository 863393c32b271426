package engine

import (
	"context"
	"fmt"
	"slices"
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
// within one batch: the first creates, the others get it back. The tasks a
// write created are handed on (mirrored to a cluster's index, tracked) by
// the write, all of them at once, before its requests are answered: a
// cluster's gather of creates costs one index write, not one per request.

// createWriters bounds the create writes in flight: with two, one gathers
// while the other commits. A store may ask for another bound
// ([store.CreateWriters]: pebblestore asks for one, as its log's syncs
// gather the writes themselves).
const createWriters = 2

// createSplitMin is how many tasks must be waiting (a new request's
// included) for a request to open a second write while one is in flight.
// Fewer wait for the write in flight and go in the next together: a
// write's cost is mostly its commit when it carries few tasks (PostgreSQL:
// single creates from 16 clients cost 20-30 % less CPU each in writes of
// about ten than of five, at the same rate), mostly its rows when it
// carries many, and then two writes in flight use two cores (batches of
// 1000 from 4 clients: 10-40 % more creates/s than one at a time).
const createSplitMin = 100

// createGatherMax bounds the tasks one gathered write carries.
const createGatherMax = 4 * MaxBatch

// creates is the creates batcher: the requests waiting for a create
// write, and the writes in flight. It has its own lock (mu), held only
// to queue and take requests, never across the store call.
type creates struct {
	// write stores tasks in one durable write (Store.Create).
	write func(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error)
	// wrote hands on the tasks a write created (writer.wrote: mirror
	// and track), before the write's requests are answered. Nil: nothing
	// to do (tests).
	wrote func(ctx context.Context, ws ...written)
	// maxWriters bounds the writes in flight: createWriters, or the
	// store's (store.CreateWriters). Set by newCreates, never changed.
	maxWriters int

	mu struct {
		sync.Mutex
		pending []*createReq
		waiting int // the tasks of pending
		// spare is the array of a write's requests once written, for
		// pending to grow into again (pending hands its array to the
		// write that takes all of it): a request is queued without
		// allocating.
		spare   []*createReq
		writers int // create writes in flight
	}
}

// newCreates returns the creates batcher of st: its writes go to
// st.Create, at most createWriters (or the number st asks for) at once,
// and the tasks each created to wrote.
func newCreates(st store.Store, wrote func(ctx context.Context, ws ...written)) *creates {
	c := &creates{write: st.Create, wrote: wrote, maxWriters: createWriters}
	if cw, ok := store.As[store.CreateWriters](st); ok && cw.CreateWriters() > 0 {
		c.maxWriters = cw.CreateWriters()
	}
	return c
}

// createReq is one request's tasks, waiting to be written.
type createReq struct {
	tasks []*task.Task
	// wake tells the request's goroutine (capacity 1, sent without
	// blocking) that done or turned changed: one channel for both, as the
	// two come in either order and the goroutine reads both at each wake.
	wake chan struct{}
	// Under the batcher's lock: done says res or err is set; turned
	// that the request was given a write slot a leaving writer gave up,
	// taken says its goroutine has seen that.
	done, turned, taken bool
	res                 []store.CreateResult
	err                 error
}

// create writes tasks durably, gathered with other requests' (see above).
// The tasks it created are handed to wrote when it returns. It returns once
// its tasks are written, also when ctx ends meanwhile: the
// write is bounded by callTimeout, and a request that left its place would
// have to hand on a write slot it may be given.
func (c *creates) create(ctx context.Context, tasks []*task.Task) ([]store.CreateResult, error) {
	r := &createReq{tasks: tasks, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.mu.pending = append(c.mu.pending, r)
	c.mu.waiting += len(tasks)
	writer := c.mu.writers == 0 || c.mu.writers < c.maxWriters && c.mu.waiting >= createSplitMin
	if writer {
		c.mu.writers++
	}
	c.mu.Unlock()
	for {
		if writer {
			c.writeUntil(ctx, r)
		}
		<-r.wake
		c.mu.Lock()
		done := r.done
		writer = r.turned && !r.taken
		r.taken = r.taken || writer
		c.mu.Unlock()
		if done {
			if writer {
				// Given a slot while another writer wrote our tasks:
				// hand it on.
				c.writeUntil(ctx, r)
			}
			return r.res, r.err
		}
	}
}

// writeUntil holds a write slot and writes the pending requests, oldest
// first, until r is written (by this slot or another). It then gives the
// slot to the oldest request still waiting, or frees it: a writer does not
// go on writing others' tasks after its own are written. The slot goes on
// as soon as r's batch is stored, before its tasks are handed to wrote (in
// a cluster a Redis round trip), so that the next write's commit overlaps
// it.
func (c *creates) writeUntil(ctx context.Context, r *createReq) {
	c.mu.Lock()
	for !r.done && len(c.mu.pending) > 0 {
		batch := c.takeLocked()
		c.mu.Unlock()
		fresh := c.writeBatch(ctx, batch)
		c.mu.Lock()
		own := slices.Contains(batch, r)
		if own {
			c.handOnLocked()
		}
		c.mu.Unlock()
		if c.wrote != nil && len(fresh) > 0 {
			wctx, cancel := detached(ctx)
			c.wrote(wctx, fresh...)
			cancel()
		}
		c.mu.Lock()
		c.doneLocked(batch)
		if own {
			c.mu.Unlock()
			return
		}
	}
	c.handOnLocked()
	c.mu.Unlock()
}

// handOnLocked gives the caller's write slot to the oldest request waiting
// that has none, or frees it.
func (c *creates) handOnLocked() {
	for _, next := range c.mu.pending {
		if !next.turned {
			next.turned = true
			signal(next.wake)
			return
		}
	}
	c.mu.writers--
}

// doneLocked marks the requests of a written batch done and wakes each,
// and keeps the batch's array for pending to reuse when it has none.
func (c *creates) doneLocked(batch []*createReq) {
	for _, r := range batch {
		r.done = true
		signal(r.wake)
	}
	if c.mu.spare == nil {
		clear(batch)
		c.mu.spare = batch[:0]
	}
}

// takeLocked takes the pending requests, oldest first, up to
// createGatherMax tasks (always at least one request).
func (c *creates) takeLocked() []*createReq {
	n, size := 0, 0
	for n < len(c.mu.pending) && (n == 0 || size+len(c.mu.pending[n].tasks) <= createGatherMax) {
		size += len(c.mu.pending[n].tasks)
		n++
	}
	batch := c.mu.pending[:n:n]
	c.mu.pending = c.mu.pending[n:]
	c.mu.waiting -= size
	if len(c.mu.pending) == 0 {
		// All taken: the next requests queue in the spare array, not
		// in a new one grown from the end of this one.
		c.mu.pending, c.mu.spare = c.mu.spare, nil
	}
	return batch
}

// writeBatch writes the tasks of batch in one store call, hands each
// request its results and returns the tasks created, for wrote (the caller
// hands them on, then marks the requests done). The write runs to its end
// whatever becomes of the request that runs it: other requests wait on it.
func (c *creates) writeBatch(ctx context.Context, batch []*createReq) []written {
	all := batch[0].tasks // one request's (most often): no copy
	if len(batch) > 1 {
		all = nil
		for _, r := range batch {
			all = append(all, r.tasks...)
		}
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	rs, err := c.write(wctx, all)
	if err == nil && len(rs) != len(all) {
		err = fmt.Errorf("store returned %d results for %d tasks", len(rs), len(all))
	}
	var fresh []written
	if err == nil && c.wrote != nil {
		fresh = make([]written, 0, len(rs))
		for _, r := range rs {
			if r.Created {
				fresh = append(fresh, written{t: r.Task}) // a new task: no other write to race with
			}
		}
	}
	off := 0
	for _, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.res = rs[off : off+len(r.tasks) : off+len(r.tasks)]
		}
		off += len(r.tasks)
	}
	return fresh
}
