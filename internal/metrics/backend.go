package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Backend measures what toc's storage does: every store call (Pebble or
// SQL) and every Redis command, with their latencies and errors, and in
// cluster mode the node's members and share.
type Backend struct {
	storeDur  *prometheus.HistogramVec
	storeErrs *prometheus.CounterVec
	redisDur  *prometheus.HistogramVec
	redisErrs *prometheus.CounterVec
}

// NewBackend registers the backend metrics on reg:
// toc_store_duration_seconds{op}, toc_store_errors_total{op},
// toc_redis_duration_seconds{cmd}, toc_redis_errors_total{cmd}.
func NewBackend(reg prometheus.Registerer) *Backend {
	b := &Backend{
		storeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "toc_store_duration_seconds", Help: "Store calls (Pebble or SQL) by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9)}, []string{"op"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_store_errors_total", Help: "Store calls that failed (not found and conflicts excluded)."}, []string{"op"}),
		redisDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "toc_redis_duration_seconds", Help: "Redis commands and pipelines (cluster mode).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9)}, []string{"cmd"}),
		redisErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toc_redis_errors_total", Help: "Redis commands that failed (cluster mode)."}, []string{"cmd"}),
	}
	reg.MustRegister(b.storeDur, b.storeErrs, b.redisDur, b.redisErrs)
	return b
}

// Share reports a cluster node's slots, shards and members.
type Share func() (slots, shards int, members []string)

// WatchCluster registers toc_cluster_members, toc_cluster_slots and
// toc_cluster_shards (this node's share), read at scrape time.
func (b *Backend) WatchCluster(reg prometheus.Registerer, share Share) {
	g := func(name, help string, pick func() float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, pick)
	}
	reg.MustRegister(
		g("toc_cluster_members", "Live nodes of the cluster.", func() float64 { _, _, m := share(); return float64(len(m)) }),
		g("toc_cluster_slots", "Redis slots (of every app) this node owns.", func() float64 { s, _, _ := share(); return float64(s) }),
		g("toc_cluster_shards", "SQL shards this node promotes and repairs.", func() float64 { _, h, _ := share(); return float64(h) }),
	)
}

// Disk is what the embedded store tells of its disk (pebblestore.Store).
type Disk interface {
	DiskFull() bool
	BackgroundErrors() uint64
}

// WatchDisk registers toc_store_disk_full (1 while the embedded store
// refuses new tasks for lack of disk space) and
// toc_store_background_errors_total (Pebble's failed flushes and
// compactions, logged at most once every 10 s), read at scrape time.
func (b *Backend) WatchDisk(reg prometheus.Registerer, d Disk) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toc_store_disk_full",
			Help: "1 while the embedded store refuses new tasks for lack of disk space."},
			func() float64 {
				if d.DiskFull() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toc_store_background_errors_total",
			Help: "Errors of the embedded store's background work (flushes, compactions); their log is rate-limited."},
			func() float64 { return float64(d.BackgroundErrors()) }),
	)
}

func (b *Backend) observe(op string, start time.Time, err error) {
	b.storeDur.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, context.Canceled) {
		b.storeErrs.WithLabelValues(op).Inc()
	}
}

// Store wraps s so that every call is measured. The result also implements
// store.Counter when s does.
func (b *Backend) Store(s store.Store) store.Store {
	m := &measured{Store: s, b: b}
	if c, ok := s.(store.Counter); ok {
		return &measuredCounter{measured: m, c: c}
	}
	return m
}

type measured struct {
	store.Store
	b *Backend
}

// Unwrap implements [store.Wrapper]: what is not measured (a backup) goes
// to the store underneath.
func (m *measured) Unwrap() store.Store { return m.Store }

func (m *measured) Create(ctx context.Context, ts []*task.Task) (r []store.CreateResult, err error) {
	defer func(start time.Time) { m.b.observe("create", start, err) }(time.Now())
	return m.Store.Create(ctx, ts)
}

func (m *measured) Get(ctx context.Context, id task.ID) (t *task.Task, err error) {
	defer func(start time.Time) { m.b.observe("get", start, err) }(time.Now())
	return m.Store.Get(ctx, id)
}

func (m *measured) GetByKey(ctx context.Context, app, key string) (t *task.Task, err error) {
	defer func(start time.Time) { m.b.observe("get_by_key", start, err) }(time.Now())
	return m.Store.GetByKey(ctx, app, key)
}

func (m *measured) Update(ctx context.Context, id task.ID, o *store.UpdateOpts, fn func(*task.Task) error) (t *task.Task, err error) {
	var fnErr error
	start := time.Now()
	t, err = m.Store.Update(ctx, id, o, func(t *task.Task) error { fnErr = fn(t); return fnErr })
	if err != nil && errors.Is(err, fnErr) {
		m.b.storeDur.WithLabelValues("update").Observe(time.Since(start).Seconds())
		return t, err // the engine's refusal, not a store error
	}
	m.b.observe("update", start, err)
	return t, err
}

// UpdateMany is measured as one "update_many" call; the tasks fn refused
// are the engine's, not store errors.
func (m *measured) UpdateMany(ctx context.Context, ids []task.ID, o *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	var fnErrs []error
	start := time.Now()
	ts, errs := m.Store.UpdateMany(ctx, ids, o, func(ts []*task.Task) []error { fnErrs = fn(ts); return fnErrs })
	var err error
	for i, e := range errs {
		if e != nil && (i >= len(fnErrs) || !errors.Is(e, fnErrs[i])) {
			err = e
			break
		}
	}
	m.b.observe("update_many", start, err)
	return ts, errs
}

func (m *measured) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) (w []store.Wakeup, err error) {
	defer func(start time.Time) { m.b.observe("wakeups", start, err) }(time.Now())
	return m.Store.Wakeups(ctx, after, until, limit)
}

func (m *measured) Claimable(ctx context.Context, app string, now time.Time, limit int) (ids []task.ID, err error) {
	defer func(start time.Time) { m.b.observe("claimable", start, err) }(time.Now())
	return m.Store.Claimable(ctx, app, now, limit)
}

func (m *measured) List(ctx context.Context, app string, st task.State, after task.ID, limit int) (ts []*task.Task, err error) {
	defer func(start time.Time) { m.b.observe("list", start, err) }(time.Now())
	return m.Store.List(ctx, app, st, after, limit)
}

func (m *measured) Sweep(ctx context.Context, cutoff time.Time, limit int) (n int, err error) {
	defer func(start time.Time) { m.b.observe("sweep", start, err) }(time.Now())
	return m.Store.Sweep(ctx, cutoff, limit)
}

type measuredCounter struct {
	*measured
	c store.Counter
}

func (m *measuredCounter) Counts(ctx context.Context) (c map[string]map[task.State]int64, err error) {
	defer func(start time.Time) { m.b.observe("counts", start, err) }(time.Now())
	return m.c.Counts(ctx)
}

// RedisCall records one Redis command or pipeline (cmd "pipeline") that
// took took, and failed or not. A go-redis hook in package redisindex
// calls it for every command (redisindex.MetricsHook).
func (b *Backend) RedisCall(cmd string, took time.Duration, failed bool) {
	b.redisDur.WithLabelValues(cmd).Observe(took.Seconds())
	if failed {
		b.redisErrs.WithLabelValues(cmd).Inc()
	}
}

// RedisDialFailed records a connection to Redis that could not be made.
func (b *Backend) RedisDialFailed() { b.redisErrs.WithLabelValues("dial").Inc() }
