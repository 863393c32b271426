package cluster

import (
	"context"
	"strings"
	"sync"

	"github.com/toc-dev/toc/internal/store/redisindex"
)

// gather runs index writes one round trip at a time, gathering the calls
// that come while one is under way into the next: the calls that arrive
// together share a round trip. A call's caller writes its batch itself (the
// first, or the one a finished write hands the turn to), so no goroutine
// is left behind.
type gather struct {
	mu      sync.Mutex
	busy    bool        // a write is under way
	pending []*gathered // the calls waiting for the next
}

// gathered is one call of a gather.
type gathered struct {
	ops      []redisindex.Op
	announce string
	done     chan struct{} // closed once err is set
	turn     chan struct{} // capacity 1: write the next batch
	err      error
}

// do runs c's write, gathered with others' by write. It returns once c's
// ops are written (write's error, which every call of the batch gets). A
// caller waits for the batch its call is in, also when ctx ends meanwhile:
// the batch's writer bounds it with its own ctx.
func (g *gather) do(ctx context.Context, c *gathered, write func(ctx context.Context, ops []redisindex.Op, announce string) error) error {
	c.done, c.turn = make(chan struct{}), make(chan struct{}, 1)
	g.mu.Lock()
	g.pending = append(g.pending, c)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead {
		select {
		case <-c.done:
			return c.err
		case <-c.turn:
		}
	}
	g.mu.Lock()
	batch := g.pending
	g.pending = nil
	g.mu.Unlock()
	var ops []redisindex.Op
	var announce strings.Builder
	for _, b := range batch {
		ops = append(ops, b.ops...)
		announce.WriteString(b.announce)
	}
	err := write(ctx, ops, announce.String())
	for _, b := range batch {
		b.err = err
		close(b.done)
	}
	g.mu.Lock()
	if len(g.pending) > 0 {
		g.pending[0].turn <- struct{}{}
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return c.err
}
