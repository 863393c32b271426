package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/toc-dev/toc/internal/loadgen"
)

// riverArgs is the job: the payload, under River's JobArgs.
type riverArgs payload

func (riverArgs) Kind() string { return "toc_bench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	rec *loadgen.Recorder
}

// Work records lateness at the start of the job.
func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	w.rec.Record(job.Args.Seq, time.Unix(0, job.Args.Due), time.Now())
	return nil
}

// riverPeer inserts each job with InsertOpts.ScheduledAt (InsertManyFast
// for batches); a Client with a worker records lateness.
type riverPeer struct {
	admin   string // URL of the database the run's one is created from
	db      string
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	variant string
}

func newRiver(ctx context.Context, o options, rec *loadgen.Recorder) (p *riverPeer, err error) {
	p = &riverPeer{admin: o.pgURL, db: o.riverDB}
	if err := p.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{p.db}.Sanitize()+" WITH (FORCE)", "CREATE DATABASE "+pgx.Identifier{p.db}.Sanitize()); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close(context.WithoutCancel(ctx)))
		}
	}()
	cfg, err := pgxpool.ParseConfig(o.pgURL)
	if err != nil {
		return nil, fmt.Errorf("river: --pg: %w", err)
	}
	cfg.ConnConfig.Database = p.db
	cfg.MaxConns = int32(o.concurrency + 4) // the server is shared: leave it room
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	driver := riverpgxv5.New(p.pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{rec: rec})
	rc := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	p.variant = variant(o.poll, "FetchPollInterval=1ms", "FetchCooldown=1ms")
	if o.poll == PollTight {
		// River's minimums: river.FetchPollIntervalMin, river.FetchCooldownMin.
		rc.FetchPollInterval = river.FetchPollIntervalMin
		rc.FetchCooldown = river.FetchCooldownMin
	}
	if p.client, err = river.NewClient(driver, rc); err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	if err := p.client.Start(ctx); err != nil {
		return nil, fmt.Errorf("river: start: %w", err)
	}
	return p, nil
}

func (p *riverPeer) Variant() string { return p.variant }

// Schedule inserts one job with Insert, or a batch with InsertManyFast.
func (p *riverPeer) Schedule(ctx context.Context, jobs []loadgen.Job) error {
	if len(jobs) == 1 {
		j := jobs[0]
		_, err := p.client.Insert(ctx, riverArgs{Seq: j.Seq, Due: j.DueAt.UnixNano()}, &river.InsertOpts{ScheduledAt: j.DueAt})
		return err
	}
	ps := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		ps[i] = river.InsertManyParams{Args: riverArgs{Seq: j.Seq, Due: j.DueAt.UnixNano()}, InsertOpts: &river.InsertOpts{ScheduledAt: j.DueAt}}
	}
	n, err := p.client.InsertManyFast(ctx, ps)
	if err == nil && n != len(ps) {
		err = fmt.Errorf("river: inserted %d of %d jobs", n, len(ps))
	}
	return err
}

// Close stops the client and drops the run's database.
func (p *riverPeer) Close(ctx context.Context) error {
	var err error
	if p.client != nil {
		err = p.client.Stop(ctx)
	}
	if p.pool != nil {
		p.pool.Close()
	}
	return errors.Join(err, p.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{p.db}.Sanitize()+" WITH (FORCE)"))
}

// exec runs statements on the admin database.
func (p *riverPeer) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, p.admin)
	if err != nil {
		return fmt.Errorf("river: connect to %s: %w", p.admin, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("river: %s: %w", s, err)
		}
	}
	return nil
}
