package redisindex_test

import (
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testsvc"
)

type observed struct {
	mu    sync.Mutex
	calls map[string]int
	fails map[string]int
}

func (o *observed) RedisCall(cmd string, _ time.Duration, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[cmd]++
	if failed {
		o.fails[cmd]++
	}
}

func (o *observed) RedisDialFailed() {}

func TestMetricsHook(t *testing.T) {
	c, prefix := testsvc.Redis(t)
	o := &observed{calls: map[string]int{}, fails: map[string]int{}}
	c.AddHook(redisindex.MetricsHook(o))
	ctx := t.Context()
	if err := c.Set(ctx, prefix+":k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, prefix+":missing").Err() // redis.Nil: an answer, not a failure
	_ = c.Do(ctx, "nosuchcommand").Err()    // a failure
	p := c.Pipeline()
	p.Get(ctx, prefix+":k")
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// The connection's handshake (hello, in a pipeline) counts too.
	if o.calls["set"] != 1 || o.calls["get"] != 1 || o.calls["pipeline"] < 1 {
		t.Errorf("calls %v, want one set, one get and a pipeline", o.calls)
	}
	if o.fails["get"] != 0 || o.fails["nosuchcommand"] != 1 {
		t.Errorf("failures %v, want only nosuchcommand", o.fails)
	}
}
