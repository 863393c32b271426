package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// MaxBodyMemoryDefault is Config.MaxBodyMemory's default: 128 MiB, room
// at once for two batches at their 32 MiB cap (in the half for large
// bodies) and about 420 creates at the default payload cap, or 850 creates.
// Memory in use is a small multiple of it at most: a body's tasks, their
// records and the store's write.
const MaxBodyMemoryDefault = 128 << 20

// BodyWaitDefault is Config.BodyWait's default.
const BodyWaitDefault = time.Second

// bodyBudget bounds the memory that request bodies take: every body is
// charged its size (its Content-Length, or its route's cap when the length
// is not given) before it is read, and the charge is held until the
// request is answered, since the tasks decoded from it live that long.
// Past the budget a request waits up to wait for the bodies ahead of it,
// then gets 503 with Retry-After, unread.
//
// Bodies larger than one task's cap (batches, acks of many tasks, imports)
// may hold at most half the budget between them, so that a flood of
// batches cannot turn away the creates of every other client.
//
// golang.org/x/sync/semaphore is FIFO: a large body waiting at the head
// makes the smaller ones behind it wait too (no starvation); the half kept
// for small bodies keeps that wait short.
type bodyBudget struct {
	all   *semaphore.Weighted
	large *semaphore.Weighted // bodies over largeOver: half of all
	// largeOver is one task's body cap.
	largeOver int64
	wait      time.Duration
}

// newBodyBudget returns a budget of size bytes (at least twice largest, the
// largest body a route takes, so that it fits in the large half) in which
// bodies over oneTask bytes are large.
func newBodyBudget(size, oneTask, largest int64, wait time.Duration) *bodyBudget {
	size = max(size, 2*largest)
	return &bodyBudget{
		all:       semaphore.NewWeighted(size),
		large:     semaphore.NewWeighted(size / 2),
		largeOver: oneTask,
		wait:      wait,
	}
}

// errBodyBudget is the answer past the budget.
var errBodyBudget = &apiError{status: http.StatusServiceUnavailable, code: "overloaded",
	msg: "the server holds as many request bodies in memory as its budget allows (max_body_memory); retry after the Retry-After delay"}

// acquire takes n bytes of the budget, waiting up to b.wait.
func (b *bodyBudget) acquire(ctx context.Context, n int64) error {
	large := n > b.largeOver
	if !large {
		if b.all.TryAcquire(n) {
			return nil
		}
	} else if b.large.TryAcquire(n) {
		if b.all.TryAcquire(n) {
			return nil
		}
		b.large.Release(n) // wait for both below, in turn with the others
	}
	wctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	return b.acquireWait(ctx, wctx, n, large)
}

func (b *bodyBudget) acquireWait(ctx, wctx context.Context, n int64, large bool) error {
	fail := func() error {
		if ctx.Err() != nil {
			return ctx.Err() // the client went away
		}
		return errBodyBudget
	}
	if large {
		if b.large.Acquire(wctx, n) != nil {
			return fail()
		}
	}
	if b.all.Acquire(wctx, n) != nil {
		if large {
			b.large.Release(n)
		}
		return fail()
	}
	return nil
}

func (b *bodyBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.all.Release(n)
	if n > b.largeOver {
		b.large.Release(n)
	}
}

// bodyCharge is what one request holds of the budget; [Handler.charged]
// gives it back when the request is answered.
type bodyCharge struct {
	b    *bodyBudget
	held []int64
}

type bodyChargeKey struct{}

// budgeted is charged as a handler, for routes outside limited.
func (h *Handler) budgeted(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h.charged(next, w, r) }
}

// charged serves next with a charge in its context that takeBody draws on,
// and gives the charge back when next returns.
func (h *Handler) charged(next http.HandlerFunc, w http.ResponseWriter, r *http.Request) {
	c := &bodyCharge{b: h.bodies}
	defer func() {
		for _, n := range c.held {
			c.b.release(n)
		}
	}()
	next(w, r.WithContext(context.WithValue(r.Context(), bodyChargeKey{}, c)))
}

// takeBody charges the body of r, whose route takes at most limit bytes,
// to the budget before it is read. A body that says it is over limit is
// refused at once (413), unread.
func takeBody(r *http.Request, limit int64) error {
	n := limit
	if r.ContentLength >= 0 {
		if r.ContentLength > limit {
			return &http.MaxBytesError{Limit: limit}
		}
		n = r.ContentLength
	}
	c, _ := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	if c == nil || n == 0 {
		return nil // a route outside charged: its own bound applies
	}
	if err := c.b.acquire(r.Context(), n); err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("wait for the body budget: %w", err)
		}
		return err
	}
	c.held = append(c.held, n)
	return nil
}
