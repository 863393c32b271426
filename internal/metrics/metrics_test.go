package metrics_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/internal/testkit"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
	"github.com/toc-dev/toc/task"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const adminToken = "admin-secret"

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// stack is the real thing, wired as the server wires it: an engine over a
// Pebble store with the metrics' hooks, and the API with /metrics mounted.
type stack struct {
	url string
	m   *metrics.Metrics
	eng *engine.Engine
}

func startStack(t *testing.T) *stack {
	t.Helper()
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest("shop-secret")}})
	if err != nil {
		t.Fatal(err)
	}
	s := tkstack.Start(t, tkstack.Options{Metrics: true, Access: acc})
	return &stack{url: s.URL, m: s.Metrics, eng: s.Engine}
}

// receiver answers every push with status and counts them.
func receiver(t *testing.T, status int) *testkit.Receiver {
	r := testkit.NewReceiver(t)
	r.SetStatus(status)
	return r
}

// scrape reads /metrics with token and parses it.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// values returns a family's samples keyed by their labels ("app=shop,state=dead").
func values(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		key := ""
		for i, l := range m.Label {
			if i > 0 {
				key += ","
			}
			key += l.GetName() + "=" + l.GetValue()
		}
		switch {
		case m.Counter != nil:
			out[key] = m.Counter.GetValue()
		case m.Gauge != nil:
			out[key] = m.Gauge.GetValue()
		case m.Histogram != nil:
			out[key] = float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

// TestWorkload runs a known workload through the API and checks what
// /metrics says about it.
func TestWorkload(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	c := client.New(client.Config{BaseURL: s.url, Token: adminToken})
	ok := receiver(t, http.StatusNoContent)
	bad := receiver(t, http.StatusInternalServerError)

	const (
		n           = 7 // delivered
		m           = 3 // dead after maxAttempts failures each
		k           = 4 // cancelled
		maxAttempts = 2
	)
	var dead []task.ID
	for i := range n {
		if _, _, err := c.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: fmt.Sprint("ok-", i),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: ok.URL}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range m {
		tk, _, err := c.Schedule(ctx, client.ScheduleRequest{App: "billing", Key: fmt.Sprint("bad-", i),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: bad.URL}},
			Retry:  &task.RetryPolicy{MaxAttempts: maxAttempts, MinBackoff: task.Duration(time.Millisecond), MaxBackoff: task.Duration(5 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, tk.ID)
	}
	for i := range k {
		tk, _, err := c.Schedule(ctx, client.ScheduleRequest{App: "shop", Key: fmt.Sprint("later-", i), Delay: task.Duration(time.Hour),
			Target: task.Target{HTTP: &task.HTTPTarget{URL: ok.URL}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the deliveries", func() bool {
		if ok.Count() < n || bad.Count() < m*maxAttempts {
			return false
		}
		for _, id := range dead {
			if tk, err := c.Get(ctx, id); err != nil || tk.State != task.Dead {
				return false
			}
		}
		return true
	})
	// The delivered tasks' Finished hooks run after the receiver answered.
	var fams map[string]*dto.MetricFamily
	testkit.WaitFor(t, 5*time.Second, "the delivered count", func() bool {
		fams = scrape(t, s.url, adminToken)
		return values(fams, "toc_tasks_finished_total")["app=shop,state=delivered"] == n
	})

	for _, tc := range []struct {
		name string
		want map[string]float64
	}{
		{"toc_tasks_created_total", map[string]float64{"app=shop": n + k, "app=billing": m}},
		{"toc_tasks_finished_total", map[string]float64{
			"app=shop,state=delivered": n, "app=shop,state=cancelled": k, "app=shop,state=dead": 0, "app=shop,state=expired": 0,
			"app=billing,state=dead": m, "app=billing,state=delivered": 0, "app=billing,state=cancelled": 0, "app=billing,state=expired": 0,
		}},
		{"toc_attempts_started_total", map[string]float64{"app=shop,kind=http": n, "app=billing,kind=http": m * maxAttempts}},
		{"toc_lateness_seconds", map[string]float64{"app=shop,kind=http": n, "app=billing,kind=http": m * maxAttempts}},
		{"toc_delivery_duration_seconds", map[string]float64{"kind=http,outcome=ok": n, "kind=http,outcome=error": m * maxAttempts}},
		{"toc_tasks", map[string]float64{
			"app=shop,state=scheduled": 0, "app=shop,state=delivering": 0, "app=shop,state=delivered": n,
			"app=shop,state=dead": 0, "app=shop,state=expired": 0, "app=shop,state=cancelled": k,
			"app=billing,state=scheduled": 0, "app=billing,state=delivering": 0, "app=billing,state=delivered": 0,
			"app=billing,state=dead": m, "app=billing,state=expired": 0, "app=billing,state=cancelled": 0,
		}},
		{"toc_wheel_tasks", map[string]float64{"": 0}},
		{"toc_ready_tasks", map[string]float64{"": 0}},
	} {
		if diff := cmp.Diff(tc.want, values(fams, tc.name)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}

	// The lateness histogram has the buckets asked for: 0.5 ms to 60 s.
	h := fams["toc_lateness_seconds"].Metric[0].Histogram
	var bounds []float64
	for _, b := range h.Bucket {
		bounds = append(bounds, b.GetUpperBound())
	}
	if diff := cmp.Diff(append(metrics.LatenessBuckets, math.Inf(1)), bounds); diff != "" || bounds[0] != 0.0005 {
		t.Errorf("lateness buckets (-want +got):\n%s", diff)
	}
	// The loader keeps its cursor between now+window/2 and now+window.
	lag := values(fams, "toc_loader_lag_seconds")[""]
	if lag < -0.5 || lag > engine.WindowDefault.Seconds() {
		t.Errorf("toc_loader_lag_seconds = %v, want within [0, %v]", lag, engine.WindowDefault.Seconds())
	}

	// Each attempt is in the recent seconds once its second is over.
	testkit.WaitFor(t, 3*time.Second, "the recent seconds", func() bool {
		var sum int64
		for _, sec := range s.m.Recent() {
			sum += sec.Count
		}
		return sum == n+m*maxAttempts
	})
}

// TestMetricsNeedAdmin checks that /metrics answers admin tokens only.
func TestMetricsNeedAdmin(t *testing.T) {
	s := startStack(t)
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"shop-secret", http.StatusForbidden},
		{adminToken, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /metrics with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
}

// TestCountsCached checks that the store is counted once per max age, not
// once per call.
func TestCountsCached(t *testing.T) {
	var calls atomic.Int64
	c := counterFunc(func(context.Context) (map[string]map[task.State]int64, error) {
		calls.Add(1)
		return map[string]map[task.State]int64{"a": {task.Scheduled: 1}}, nil
	})
	m := metrics.New(prometheus.NewRegistry(), nil, c)
	for range 10 {
		got, err := m.Counts(context.Background())
		if err != nil || got["a"][task.Scheduled] != 1 {
			t.Fatalf("Counts = %v, %v", got, err)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("counted %d times in 10 calls, want once", calls.Load())
	}
}

type counterFunc func(context.Context) (map[string]map[task.State]int64, error)

func (f counterFunc) Counts(ctx context.Context) (map[string]map[task.State]int64, error) {
	return f(ctx)
}

// TestSchedules: toc_schedules counts the store's schedules by app and
// state, found under the store New is given, with every state of an app
// (zeros included).
func TestSchedules(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	c := client.New(client.Config{BaseURL: s.url, Token: adminToken})
	pull := task.Target{Pull: &task.PullTarget{}}
	var shop []*task.Schedule
	for _, key := range []string{"daily-report", "reconcile", "weekly"} {
		sc, _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{App: "shop", Key: key, Cron: "0 9 * * *", Timezone: "Europe/Berlin", Target: pull})
		if err != nil {
			t.Fatal(err)
		}
		shop = append(shop, sc)
	}
	if _, err := c.PauseSchedule(ctx, shop[2].ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{App: "billing", Key: "close-books", Every: task.Duration(time.Hour), Target: pull}); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, s.url, adminToken) // the first count: nothing cached before it
	want := map[string]float64{
		"app=shop,state=active": 2, "app=shop,state=paused": 1, "app=shop,state=ended": 0,
		"app=billing,state=active": 1, "app=billing,state=paused": 0, "app=billing,state=ended": 0,
	}
	if diff := cmp.Diff(want, values(fams, "toc_schedules")); diff != "" {
		t.Errorf("toc_schedules (-want +got):\n%s", diff)
	}
	got, err := s.m.ScheduleCounts(ctx)
	if err != nil || got["shop"][task.ScheduleActive] != 2 {
		t.Errorf("ScheduleCounts = %v, %v", got, err)
	}
}

// TestOccurrencesCreated: the counter the engine's hooks feed.
func TestOccurrencesCreated(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil, nil)
	hook := m.Hooks().OccurrencesCreated // what the engine calls
	if hook == nil {
		t.Fatal("Hooks().OccurrencesCreated is not set")
	}
	hook("shop", 1)
	hook("shop", 1000) // a catch-up of every missed occurrence
	hook("billing", 0) // nothing created: no series
	byName := gather(t, reg)
	if diff := cmp.Diff(map[string]float64{"app=shop": 1001}, values(byName, "toc_schedule_occurrences_total")); diff != "" {
		t.Errorf("toc_schedule_occurrences_total (-want +got):\n%s", diff)
	}
	// Without counters there are no count gauges.
	if len(values(byName, "toc_tasks"))+len(values(byName, "toc_schedules")) != 0 {
		t.Errorf("count gauges without a counter: %v %v", values(byName, "toc_tasks"), values(byName, "toc_schedules"))
	}
}

// TestScheduleCountsCached: schedules are counted once per max age, as
// tasks are, and apart from them.
func TestScheduleCountsCached(t *testing.T) {
	var tasks, schedules atomic.Int64
	c := bothCounter{
		counterFunc: func(context.Context) (map[string]map[task.State]int64, error) {
			tasks.Add(1)
			return map[string]map[task.State]int64{"a": {task.Scheduled: 1}}, nil
		},
		schedules: func(context.Context) (map[string]map[task.ScheduleState]int64, error) {
			schedules.Add(1)
			return map[string]map[task.ScheduleState]int64{"a": {task.ScheduleActive: 2}}, nil
		},
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil, c)
	for range 10 {
		got, err := m.ScheduleCounts(context.Background())
		if err != nil || got["a"][task.ScheduleActive] != 2 {
			t.Fatalf("ScheduleCounts = %v, %v", got, err)
		}
	}
	if schedules.Load() != 1 || tasks.Load() != 0 {
		t.Errorf("counted schedules %d times and tasks %d times in 10 calls, want once and never", schedules.Load(), tasks.Load())
	}
	if _, err := reg.Gather(); err != nil { // a scrape takes the cached count
		t.Fatal(err)
	}
	if schedules.Load() != 1 || tasks.Load() != 1 {
		t.Errorf("after a scrape: counted schedules %d times and tasks %d times, want once each", schedules.Load(), tasks.Load())
	}
}

// bothCounter counts tasks and schedules.
type bothCounter struct {
	counterFunc
	schedules func(context.Context) (map[string]map[task.ScheduleState]int64, error)
}

func (b bothCounter) CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error) {
	return b.schedules(ctx)
}

// TestSchedulesThroughBackend: the server hands New the measured store as
// its counter; toc_schedules finds the schedules of the store under it.
func TestSchedulesThroughBackend(t *testing.T) {
	inner := memstore.New()
	st := metrics.NewBackend(prometheus.NewRegistry()).Store(inner)
	counts, ok := st.(store.Counter)
	if !ok {
		t.Fatal("the measured store is not a store.Counter")
	}
	var g task.IDGenerator
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, state := range []task.ScheduleState{task.ScheduleActive, task.ScheduleEnded} {
		sc := &task.Schedule{ID: g.New(now, 0), App: "shop", Key: fmt.Sprint("k", i), Every: task.Duration(time.Minute), Timezone: "UTC",
			CatchUp: task.CatchUpOne, State: state, Target: task.Target{Pull: &task.PullTarget{}}, CreatedAt: now, UpdatedAt: now}
		if _, _, err := inner.CreateSchedule(context.Background(), sc); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	metrics.New(reg, nil, counts)
	byName := gather(t, reg)
	want := map[string]float64{"app=shop,state=active": 1, "app=shop,state=paused": 0, "app=shop,state=ended": 1}
	if diff := cmp.Diff(want, values(byName, "toc_schedules")); diff != "" {
		t.Errorf("toc_schedules (-want +got):\n%s", diff)
	}
}

// gather reads reg's metrics by family name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}
