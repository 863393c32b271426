package engine

import (
	"fmt"
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

// apps is what the engine knows of the apps: their policies (SetPolicies),
// the turn weights the scheduling core reads, and the creates limits
// (creates_per_second) that the create path and the schedule loop take
// from. The limits on deliveries are admission's (admission.go), which
// reads the policies from here.
type apps struct {
	// pol is the policies in force: a snapshot replaced whole by set and
	// read without a lock (the scheduling core reads the weights under
	// timekeeper.mu, admission reads the limits under its own lock).
	pol        atomic.Pointer[Policies]
	maxPayload int // Config.MaxPayload: an app's MaxPayload when it gives none

	// mu guards the apps' creates limiters (one per app with a
	// creates_per_second, made when first asked for).
	mu struct {
		sync.Mutex
		create map[string]*rate.Limiter
	}
	// changed is signalled when the policies change: the schedule loop
	// drops the holds the old creates limits gave.
	changed chan struct{}
}

func newApps(cfg Config) *apps {
	a := &apps{maxPayload: cfg.MaxPayload, changed: make(chan struct{}, 1)}
	a.mu.create = map[string]*rate.Limiter{}
	return a
}

// SetPolicies replaces the per-app settings. Limits change in place: tasks
// waiting for a slot or a rate reservation keep waiting under the new limits,
// and none is dropped. Safe to call at any time (a config reload).
func (e *Engine) SetPolicies(p Policies) {
	e.apps.set(p)
	e.admit.policiesChanged()
}

// set puts p in force. The creates limiters follow the snapshot in force
// when set takes the lock, not p: of two sets at once, the later snapshot
// is the one every limiter ends with.
func (a *apps) set(p Policies) {
	a.pol.Store(&p)
	a.mu.Lock()
	cur := a.pol.Load()
	for app, l := range a.mu.create {
		if l = setLimit(l, cur.of(app).CreatesPerSecond, 0); l == nil {
			delete(a.mu.create, app)
		} else {
			a.mu.create[app] = l
		}
	}
	a.mu.Unlock()
	signal(a.changed)
}

// of returns the settings in force for app.
func (a *apps) of(app string) AppPolicy {
	p := a.pol.Load()
	if p == nil {
		return AppPolicy{}
	}
	return p.of(app)
}

// weight is app's AppPolicy.Weight (package sched counts one below 1).
func (a *apps) weight(app string) int {
	if a.pol.Load() == nil {
		return 1
	}
	return a.of(app).Weight
}

// Policy returns the settings in force for app.
func (e *Engine) Policy(app string) AppPolicy { return e.apps.of(app) }

// EffectivePolicy is Policy with every default filled in: the retry
// policy, the payload cap, the in-flight cap, the burst and the weight
// actually applied.
func (e *Engine) EffectivePolicy(app string) AppPolicy {
	p := e.apps.effective(app)
	p.MaxInFlight = e.admit.inFlightCap(p)
	return p
}

// effective is EffectivePolicy but for the in-flight cap, which is
// admission's (inFlightCap).
func (a *apps) effective(app string) AppPolicy {
	p := a.of(app)
	p.Retry = p.Retry.WithDefaults()
	if p.MaxPayload == 0 {
		p.MaxPayload = a.maxPayload
	}
	if p.DeliveriesPerSecond > 0 && p.Burst <= 0 {
		p.Burst = defaultBurst(p.DeliveriesPerSecond)
	}
	if p.MaxSchedules == 0 {
		p.MaxSchedules = MaxSchedulesDefault
	}
	p.Weight = max(1, p.Weight)
	return p
}

// defaultBurst is a rate's burst when its policy gives none.
func defaultBurst(perSec float64) int { return max(1, int(math.Ceil(perSec/10))) }

// setLimit makes l allow perSec with burst (defaultBurst when 0), or
// returns nil for no limit (perSec 0). l may be nil: a new limiter.
func setLimit(l *rate.Limiter, perSec float64, burst int) *rate.Limiter {
	if perSec <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = defaultBurst(perSec)
	}
	if l == nil {
		return rate.NewLimiter(rate.Limit(perSec), burst)
	}
	l.SetLimit(rate.Limit(perSec))
	l.SetBurst(burst)
	return l
}

// createLocked is app's creates limiter, nil when unlimited. a.mu is held.
func (a *apps) createLocked(app string) *rate.Limiter {
	l, ok := a.mu.create[app]
	if !ok {
		if l = setLimit(nil, a.of(app).CreatesPerSecond, 0); l != nil {
			a.mu.create[app] = l
		}
	}
	return l
}

// allowCreate takes n create tokens of app, or says when to retry.
func (a *apps) allowCreate(app string, n int, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.createLocked(app)
	if l == nil {
		return nil
	}
	r := l.ReserveN(now, n)
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
	l := a.createLocked(app)
	if l == nil {
		return n, time.Time{}
	}
	for got < n {
		r := l.ReserveN(now, 1)
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
