package httpsink

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// pushLoop runs n pushers back to back through l until stop, the k-th
// push of all answered after answer(k), counting the pushes under way in
// under; it returns once they have all ended.
func pushLoop(t *testing.T, l *connLimit, n int, stop time.Duration, answer func(k int) time.Duration, under ...*atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), stop)
	defer cancel()
	var wg sync.WaitGroup
	var pushes atomic.Int64
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if l.acquire(ctx, "a") != nil {
					return
				}
				took := answer(int(pushes.Add(1)))
				for _, u := range under {
					u.Add(1)
				}
				time.Sleep(took)
				for _, u := range under {
					u.Add(-1)
				}
				l.release(took)
			}
		})
	}
	wg.Wait()
}

// TestConnLimitGrowsForSlowReceiver: pushes back to back to a slow
// receiver get the connections its latency needs: the limit climbs from
// its minimum to near the maximum within a few windows, also when a
// quarter of the answers are 50 times faster than the rest (a cache in
// front of it). Sized by the shortest answer, as it once was, the limit of
// the second stayed at its minimum and its pushes queued here at a
// twentieth of the rate.
func TestConnLimitGrowsForSlowReceiver(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(k int) time.Duration
	}{
		{"100 ms each", func(int) time.Duration { return 100 * time.Millisecond }},
		{"mostly 50 ms, a quarter 1 ms", func(k int) time.Duration {
			if k%4 == 0 {
				return time.Millisecond
			}
			return 50 * time.Millisecond
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &connLimit{min: 4, max: 200, limit: 4}
				pushLoop(t, l, 300, 2*time.Second, c.answer)
				if l.limit < 150 {
					t.Errorf("limit %d after 2 s of 300 pushers, want near the maximum 200", l.limit)
				}
				if l.inFlight != 0 || l.waiting.n != 0 {
					t.Errorf("after the pushers: %d in flight, %d waiting; want 0 0", l.inFlight, l.waiting.n)
				}
			})
		})
	}
}

// TestConnLimitStaysLowForBusyReceiver: pushes back to back to a receiver
// out of CPU, which answers 20 000 pushes a second however many
// connections bring them (each answer takes the pushes under way times
// 50 µs), keep the limit near its minimum: a growth that only makes the
// answers slower is taken back. Sized by Little's law alone, the limit
// ran up to its maximum within a few windows (answers 10 ms instead of
// 0.8 ms, the same 20 000 a second).
func TestConnLimitStaysLowForBusyReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &connLimit{min: 16, max: 200, limit: 16}
		var under atomic.Int64
		var samples, sum int
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { // the limit every 10 ms
			defer close(done)
			for ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				l.mu.Lock()
				sum += l.limit
				l.mu.Unlock()
				samples++
			}
		}()
		var pushes atomic.Int64
		pushLoop(t, l, 300, 2*time.Second, func(int) time.Duration {
			pushes.Add(1)
			return time.Duration(under.Load()+1) * 50 * time.Microsecond
		}, &under)
		cancel()
		<-done
		if mean := float64(sum) / float64(samples); mean > 24 {
			t.Errorf("mean limit %.1f over 2 s (%d samples), want near the minimum 16", mean, samples)
		}
		if n := pushes.Load(); n < 36000 {
			t.Errorf("%d pushes answered in 2 s, want about 40 000 (the receiver's 20 000 a second)", n)
		}
	})
}

// TestConnLimitStaysLowForFastReceiver: pushes at a steady rate to a
// receiver that answers in 1 ms keep the limit at its minimum.
func TestConnLimitStaysLowForFastReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &connLimit{min: 16, max: 200, limit: 200}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for ctx.Err() == nil { // 2 000 pushes a second, 1 ms each: 2 busy
			wg.Go(func() {
				if l.acquire(ctx, "a") != nil {
					return
				}
				time.Sleep(time.Millisecond)
				l.release(time.Millisecond)
			})
			time.Sleep(500 * time.Microsecond)
		}
		wg.Wait()
		if l.limit != 16 {
			t.Errorf("limit %d at 2 000 pushes a second of 1 ms each (about 9 needed), want the minimum 16", l.limit)
		}
	})
}

// TestConnLimitWaitEndsWithContext: a push waiting for a slot gives up
// when its context ends, and the slots stay counted right.
func TestConnLimitWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &connLimit{min: 1, max: 1, limit: 1}
		if err := l.acquire(t.Context(), "a"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := l.acquire(ctx, "a"); err != context.DeadlineExceeded {
			t.Fatalf("acquire at the limit: %v, want the context's deadline", err)
		}
		l.release(time.Millisecond)
		if err := l.acquire(t.Context(), "a"); err != nil {
			t.Fatalf("acquire after the release: %v", err)
		}
		l.release(time.Millisecond)
		if l.inFlight != 0 || l.waiting.n != 0 {
			t.Errorf("%d in flight, %d waiting; want 0 0", l.inFlight, l.waiting.n)
		}
	})
}

// TestConnLimitAppsInTurn: pushes waiting for a slot get it by app in
// turn: a quiet app's push waits for one of a busy app's, not for all of
// them.
func TestConnLimitAppsInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &connLimit{min: 1, max: 1, limit: 1}
		if err := l.acquire(t.Context(), "busy"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		wait := func(app string) {
			wg.Go(func() {
				if err := l.acquire(t.Context(), app); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, app)
				mu.Unlock()
				l.release(time.Millisecond)
			})
			synctest.Wait() // queued in this order
		}
		for range 5 {
			wait("busy")
		}
		wait("quiet")
		l.release(time.Millisecond)
		wg.Wait()
		if got := strings.Join(order, " "); got != "busy quiet busy busy busy busy" {
			t.Errorf("slots went to %q, want the quiet app's second", got)
		}
	})
}
