package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/task"
)

// dispatcher runs the workers: at most MaxInFlight goroutines, each doing
// a job (a fire job over ready tasks, or one push attempt's delivery) and
// then the next, until it has had none for workerIdle. Its run loop (the
// pump) takes ready tasks from the timekeeper in batches and hands them
// out; push attempts that find no free worker wait in its waiting queue.
//
// Its mu guards the waiting attempts only; nothing is taken under it.
type dispatcher struct {
	maxInFlight int
	tk          *timekeeper
	// gather is how long a fire job under load waits for more due tasks
	// before it takes its batch (fireGather in a cluster, 0 on one node).
	gather  time.Duration
	fire    func(ctx context.Context, taken []sched.Taken, wrote func()) // the firer's fire job
	deliver func(ctx context.Context, t *task.Task)                      // one push attempt

	sem     chan struct{} // MaxInFlight tokens: one per worker
	writing chan struct{} // fireWriters tokens: fire jobs before their store write returns
	work    chan job      // to an idle worker
	busy    atomic.Int64  // workers doing a job
	kick    chan struct{} // capacity 1: attempts wait for a worker

	mu struct {
		sync.Mutex
		waiting waitingDeliveries // push attempts that found no free worker (waiting.go)
	}

	// loopCtx is the engine's loops' (workers started off a loop run
	// until it ends); workCtx is cancelled when Stop's grace runs out.
	// Set by start, before the loops start.
	loopCtx  context.Context
	workCtx  context.Context
	workStop context.CancelFunc
	workers  sync.WaitGroup // firing and delivering goroutines
}

// dispatcherParams are a dispatcher's settings and dependencies.
type dispatcherParams struct {
	MaxInFlight int
	Gather      time.Duration
	Timekeeper  *timekeeper
	Fire        func(ctx context.Context, taken []sched.Taken, wrote func())
	Deliver     func(ctx context.Context, t *task.Task)
}

func newDispatcher(p dispatcherParams) *dispatcher {
	return &dispatcher{
		maxInFlight: p.MaxInFlight,
		gather:      p.Gather,
		tk:          p.Timekeeper,
		fire:        p.Fire,
		deliver:     p.Deliver,
		sem:         make(chan struct{}, p.MaxInFlight),
		writing:     make(chan struct{}, fireWriters),
		work:        make(chan job),
		kick:        make(chan struct{}, 1),
		loopCtx:     context.Background(),
		workCtx:     context.Background(),
		workStop:    func() {},
	}
}

// start sets the contexts of the workers: loopCtx is the loops' (a worker
// ends when it ends).
func (d *dispatcher) start(loopCtx context.Context) {
	d.loopCtx = loopCtx
	d.workCtx, d.workStop = context.WithCancel(context.Background())
}

// stop waits for the workers, giving the attempts under way until ctx ends
// to finish; then they are cut short (released: delivered again later).
// The loops have stopped: no job is handed out any more.
func (d *dispatcher) stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() { d.workers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		d.workStop() // in-flight attempts see ctx cancelled and release their tasks
		<-done
		err = fmt.Errorf("stop: deliveries under way were interrupted (they are delivered again later): %w", ctx.Err())
	}
	d.workStop()
	return err
}

// run hands ready tasks to workers in batches, at most MaxInFlight
// workers at once. When all are busy it waits, and tasks queue in memory,
// in their apps' ready queues, which a batch takes from in turns (package
// sched): one app's backlog does not hold up the others.
//
// A batch is what came due together, up to fireBatchMax and to the workers
// free: one store write fires it (the firer), one transaction on SQL
// instead of one per task.
//
// Workers outlive their job: an idle one takes the next, and only after
// workerIdle without work does it end, so that the fire path does not grow
// a fresh goroutine stack for every task.
func (d *dispatcher) run(ctx context.Context) {
	last := 0 // tasks the last batch took
	for {
		// A fire job takes its ready tasks only once a write slot is free:
		// while the writes in flight run, the tasks falling due meanwhile
		// gather into the next batch (a group commit), rather than many
		// small batches queueing on the store's locks.
		select {
		case d.writing <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if last >= gatherAbove && d.gather > 0 && !sleepCtx(ctx, d.gather) {
			<-d.writing
			return
		}
		free := max(1, d.maxInFlight-int(d.busy.Load()))
		taken := d.tk.take(min(fireBatchMax, free))
		last = len(taken)
		if len(taken) == 0 {
			<-d.writing
			select {
			case <-ctx.Done():
				return
			case <-d.tk.ready:
				continue
			}
		}
		if !d.handOff(ctx, job{fire: taken}) {
			<-d.writing
			return
		}
	}
}

// Under load (the last batch took gatherAbove tasks or more) a fire job
// in a cluster waits fireGather before it takes its batch, so that the
// tasks due meanwhile join it: each batch costs one SQL transaction and a
// Redis round trip whatever its size, and at a few thousand fires a second
// the batches a free write slot takes at once are a handful of tasks.
// Measured on one node at 4 000 fires/s: 0.10 SQL transactions per fire
// instead of 0.25, a fifth less CPU per fire over the node, PostgreSQL and
// Redis, and p99 lateness 17–38 ms instead of 55–76 (less queueing behind
// the transactions saved). 8 ms instead of 4 (issue 25): 0.062 SQL
// transactions per fire instead of 0.11, Redis commands 3.1 instead of
// 3.3 (a batch's claim touches fewer slots per task), 12–18% less CPU over
// the three processes, p99 as noisy as before; 12 ms saved no more CPU and
// put p99 at 220 ms. A lone task, or a trickle, goes at once.
const (
	gatherAbove = 8
	fireGather  = 8 * time.Millisecond
)

// fireWriters bounds the fire jobs writing to the store at once: two keep
// one write in flight while the next batch gathers (toc bench's fire
// workload chose it over one, four and no bound).
const fireWriters = 2

// job is a worker's piece of work: tasks to fire, or a push attempt to
// deliver.
type job struct {
	fire    []sched.Taken
	deliver *task.Task
}

// handOff gives j to an idle worker, or to a new one while there are fewer
// than MaxInFlight, or waits for either. False: the loops stop.
func (d *dispatcher) handOff(ctx context.Context, j job) bool {
	select {
	case d.work <- j:
		return true
	default:
	}
	select {
	case d.work <- j:
	case d.sem <- struct{}{}:
		d.startWorker(ctx, j)
	case <-ctx.Done():
		return false
	}
	return true
}

// tryHandOff is handOff without the wait: false when every worker is busy
// and there are MaxInFlight of them.
func (d *dispatcher) tryHandOff(ctx context.Context, j job) bool {
	select {
	case d.work <- j:
		return true
	case d.sem <- struct{}{}:
		d.startWorker(ctx, j)
		return true
	default:
		return false
	}
}

// startWorker starts a worker, which holds a token of d.sem, on j.
func (d *dispatcher) startWorker(ctx context.Context, j job) {
	d.workers.Add(1)
	go func() {
		defer d.workers.Done()
		defer func() { <-d.sem }()
		d.worker(ctx, j)
	}()
}

// workerIdle is how long a worker waits for another job before it ends.
const workerIdle = 10 * time.Second

// worker does j, then the jobs handed to it, until it has waited
// workerIdle for one or the loops stop. Between jobs it delivers the push
// attempts waiting for a worker, before it takes a new job.
func (d *dispatcher) worker(ctx context.Context, j job) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		d.busy.Add(1)
		switch {
		case j.deliver != nil:
			d.deliver(d.workCtx, j.deliver)
		case j.fire != nil:
			d.fire(d.workCtx, j.fire, d.wrote)
		}
		d.deliverWaiting(d.workCtx)
		d.busy.Add(-1)
		idle.Reset(workerIdle)
		select {
		case j = <-d.work:
		case <-d.kick:
			j = job{} // only the waiting attempts
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// wrote gives back the write slot the pump took for a fire job, once its
// store call returned, so that the tasks falling due meanwhile gather into
// the next batch.
func (d *dispatcher) wrote() { <-d.writing }

// deliverAll delivers the push attempts a fire job started: each by a
// worker of its own while there are idle workers or room for one, the last
// here. When no worker is free, the rest wait in their apps' queues
// (waiting.go) for the first worker free, this one included, which takes
// them by app in turn: one after the other here, an app's delivery that
// hangs would hold up the other apps' of the batch. It never waits for a
// worker, so workers firing batches cannot all wait on each other.
func (d *dispatcher) deliverAll(ctx context.Context, ts []*task.Task) {
	for i, t := range ts {
		switch {
		case i == len(ts)-1:
			d.deliver(ctx, t)
		case !d.tryHandOff(d.loopCtx, job{deliver: t}):
			d.queue(ts[i:])
			return // the worker delivers them next (deliverWaiting)
		}
	}
}

// queue adds ts to the waiting attempts and wakes an idle worker (one that
// went idle after the hand-off failed) to take them.
func (d *dispatcher) queue(ts []*task.Task) {
	if len(ts) == 0 {
		return
	}
	d.mu.Lock()
	d.mu.waiting.push(ts...)
	d.mu.Unlock()
	signal(d.kick)
}

// deliverWaiting delivers waiting attempts, the apps in turn, until none
// is left.
func (d *dispatcher) deliverWaiting(ctx context.Context) {
	for {
		d.mu.Lock()
		t := d.mu.waiting.pop()
		d.mu.Unlock()
		if t == nil {
			return
		}
		d.deliver(ctx, t)
	}
}

// firing reports whether the fire path has due tasks it has not looked at
// yet: a lease from the store waits until it has none, since most of the
// leasable tasks the store lists are then on their way to the ready queue,
// and reading them would only find that out.
func (d *dispatcher) firing() bool {
	st, _ := d.tk.stats()
	return st.Ready > 0 || len(d.writing) > 0
}

// idle reports whether no worker has a job and no attempt waits for one.
func (d *dispatcher) idle() bool {
	if len(d.writing) > 0 || d.busy.Load() > 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.waiting.ring) == 0
}
