package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/toc-dev/toc/task"
)

// AppPolicy is what the engine applies to one app's tasks. Zero fields fall
// back to the engine's defaults.
type AppPolicy struct {
	// Target is used when a create gives none.
	Target *task.Target
	// Retry fills the fields a task's own policy leaves zero.
	Retry task.RetryPolicy
	// MaxPayload caps the app's payloads (default Config.MaxPayload).
	MaxPayload int
	// DeliveriesPerSecond and Burst limit push attempts (0: unlimited).
	// Burst defaults to max(1, DeliveriesPerSecond/10).
	DeliveriesPerSecond float64
	Burst               int
	// MaxInFlight caps the app's concurrent push attempts. Default: half of
	// Config.MaxInFlight, so that one app whose endpoint hangs can never
	// take every delivery slot. On this node it is at most three quarters
	// of Config.MaxInFlight whatever it says (in a cluster an explicit one
	// holds across the nodes, and may be larger): the other apps keep a
	// quarter of the workers.
	MaxInFlight int
	// CreatesPerSecond limits task creation (0: unlimited); past it creates
	// fail with a *RateLimitError (HTTP 429 with Retry-After). Creating,
	// changing or resuming a schedule takes one create too, and so does
	// each occurrence a schedule makes: an occurrence held back by the
	// limit is made late, keeping its due time (schedules.go).
	CreatesPerSecond float64
	// MaxSchedules caps the app's schedules (any state): past it a create
	// fails with a *ScheduleLimitError (HTTP 409). 0: MaxSchedulesDefault;
	// negative: no cap.
	MaxSchedules int
	// Weight is how many due tasks the app takes in its turn when apps
	// with due tasks take turns to be fired (package sched). Default 1.
	Weight int
}

// MaxSchedulesDefault is an app's MaxSchedules when its policy leaves it
// zero.
const MaxSchedulesDefault = 1000

// maxSchedules is p's cap on schedules, 0 for none.
func (p AppPolicy) maxSchedules() int {
	switch {
	case p.MaxSchedules < 0:
		return 0
	case p.MaxSchedules == 0:
		return MaxSchedulesDefault
	}
	return p.MaxSchedules
}

// ScheduleLimitError: an app that has its MaxSchedules schedules created
// another.
type ScheduleLimitError struct {
	App string
	Max int
}

func (e *ScheduleLimitError) Error() string {
	return fmt.Sprintf("toc: app %q has %d schedules, its max_schedules; delete one, or raise the app's max_schedules in the config file", e.App, e.Max)
}

// Policies are the per-app settings; Default applies to apps not in Apps.
type Policies struct {
	Default AppPolicy
	Apps    map[string]AppPolicy
}

func (p *Policies) of(app string) AppPolicy {
	if a, ok := p.Apps[app]; ok {
		return a
	}
	return p.Default
}

// RateLimitError: an app created tasks faster than its creates_per_second.
type RateLimitError struct {
	App        string
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("toc: app %q is over its creates_per_second limit; retry after %s", e.App, e.RetryAfter.Round(time.Millisecond))
}

// appState is the runtime state of one app's limits. Guarded by apps.mu.
type appState struct {
	deliver     *rate.Limiter // nil: unlimited
	create      *rate.Limiter // nil: unlimited
	maxInFlight int
	inFlight    int
	parked      []task.ID             // due, waiting for an in-flight slot
	reserved    map[task.ID]time.Time // due, holding a rate reservation for this time

	// Cluster limits (gate.go).
	gate    *gate
	granted map[task.ID]grant    // let through by the gate
	slots   map[task.ID]struct{} // attempts under way that hold a cluster slot
}

// apps is admission: the apps' policies and the limits on their
// deliveries, on their own. The fire pipeline consults it before the store
// is read (pace: a rated app's task waits for its rate, or for its gate in
// a cluster), with the row held (admit: an in-flight slot), and tells it
// what became of each admitted task (release, dropGrant, kickParked). It
// hands the tasks it held back to the workers through enqueue. It has its
// own lock, never held together with Engine.mu nor across a limiter call.
type apps struct {
	mu       sync.Mutex
	pol      Policies
	state    map[string]*appState
	defShare int  // default MaxInFlight per app
	maxShare int  // the most MaxInFlight per app on this node
	closed   bool // the engine is stopping: no gate starts

	rated      atomic.Pointer[ratedApps]
	weights    atomic.Pointer[appWeights]
	limiter    Limiter // the cluster's; nil on one node
	log        *slog.Logger
	leaseGrace time.Duration
	boot       string                           // the engine's: names slot holds
	enqueue    func(app string, ids ...task.ID) // hands due tasks to the workers
	ctx        context.Context                  // the engine's loops': gates run until it ends (set by Start)
	gates      sync.WaitGroup                   // the gates running
	// changed is signalled when the policies change: the schedule loop
	// drops the holds the old creates limits gave.
	changed chan struct{}
}

func newApps(cfg Config, boot string, enqueue func(app string, ids ...task.ID)) *apps {
	return &apps{
		state:      map[string]*appState{},
		defShare:   max(1, cfg.MaxInFlight/2),
		maxShare:   max(1, cfg.MaxInFlight-cfg.MaxInFlight/4),
		limiter:    cfg.Limiter,
		log:        cfg.Logger,
		leaseGrace: cfg.LeaseGrace,
		boot:       boot,
		enqueue:    enqueue,
		changed:    make(chan struct{}, 1),
	}
}

// SetPolicies replaces the per-app settings. Limits change in place: tasks
// waiting for a slot or a rate reservation keep waiting under the new limits,
// and none is dropped. Safe to call at any time (a config reload).
func (e *Engine) SetPolicies(p Policies) { e.apps.setPolicies(p) }

func (a *apps) setPolicies(p Policies) {
	rated := map[string]bool{}
	for app, ap := range p.Apps {
		rated[app] = ap.DeliveriesPerSecond > 0 || a.gatedBy(ap)
	}
	a.rated.Store(&ratedApps{apps: rated, all: p.Default.DeliveriesPerSecond > 0 || a.gatedBy(p.Default)})
	weights := map[string]int{}
	for app, ap := range p.Apps {
		weights[app] = ap.Weight
	}
	a.weights.Store(&appWeights{apps: weights, def: p.Default.Weight})
	a.mu.Lock()
	a.pol = p
	unpark := map[string][]task.ID{}
	for app, st := range a.state {
		a.applyLocked(app, st)
		for free := st.maxInFlight - st.inFlight; free > 0 && len(st.parked) > 0; free-- {
			unpark[app] = append(unpark[app], st.parked[0])
			st.parked = st.parked[1:]
		}
		if st.gate != nil {
			signal(st.gate.freed) // the gate asks again under the new limits
		}
	}
	a.mu.Unlock()
	for app, ids := range unpark {
		a.enqueue(app, ids...)
	}
	signal(a.changed)
}

// appWeights are the apps' turn weights (AppPolicy.Weight), read by the
// scheduling core under Engine.mu: an atomic snapshot, not apps.mu.
type appWeights struct {
	apps map[string]int
	def  int
}

// weight is app's AppPolicy.Weight (package sched counts one below 1).
func (a *apps) weight(app string) int {
	w := a.weights.Load()
	if w == nil {
		return 1
	}
	if v, ok := w.apps[app]; ok {
		return v
	}
	return w.def
}

// Policy returns the settings in force for app.
func (e *Engine) Policy(app string) AppPolicy { return e.apps.policy(app) }

func (a *apps) policy(app string) AppPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pol.of(app)
}

// EffectivePolicy is Policy with every default filled in: the retry
// policy, the payload cap, the in-flight cap, the burst and the weight
// actually applied.
func (e *Engine) EffectivePolicy(app string) AppPolicy {
	p := e.Policy(app)
	p.Retry = p.Retry.WithDefaults()
	if p.MaxPayload == 0 {
		p.MaxPayload = e.cfg.MaxPayload
	}
	if p.MaxInFlight <= 0 {
		p.MaxInFlight = e.apps.defShare
	}
	if e.apps.limiter == nil {
		p.MaxInFlight = min(p.MaxInFlight, e.apps.maxShare) // in a cluster it holds across the nodes
	}
	if p.DeliveriesPerSecond > 0 && p.Burst <= 0 {
		p.Burst = max(1, int(math.Ceil(p.DeliveriesPerSecond/10)))
	}
	if p.MaxSchedules == 0 {
		p.MaxSchedules = MaxSchedulesDefault
	}
	p.Weight = max(1, p.Weight)
	return p
}

func (a *apps) applyLocked(app string, st *appState) {
	p := a.pol.of(app)
	st.maxInFlight = p.MaxInFlight
	if st.maxInFlight <= 0 {
		st.maxInFlight = a.defShare
	}
	st.maxInFlight = min(st.maxInFlight, a.maxShare) // the other apps keep a quarter of the workers
	st.deliver = setLimit(st.deliver, p.DeliveriesPerSecond, p.Burst)
	st.create = setLimit(st.create, p.CreatesPerSecond, 0)
}

func setLimit(l *rate.Limiter, perSec float64, burst int) *rate.Limiter {
	if perSec <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSec/10)))
	}
	if l == nil {
		return rate.NewLimiter(rate.Limit(perSec), burst)
	}
	l.SetLimit(rate.Limit(perSec))
	l.SetBurst(burst)
	return l
}

func (a *apps) getLocked(app string) *appState {
	st, ok := a.state[app]
	if !ok {
		st = &appState{granted: map[task.ID]grant{}, slots: map[task.ID]struct{}{}}
		a.applyLocked(app, st)
		a.state[app] = st
	}
	return st
}

type admission int

const (
	admitNow   admission = iota
	admitLater           // wait for a rate reservation: retry at the returned time
	admitPark            // at MaxInFlight: parked until a slot frees
	admitGate            // cluster limits: queue behind the app's gate
)

// ratedApps says which apps have a delivery rate (or, in cluster mode, an
// explicit in-flight cap): their due tasks are checked against it before
// the store is read (see preAdmit and enterGate).
type ratedApps struct {
	apps map[string]bool
	all  bool // the default policy has a rate: every undeclared app too
}

func (a *apps) isRated(app string) bool {
	r := a.rated.Load()
	if r == nil || app == "" {
		return false
	}
	if v, ok := r.apps[app]; ok {
		return v
	}
	return r.all
}

// pace paces a rated app's due task before its store read: in a cluster
// (a Limiter) it queues at the app's gate (gated: it leaves the fire job,
// and the gate sends it back when the cluster's limits allow); on one node
// it takes a rate reservation, and at is when it may come back (zero: go
// on now).
func (a *apps) pace(app string, id task.ID, now time.Time) (gated bool, at time.Time) {
	if a.limiter != nil {
		return a.enterGate(app, id), time.Time{}
	}
	return false, a.preAdmit(app, id, now)
}

// preAdmit paces a rate-limited app's due tasks before their store read, on
// a single node: it takes the task's reservation, so a burst of N tasks
// costs N reservations, not N store transactions. It returns the time to
// come back, or zero to go on to the store (where admit decides). In
// cluster mode the gate does this (enterGate).
func (a *apps) preAdmit(app string, id task.ID, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if at, held := st.reserved[id]; held {
		if at.After(now) {
			return at
		}
		return time.Time{} // its reservation came due: admit honours it
	}
	if st.deliver == nil {
		return time.Time{}
	}
	r := st.deliver.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if st.reserved == nil {
		st.reserved = map[task.ID]time.Time{}
	}
	at := now
	if d > 0 {
		at = task.Ms(now.Add(d))
	}
	st.reserved[id] = at // admit sees the held reservation and does not take another
	if d > 0 {
		return at
	}
	return time.Time{}
}

// admit decides whether a due push task of app may start an attempt now. On
// admitNow it has taken an in-flight slot, which release gives back.
func (a *apps) admit(app string, id task.ID, now time.Time) (admission, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if a.limiter != nil {
		return a.admitClusterLocked(app, st, id), time.Time{}
	}
	at, held := st.reserved[id]
	if held && at.After(now) {
		return admitLater, at
	}
	if st.inFlight >= st.maxInFlight {
		if held {
			delete(st.reserved, id) // it will reserve again when unparked
		}
		st.parked = append(st.parked, id)
		return admitPark, time.Time{}
	}
	if !held && st.deliver != nil {
		r := st.deliver.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			if st.reserved == nil {
				st.reserved = map[task.ID]time.Time{}
			}
			at := task.Ms(now.Add(d))
			st.reserved[id] = at
			return admitLater, at
		}
	}
	delete(st.reserved, id)
	st.inFlight++
	return admitNow, time.Time{}
}

// admitClusterLocked is admit in cluster mode. A task the gate let through
// goes (it holds its token, and its cluster slot unless the limiter was
// down); a task of an app with cluster limits that did not pass the gate
// is sent to it; any other task is held to the node's own in-flight cap.
func (a *apps) admitClusterLocked(app string, st *appState, id task.ID) admission {
	g, granted := st.granted[id]
	if granted {
		delete(st.granted, id)
		if g.slot {
			st.slots[id] = struct{}{}
			st.inFlight++
			return admitNow
		}
	} else if a.gatedBy(a.pol.of(app)) {
		return admitGate
	}
	if st.inFlight >= st.maxInFlight {
		st.parked = append(st.parked, id)
		return admitPark
	}
	st.inFlight++
	return admitNow
}

// release gives back an in-flight slot of app and sends one parked task to
// try for it. No slot is held on the parked task's behalf: it is admitted
// (or parked again) like any other when it fires, so a task that turns out
// to need no attempt (done by another node, cancelled) cannot leak a slot.
func (a *apps) release(app string, id task.ID) {
	a.mu.Lock()
	st := a.getLocked(app)
	st.inFlight--
	_, slot := st.slots[id]
	delete(st.slots, id)
	max := a.pol.of(app).MaxInFlight
	var next []task.ID
	if len(st.parked) > 0 && st.inFlight < st.maxInFlight {
		next = append(next, st.parked[0])
		st.parked[0] = task.ID{}
		st.parked = st.parked[1:]
	}
	a.mu.Unlock()
	if slot {
		a.releaseSlot(app, id, max)
	}
	a.enqueue(app, next...)
}

// kickParked sends parked tasks of app to try for the free slots: called
// when a task that fired took no slot, so a free slot is never left idle
// while tasks wait for one.
func (a *apps) kickParked(app string) {
	a.mu.Lock()
	st, ok := a.state[app]
	var next []task.ID
	if ok {
		for free := st.maxInFlight - st.inFlight; free > 0 && len(st.parked) > 0; free-- {
			next = append(next, st.parked[0])
			st.parked[0] = task.ID{}
			st.parked = st.parked[1:]
		}
	}
	a.mu.Unlock()
	a.enqueue(app, next...)
}

// InFlight returns app's push attempts under way and tasks parked for a
// slot (tests, metrics).
func (e *Engine) InFlight(app string) (inFlight, parked int) {
	a := e.apps
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	return st.inFlight, len(st.parked)
}

// allowCreate takes n create tokens of app, or says when to retry.
func (a *apps) allowCreate(app string, n int, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if st.create == nil {
		return nil
	}
	r := st.create.ReserveN(now, n)
	if !r.OK() {
		return &RateLimitError{App: app, RetryAfter: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &RateLimitError{App: app, RetryAfter: d}
	}
	return nil
}

// takeCreates takes up to n of app's create tokens for a schedule's
// occurrences, without waiting: got is how many it took. When got < n it
// also holds one token reserved for the time it returns, so that a held
// back schedule has its turn at the limit's pace, in the order it asked
// (creates that cannot wait, API calls, get 429 meanwhile): the caller
// steps the schedule then with that token paid.
func (a *apps) takeCreates(app string, n int, now time.Time) (got int, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.getLocked(app)
	if st.create == nil {
		return n, time.Time{}
	}
	for got < n {
		r := st.create.ReserveN(now, 1)
		if !r.OK() { // a burst of 0: never
			return got, time.Time{}
		}
		if d := r.DelayFrom(now); d > 0 {
			return got, task.Ms(now.Add(d))
		}
		got++
	}
	return got, time.Time{}
}
