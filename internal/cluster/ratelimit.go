package cluster

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/engine"
)

// RateLimiter holds each app's deliveries_per_second across every node: a
// GCRA token bucket per app in Redis (go-redis/redis_rate), so the rate is
// the cluster's, not each node's.
type RateLimiter struct {
	l      *redis_rate.Limiter
	prefix string
}

var _ engine.Limiter = (*RateLimiter)(nil)

// NewRateLimiter returns a limiter whose keys start with prefix.
func NewRateLimiter(rdb redis.UniversalClient, prefix string) *RateLimiter {
	return &RateLimiter{l: redis_rate.NewLimiter(rdb), prefix: prefix}
}

// Allow implements engine.Limiter.
func (r *RateLimiter) Allow(ctx context.Context, app string, perSec float64, burst int) (time.Duration, error) {
	limit := redis_rate.Limit{Rate: int(math.Round(perSec)), Burst: burst, Period: time.Second}
	if perSec < 1 { // one per 1/perSec seconds
		limit.Rate, limit.Period = 1, time.Duration(float64(time.Second)/perSec)
	}
	res, err := r.l.Allow(ctx, r.prefix+":{"+app+"}", limit)
	if err != nil {
		return 0, fmt.Errorf("rate limit app %s: %w", app, err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}
