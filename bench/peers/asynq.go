package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/loadgen"
)

// asynq's settings for the tight variant. asynq sets no minimum; 1ms is as
// often as it is sensible to run a Lua script over the scheduled set and
// to poll an empty queue.
const (
	asynqTaskType  = "toc:bench"
	asynqQueue     = "tocbench"
	asynqTightPoll = time.Millisecond
)

// asynqPeer enqueues each job with asynq.ProcessAt; a Server with a handler
// records lateness at the start of the handler.
type asynqPeer struct {
	rdb     *redis.Client
	client  *asynq.Client
	srv     *asynq.Server
	variant string
}

func newAsynq(ctx context.Context, o options, rec *loadgen.Recorder) (*asynqPeer, error) {
	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr, DB: o.redisDB})
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("asynq: redis %s: %w", o.redisAddr, err)
	}
	if n != 0 {
		rdb.Close()
		return nil, fmt.Errorf("asynq: redis database %d holds %d keys; give an empty one with --redis-db", o.redisDB, n)
	}
	cfg := asynq.Config{
		Concurrency: o.workers,
		Queues:      map[string]int{asynqQueue: 1},
		LogLevel:    asynq.WarnLevel,
	}
	if o.poll == PollTight {
		cfg.DelayedTaskCheckInterval = asynqTightPoll
		cfg.TaskCheckInterval = asynqTightPoll
	}
	opt := asynq.RedisClientOpt{Addr: o.redisAddr, DB: o.redisDB, PoolSize: o.concurrency + 16}
	p := &asynqPeer{
		rdb:     rdb,
		client:  asynq.NewClient(opt),
		srv:     asynq.NewServer(opt, cfg),
		variant: variant(o.poll, "DelayedTaskCheckInterval=1ms", "TaskCheckInterval=1ms"),
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(ctx context.Context, t *asynq.Task) error {
		at := time.Now()
		var pl payload
		if err := json.Unmarshal(t.Payload(), &pl); err != nil {
			rec.Record(-1, at, at)
			return nil
		}
		rec.Record(pl.Seq, time.Unix(0, pl.Due), at)
		return nil
	})
	if err := p.srv.Start(mux); err != nil {
		p.client.Close()
		rdb.Close()
		return nil, fmt.Errorf("asynq: start server: %w", err)
	}
	return p, nil
}

func (p *asynqPeer) Variant() string { return p.variant }

// Schedule enqueues each job; asynq has no batch enqueue.
func (p *asynqPeer) Schedule(ctx context.Context, jobs []loadgen.Job) error {
	for _, j := range jobs {
		b, err := json.Marshal(payload{Seq: j.Seq, Due: j.DueAt.UnixNano()})
		if err != nil {
			return err
		}
		t := asynq.NewTask(asynqTaskType, b)
		if _, err := p.client.EnqueueContext(ctx, t, asynq.ProcessAt(j.DueAt), asynq.Queue(asynqQueue), asynq.MaxRetry(3)); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the server and flushes the run's Redis database.
func (p *asynqPeer) Close(ctx context.Context) error {
	p.srv.Shutdown()
	err := p.client.Close()
	err = errors.Join(err, p.rdb.FlushDB(ctx).Err())
	return errors.Join(err, p.rdb.Close())
}
