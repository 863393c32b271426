package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestCrashLosesNothing kills `toc serve` with SIGKILL while clients are
// scheduling and tasks are being delivered, restarts it on the same data
// directory, and checks that every task that got a 2xx answer is delivered
// at least once. It counts lost and duplicate deliveries and fails on any
// loss; duplicates are allowed (at-least-once) and reported.
func TestCrashLosesNothing(t *testing.T) {
	dir := t.TempDir()
	rcv := newHooks(t)
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook"}}

	for round := range 2 {
		c := startChild(t, dir)
		cl := c.client()
		var (
			mu    sync.Mutex
			acked []string
			seq   atomic.Int64
			wg    sync.WaitGroup
		)
		ctx, stopClients := context.WithCancel(context.Background())
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil && i < 5000; i++ {
					n := seq.Add(1)
					// Due between now and 1.5 s from now, so deliveries run
					// while the kill comes.
					delay := time.Duration(n%1500) * time.Millisecond
					tk, _, err := cl.Schedule(ctx, client.ScheduleRequest{
						App: "crash", Key: fmt.Sprintf("r%d-w%d-%d", round, w, i),
						Delay: task.Duration(delay), Target: target,
					})
					if err != nil {
						return // the server died under us: this one was not acked
					}
					mu.Lock()
					acked = append(acked, tk.ID.String())
					mu.Unlock()
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond) // let scheduling and delivery overlap
		c.kill(t)
		stopClients()
		wg.Wait()
		t.Logf("round %d: %d tasks acked before SIGKILL", round, len(acked))
		if len(acked) == 0 {
			t.Fatalf("no task was acked before the kill:\n%s", c.stderr)
		}

		c2 := startChild(t, dir)
		wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		testkit.Until(wctx, func() bool {
			for _, id := range acked {
				if !rcv.seen(id) {
					return false
				}
			}
			return true
		})
		cancel()
		lost, dups := 0, 0
		rcv.mu.Lock()
		for _, id := range acked {
			switch n := rcv.count[id]; {
			case n == 0:
				lost++
			case n > 1:
				dups += n - 1
			}
		}
		rcv.mu.Unlock()
		t.Logf("round %d: %d acked, %d lost, %d duplicate deliveries", round, len(acked), lost, dups)
		if lost > 0 {
			t.Fatalf("round %d: %d of %d acked tasks were never delivered\n%s", round, lost, len(acked), c2.stderr)
		}
		// Every acked task ends delivered in the store too.
		for _, id := range acked[:min(len(acked), 200)] {
			pid, _ := task.ParseID(id)
			var tk *task.Task
			wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			testkit.Until(wctx, func() bool {
				var err error
				tk, err = c2.client().Get(context.Background(), pid)
				return err == nil && tk.State == task.Delivered
			})
			cancel()
			if tk == nil || tk.State != task.Delivered {
				t.Fatalf("task %s is %v after recovery", id, tk)
			}
		}
		err, took := c2.terminate(t)
		if err != nil {
			t.Fatalf("SIGTERM: exit %v after %s\n%s", err, took, c2.stderr)
		}
	}
	if len(rcv.bad) > 0 {
		t.Errorf("malformed deliveries: %v", rcv.bad)
	}
}

// TestCrashDuringAttempts kills `toc serve` with SIGKILL while push
// attempts are under way (every one started, none answered: the receiver
// holds them). An attempt is stored only at its outcome, so the store still
// holds each task due: the restarted server delivers every one again, as
// attempt 2 (the attempt log counted the interrupted one: a Toc-Attempt
// never repeats, issue 22), and each ends delivered after 2 attempts.
func TestCrashDuringAttempts(t *testing.T) {
	dir := t.TempDir()
	const n = 50
	var (
		mu      sync.Mutex
		held    = map[string]int{}    // attempts seen while holding, by task
		done    = map[string]int{}    // attempts answered 200, by task
		number  = map[string]string{} // Toc-Attempt of the last answered
		holding atomic.Bool
	)
	holding.Store(true)
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Toc-Task-Id")
		if holding.Load() {
			mu.Lock()
			held[id]++
			mu.Unlock()
			select { // hold the attempt until the server is killed
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		mu.Lock()
		done[id]++
		number[id] = r.Header.Get("Toc-Attempt")
		mu.Unlock()
	}))
	defer rcv.Close()
	defer close(release)
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook", Timeout: task.Duration(time.Minute)}}

	c := startChild(t, dir)
	cl := c.client()
	ctx := context.Background()
	var ids []task.ID
	for i := range n {
		tk, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "crash", Key: fmt.Sprintf("held-%d", i), Delay: task.Duration(200 * time.Millisecond), Target: target})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	testkit.WaitFor(t, 20*time.Second, "every attempt to start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) == n
	})
	c.kill(t)
	holding.Store(false)

	c2 := startChild(t, dir)
	cl2 := c2.client()
	testkit.WaitFor(t, 30*time.Second, "every task to be delivered again", func() bool {
		for _, id := range ids {
			tk, err := cl2.Get(ctx, id)
			if err != nil || tk.State != task.Delivered {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if done[id.String()] != 1 {
			t.Errorf("task %s: %d deliveries after the restart, want 1", id, done[id.String()])
		}
		if n := number[id.String()]; n != "2" {
			t.Errorf("task %s: delivered after the restart with Toc-Attempt %q, want 2 (attempt 1 was interrupted)", id, n)
		}
		tk, _ := cl2.Get(ctx, id)
		if tk.Attempts != 2 {
			t.Errorf("task %s: %d attempts recorded, want 2 (the interrupted one and the delivery)", id, tk.Attempts)
		}
	}
	if err, took := c2.terminate(t); err != nil {
		t.Fatalf("SIGTERM: exit %v after %s\n%s", err, took, c2.stderr)
	}
}

// TestCrashWithPullClaimed kills `toc serve` with SIGKILL while pull tasks
// are claimed and not acked. A claim's lease lives in the process (issue
// 25): the store still holds each task due, so the restarted server hands
// every one out again at once (not after the old lease's hour), none lost,
// each to one claim; the old leases are refused, and acking the new ones
// finishes each task once.
func TestCrashWithPullClaimed(t *testing.T) {
	dir := t.TempDir()
	const n = 300
	ctx := context.Background()
	pull := task.Target{Pull: &task.PullTarget{}}

	c := startChild(t, dir)
	cl := c.client()
	want := map[task.ID]bool{}
	for i := range n {
		tk, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "pulls", Key: fmt.Sprintf("p-%d", i), Delay: task.Duration(100 * time.Millisecond), Target: pull})
		if err != nil {
			t.Fatal(err)
		}
		want[tk.ID] = true
	}
	before := claimAll(t, ctx, cl, want, "before the kill", claimRound{max: 1000, lease: time.Hour, within: 30 * time.Second})
	c.kill(t)

	c2 := startChild(t, dir)
	cl2 := c2.client()
	after := claimAll(t, ctx, cl2, want, "after the restart", claimRound{max: 1000, lease: time.Hour, within: 30 * time.Second})
	var old, acks []client.AckItem
	for id, lease := range after {
		acks = append(acks, client.AckItem{ID: id, Lease: lease})
		old = append(old, client.AckItem{ID: id, Lease: before[id]})
	}
	errs, err := cl2.AckMany(ctx, "pulls", old[:10])
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !client.IsConflict(err) {
			t.Errorf("ack under the killed process's lease (task %s): %v, want a conflict", old[i].ID, err)
		}
	}
	errs, err = cl2.AckMany(ctx, "pulls", acks)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("ack of task %s: %v", acks[i].ID, err)
		}
	}
	for id := range want {
		tk, err := cl2.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		delivered := 0
		for _, ev := range tk.History {
			if ev.What == "delivered" {
				delivered++
			}
		}
		if tk.State != task.Delivered || delivered != 1 || tk.Attempts != 2 {
			t.Errorf("task %s after the ack: %s, %d delivered events, %d attempts; want delivered once, 2 attempts (the claim the kill interrupted, and this one)", id, tk.State, delivered, tk.Attempts)
		}
	}
	if got, err := cl2.Claim(ctx, "pulls", client.ClaimRequest{Max: 1000, Lease: task.Duration(time.Minute)}); err != nil || len(got) != 0 {
		t.Errorf("claim after every ack: %d tasks, %v; want none", len(got), err)
	}
	if err, took := c2.terminate(t); err != nil {
		t.Fatalf("SIGTERM: exit %v after %s\n%s", err, took, c2.stderr)
	}
}

// claimRound is how claimAll claims: up to max a call, each under lease,
// all of them within.
type claimRound struct {
	max           int
	lease, within time.Duration
}

// claimAll claims app "pulls"'s tasks from cl until every task of want is
// claimed, and returns their leases, failing on a task claimed twice, one
// not in want, or one not leased as a claim answers it.
func claimAll(t *testing.T, ctx context.Context, cl *client.Client, want map[task.ID]bool, round string, r claimRound) map[task.ID]string {
	t.Helper()
	leases := map[task.ID]string{}
	testkit.WaitFor(t, r.within, round+": every task claimed", func() bool {
		got, err := cl.Claim(ctx, "pulls", client.ClaimRequest{Max: r.max, Lease: task.Duration(r.lease), Wait: task.Duration(time.Second)})
		if err != nil {
			t.Logf("%s: claim: %v", round, err)
			return false
		}
		for _, tk := range got {
			if !want[tk.ID] {
				t.Fatalf("%s: claimed task %s, not one of those created", round, tk.ID)
			}
			if _, dup := leases[tk.ID]; dup {
				t.Fatalf("%s: task %s claimed twice", round, tk.ID)
			}
			if tk.State != task.Delivering || tk.Lease == "" || tk.LeaseExpiresAt == nil {
				t.Fatalf("%s: claimed task %s is %s with lease %q until %v", round, tk.ID, tk.State, tk.Lease, tk.LeaseExpiresAt)
			}
			leases[tk.ID] = tk.Lease
		}
		return len(leases) == len(want)
	})
	return leases
}
