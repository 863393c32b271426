// Package engine is toc's heart: it decides every state change of a task,
// keeps the tasks that are due soon in a timing wheel, fires them on time,
// and hands them to sinks or to pull consumers.
//
// # Tiers of time
//
// The store holds every task and orders the live ones by WakeAt, the next
// instant the engine must look at them (a due attempt, a deadline, the end of
// a lease). The loader reads that order from a cursor into the wheel, a
// window (Config.Window) at a time, so memory holds only what is due soon.
// The wheel tells the run loop the next instant anything is due; the run loop
// sleeps on one timer until then. A task created or rescheduled inside the
// loaded window goes straight into the wheel; there is no polling interval
// anywhere between a due time and its delivery.
//
// # Invariant
//
// Every live task with a WakeAt at or before the cursor is in the wheel (at
// or before its WakeAt: an entry may fire early and find the task moved,
// never late), in a ready queue, or being handled by a worker. Tasks
// after the cursor are only in the store. Anything written to the store
// reaches the wheel through track; package sched keeps the invariant
// against concurrent scans and copies tracked out of order, and its model
// test (FuzzCore) checks it.
//
// # Locks
//
// Four mutexes, none ever held while another is taken, so there is no lock
// order to keep:
//   - e.mu guards the scheduling core (package sched: the wheel, the cursor
//     and the per-app ready queues) and the pull waiters;
//   - e.apps.mu guards the apps' policies, rate reservations, in-flight
//     counts, parked tasks and gates (apps.go, gate.go);
//   - e.out guards the push attempts under way in this process, those
//     waiting for a worker (waiting.go) and their outcomes waiting to be
//     stored (fire.go), and the pull tasks held in this process: due and
//     waiting for a claim, or claimed under a lease (pull.go);
//   - e.creates.mu guards the creates gathering into the next
//     group-committed store write (creates.go).
//
// No store, index (Redis), limiter or sink call is made while one is held.
// Store callbacks (Update, UpdateMany) run under the store's own row locks
// and make no network call: the cluster index's claim of a fire batch runs
// after the store call that read the batch returned (fire.go). Every call
// carries a deadline: its caller's, or callTimeout for the writes that must
// finish after their caller has gone (detached).
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/toc-dev/toc/internal/lograte"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine/sched"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Defaults for Config.
const (
	WindowDefault      = 10 * time.Second
	MaxLoadedDefault   = 1_000_000
	MaxInFlightDefault = 1024
	RetentionDefault   = 7 * 24 * time.Hour
	LeaseGraceDefault  = 5 * time.Second
	MaxPayloadDefault  = task.DefaultMaxPayload
	ShutdownDefault    = 10 * time.Second
)

// Config configures an Engine. Zero fields take the documented defaults.
type Config struct {
	// Store keeps the tasks. Required.
	Store store.Store
	// Sinks deliver push tasks, by target kind ("http"). A task whose kind
	// has no sink fails its attempts with an error that says so.
	Sinks map[string]sink.Sink
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// Window is how far ahead of now the loader keeps the wheel filled.
	// Default WindowDefault (10s).
	Window time.Duration
	// MaxLoaded caps the tasks held in memory (wheel and ready queue).
	// When more fall due within the window they are loaded in due order as
	// room frees. Default MaxLoadedDefault (1,000,000).
	MaxLoaded int
	// MaxInFlight caps concurrent push deliveries. Default
	// MaxInFlightDefault (1024).
	MaxInFlight int
	// MaxPayload caps a payload in bytes. Default MaxPayloadDefault (64 KiB).
	MaxPayload int
	// Retention is how long finished tasks (and their keys) are kept.
	// Default RetentionDefault (168h).
	Retention time.Duration
	// LeaseGrace is added to a push target's timeout to make its lease.
	// Default LeaseGraceDefault (5s).
	LeaseGrace time.Duration
	// Hooks follow tasks as they move (metrics).
	Hooks Hooks
	// Index is the shared hot tier of cluster mode; nil on a single node.
	// With it the loader reads the node's slots instead of the store's
	// wake order, every write is mirrored into it, and an attempt or a
	// lease rollback starts only after the index gives the task to this
	// node.
	Index Index
	// Limiter, when set, enforces the apps' deliveries_per_second and
	// explicit max_in_flight across every process that shares it (cluster
	// mode) instead of per process; see gate.go.
	Limiter Limiter
	// ShardFor places a new task: its result goes into the task id, so a
	// lookup by id goes to one shard. Nil: shard 0 (a single node).
	ShardFor func(app, key string, id task.ID) uint16
	// CheckTarget, when set, vets the target of every task created, after
	// the app's default target filled an empty one and Target.Validate
	// passed: an error refuses the create (a *task.FieldError is a 400
	// naming the field). toc serve uses it to keep amqp and nats targets
	// on the brokers the operator allowed. Nil accepts every valid target.
	CheckTarget func(app string, t task.Target) error
	// OwnsSchedule, when set, says whether this engine's schedule loop
	// acts on the schedule with this id (schedules.go): a cluster node
	// takes its share (the schedules in the SQL shards it owns), so that
	// each schedule is stepped by one node at a time. Nil: every schedule.
	// API calls (create, PATCH, resume) step the schedule they wrote
	// wherever they run.
	OwnsSchedule func(id task.ID) bool
	// Clock is the time the engine decides by: due times, backoff,
	// leases, deadlines, schedules, retention, the times it records.
	// Nil: the wall clock. With a *clock.Test the engine moves only when
	// AdvanceClock moves it (testclock.go).
	Clock clock.Clock
}

// Limiter holds the apps' delivery limits across a cluster's nodes.
type Limiter interface {
	// Take asks for up to n delivery tokens of app, whose rate is perSec
	// with burst. It returns how many it got and, when none, how long to
	// wait before asking again.
	Take(ctx context.Context, app string, perSec float64, burst, n int) (got int, wait time.Duration, err error)
	// Acquire takes in-flight slots of app, at most max held at once across
	// the cluster, for holders in order, each until `until` (a holder that
	// already has one keeps it, with the new end). It returns how many
	// holders got one and, when not all did, when the first held slot
	// runs out.
	Acquire(ctx context.Context, app string, holders []string, max int, until time.Time) (got int, next time.Time, err error)
	// Release gives back holder's slot; the nodes waiting for one of app's
	// slots hear of it through SlotFreed.
	Release(ctx context.Context, app, holder string, max int) error
}

// Index is the cluster hot tier, as the engine sees it.
type Index interface {
	// Wakeups is like Store.Wakeups over the tasks this node watches.
	Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error)
	// Sync mirrors tasks just written to the store: due soon and
	// scheduled, leased, dead, or gone.
	Sync(ctx context.Context, ts ...*task.Task) error
	// Settled is Sync for the tasks of attempts this node claimed, once
	// they ended: the index holds each one's member for this node.
	Settled(ctx context.Context, ts ...*task.Task) error
	// Claim gives each task of ts to this node for an attempt or a lease
	// rollback at now, holding it until until[i]; 0 where another node has
	// it. One round trip for all. For a scheduled task (an attempt) it
	// returns the attempt's number: one more than the attempts claimed of
	// the task before, or than ts[i].Attempts when that is more, so that
	// an attempt whose process stopped during it still counts.
	Claim(ctx context.Context, ts []*task.Task, until []time.Time, now time.Time) ([]int, error)
	// Live reports whether the process that took a lease (the boot part of
	// its token) is still a member of the cluster.
	Live(boot string) bool
	// Watches reports whether this node times the task (owns its slot).
	// Others leave it to the owner, which Sync has told.
	Watches(t *task.Task) bool
	// PullDue tells every node that app has pull tasks due, so their
	// long-polling claims look again.
	PullDue(ctx context.Context, app string)
}

// NotifyPull wakes this node's claims waiting on app (another node's
// PullDue).
func (e *Engine) NotifyPull(app string) { e.notifyLocal(app) }

func (c *Config) setDefaults() {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Clock = clock.Or(c.Clock)
	c.Window = cmp.Or(c.Window, WindowDefault)
	c.MaxLoaded = cmp.Or(c.MaxLoaded, MaxLoadedDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, MaxInFlightDefault)
	c.MaxPayload = cmp.Or(c.MaxPayload, MaxPayloadDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.LeaseGrace = cmp.Or(c.LeaseGrace, LeaseGraceDefault)
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("engine config: Store is required")
	case c.Window < 100*time.Millisecond:
		return fmt.Errorf("engine config: Window must be at least 100ms, got %s", c.Window)
	case c.MaxLoaded < 16:
		return fmt.Errorf("engine config: MaxLoaded must be at least 16, got %d", c.MaxLoaded)
	case c.MaxInFlight < 1:
		return fmt.Errorf("engine config: MaxInFlight must be at least 1, got %d", c.MaxInFlight)
	case c.MaxPayload < 1:
		return fmt.Errorf("engine config: MaxPayload must be at least 1, got %d", c.MaxPayload)
	case c.Retention < time.Minute:
		return fmt.Errorf("engine config: Retention must be at least 1m, got %s", c.Retention)
	}
	return nil
}

// Engine schedules, fires and delivers tasks. Create it with New, then
// Start; Stop before closing the store.
type Engine struct {
	cfg   Config
	store store.Store
	log   *slog.Logger
	clock clock.Clock // cfg.Clock: the time of every decision
	ids   task.IDGenerator
	boot  string // this process's part of lease tokens
	apps  *apps  // per-app policies and limits (admission)

	// kick wakes the run loop when an earlier entry enters the wheel;
	// loadKick wakes the loader when room frees up. Capacity 1, sent
	// without blocking.
	kick     chan struct{}
	loadKick chan struct{}
	readyCh  chan struct{}
	sem      chan struct{} // MaxInFlight tokens: one per worker
	writing  chan struct{} // fireWriters tokens: fire jobs before their store write returns
	work     chan job      // to an idle worker
	busy     atomic.Int64  // workers doing a job
	seq      atomic.Uint64 // numbers the writes (see written)

	// schedules is the store's schedules (nil: it keeps none, and the
	// schedule loop does not run).
	schedules store.Schedules
	// tclock is AdvanceClock's (testclock.go).
	tclock testClockState

	mu struct {
		sync.Mutex
		started  bool
		stopping bool
		// core holds the wheel, the loader's cursor and the per-app ready
		// queues (package sched); nil before Start.
		core    *sched.Core
		waiters map[string]chan struct{}
	}

	// The API's edge (wireEdge, api.go): the creates batcher (create
	// requests gathering into the next group-committed store write:
	// creates.go), the checks of every way in, bulk actions and transfers.
	creates  *creates
	rules    *rules
	bulk     *Bulk
	transfer *Transfer
	leases   *leases    // pull leases, held here or stored (leases.go)
	sched    *Schedules // the schedules' API (schedules.go)
	steps    *stepper   // the schedule stepper and its loop (stepper.go)

	// out holds the push attempts under way in this process (fire.go:
	// they are not stored until they end; nil: reserved, not started) and
	// their outcomes waiting to be stored (settleOutcome).
	out struct {
		sync.Mutex
		attempts  map[task.ID]*attempt
		pending   []outcome
		settlers  int           // goroutines writing outcomes
		gathering bool          // one of them waits for more (settleOutcome)
		waits     int           // pending outcomes a caller waits for: written at once
		full      chan struct{} // a batch is full: the gathering one writes now

		waiting waitingDeliveries // push attempts that found no free worker (waiting.go)

		pull pullHeld // pull tasks due in memory and their claims' leases (pull.go)
	}
	deliverKick chan struct{} // capacity 1: attempts wait for a worker (waiting.go)
	pullLeases  atomic.Int64  // pull attempts in e.out.attempts (pull.go), read without the lock

	// alog is the store's attempt log (nil: it keeps none; in a cluster the
	// index numbers the attempts); noted counts the attempts noted since it
	// last started over (attemptlog.go); noteErrs limits the log lines of
	// notes that failed.
	alog     store.AttemptLog
	noted    atomic.Int64
	noteErrs lograte.Limiter

	cancel   context.CancelFunc // stops the loops
	loops    sync.WaitGroup     // run, load, pump, sweep and schedule loops
	loopCtx  context.Context    // the loops' context: gates and workers started off a loop run until it ends
	workers  sync.WaitGroup     // firing and delivering goroutines
	workCtx  context.Context    // cancelled when Stop's grace runs out
	workStop context.CancelFunc
}

// New returns an engine. It does nothing until Start.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		store:    cfg.Store,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		boot:     newBoot(),
		kick:     make(chan struct{}, 1),
		loadKick: make(chan struct{}, 1),
		readyCh:  make(chan struct{}, 1),
		sem:      make(chan struct{}, cfg.MaxInFlight),
		writing:  make(chan struct{}, fireWriters),
		work:     make(chan job),

		deliverKick: make(chan struct{}, 1),
	}
	e.schedules, _ = store.As[store.Schedules](cfg.Store)
	if cfg.Index == nil {
		e.alog, _ = store.As[store.AttemptLog](cfg.Store)
		e.noteErrs.Every = noteErrorsEvery
	}
	e.apps = newApps(cfg, e.boot, e.enqueue)
	wireEdge(e, cfg)
	e.mu.waiters = make(map[string]chan struct{})
	e.out.attempts = make(map[task.ID]*attempt)
	e.out.full = make(chan struct{}, 1)
	e.out.pull.init()
	return e, nil
}

// Start recovers deliveries interrupted by a previous process and starts the
// loops. The loops run until Stop; ctx only bounds the recovery scan.
func (e *Engine) Start(ctx context.Context) error {
	now := e.clock.Now()
	e.mu.Lock()
	if e.mu.started {
		e.mu.Unlock()
		return errors.New("engine: already started")
	}
	e.mu.core = sched.New(now, sched.Config{MaxLoaded: e.cfg.MaxLoaded, Weight: e.apps.weight})
	e.mu.Unlock()
	e.steps.startedAt = now.UTC().Truncate(time.Millisecond)

	if e.cfg.Index == nil { // in a cluster, Live tells whose leases are orphaned
		if err := e.recover(ctx, now); err != nil {
			return err
		}
	}
	if err := e.countInterrupted(ctx, now); err != nil {
		return err
	}

	loopCtx, cancel := context.WithCancel(context.Background())
	e.workCtx, e.workStop = context.WithCancel(context.Background())
	e.cancel = cancel
	e.mu.Lock()
	e.mu.started = true
	e.mu.Unlock()
	e.loopCtx = loopCtx
	e.apps.mu.Lock()
	e.apps.ctx = loopCtx // the gates' (gate.go)
	e.apps.mu.Unlock()

	e.loops.Add(4)
	go func() { defer e.loops.Done(); e.runLoop(loopCtx) }()
	go func() { defer e.loops.Done(); e.loadLoop(loopCtx) }()
	go func() { defer e.loops.Done(); e.pumpLoop(loopCtx) }()
	go func() { defer e.loops.Done(); e.sweepLoop(loopCtx) }()
	if e.schedules != nil {
		e.loops.Add(1)
		go func() { defer e.loops.Done(); e.steps.run(loopCtx) }()
	}
	return nil
}

// recover queues push deliveries that a previous process had under way: their
// leases name a boot that is gone, so nobody will finish them. fire rolls
// them back and delivers them again (at-least-once).
func (e *Engine) recover(ctx context.Context, now time.Time) error {
	until := now.Add(task.MaxHTTPTimeout + e.cfg.LeaseGrace + time.Second)
	var after store.Cursor
	n := 0
	for {
		ws, err := e.store.Wakeups(ctx, after, until, 1000)
		if err != nil {
			return fmt.Errorf("recover interrupted deliveries: %w", err)
		}
		e.mu.Lock()
		for _, w := range ws {
			if w.State == task.Delivering && w.Kind != "pull" {
				e.mu.core.Enqueue(w.App, w.ID)
				n++
			}
		}
		e.mu.Unlock()
		if len(ws) < 1000 {
			break
		}
		after = store.Cursor{At: ws[len(ws)-1].At, ID: ws[len(ws)-1].ID}
	}
	if n > 0 {
		e.log.InfoContext(ctx, "redelivering tasks interrupted by a restart", slog.Int("tasks", n))
		e.signalReady()
	}
	return nil
}

// Stop stops firing, gives in-flight deliveries until ctx is done to finish,
// then cancels them and puts them back to scheduled. It is safe to call more
// than once and before Start. When ctx ended before the deliveries did, the
// engine is stopped all the same and the error (wrapping ctx's) says so.
//
// Shutdown order: loops first (nothing new fires), then workers (in-flight
// attempts finish or are released), so the store is still open for both.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.mu.started || e.mu.stopping {
		e.mu.Unlock()
		e.loops.Wait()
		e.workers.Wait()
		return nil
	}
	e.mu.stopping = true
	e.mu.Unlock()

	e.cancel()
	e.loops.Wait()
	e.apps.mu.Lock()
	e.apps.closed = true // no gate starts from here on
	e.apps.mu.Unlock()
	e.apps.gates.Wait()

	done := make(chan struct{})
	go func() { e.workers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		e.workStop() // in-flight attempts see ctx cancelled and release their tasks
		<-done
		err = fmt.Errorf("stop: deliveries under way were interrupted (they are delivered again later): %w", ctx.Err())
	}
	e.workStop()
	return err
}

// Ready reports whether the engine accepts work.
func (e *Engine) Ready() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.started && !e.mu.stopping
}

// Stats is a snapshot of the engine's memory tiers.
type Stats struct {
	Wheel  int       // tasks in the timing wheel
	Ready  int       // due tasks waiting for a worker, in all apps' queues
	Cursor time.Time // the loader has loaded everything due up to here
	Now    time.Time // the engine's clock's time (a test clock's, on one)
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.core == nil {
		return Stats{}
	}
	s := e.mu.core.Stats()
	return Stats{Wheel: s.Wheel, Ready: s.Ready, Cursor: s.Cursor, Now: e.clock.Now()}
}

// callTimeout bounds a store or index call that must run to its end even
// when its caller's context ends: the write that records an attempt, the
// mirror of a write already stored. Past it the call fails like any other
// (the lease runs out, the repair scan restores the index).
const callTimeout = 30 * time.Second

// detached returns a context for such a call: ctx's values without its
// cancellation, and a deadline of callTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (e *Engine) signalReady() { signal(e.readyCh) }

// Boot returns this process's id, the prefix of its lease tokens (a
// cluster uses it as the node's member name).
func (e *Engine) Boot() string { return e.boot }

// Notify tells the engine that a task it did not write itself wakes at
// `at` (a cluster node's notice of another node's write). It enters the
// wheel if it falls within what is loaded.
func (e *Engine) Notify(id task.ID, at time.Time, app string) {
	e.mu.Lock()
	earlier := e.mu.core != nil && e.mu.core.Wake(id, at, app)
	e.mu.Unlock()
	if earlier {
		signal(e.kick)
	}
}

// Rescan makes the loader read the whole window again from the start (the
// index holds tasks the loader has not seen: a new app's). The wheel
// ignores what it already has.
func (e *Engine) Rescan() { e.rescan(false) }

// Reown is Rescan after the cluster's slot ownership changed: the wheel is
// emptied first, so that the tasks of slots another node now owns stop
// firing here (each would cost a store transaction and, for a limited app,
// a token, only to lose the claim). Everything in the wheel came from the
// index, which the loader reads again.
func (e *Engine) Reown() { e.rescan(true) }

func (e *Engine) rescan(forget bool) {
	e.mu.Lock()
	if e.mu.core != nil {
		e.mu.core.Rescan(forget)
	}
	e.mu.Unlock()
	signal(e.loadKick)
	signal(e.kick)
}

// wrote mirrors tasks just written to the store into the cluster index,
// then tracks them. A failed mirror is logged: the repair scan restores it.
func (e *Engine) wrote(ctx context.Context, ws ...written) {
	if len(ws) == 0 {
		return
	}
	if e.cfg.Index != nil {
		ts := make([]*task.Task, len(ws))
		for i, w := range ws {
			ts[i] = w.t
		}
		sctx, cancel := detached(ctx)
		defer cancel()
		if err := e.cfg.Index.Sync(sctx, ts...); err != nil {
			e.log.WarnContext(ctx, "mirror tasks to the index; the repair scan will", slog.Int("tasks", len(ts)), slog.String("error", err.Error()))
		}
	}
	for _, w := range ws {
		e.track(w)
	}
}

// track brings the wheel in line with a task just written to (or read from)
// the store: the only way tasks enter the wheel besides the loader. A copy
// older than one tracked already is ignored (see package sched).
func (e *Engine) track(w written) {
	t := w.t
	wake := t.WakeAt
	if e.cfg.Index != nil && !e.cfg.Index.Watches(t) {
		wake = time.Time{} // another node times it
	}
	if t.Target.Pull != nil {
		// Written: a claim must not hand out a copy read before. Dropped
		// before the wheel has the task again, which may fire it into
		// the ready queue at once.
		e.dropQueued(t.ID)
	}
	e.mu.Lock()
	if e.mu.core == nil {
		e.mu.Unlock()
		return
	}
	earlier := e.mu.core.Track(sched.Entry{ID: t.ID, WakeAt: wake, Seq: w.seq, App: t.App})
	e.mu.Unlock()
	if earlier {
		signal(e.kick)
	}
	if t.State == task.Scheduled && t.Target.Pull != nil && !t.NextAttemptAt.After(e.clock.Now()) {
		e.notifyPull(t.App)
	}
}

// runLoop fires what is due and sleeps until the wheel's next bucket.
func (e *Engine) runLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.mu.Lock()
		now := e.clock.Now()
		moved, next := e.mu.core.Advance(now)
		e.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		if moved > 0 {
			e.signalReady()
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-e.kick:
		}
	}
}

// pumpLoop hands ready tasks to workers in batches, at most MaxInFlight
// workers at once. When all are busy it waits, and tasks queue in memory,
// in their apps' ready queues, which a batch takes from in turns (package
// sched): one app's backlog does not hold up the others.
//
// A batch is what came due together, up to fireBatchMax and to the workers
// free: one store write fires it (fireMany), one transaction on SQL instead
// of one per task.
//
// Workers outlive their job: an idle one takes the next, and only after
// workerIdle without work does it end, so that the fire path does not grow
// a fresh goroutine stack for every task.
func (e *Engine) pumpLoop(ctx context.Context) {
	last := 0 // tasks the last batch took
	for {
		// A fire job takes its ready tasks only once a write slot is free:
		// while the writes in flight run, the tasks falling due meanwhile
		// gather into the next batch (a group commit), rather than many
		// small batches queueing on the store's locks.
		select {
		case e.writing <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if e.cfg.Index != nil && last >= gatherAbove && !e.gatherFire(ctx) {
			<-e.writing
			return
		}
		free := max(1, e.cfg.MaxInFlight-int(e.busy.Load()))
		e.mu.Lock()
		taken := e.mu.core.Take(min(fireBatchMax, free))
		e.mu.Unlock()
		last = len(taken)
		if len(taken) == 0 {
			<-e.writing
			select {
			case <-ctx.Done():
				return
			case <-e.readyCh:
				continue
			}
		}
		if !e.handOff(ctx, job{fire: taken}) {
			<-e.writing
			return
		}
		e.maybeKickLoader()
	}
}

// In a cluster, under load (the last batch took gatherAbove tasks or more),
// a fire job waits fireGather before it takes its batch, so that the tasks
// due meanwhile join it: each batch costs one SQL transaction and a Redis
// round trip whatever its size, and at a few thousand fires a second the
// batches a free write slot takes at once are a handful of tasks. Measured
// on one node at 4 000 fires/s: 0.10 SQL transactions per fire instead of
// 0.25, a fifth less CPU per fire over the node, PostgreSQL and Redis, and
// p99 lateness 17–38 ms instead of 55–76 (less queueing behind the
// transactions saved). A lone task, or a trickle, goes at once.
const (
	gatherAbove = 8
	fireGather  = 4 * time.Millisecond
)

// gatherFire waits fireGather; false when ctx ended first.
func (e *Engine) gatherFire(ctx context.Context) bool { return sleepCtx(ctx, fireGather) }

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
func (e *Engine) handOff(ctx context.Context, j job) bool {
	select {
	case e.work <- j:
		return true
	default:
	}
	select {
	case e.work <- j:
	case e.sem <- struct{}{}:
		e.startWorker(ctx, j)
	case <-ctx.Done():
		return false
	}
	return true
}

// tryHandOff is handOff without the wait: false when every worker is busy
// and there are MaxInFlight of them.
func (e *Engine) tryHandOff(ctx context.Context, j job) bool {
	select {
	case e.work <- j:
		return true
	case e.sem <- struct{}{}:
		e.startWorker(ctx, j)
		return true
	default:
		return false
	}
}

// startWorker starts a worker, which holds a token of e.sem, on j.
func (e *Engine) startWorker(ctx context.Context, j job) {
	e.workers.Add(1)
	go func() {
		defer e.workers.Done()
		defer func() { <-e.sem }()
		e.worker(ctx, j)
	}()
}

// workerIdle is how long a worker waits for another job before it ends.
const workerIdle = 10 * time.Second

// worker does j, then the jobs handed to it, until it has waited
// workerIdle for one or the loops stop. Between jobs it delivers the push
// attempts waiting for a worker (waiting.go), before it takes a new job.
func (e *Engine) worker(ctx context.Context, j job) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		e.busy.Add(1)
		switch {
		case j.deliver != nil:
			e.deliver(e.workCtx, j.deliver)
		case j.fire != nil:
			e.fireMany(e.workCtx, j.fire)
		}
		e.deliverWaiting(e.workCtx)
		e.busy.Add(-1)
		idle.Reset(workerIdle)
		select {
		case j = <-e.work:
		case <-e.deliverKick:
			j = job{} // only the waiting attempts
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// deliverAll delivers the push attempts fireMany started: each by a worker
// of its own while there are idle workers or room for one, the last here.
// When no worker is free, the rest wait in their apps' queues (waiting.go)
// for the first worker free, this one included, which takes them by app in
// turn: one after the other here, an app's delivery that hangs would hold
// up the other apps' of the batch. It never waits for a worker, so workers
// firing batches cannot all wait on each other.
func (e *Engine) deliverAll(ctx context.Context, ts []*task.Task) {
	for i, t := range ts {
		switch {
		case i == len(ts)-1:
			e.deliver(ctx, t)
		case !e.tryHandOff(e.loopCtx, job{deliver: t}):
			e.queueDeliveries(ts[i:])
			return // the worker delivers them next (deliverWaiting)
		}
	}
}

// maybeKickLoader wakes the loader when it stopped for lack of room and
// there is room again.
func (e *Engine) maybeKickLoader() {
	e.mu.Lock()
	room := e.mu.core.NeedsLoad()
	e.mu.Unlock()
	if room {
		signal(e.loadKick)
	}
}

// loadLoop keeps the wheel filled up to now+Window. It scans when half the
// window has passed since its last scan, or when room frees up after the
// cap stopped it.
func (e *Engine) loadLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := e.cfg.Window / 2
		if err := e.load(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.ErrorContext(ctx, "load due tasks", slog.String("error", err.Error()))
			wait = time.Second // the store is in trouble; try again soon
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-e.loadKick:
		}
	}
}

const loadPage = 1000

// scan reads one page of the wake order: the node's slots of the cluster
// index, or the store's.
func (e *Engine) scan(ctx context.Context, s sched.Scan) ([]store.Wakeup, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if e.cfg.Index != nil {
		return e.cfg.Index.Wakeups(ctx, s.From, s.Until, s.Limit)
	}
	return e.store.Wakeups(ctx, s.From, s.Until, s.Limit)
}

// load moves tasks due up to now+Window from the store (or, in a cluster,
// the node's slots of the index) into the wheel, in wake order, while there
// is room.
func (e *Engine) load(ctx context.Context) error {
	until := e.clock.Now().Add(e.cfg.Window)
	for {
		e.mu.Lock()
		scan, ok := e.mu.core.BeginScan(until, loadPage)
		e.mu.Unlock()
		if !ok {
			return nil
		}
		ws, err := e.scan(ctx, scan)
		e.mu.Lock()
		earlier, again := e.mu.core.EndScan(scan, ws, err != nil)
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("scan wakeups after %s: %w", scan.From.At.Format(time.RFC3339Nano), err)
		}
		if earlier {
			signal(e.kick)
		}
		if !again {
			return nil
		}
	}
}

// sweepLoop deletes finished tasks past the retention period, a page at a
// time, so that it never holds up the hot path for long.
func (e *Engine) sweepLoop(ctx context.Context) {
	every := min(e.cfg.Retention/10, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := e.clock.Now().Add(-e.cfg.Retention)
		for {
			sctx, cancel := context.WithTimeout(ctx, callTimeout)
			n, err := e.store.Sweep(sctx, cutoff, 1000)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					e.log.ErrorContext(ctx, "sweep finished tasks", slog.String("error", err.Error()))
				}
				break
			}
			if n < 1000 {
				break
			}
		}
	}
}
