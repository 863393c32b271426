package engine

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/task"
)

// memLimiter is Limiter within one process, for the engine's gate logic on
// fake time; internal/cluster's RateLimiter is the Redis one (tested there
// and end to end in internal/e2e).
type memLimiter struct {
	mu       sync.Mutex
	buckets  map[string]*rate.Limiter
	held     map[string]map[string]time.Time // app → holder → until
	peak     int
	acquires int
}

func newMemLimiter() *memLimiter {
	return &memLimiter{buckets: map[string]*rate.Limiter{}, held: map[string]map[string]time.Time{}}
}

func (m *memLimiter) Take(_ context.Context, app string, perSec float64, burst, n int) (int, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[app]
	if !ok {
		b = rate.NewLimiter(rate.Limit(perSec), burst)
		m.buckets[app] = b
	}
	now := time.Now()
	got := min(n, int(b.TokensAt(now)))
	if got == 0 {
		r := b.ReserveN(now, 1)
		d := r.DelayFrom(now)
		r.CancelAt(now)
		return 0, d, nil
	}
	b.AllowN(now, got)
	return got, 0, nil
}

func (m *memLimiter) Acquire(_ context.Context, app string, holders []string, limit int, until time.Time) (int, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquires++
	h := m.held[app]
	if h == nil {
		h = map[string]time.Time{}
		m.held[app] = h
	}
	got := 0
	for _, x := range holders {
		if _, ok := h[x]; !ok && len(h) >= limit {
			break
		}
		h[x] = until
		got++
	}
	m.peak = max(m.peak, len(h))
	var next time.Time
	for _, u := range h {
		if next.IsZero() || u.Before(next) {
			next = u
		}
	}
	return got, next, nil
}

func (m *memLimiter) Release(_ context.Context, app, holder string, _ int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.held[app], holder)
	return nil
}

// TestGateHoldsSharedLimits: with a shared limiter (cluster mode), app
// "slow" (200/s, at most 5 in flight, 10 ms per delivery) drains 1000
// tasks due at once at about 200/s holding at most 5 slots, gives every slot
// back, and app "fast"'s tasks, due meanwhile, fire on time.
func TestGateHoldsSharedLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newMemLimiter()
		s := newAppSink()
		s.by["slow"] = func(ctx context.Context, _ *task.Task) error {
			time.Sleep(10 * time.Millisecond)
			return nil
		}
		b := setup(t, func(c *Config) {
			c.Sinks = map[string]sink.Sink{"http": s}
			c.Limiter = lim
		})
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"slow": {DeliveriesPerSecond: 200, Burst: 10, MaxInFlight: 5}}})
		start := time.Now()
		if _, err := b.eng.Create(t.Context(), many("slow", 1000, start.Add(time.Second))); err != nil {
			t.Fatal(err)
		}
		var fast []CreateParams
		for i := range 100 {
			fast = append(fast, CreateParams{App: "fast", DueAt: start.Add(time.Second + time.Duration(i)*40*time.Millisecond), Target: httpTarget})
		}
		if _, err := b.eng.Create(t.Context(), fast); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.count("slow"); n != 1000 {
			t.Fatalf("slow: %d delivered, want 1000", n)
		}
		ts := s.times["slow"]
		span := ts[len(ts)-1].Sub(ts[0])
		r := float64(len(ts)-10) / span.Seconds()
		t.Logf("slow app: 1000 deliveries over %s: %.1f/s, at most %d slots held, %d acquire calls", span, r, lim.peak, lim.acquires)
		if r < 180 || r > 220 {
			t.Errorf("rate %.1f/s, want about 200/s", r)
		}
		if lim.peak > 5 || lim.peak == 0 {
			t.Errorf("%d slots held at once, want 1 to 5", lim.peak)
		}
		if n := len(lim.held["slow"]); n != 0 {
			t.Errorf("%d slots still held after every delivery ended", n)
		}
		if n := s.count("fast"); n != 100 {
			t.Fatalf("fast: %d delivered, want 100", n)
		}
		for i, l := range s.late["fast"] {
			if l != 0 {
				t.Errorf("fast task %d fired %s late", i, l)
			}
		}
	})
}

// TestGateSlotSharedByTwoAdmissions: a task let through again while its
// attempt is under way here (its firing then leaves: the attempt is
// reserved; or it stops at the store read) shares the attempt's cluster
// slot, since the limiter's holder is this process's and the task's.
// Giving the second admission, or the grant, back keeps the slot held
// until the attempt ends; before, it freed the slot under the running
// attempt, and the app ran over its max_in_flight (TestClusterMaxInFlight
// saw 4 and 5 deliveries at once against 3).
func TestGateSlotSharedByTwoAdmissions(t *testing.T) {
	lim := newMemLimiter()
	limits := sharedLimits{limiter: lim, boot: "boot0000", log: slog.New(slog.DiscardHandler)}
	a := newClusterAdmission(admissionParams{
		Policy:  func(string) AppPolicy { return AppPolicy{MaxInFlight: 3} },
		Shares:  sharesOf(8),
		Enqueue: func(string, ...task.ID) {},
	}, limits)
	var gen task.IDGenerator
	id := gen.New(time.Now(), 0)
	held := func() int {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.held["capped"])
	}
	for range 2 { // the attempt's admission, then the second firing's
		if n, slots, _ := limits.ask(context.Background(), "capped", AppPolicy{MaxInFlight: 3}, []task.ID{id}); n != 1 || !slots {
			t.Fatalf("ask: %d let through, slots %v", n, slots)
		}
		a.mu.Lock()
		a.getLocked("capped").granted[id] = grant{slot: true}
		a.mu.Unlock()
		if got, _ := a.admit("capped", id, time.Time{}); got != admitNow {
			t.Fatalf("admit: %v, want admitNow", got)
		}
	}
	a.release("capped", id) // the second firing leaves
	if n := held(); n != 1 {
		t.Fatalf("after the second admission gave back: %d slots held, want the attempt's 1", n)
	}
	// Let through a third time, but its firing goes no further than the
	// store (the task is being delivered): the grant is dropped.
	if n, _, _ := limits.ask(context.Background(), "capped", AppPolicy{MaxInFlight: 3}, []task.ID{id}); n != 1 {
		t.Fatalf("ask: %d let through", n)
	}
	a.mu.Lock()
	a.getLocked("capped").granted[id] = grant{slot: true}
	a.mu.Unlock()
	a.dropGrant("capped", id)
	if n := held(); n != 1 {
		t.Fatalf("after a grant was dropped: %d slots held, want the attempt's 1", n)
	}
	a.release("capped", id) // the attempt ends
	if n := held(); n != 0 {
		t.Fatalf("after the attempt ended: %d slots held, want 0", n)
	}
	// A grant dropped with no attempt under way gives the slot back.
	limits.ask(context.Background(), "capped", AppPolicy{MaxInFlight: 3}, []task.ID{id})
	a.mu.Lock()
	a.getLocked("capped").granted[id] = grant{slot: true}
	a.mu.Unlock()
	a.dropGrant("capped", id)
	if n := held(); n != 0 {
		t.Fatalf("after a lone grant was dropped: %d slots held, want 0", n)
	}
}
