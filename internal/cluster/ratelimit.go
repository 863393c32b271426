package cluster

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RateLimiter holds each app's delivery limits across every node:
// deliveries_per_second as a GCRA token bucket per app in Redis
// (go-redis/redis_rate), and an explicit max_in_flight as a sorted set of
// the attempts holding a slot, scored by when each hold runs out, so the
// slots of a node that died come back by themselves.
type RateLimiter struct {
	rdb    redis.UniversalClient
	l      *redis_rate.Limiter
	prefix string
	wake   string // the nodes' wake channel: "slot <app>" when a slot frees
}

// NewRateLimiter returns a limiter whose keys start with prefix; it
// announces freed slots on wakeChannel, which Node listens to.
func NewRateLimiter(rdb redis.UniversalClient, prefix, wakeChannel string) *RateLimiter {
	return &RateLimiter{rdb: rdb, l: redis_rate.NewLimiter(rdb), prefix: prefix, wake: wakeChannel}
}

// Take implements engine.Limiter.
func (r *RateLimiter) Take(ctx context.Context, app string, perSec float64, burst, n int) (int, time.Duration, error) {
	limit := redis_rate.Limit{Rate: int(math.Round(perSec)), Burst: burst, Period: time.Second}
	if perSec < 1 { // one per 1/perSec seconds
		limit.Rate, limit.Period = 1, time.Duration(float64(time.Second)/perSec)
	}
	// One token, then as many more as were whole tokens left. Not
	// AllowAtMost: when fewer than n are left it charges the fractional
	// remainder too but grants only the whole part, so a caller that asks
	// often (as a draining gate does) loses up to a token per call.
	key := r.prefix + ":{" + app + "}"
	res, err := r.l.AllowN(ctx, key, limit, 1)
	if err != nil {
		return 0, 0, fmt.Errorf("rate limit app %s: %w", app, err)
	}
	if res.Allowed == 0 {
		return 0, max(res.RetryAfter, time.Millisecond), nil
	}
	got := 1
	if more := min(res.Remaining, n-1); more > 0 {
		res, err = r.l.AllowN(ctx, key, limit, more)
		if err != nil {
			return got, 0, fmt.Errorf("rate limit app %s: %w", app, err)
		}
		got += res.Allowed
	}
	return got, 0, nil
}

// acquireScript takes slots for ARGV[4..] in order while fewer than ARGV[3]
// are held (a holder that has one keeps it, until the new end), after
// dropping holds that ran out before ARGV[1], now in ms. Ends are whole
// ms, cut from a time.Time: a hold ending in now's ms stays, so that none
// runs out early (ZREMRANGEBYSCORE's bound is exclusive, "("). It returns
// how many holders got one and when the first remaining hold runs out
// (ms).
var acquireScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local max = tonumber(ARGV[3])
local held = redis.call('ZCARD', KEYS[1])
local got = 0
for i = 4, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
  elseif held < max then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    held = held + 1
  else
    break
  end
  got = got + 1
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nextAt = 0
if first[2] then nextAt = tonumber(first[2]) end
if held > 0 then redis.call('PEXPIREAT', KEYS[1], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]) end
return {got, nextAt}
`)

// releaseScript gives back ARGV[2]'s slot and returns 1 when the set was
// full before (some node may be waiting for a slot); holds that ran out
// are dropped first, as acquireScript drops them.
var releaseScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local held = redis.call('ZCARD', KEYS[1])
if redis.call('ZREM', KEYS[1], ARGV[2]) == 1 and held >= tonumber(ARGV[3]) then return 1 end
return 0
`)

func (r *RateLimiter) slotsKey(app string) string { return r.prefix + ":inflight:{" + app + "}" }

// Acquire implements engine.Limiter.
func (r *RateLimiter) Acquire(ctx context.Context, app string, holders []string, max int, until time.Time) (int, time.Time, error) {
	args := make([]any, 0, 3+len(holders))
	args = append(args, time.Now().UnixMilli(), until.UnixMilli(), max)
	for _, h := range holders {
		args = append(args, h)
	}
	res, err := acquireScript.Run(ctx, r.rdb, []string{r.slotsKey(app)}, args...).Int64Slice()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("take in-flight slots of app %s: %w", app, err)
	}
	var next time.Time
	if res[1] > 0 {
		next = time.UnixMilli(res[1])
	}
	return int(res[0]), next, nil
}

// Release implements engine.Limiter.
func (r *RateLimiter) Release(ctx context.Context, app, holder string, max int) error {
	full, err := releaseScript.Run(ctx, r.rdb, []string{r.slotsKey(app)}, time.Now().UnixMilli(), holder, max).Int()
	if err != nil {
		return fmt.Errorf("give back an in-flight slot of app %s: %w", app, err)
	}
	if full == 1 {
		if err := r.rdb.Publish(ctx, r.wake, "slot "+app).Err(); err != nil {
			return fmt.Errorf("announce a free slot of app %s: %w", app, err)
		}
	}
	return nil
}
