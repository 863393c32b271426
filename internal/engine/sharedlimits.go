package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/toc-dev/toc/task"
)

// sharedLimits makes the cluster admission's calls to the shared Limiter
// (Config.Limiter): tokens and slots for a gate's tasks, a slot given back.
// It has no state: the Limiter holds it, in Redis.
type sharedLimits struct {
	limiter    Limiter
	boot       string // the engine's: names this process's slot holds
	leaseGrace time.Duration
	log        *slog.Logger
}

// ask asks for delivery tokens, then in-flight slots, for ids in order. It
// returns how many of ids (a prefix) may go, whether they hold cluster
// slots, and how long to wait before asking again when not all may.
// Tokens are taken first: a token taken for a task that then finds no
// slot is spent, so when both limits bind the rate comes out lower, never
// higher. When the limiter fails the tasks go anyway (a Redis outage must
// not stop every limited app); the node's own in-flight cap still holds.
func (l sharedLimits) ask(ctx context.Context, app string, p AppPolicy, ids []task.ID) (n int, slots bool, wait time.Duration) {
	n = len(ids)
	if p.DeliveriesPerSecond > 0 {
		burst := p.Burst
		if burst <= 0 {
			burst = defaultBurst(p.DeliveriesPerSecond)
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		got, w, err := l.limiter.Take(cctx, app, p.DeliveriesPerSecond, burst, n)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, false, 0
		case err != nil:
			l.log.Warn("shared rate limiter failed; delivering without it", slog.String("app", app), slog.String("error", err.Error()))
		case got == 0:
			return 0, false, max(w, time.Millisecond)
		default:
			n = got
		}
	}
	if p.MaxInFlight > 0 {
		holders := make([]string, n)
		for i, id := range ids[:n] {
			holders[i] = l.holder(id)
		}
		now := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		got, next, err := l.limiter.Acquire(cctx, app, holders, p.MaxInFlight, now.Add(task.DefaultHTTPTimeout+l.leaseGrace))
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, false, 0
		case err != nil:
			l.log.Warn("shared in-flight limit failed; holding the node's own", slog.String("app", app), slog.String("error", err.Error()))
			return n, false, 0
		case got < n:
			// Wait for a SlotFreed notice, or for the first held slot to
			// run out (its node may be gone), whichever comes first.
			wait = min(max(next.Sub(now), time.Millisecond), time.Second)
		}
		return got, true, wait
	}
	return n, false, 0
}

// release gives back task id's slot of app (max: the app's MaxInFlight).
func (l sharedLimits) release(app string, id task.ID, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := l.limiter.Release(ctx, app, l.holder(id), max); err != nil {
		// The slot runs out on its own at the end of its hold.
		l.log.Warn("give back an in-flight slot", slog.String("app", app), slog.String("task", id.String()), slog.String("error", err.Error()))
	}
}

// holder names this process's hold of a slot for task id. Two nodes can
// both let the same task through (a wheel entry left on a slot's previous
// owner); each must hold, and give back, a slot of its own.
func (l sharedLimits) holder(id task.ID) string { return l.boot + "/" + id.String() }
