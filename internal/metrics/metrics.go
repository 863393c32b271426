// Package metrics measures toc for the people who run it: Prometheus
// metrics (prefix toc_) fed by the engine's hooks, its memory tiers and the
// store's counts, and a short in-memory history of delivery lateness for the
// dashboard.
//
// # Metrics
//
//	toc_tasks_created_total{app}                  counter
//	toc_tasks_finished_total{app,state}           counter: delivered, dead, expired, cancelled
//	toc_attempts_started_total{app,kind}          counter: kind is the target kind (http, pull, amqp, nats)
//	toc_lateness_seconds{app,kind}                histogram: due time → attempt start, 0.5 ms to 60 s
//	toc_delivery_duration_seconds{kind,outcome}   histogram: one push attempt; outcome ok or error
//	toc_wheel_tasks                               gauge: tasks in the timing wheel
//	toc_ready_tasks                               gauge: fired tasks waiting for a worker
//	toc_loader_lag_seconds                        gauge: now+window minus the loader's cursor
//	toc_tasks{app,state}                          gauge: stored tasks, from [store.Counter]
//	toc_schedules{app,state}                      gauge: stored schedules (active, paused, ended), from [store.Schedules]
//	toc_schedule_occurrences_total{app}           counter: occurrences schedules created ([Metrics.OccurrencesCreated])
//	toc_schedule_holds_total{app}                 counter: schedule steps whose occurrences the app's creates_per_second held back (made later, late)
//
// The gauges are read when Prometheus scrapes. toc_tasks counts the store
// (O(tasks)), so its answer is reused for up to [CountsMaxAge];
// toc_schedules is counted and reused the same way.
package metrics

import (
	"cmp"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Buckets of the histograms, in seconds.
var (
	LatenessBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// CountsMaxAge is the longest [Metrics.Counts] reuses a count. A count
// that took little time is reused for less: 100 times what it took, at
// least [CountsMinAge], so a small store looks live while a large one is
// read at most every CountsMaxAge.
const (
	CountsMaxAge = 10 * time.Second
	CountsMinAge = time.Second
)

// countTimeout bounds a count made for a scrape, which has no context.
const countTimeout = 10 * time.Second

// ScheduleCounter counts the stored schedules by app and state:
// [store.Schedules] has it.
type ScheduleCounter interface {
	CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error)
}

// Metrics holds toc's metrics. Create it with [New]; it is safe for
// concurrent use.
type Metrics struct {
	gatherer      prometheus.Gatherer
	stats         func() engine.Stats
	counter       store.Counter
	schedCounter  ScheduleCounter // nil: no toc_schedules
	window        atomic.Int64    // engine window, ns
	taskCounts    countCache[task.State]
	scheduleCount countCache[task.ScheduleState]

	created     *prometheus.CounterVec
	finished    *prometheus.CounterVec
	started     *prometheus.CounterVec
	lateness    *prometheus.HistogramVec
	delivery    *prometheus.HistogramVec
	occurrences *prometheus.CounterVec
	holds       *prometheus.CounterVec

	seen sync.Map // app → struct{}: apps whose finished series exist

	recentMu struct {
		sync.Mutex
		r    recent             // every app's attempts
		apps map[string]*recent // each app's, for tokens that reach only some apps
	}
}

// countCache keeps the last count of the store (tasks or schedules by app
// and state) and lets one count run at a time: the others wait for it and
// take its answer.
type countCache[S comparable] struct {
	sem chan struct{} // capacity 1: held by the count under way
	mu  struct {
		sync.Mutex
		at     time.Time // when the cached count was taken
		maxAge time.Duration
		counts map[string]map[S]int64
	}
}

func newCountCache[S comparable]() countCache[S] {
	return countCache[S]{sem: make(chan struct{}, 1)}
}

// get returns the cached count while it is fresh, else counts with count.
// A count that took little time is reused for less: 100 times what it
// took, between [CountsMinAge] and [CountsMaxAge].
func (c *countCache[S]) get(ctx context.Context, count func(context.Context) (map[string]map[S]int64, error)) (map[string]map[S]int64, error) {
	if got, ok := c.cached(); ok {
		return got, nil
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if got, ok := c.cached(); ok { // counted while we waited
		return got, nil
	}
	start := time.Now()
	got, err := count(ctx)
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	c.mu.Lock()
	c.mu.at, c.mu.counts = time.Now(), got
	c.mu.maxAge = min(max(100*took, CountsMinAge), CountsMaxAge)
	c.mu.Unlock()
	return got, nil
}

func (c *countCache[S]) cached() (map[string]map[S]int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.counts == nil || time.Since(c.mu.at) >= c.mu.maxAge {
		return nil, false
	}
	return c.mu.counts, true
}

// New registers toc's metrics with reg (prometheus.DefaultRegisterer when
// nil) and returns them. stats reads the engine's memory tiers
// (Engine.Stats) and counts the stored tasks; either may be nil, leaving
// out the gauges it feeds. When counts also counts schedules (a
// [ScheduleCounter] itself, or a [store.Store] with [store.Schedules]
// under it, found with [store.As]), toc_schedules counts them. New panics
// if the metrics are already registered with reg (a programmer error).
func New(reg prometheus.Registerer, stats func() engine.Stats, counts store.Counter) *Metrics {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{
		stats:         stats,
		counter:       counts,
		schedCounter:  scheduleCounterOf(counts),
		taskCounts:    newCountCache[task.State](),
		scheduleCount: newCountCache[task.ScheduleState](),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_tasks_created_total", Help: "Tasks created, by app.",
		}, []string{"app"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_tasks_finished_total", Help: "Tasks that reached a final state (delivered, dead, expired, cancelled), by app and state.",
		}, []string{"app", "state"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_attempts_started_total", Help: "Delivery attempts started (push attempts and pull claims), by app and target kind.",
		}, []string{"app", "kind"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "toc_lateness_seconds", Help: "Time from an attempt's due time to its start, by app and target kind.",
			Buckets: LatenessBuckets,
		}, []string{"app", "kind"}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "toc_delivery_duration_seconds", Help: "Duration of push delivery attempts, by target kind and outcome (ok or error).",
			Buckets: DurationBuckets,
		}, []string{"kind", "outcome"}),
		occurrences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_schedule_occurrences_total", Help: "Occurrences (tasks) created by recurring schedules, by app; caught-up ones included.",
		}, []string{"app"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_schedule_holds_total", Help: "Schedule steps whose occurrences the app's creates_per_second held back, by app: those occurrences are made later, late, keeping their due times.",
		}, []string{"app"}),
	}
	m.window.Store(int64(engine.WindowDefault))
	reg.MustRegister(m.created, m.finished, m.started, m.lateness, m.delivery, m.occurrences, m.holds, (*collector)(m))
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	} else {
		m.gatherer = prometheus.DefaultGatherer
	}
	return m
}

// scheduleCounterOf finds what counts the schedules of the store behind
// counts: nil when there is none.
func scheduleCounterOf(counts store.Counter) ScheduleCounter {
	if sc, ok := counts.(ScheduleCounter); ok {
		return sc
	}
	if st, ok := counts.(store.Store); ok {
		if ss, ok := store.As[store.Schedules](st); ok {
			return ss
		}
	}
	return nil
}

// OccurrencesCreated counts n occurrences that app's schedules created
// (tasks newly stored, not ones found by their key): the engine calls it
// through its hooks. Its signature is that of a hook, func(app string, n
// int), so the method value m.OccurrencesCreated can be one.
func (m *Metrics) OccurrencesCreated(app string, n int) {
	if n > 0 {
		m.occurrences.WithLabelValues(app).Add(float64(n))
	}
}

// SetWindow tells the metrics the engine's Config.Window, which
// toc_loader_lag_seconds is measured against. Default
// engine.WindowDefault.
func (m *Metrics) SetWindow(d time.Duration) { m.window.Store(int64(d)) }

// Hooks returns the engine hooks that feed the metrics; put them in
// engine.Config.Hooks.
func (m *Metrics) Hooks() engine.Hooks {
	return engine.Hooks{
		Created: func(app string, n int) {
			m.created.WithLabelValues(app).Add(float64(n))
			if _, ok := m.seen.LoadOrStore(app, struct{}{}); !ok {
				// Start the app's finished series at 0, so that rates
				// and ratios exist before the first task finishes.
				for _, s := range task.States {
					if s.Final() {
						m.finished.WithLabelValues(app, string(s))
					}
				}
			}
		},
		Finished: func(app string, state task.State) {
			m.finished.WithLabelValues(app, string(state)).Inc()
		},
		OccurrencesCreated: m.OccurrencesCreated,
		ScheduleHeld:       func(app string) { m.holds.WithLabelValues(app).Inc() },
		AttemptStarted: func(app, kind string, lateness time.Duration) {
			m.started.WithLabelValues(app, kind).Inc()
			m.lateness.WithLabelValues(app, kind).Observe(max(lateness, 0).Seconds())
			now := time.Now()
			m.recentMu.Lock()
			m.recentMu.r.add(now, lateness)
			r := m.recentMu.apps[app]
			if r == nil {
				if m.recentMu.apps == nil {
					m.recentMu.apps = make(map[string]*recent)
				}
				r = new(recent)
				m.recentMu.apps[app] = r
			}
			r.add(now, lateness)
			m.recentMu.Unlock()
		},
		AttemptEnded: func(_, kind string, took time.Duration, err error) {
			outcome := "ok"
			if err != nil {
				outcome = "error"
			}
			m.delivery.WithLabelValues(kind, outcome).Observe(took.Seconds())
		},
	}
}

// Recent returns the lateness of the attempts started in each of the last
// 15 minutes' finished seconds ([RecentWindow]), oldest first. Seconds
// without attempts are left out.
func (m *Metrics) Recent() []Second {
	now := time.Now()
	m.recentMu.Lock()
	defer m.recentMu.Unlock()
	return m.recentMu.r.seconds(now)
}

// RecentOf is [Metrics.Recent] for the apps include accepts only. With one
// app it is that app's own series; where several have attempts in the same
// second, Count is their sum, MaxMs their maximum, and P50Ms and P99Ms the
// highest of theirs (an upper bound: percentiles do not add up).
func (m *Metrics) RecentOf(include func(app string) bool) []Second {
	now := time.Now()
	m.recentMu.Lock()
	defer m.recentMu.Unlock()
	var per [][]Second
	for app, r := range m.recentMu.apps {
		if include(app) {
			per = append(per, r.seconds(now))
		}
	}
	return mergeSeconds(per)
}

// Counts returns the store's counts (see [store.Counter]), reusing a count
// up to [CountsMaxAge] old. Concurrent callers share one count. The maps
// are shared: do not change them. With no counter it returns an empty map.
func (m *Metrics) Counts(ctx context.Context) (map[string]map[task.State]int64, error) {
	if m.counter == nil {
		return map[string]map[task.State]int64{}, nil
	}
	return m.taskCounts.get(ctx, m.counter.Counts)
}

// ScheduleCounts returns the stored schedules by app and state (see
// [store.Schedules]), reusing a count as [Metrics.Counts] does. The maps
// are shared: do not change them. With no schedule counter (see [New]) it
// returns an empty map.
func (m *Metrics) ScheduleCounts(ctx context.Context) (map[string]map[task.ScheduleState]int64, error) {
	if m.schedCounter == nil {
		return map[string]map[task.ScheduleState]int64{}, nil
	}
	return m.scheduleCount.get(ctx, m.schedCounter.CountSchedules)
}

// Handler serves the metrics in Prometheus's text format. Mount it behind
// the API's authentication (httpapi.Config.Mount): it answers only admin
// tokens (or every request when no token is configured), since its labels
// name every app; an app token gets 403.
func (m *Metrics) Handler() http.Handler {
	prom := promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpapi.IsAdmin(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":{"code":"forbidden","message":"metrics cover every app: use an admin token"}}` + "\n"))
			return
		}
		prom.ServeHTTP(w, r)
	})
}

// collector reads the gauges at scrape time.
type collector Metrics

var (
	wheelDesc = prometheus.NewDesc("toc_wheel_tasks", "Tasks in the timing wheel (due within the loaded window).", nil, nil)
	readyDesc = prometheus.NewDesc("toc_ready_tasks", "Fired tasks waiting for a delivery worker.", nil, nil)
	lagDesc   = prometheus.NewDesc("toc_loader_lag_seconds",
		"How far the loader's cursor is behind now+window (negative: how far it leads). Normally between 0 and window/2; growing means tasks due soon are not in memory yet.", nil, nil)
	tasksDesc     = prometheus.NewDesc("toc_tasks", "Stored tasks by app and state (counted at most every 10s).", []string{"app", "state"}, nil)
	schedulesDesc = prometheus.NewDesc("toc_schedules", "Stored recurring schedules by app and state: active, paused, ended (counted at most every 10s).", []string{"app", "state"}, nil)
)

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- wheelDesc
	ch <- readyDesc
	ch <- lagDesc
	ch <- tasksDesc
	ch <- schedulesDesc
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := (*Metrics)(c)
	if m.stats != nil {
		s := m.stats()
		ch <- prometheus.MustNewConstMetric(wheelDesc, prometheus.GaugeValue, float64(s.Wheel))
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(s.Ready))
		if !s.Cursor.IsZero() { // zero until the engine has started
			lag := cmp.Or(s.Now, time.Now()).Add(time.Duration(m.window.Load())).Sub(s.Cursor) // on the engine's clock
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, lag.Seconds())
		}
	}
	if m.counter != nil {
		ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
		defer cancel()
		if counts, err := m.Counts(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(tasksDesc, err)
		} else {
			collectCounts(ch, tasksDesc, counts, task.States)
		}
	}
	if m.schedCounter != nil {
		ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
		defer cancel()
		if counts, err := m.ScheduleCounts(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(schedulesDesc, err)
		} else {
			collectCounts(ch, schedulesDesc, counts, task.ScheduleStates)
		}
	}
}

// collectCounts sends a gauge per app and state, every state of an app
// with a count (zeros included).
func collectCounts[S ~string](ch chan<- prometheus.Metric, desc *prometheus.Desc, counts map[string]map[S]int64, states []S) {
	for app, byState := range counts {
		for _, s := range states {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(byState[s]), app, string(s))
		}
	}
}
