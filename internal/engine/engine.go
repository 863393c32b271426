// Package engine is toc's heart: it decides every state change of a task,
// keeps the tasks that are due soon in a timing wheel, fires them on time,
// and hands them to sinks or to pull consumers.
//
// # Tiers of time
//
// The store holds every task and orders the live ones by WakeAt, the next
// instant the engine must look at them (a due attempt, a deadline, the end of
// a lease). The loader reads that order (the index's: the store's on one
// node, the node's slots of the cluster index in a cluster) from a cursor
// into the wheel, a window (Config.Window) at a time, so memory holds only
// what is due soon. The wheel tells the timekeeper's run loop the next
// instant anything is due; the run loop sleeps on one timer until then. A task created or rescheduled inside the
// loaded window goes straight into the wheel; there is no polling interval
// anywhere between a due time and its delivery.
//
// # Services
//
// The Engine is a façade: New wires a few services, each a type of its own
// in its own file with its own lock if it has state, and Start and Stop
// start and stop them in order. The API's files call them.
//   - timekeeper (timekeeper.go): the scheduling core (package sched) and
//     its run loop, which moves what falls due into the ready queues;
//   - loader (loader.go): fills the wheel from the index's wake order;
//   - dispatcher (dispatcher.go): the workers, the pump that hands them
//     ready tasks in batches, the push attempts waiting for a worker;
//   - firer (fire.go): the fire pipeline over a batch, and the deliveries;
//   - attempts (attempts.go): the attempts under way in this process;
//   - outcomes (outcomes.go): the group commit of the attempts' outcomes;
//   - held and waiters (pull.go, waiters.go): the pull tasks held in
//     memory, and the leases waiting for them;
//   - writer (writer.go): writes tasks and has the others follow (the
//     index's mirror, the wheel);
//   - apps (apps.go): the apps' policies, turn weights and creates
//     limits;
//   - admission (admission.go): the limits on the apps' deliveries, one
//     of two chosen in New: this process's rate reservations and
//     in-flight counts (admitlocal.go), or, with a Config.Limiter, the
//     cluster's gates over it (gate.go, sharedlimits.go);
//   - sweeper (sweeper.go), attemptLog (attemptlog.go) and testClock
//     (testclock.go).
//
// One mode, two indexes: the cluster's (Config.Index) or, on one node,
// the local one (localindex.go); the services run the same over either.
// Likewise admission is the cluster's (Config.Limiter) or the local one.
// New chooses, in one place, the few settings that follow from the mode
// but are not the index's to answer (see New).
//
// # Invariant
//
// Every live task with a WakeAt at or before the cursor is in the wheel (at
// or before its WakeAt: an entry may fire early and find the task moved,
// never late), in a ready queue, or being handled by a worker. Tasks
// after the cursor are only in the store. Anything written to the store
// reaches the wheel through the writer's track; package sched keeps the
// invariant against concurrent scans and copies tracked out of order, and
// its model test (FuzzCore) checks it.
//
// # Locks
//
// Each service's lock guards its own state, and only one lock order is
// kept: held.mu before attempts.mu (a pull task moves from its ready queue
// to a lease, and is looked for in both, atomically). No other lock is
// ever held while another is taken.
//   - timekeeper.mu guards the scheduling core (the wheel, the cursor and
//     the per-app ready queues);
//   - attempts.mu guards the attempts under way: push attempts from their
//     reservation to their outcome's write, pull tasks leased in memory;
//   - outcomes.mu guards the outcomes waiting for their group commit and
//     its writers (it reads the attempts' count atomically, not under
//     attempts.mu);
//   - held.mu guards the pull tasks held in memory: due and queued, or
//     about to be (pull.go);
//   - dispatcher.mu guards the push attempts waiting for a worker;
//   - waiters.mu guards the leases waiting for pull tasks;
//   - apps.mu guards the apps' creates limiters; the policies are a
//     snapshot replaced whole and read without a lock (apps.go);
//   - the admission's lock, localAdmission.mu or clusterAdmission.mu,
//     guards the apps' in-flight counts and parked tasks, and on one node
//     the delivery rates and their reservations (admitlocal.go), in a
//     cluster the gates, their grants and the cluster slots held
//     (gate.go);
//   - e.creates guards the creates gathering into the next group-committed
//     store write (creates.go);
//   - e.mu guards only whether the engine started and is stopping.
//
// No store, index (Redis), limiter or sink call is made while one is held.
// Store callbacks (Update, UpdateMany, UpdateKnown) run under the store's own row locks
// and make no network call: the cluster index's claim of a fire batch runs
// after the store call that read the batch returned (fire.go). They take
// held.mu and attempts.mu (in that order, one after the other): every
// write tells the held service, under its task's row lock, that the task
// is changing (writer.touch), and an outcome written over a lease's base
// checks there that no write came since (outcomes.write). The row lock
// is what orders the two. Every call
// carries a deadline: its caller's, or callTimeout for the writes that must
// finish after their caller has gone (detached).
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/clock"
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
	// Ended is Sync for the tasks of attempts this node claimed, once
	// they ended: the index holds each one's member for this node.
	Ended(ctx context.Context, ts ...*task.Task) error
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
	boot  string    // this process's part of lease tokens
	apps  *apps     // the apps' policies, weights and creates limits (apps.go)
	admit admission // the limits on the apps' deliveries (admission.go)

	index  engIdx      // Config.Index (clusterindex.go), or the local one (localindex.go)
	tk     *timekeeper // the scheduling core (timekeeper.go)
	writer *writer     // writes tasks and has the engine follow (writer.go)

	dispatch *dispatcher // workers, the pump, the waiting attempts (dispatcher.go)
	firer    *firer      // fire jobs and push deliveries (fire.go)
	loader   *loader     // fills the wheel (loader.go)
	sweeper  *sweeper    // deletes finished tasks past the retention (sweeper.go)

	// schedules is the store's schedules (nil: it keeps none, and the
	// schedule loop does not run).
	schedules store.Schedules
	// tclock is AdvanceClock's (testclock.go).
	tclock *testClock

	mu struct {
		sync.Mutex
		started  bool
		stopping bool
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

	attempts *attempts // under way in this process (attempts.go)
	outcomes *outcomes // their outcomes' group commit (outcomes.go)

	held    *held    // pull tasks held in this process (pull.go)
	waiters *waiters // leases waiting for pull tasks (waiters.go)

	cancel context.CancelFunc // stops the loops
	loops  sync.WaitGroup     // run, load, pump, sweep and schedule loops
}

// New returns an engine. It does nothing until Start.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:   cfg,
		store: cfg.Store,
		log:   cfg.Logger,
		clock: cfg.Clock,
		boot:  newBoot(),
	}
	e.schedules, _ = store.As[store.Schedules](cfg.Store)
	e.apps = newApps(cfg)
	e.tk = newTimekeeper(timekeeperParams{Clock: cfg.Clock, MaxLoaded: cfg.MaxLoaded, Weight: e.apps.weight})
	e.attempts = newAttempts()
	// The one place the mode is chosen: a cluster's index, or the local
	// one (with the store's attempt log, which numbers the attempts a
	// cluster's index numbers); the services run the same over either.
	// One thing follows from the mode outside the index: on one node pull
	// tasks are held in memory from their due time to their ack, up to
	// holdMax (pull.go); in a cluster every node must find them in the
	// index or the store, and none is held.
	holdMax := 0
	// Admission follows the Limiter: the cluster's limits on deliveries
	// through it (gate.go), or this process's (admitlocal.go).
	ap := admissionParams{Policy: e.apps.of, Shares: sharesOf(cfg.MaxInFlight), Enqueue: e.tk.enqueue, Freed: e.tk.roomFreed}
	if cfg.Limiter != nil {
		e.admit = newClusterAdmission(ap, sharedLimits{limiter: cfg.Limiter, boot: e.boot, leaseGrace: cfg.LeaseGrace, log: cfg.Logger})
	} else {
		e.admit = newLocalAdmission(ap)
	}
	e.tk.room, e.tk.taking = e.admit.room, e.admit.taking
	var tellPullDue func(ctx context.Context, app string) // the other nodes: none on one node
	if cfg.Index != nil {
		e.index = clusterIndex{cfg.Index}
		tellPullDue = cfg.Index.PullDue
	} else {
		alog, _ := store.As[store.AttemptLog](cfg.Store)
		l := &attemptLog{alog: alog, store: cfg.Store, attempts: e.attempts, log: cfg.Logger}
		l.errs.Every = noteErrorsEvery
		e.index = &localIndex{store: cfg.Store, boot: e.boot, alog: l, enqueue: e.tk.enqueue, leaseGrace: cfg.LeaseGrace, log: cfg.Logger}
		holdMax = pullHoldMax(cfg.MaxLoaded)
	}
	e.waiters = newWaiters(tellPullDue)
	e.held = &held{
		attempts: e.attempts,
		tk:       e.tk,
		clock:    cfg.Clock,
		boot:     e.boot,
		max:      holdMax,
		started:  cfg.Hooks.AttemptStarted,
		alog:     e.index.attemptLog(),
		workCtx:  func() context.Context { return e.dispatch.workCtx },
	}
	e.held.mu.init()
	e.writer = &writer{
		store:    cfg.Store,
		finished: cfg.Hooks.Finished,
		index:    e.index,
		tk:       e.tk,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		dropHeld: e.held.drop,
		pullDue:  e.waiters.due,
		touch:    e.held.touch,
	}
	if e.held.max > 0 {
		// Pull leases held in memory (one node): their acks' outcomes are
		// written over the task as held, when no write touched it since
		// (outcomes.write), on a store that can.
		e.writer.known, _ = store.As[store.KnownUpdater](cfg.Store)
	} else {
		e.writer.known = clusterKnown(cfg.Store) // clusterindex.go
	}
	e.outcomes = &outcomes{
		attempts:    e.attempts,
		writer:      e.writer,
		index:       e.index,
		tk:          e.tk,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		leasesEnded: e.held.leasesEnded,
		full:        make(chan struct{}, 1),
	}
	e.held.outcomes = e.outcomes
	e.firer = &firer{
		admit:      e.admit,
		tk:         e.tk,
		attempts:   e.attempts,
		outcomes:   e.outcomes,
		held:       e.held,
		waiters:    e.waiters,
		writer:     e.writer,
		index:      e.index,
		sinks:      cfg.Sinks,
		hooks:      cfg.Hooks,
		clock:      cfg.Clock,
		log:        cfg.Logger,
		boot:       e.boot,
		leaseGrace: cfg.LeaseGrace,
		alog:       e.index.attemptLog(),
	}
	e.dispatch = newDispatcher(dispatcherParams{
		MaxInFlight: cfg.MaxInFlight,
		Gather:      e.index.fireGather(),
		Timekeeper:  e.tk,
		Fire:        e.firer.fire,
		Deliver:     e.firer.deliver,
	})
	e.firer.deliverAll = e.dispatch.deliverAll
	e.loader = &loader{tk: e.tk, index: e.index, clock: cfg.Clock, window: cfg.Window, log: cfg.Logger}
	e.sweeper = &sweeper{store: cfg.Store, clock: cfg.Clock, retention: cfg.Retention, log: cfg.Logger}
	e.tclock = &testClock{
		clock:     cfg.Clock,
		window:    cfg.Window,
		store:     cfg.Store,
		schedules: e.schedules,
		tk:        e.tk,
		dispatch:  e.dispatch,
		attempts:  e.attempts,
		outcomes:  e.outcomes,
		sweeper:   e.sweeper,
		log:       cfg.Logger,
		ready:     e.checkReady,
		kickSched: func() { e.steps.kick() },
	}
	e.firer.fired = &e.tclock.fired
	wireEdge(e, cfg)
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
	e.mu.Unlock()
	// Start order: the timekeeper's core first (the index's start may
	// queue into it); the index's start (on one node: the recovery of
	// deliveries a previous process left under way and the attempt log's
	// count of its unfinished attempts) before anything fires; then the
	// workers' and the gates' contexts; then the loops.
	e.tk.start(now)
	e.steps.startedAt = now.UTC().Truncate(time.Millisecond)

	if err := e.index.start(ctx, now); err != nil {
		return err
	}

	loopCtx, cancel := context.WithCancel(context.Background())
	e.dispatch.start(loopCtx)
	e.cancel = cancel
	e.mu.Lock()
	e.mu.started = true
	e.mu.Unlock()
	e.admit.start(loopCtx)

	// The loops, each a service's run: the timekeeper fires what falls
	// due into the ready queues, the loader fills the wheel, the
	// dispatcher's pump hands ready tasks to workers, the sweeper deletes
	// what the retention let go. Stop ends them together (loopCtx).
	e.loops.Add(4)
	go func() { defer e.loops.Done(); e.tk.run(loopCtx) }()
	go func() { defer e.loops.Done(); e.loader.run(loopCtx) }()
	go func() { defer e.loops.Done(); e.dispatch.run(loopCtx) }()
	go func() { defer e.loops.Done(); e.sweeper.run(loopCtx) }()
	if e.schedules != nil {
		e.loops.Add(1)
		go func() { defer e.loops.Done(); e.steps.run(loopCtx) }()
	}
	return nil
}

// Stop stops firing, gives in-flight deliveries until ctx is done to finish,
// then cancels them and puts them back to scheduled. It is safe to call more
// than once and before Start. When ctx ended before the deliveries did, the
// engine is stopped all the same and the error (wrapping ctx's) says so.
//
// Shutdown order: the loops first (nothing new fires), then admission's
// gates (nothing is let through), then the dispatcher's workers (in-flight
// attempts finish or are released, and their outcomes are written), so
// the store is still open for all.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.mu.started || e.mu.stopping {
		e.mu.Unlock()
		e.loops.Wait()
		e.dispatch.workers.Wait()
		return nil
	}
	e.mu.stopping = true
	e.mu.Unlock()

	e.cancel()
	e.loops.Wait()
	e.admit.stop()
	return e.dispatch.stop(ctx) // the workers: attempts under way finish, or are released when ctx ends
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
	s, ok := e.tk.stats()
	if !ok {
		return Stats{}
	}
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
