package redisindex

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Observer receives the timing of Redis calls; package metrics implements
// it, so that only this package and the cluster need go-redis.
type Observer interface {
	// RedisCall is one command, or a pipeline (cmd "pipeline"), that took
	// took; failed is false for redis.Nil (a missing key is an answer).
	RedisCall(cmd string, took time.Duration, failed bool)
	// RedisDialFailed is a connection that could not be made.
	RedisDialFailed()
}

// MetricsHook returns a go-redis hook that times every command and
// pipeline for o: add it with the client's AddHook.
func MetricsHook(o Observer) redis.Hook { return hook{o} }

type hook struct{ o Observer }

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			h.o.RedisDialFailed()
		}
		return c, err
	}
}

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.o.RedisCall(cmd.Name(), time.Since(start), failed(err))
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.o.RedisCall("pipeline", time.Since(start), failed(err))
		return err
	}
}

func failed(err error) bool { return err != nil && !errors.Is(err, redis.Nil) }
