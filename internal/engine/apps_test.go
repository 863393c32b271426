package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// appSink routes deliveries by app to per-app functions and records them.
type appSink struct {
	mu    sync.Mutex
	by    map[string]func(ctx context.Context, t *task.Task) error
	times map[string][]time.Time
	late  map[string][]time.Duration
}

func newAppSink() *appSink {
	return &appSink{by: map[string]func(context.Context, *task.Task) error{}, times: map[string][]time.Time{}, late: map[string][]time.Duration{}}
}

func (s *appSink) Deliver(ctx context.Context, t *task.Task) error {
	now := time.Now()
	s.mu.Lock()
	s.times[t.App] = append(s.times[t.App], now)
	s.late[t.App] = append(s.late[t.App], now.Sub(t.DueAt))
	fn := s.by[t.App]
	s.mu.Unlock()
	if fn != nil {
		return fn(ctx, t)
	}
	return nil
}

func (s *appSink) count(app string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times[app])
}

func many(app string, n int, due time.Time) []CreateParams {
	ps := make([]CreateParams, n)
	for i := range ps {
		ps[i] = CreateParams{App: app, DueAt: due, Target: httpTarget}
	}
	return ps
}

// TestRateLimitAndIsolation: app "slow" is limited to 200 deliveries/s and
// 2000 of its tasks fall due at once; they go out at about 200/s, while app
// "fast"'s tasks, due meanwhile, fire exactly on time.
func TestRateLimitAndIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": s} })
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"slow": {DeliveriesPerSecond: 200, Burst: 10}}})
		start := time.Now()
		if _, err := b.eng.Create(t.Context(), many("slow", 2000, start.Add(time.Second))); err != nil {
			t.Fatal(err)
		}
		var fast []CreateParams
		for i := range 100 {
			fast = append(fast, CreateParams{App: "fast", DueAt: start.Add(time.Second + time.Duration(i)*50*time.Millisecond), Target: httpTarget})
		}
		if _, err := b.eng.Create(t.Context(), fast); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.count("slow"); n != 2000 {
			t.Fatalf("slow: %d delivered, want 2000", n)
		}
		ts := s.times["slow"]
		span := ts[len(ts)-1].Sub(ts[0])
		rate := float64(len(ts)-10) / span.Seconds() // the burst goes at once
		t.Logf("slow app: 2000 deliveries over %s: %.1f/s", span, rate)
		if rate < 180 || rate > 220 {
			t.Errorf("rate %.1f/s, want about 200/s", rate)
		}
		for i, l := range s.late["fast"] {
			if l != 0 {
				t.Errorf("fast task %d fired %s late", i, l)
			}
		}
	})
}

// TestHangingAppDoesNotDelayOthers: app A's endpoint hangs (until its
// timeout); app B's 1000 tasks still fire on time. With an explicit
// max_in_flight for A, and with none (each app then gets at most half of the
// node's in-flight attempts).
func TestHangingAppDoesNotDelayOthers(t *testing.T) {
	for _, c := range []struct {
		name  string
		pol   Policies
		limit int
	}{
		{"max_in_flight 16", Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 16}}}, 16},
		{"defaults", Policies{}, 32},
	} {
		t.Run(c.name, func(t *testing.T) { testHangingApp(t, c.pol, c.limit) })
	}
}

func testHangingApp(t *testing.T, pol Policies, limit int) {
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		var inFlight, peak int
		var mu sync.Mutex
		s.by["a"] = func(ctx context.Context, _ *task.Task) error {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			mu.Unlock()
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			return errors.New("timeout")
		}
		b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": s}; c.MaxInFlight = 64 })
		b.eng.SetPolicies(pol)
		start := time.Now()
		if _, err := b.eng.Create(t.Context(), many("a", 500, start)); err != nil {
			t.Fatal(err)
		}
		var bs []CreateParams
		for i := range 1000 {
			bs = append(bs, CreateParams{App: "b", DueAt: start.Add(time.Duration(i) * time.Millisecond), Target: httpTarget})
		}
		if _, err := b.eng.Create(t.Context(), bs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := s.count("b"); n != 1000 {
			t.Fatalf("b: %d delivered, want 1000", n)
		}
		for i, l := range s.late["b"] {
			if l != 0 {
				t.Fatalf("b task %d fired %s late", i, l)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if peak > limit || peak == 0 {
			t.Errorf("app a had %d attempts in flight, want 1 to %d", peak, limit)
		}
	})
}

func TestSetPoliciesRaisesLimitsLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		block := make(chan struct{})
		s.by["a"] = func(ctx context.Context, _ *task.Task) error { <-block; return nil }
		b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": s} })
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 2}}})
		if _, err := b.eng.Create(t.Context(), many("a", 10, time.Now())); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := s.count("a"); n != 2 {
			t.Fatalf("%d attempts started, want 2 (max_in_flight)", n)
		}
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 5}}})
		synctest.Wait()
		if n := s.count("a"); n != 5 {
			t.Fatalf("after raising the limit: %d attempts started, want 5", n)
		}
		close(block)
		synctest.Wait()
		if n := s.count("a"); n != 10 {
			t.Fatalf("%d attempts, want all 10 (none dropped by the reload)", n)
		}
		if f, p := b.eng.InFlight("a"); f != 0 || p != 0 {
			t.Errorf("after all attempts: %d in flight, %d parked; want 0 0", f, p)
		}
	})
}

// TestParkedTaskCancelledDoesNotLeakSlot: a task waiting for an in-flight
// slot that is cancelled meanwhile must not keep a slot when it comes up.
func TestParkedTaskCancelledDoesNotLeakSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		block := make(chan struct{})
		s.by["a"] = func(ctx context.Context, _ *task.Task) error { <-block; return nil }
		b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": s} })
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 1}}})
		rs, err := b.eng.Create(t.Context(), many("a", 3, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The two waiting for the slot are parked, or still in the ready
		// queue (not read while the app has no room: timekeeper.take).
		if f, p := b.eng.InFlight("a"); f != 1 || p+b.ready() != 2 {
			close(block)
			t.Fatalf("%d in flight, %d parked, %d ready; want 1 in flight, 2 waiting", f, p, b.ready())
		}
		cancelled := 0
		for _, r := range rs {
			if b.get(t, r.Task.ID).State != task.Scheduled {
				continue // the one in flight (same-ms tasks fire in any order)
			}
			if _, err := b.eng.Cancel(t.Context(), r.Task.ID); err != nil {
				close(block)
				t.Fatal(err)
			}
			cancelled++
		}
		close(block)
		if cancelled != 2 {
			t.Fatalf("cancelled %d parked tasks, want 2", cancelled)
		}
		synctest.Wait()
		if f, p := b.eng.InFlight("a"); f != 0 || p != 0 {
			t.Errorf("after the parked tasks were cancelled: %d in flight, %d parked; want 0 0", f, p)
		}
		// The slot is free: a new task goes out.
		b.schedule(t, CreateParams{App: "a", DueAt: time.Now()})
		synctest.Wait()
		if n := s.count("a"); n != 2 {
			t.Errorf("%d attempts, want 2", n)
		}
	})
}

func TestCreatesPerSecondAndAppDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		tgt := task.Target{Pull: &task.PullTarget{}}
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {
			CreatesPerSecond: 10, Target: &tgt,
			Retry: task.RetryPolicy{MaxAttempts: 3}, MaxPayload: 5,
		}}})
		rs, err := b.eng.Create(t.Context(), []CreateParams{{App: "a", DueAt: time.Now().Add(time.Hour)}})
		if err != nil || rs[0].Err != nil {
			t.Fatal(err, rs[0].Err)
		}
		got := rs[0].Task
		if got.Target.Pull == nil || got.Retry.MaxAttempts != 3 || got.Retry.MinBackoff.Std() != task.DefaultMinBackoff {
			t.Errorf("app defaults not applied: target %+v retry %+v", got.Target, got.Retry)
		}
		rs, _ = b.eng.Create(t.Context(), []CreateParams{{App: "a", DueAt: time.Now(), Payload: []byte("123456")}})
		if !errors.Is(rs[0].Err, ErrTooLarge) {
			t.Errorf("app max_payload: %v", rs[0].Err)
		}
		rs, _ = b.eng.Create(t.Context(), many("a", 50, time.Now().Add(time.Hour)))
		var rl *RateLimitError
		if !errors.As(rs[0].Err, &rl) || rl.RetryAfter <= 0 {
			t.Fatalf("50 creates at 10/s: %v, want a RateLimitError", rs[0].Err)
		}
		// Other apps are not limited.
		rs, _ = b.eng.Create(t.Context(), many("b", 50, time.Now().Add(time.Hour)))
		if rs[0].Err != nil {
			t.Errorf("app b: %v", rs[0].Err)
		}
	})
}

// TestSetPoliciesConcurrently: reloads racing each other leave every limit
// under the policies in force at the end, in both modes: the creates
// limiters (apps) and the delivery limits (admission) are guarded by two
// locks, and each follows the snapshot in force, not its caller's copy.
func TestSetPoliciesConcurrently(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "one node", true: "cluster"}[cluster], func(t *testing.T) {
			b := setup(t, func(c *Config) {
				c.MaxInFlight = 64
				if cluster {
					c.Limiter = newMemLimiter()
				}
			})
			b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {CreatesPerSecond: 1, DeliveriesPerSecond: 1}}})
			if err := b.eng.apps.allowCreate("a", 1, time.Now()); err != nil { // the limiters exist before the race
				t.Fatal(err)
			}
			b.eng.InFlight("a")
			for round := range 500 {
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						n := round*8 + i + 1
						b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {
							CreatesPerSecond: float64(n), DeliveriesPerSecond: float64(n), MaxInFlight: 1 + n%40,
						}}})
					})
				}
				wg.Wait()
				p := b.eng.Policy("a")
				b.eng.apps.mu.Lock()
				creates := b.eng.apps.mu.create["a"].Limit()
				b.eng.apps.mu.Unlock()
				if creates != rate.Limit(p.CreatesPerSecond) {
					t.Fatalf("round %d: creates limit %v, policy in force %v", round, creates, p.CreatesPerSecond)
				}
				var capped int
				switch a := b.eng.admit.(type) {
				case *localAdmission:
					a.mu.Lock()
					st := a.mu.apps["a"]
					capped = st.max
					if l := st.deliver.Limit(); l != rate.Limit(p.DeliveriesPerSecond) {
						t.Fatalf("round %d: delivery rate %v, policy in force %v", round, l, p.DeliveriesPerSecond)
					}
					a.mu.Unlock()
				case *clusterAdmission:
					a.mu.Lock()
					capped = a.mu.apps["a"].max
					a.mu.Unlock()
				}
				if capped != p.MaxInFlight {
					t.Fatalf("round %d: node in-flight cap %d, policy in force %d", round, capped, p.MaxInFlight)
				}
			}
		})
	}
}

// ready is the tasks waiting in the ready queues.
func (b *bundle) ready() int {
	st, _ := b.eng.tk.stats()
	return st.Ready
}

// lookCounter counts the tasks read with fireLook: by the fire jobs' look
// and, on a store without known updates (memstore), by the outcomes'
// writes.
type lookCounter struct {
	store.Store
	looked atomic.Int64
}

func (s *lookCounter) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if opts == fireLook {
		s.looked.Add(int64(len(ids)))
	}
	return s.Store.UpdateMany(ctx, ids, opts, fn)
}

func (s *lookCounter) Unwrap() store.Store { return s.Store }

// TestBurstAtCapReadsOnce: the due tasks of an app at its in-flight cap
// wait in its ready queue until slots free, rather than being read only
// to park and read again when a slot frees (every task of a burst read
// twice, in fire jobs of one or two).
func TestBurstAtCapReadsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2000
		s := newAppSink()
		st := &lookCounter{Store: memstore.New()}
		b := setup(t, func(c *Config) { c.Store = st; c.Sinks = map[string]sink.Sink{"http": s} })
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 16}}})
		if _, err := b.eng.Create(t.Context(), many("a", n, time.Now().Add(time.Second))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := s.count("a"); got != n {
			t.Fatalf("%d delivered, want %d", got, n)
		}
		// Each task read once by a fire job and once by its outcome's
		// write (memstore), and a few twice: a task can still park after
		// its read when another job took the last slot.
		if got := st.looked.Load(); got > 2*n+n/8 {
			t.Errorf("%d tasks read for %d attempts, want at most %d", got, n, 2*n+n/8)
		}
		t.Logf("%d tasks read for %d attempts", st.looked.Load(), n)
	})
}
