package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// costlyStore is a store whose writes of the fire path cost time, in
// proportion to the tasks they carry, as a real store's do: under synctest
// the work of a fire is otherwise free, and a backlog would drain in no
// time at all.
type costlyStore struct {
	store.Store
	perTask time.Duration
}

func (s *costlyStore) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	time.Sleep(time.Duration(len(ids)) * s.perTask)
	return s.Store.UpdateMany(ctx, ids, opts, fn)
}

func (s *costlyStore) Unwrap() store.Store { return s.Store }

// burst schedules n tasks of app due at due, in batches of 1000.
func burst(t *testing.T, eng *Engine, app string, n int, due time.Time) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		if _, err := eng.Create(t.Context(), many(app, min(1000, n-i), due)); err != nil {
			t.Fatal(err)
		}
	}
}

// p99 is the 99th percentile of ls.
func p99(ls []time.Duration) time.Duration {
	ls = slices.Clone(ls)
	slices.Sort(ls)
	return ls[(len(ls)*99)/100]
}

// testQuietApp schedules a burst of app "shop" and, due while it drains,
// tasks of app "bank" one every 5 ms, and checks that bank's are delivered
// on time (lateness p99 ≤ 100 ms, on synctest's clock) however long
// shop's backlog takes. The store's fire writes cost 40 µs a task, so that
// the drain takes time (a second for 50 000 here), as it does on a real
// store; the work in between is free on that clock, and the test measures
// the order the engine serves the apps in, not the machine.
//
// The tasks are due in `in`: within the loaded window they enter the wheel
// when created, knowing their app; beyond it the loader reads them from the
// store, which says whose they are.
func testQuietApp(t *testing.T, shop func(context.Context, *task.Task) error, n int, in time.Duration, mod func(*Config)) {
	hangs := shop != nil
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		s.by["shop"] = shop
		b := setup(t, func(c *Config) {
			c.Store = &costlyStore{Store: memstore.New(), perTask: 40 * time.Microsecond}
			c.Sinks = map[string]sink.Sink{"http": s}
			if mod != nil {
				mod(c)
			}
		})
		due := time.Now().Add(in)
		burst(t, b.eng, "shop", n, due)
		var bank []CreateParams
		for i := range 200 {
			bank = append(bank, CreateParams{App: "bank", DueAt: due.Add(time.Duration(i) * 5 * time.Millisecond), Target: httpTarget})
		}
		if _, err := b.eng.Create(t.Context(), bank); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(due.Add(time.Minute))) // shop's attempts hang for 5 min
		synctest.Wait()
		if got := s.count("bank"); got != len(bank) {
			t.Fatalf("bank: %d delivered, want %d", got, len(bank))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		shopTimes := s.times["shop"]
		drain := shopTimes[len(shopTimes)-1].Sub(due)
		late := p99(s.late["bank"])
		inFlight, parked := b.eng.InFlight("shop")
		t.Logf("shop: %d attempts over %s, %d in flight, %d parked; bank: lateness p99 %s, max %s", len(shopTimes), drain, inFlight, parked, late, slices.Max(s.late["bank"]))
		if hangs {
			// All but shop's tasks in flight wait for a slot: parked (read
			// once, found the cap full) or still in its ready queue (not
			// read while it has no room: timekeeper.take).
			if inFlight+parked+b.ready() != n || inFlight == 0 {
				t.Fatalf("shop: %d in flight, %d parked and %d ready, want %d in all", inFlight, parked, b.ready(), n)
			}
		} else if drain < time.Second {
			t.Fatalf("shop's burst drained in %s: too soon for the test to tell", drain)
		}
		if late > 100*time.Millisecond {
			t.Errorf("bank's lateness p99 %s while shop's burst drained, want ≤ 100ms", late)
		}
	})
}

// TestBurstDoesNotDelayOtherApps: app shop has 50 000 tasks due at one
// instant; app bank's tasks due while they drain are delivered on time
// (issue 21: they waited behind the whole backlog, seconds late).
func TestBurstDoesNotDelayOtherApps(t *testing.T) {
	testQuietApp(t, nil, 50_000, 2*time.Second, nil)
}

// TestHangingAppDoesNotDelayOtherApps: app shop's endpoint never answers
// (each attempt waits for its 5 min timeout) and 20 000 of its tasks are
// due at once; app bank's tasks due meanwhile are delivered on time. Shop
// holds only its own in-flight slots and the workers that wait on them.
// The tasks are due beyond the loaded window: the loader reads them.
func TestHangingAppDoesNotDelayOtherApps(t *testing.T) {
	hang := func(ctx context.Context, _ *task.Task) error {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Minute):
		}
		return context.DeadlineExceeded
	}
	testQuietApp(t, hang, 20_000, WindowDefault+2*time.Second, func(c *Config) { c.MaxInFlight = 64 })
}

// TestWaitingDeliveriesTakeTurns: push attempts waiting for a worker are
// taken by app in turn, each app's in order, an app that ran out joining
// the turns last, so that a worker freed takes the next app's attempt,
// not the rest of a batch after one app's delivery that hangs.
func TestWaitingDeliveriesTakeTurns(t *testing.T) {
	var w waitingDeliveries
	mk := func(app string, n int) *task.Task { return &task.Task{App: app, Key: app + string(rune('0'+n))} }
	w.push(mk("a", 1), mk("a", 2), mk("a", 3), mk("b", 1))
	w.push(mk("c", 1), mk("b", 2))
	var got []string
	pop := func(n int) {
		for range n {
			if tk := w.pop(); tk != nil {
				got = append(got, tk.Key)
			}
		}
	}
	pop(4)
	w.push(mk("c", 2)) // c ran out: it joins last, after b and a
	pop(10)
	want := []string{"a1", "b1", "c1", "a2", "b2", "a3", "c2"}
	if !slices.Equal(got, want) {
		t.Errorf("taken %v, want %v", got, want)
	}
	if w.pop() != nil || len(w.by) != 0 || len(w.ring) != 0 {
		t.Errorf("left behind: %v %v", w.by, w.ring)
	}
}

// TestHangingDeliveryDoesNotHoldUpBatch: a fire job's push attempts find no
// free worker (both of MaxInFlight 2 are busy: one delivers app c's task
// for 50 ms, the other is the firing one). App a's attempt comes first and
// hangs; app b's two must not wait for it: the first worker free (c's)
// delivers them. Before, the firing worker delivered all three one after
// the other, b's after a's timeout.
func TestHangingDeliveryDoesNotHoldUpBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newAppSink()
		s.by["a"] = func(ctx context.Context, _ *task.Task) error {
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return context.DeadlineExceeded
		}
		s.by["c"] = func(context.Context, *task.Task) error { time.Sleep(50 * time.Millisecond); return nil }
		b := setup(t, func(c *Config) { c.Sinks = map[string]sink.Sink{"http": s}; c.MaxInFlight = 2 })
		e := b.eng
		start := time.Now()
		mk := func(app string) *task.Task {
			return &task.Task{ID: e.ids.New(start, 0), App: app, DueAt: start, Target: httpTarget, Lease: "l"}
		}
		e.dispatch.sem <- struct{}{} // c's worker
		e.dispatch.startWorker(e.dispatch.loopCtx, job{deliver: mk("c")})
		e.dispatch.sem <- struct{}{} // the firing worker: this goroutine's
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { <-e.dispatch.sem }()
			e.dispatch.deliverAll(e.dispatch.workCtx, []*task.Task{mk("a"), mk("b"), mk("b")})
			e.dispatch.deliverWaiting(e.dispatch.workCtx) // as the worker does after its job
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := s.count("b"); n != 2 {
			t.Fatalf("b: %d of 2 delivered a second on, while a's hangs", n)
		}
		s.mu.Lock()
		late := slices.Max(s.late["b"])
		s.mu.Unlock()
		if late > 100*time.Millisecond {
			t.Errorf("b's attempts started %s late, want ≤ 100ms (c's delivery took 50)", late)
		}
		time.Sleep(time.Minute)
		<-done
	})
}

// TestPolicyWeight: the policies' weights are what the scheduling core
// asks for, and the effective policy shows them, 1 by default.
func TestPolicyWeight(t *testing.T) {
	b := setup(t, nil)
	b.eng.SetPolicies(Policies{Default: AppPolicy{Weight: 3}, Apps: map[string]AppPolicy{"shop": {Weight: 2}, "bank": {}}})
	for app, want := range map[string]int{"shop": 2, "bank": 0, "other": 3} {
		if got := b.eng.apps.weight(app); got != want {
			t.Errorf("weight(%q) = %d, want %d", app, got, want)
		}
	}
	if w := b.eng.EffectivePolicy("bank").Weight; w != 1 {
		t.Errorf("bank's effective weight %d, want 1", w)
	}
}

// TestHangingAppKeepsToItsShare: app a's max_in_flight (1000) is above the
// node's 64 workers, and its endpoint hangs: it holds at most three
// quarters of them (48), and app b's tasks due meanwhile fire on time. In
// a cluster, where a's max_in_flight holds across the nodes, the node
// still asks the shared limiter for no more slots than its share.
func TestHangingAppKeepsToItsShare(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "one node", true: "cluster"}[cluster], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newAppSink()
				var mu sync.Mutex
				var inFlight, peak int
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
					return context.DeadlineExceeded
				}
				b := setup(t, func(c *Config) {
					c.Sinks = map[string]sink.Sink{"http": s}
					c.MaxInFlight = 64
					if cluster {
						c.Limiter = newMemLimiter()
					}
				})
				b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"a": {MaxInFlight: 1000}}})
				if p := b.eng.EffectivePolicy("a").MaxInFlight; p != map[bool]int{false: 48, true: 1000}[cluster] {
					t.Errorf("a's effective max_in_flight %d", p)
				}
				start := time.Now()
				if _, err := b.eng.Create(t.Context(), many("a", 500, start)); err != nil {
					t.Fatal(err)
				}
				var bs []CreateParams
				for i := range 200 {
					bs = append(bs, CreateParams{App: "b", DueAt: start.Add(time.Duration(i) * time.Millisecond), Target: httpTarget})
				}
				if _, err := b.eng.Create(t.Context(), bs); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if n := s.count("b"); n != len(bs) {
					t.Fatalf("b: %d of %d delivered while a's deliveries hang", n, len(bs))
				}
				s.mu.Lock()
				late := slices.Max(s.late["b"])
				s.mu.Unlock()
				if late > 10*time.Millisecond {
					t.Errorf("b's tasks up to %s late, want on time", late)
				}
				mu.Lock()
				defer mu.Unlock()
				if peak > 48 || peak == 0 {
					t.Errorf("a had %d attempts in flight, want 1 to 48 of the 64 workers", peak)
				}
			})
		})
	}
}
