package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestClusterRateLimit: two nodes, app "limited" at 200 deliveries/s, 2000
// of its tasks due at once: they go out at about 200/s in total (the limit
// holds across the nodes, not per node). App "free"'s tasks, due meanwhile,
// are all delivered on time.
func TestClusterRateLimit(t *testing.T) {
	env := newClusterEnv(t)
	rcv := newHooks(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	if err := os.WriteFile(cfg, []byte("apps:\n  limited:\n    rate: {deliveries_per_second: 200, burst: 20}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*child
	for i := range 2 {
		nodes = append(nodes, startChild(t, fmt.Sprintf("%s/n%d", dir, i), append(env.flags(), "--config", cfg)...))
	}
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook"}}
	ctx := context.Background()
	due := time.Now().Add(4 * time.Second)
	var limited, free []client.ScheduleRequest
	for i := range 2000 {
		limited = append(limited, client.ScheduleRequest{App: "limited", Key: fmt.Sprint(i), DueAt: &due, Target: target})
	}
	for i := range 100 {
		d := due.Add(time.Duration(i) * 50 * time.Millisecond)
		free = append(free, client.ScheduleRequest{App: "free", Key: fmt.Sprint(i), DueAt: &d, Target: target})
	}
	var limitedIDs, freeIDs []string
	for i, reqs := range [][]client.ScheduleRequest{limited, free} {
		for chunk := range slices.Chunk(reqs, 500) {
			rs, err := nodes[i%2].client().ScheduleBatch(ctx, chunk)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if i == 0 {
					limitedIDs = append(limitedIDs, r.Task.ID.String())
				} else {
					freeIDs = append(freeIDs, r.Task.ID.String())
				}
			}
		}
	}
	if time.Now().After(due) {
		t.Fatal("scheduling took longer than the lead")
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	testkit.Until(wctx, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.first) >= 2100
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var at []time.Time
	for _, id := range limitedIDs {
		if a, ok := rcv.first[id]; ok {
			at = append(at, a)
		}
	}
	if len(at) != 2000 {
		t.Fatalf("%d of 2000 limited tasks delivered", len(at))
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	perSec := make([]int, int(at[len(at)-1].Sub(at[0])/time.Second)+1)
	for _, a := range at {
		perSec[int(a.Sub(at[0])/time.Second)]++
	}
	t.Logf("deliveries in each second: %v", perSec)
	span := at[len(at)-1].Sub(at[0])
	rate := float64(len(at)-20) / span.Seconds() // the burst goes at once
	t.Logf("2 nodes, limit 200/s: 2000 deliveries over %s: %.1f/s in total", span.Round(time.Millisecond), rate)
	if rate < 150 || rate > 260 {
		t.Errorf("measured %.1f/s, want about 200/s", rate)
	}
	var late []time.Duration
	for _, id := range freeIDs {
		a, ok := rcv.first[id]
		if !ok {
			t.Fatalf("free task %s not delivered", id)
		}
		late = append(late, a.Sub(rcv.dueAt[id]))
	}
	slices.Sort(late)
	p50, p90, worst := late[len(late)/2], late[len(late)*9/10], late[len(late)-1]
	t.Logf("the other app meanwhile: p50 %s, p90 %s, max %s late", p50, p90, worst)
	// Loose bounds for a loaded 2-core machine running -race children (CI
	// saw p90 193 ms and max 430 ms beside other packages' tests; quiet
	// runs p90 7-36 ms). Held up behind the limited app's 10 s of
	// deliveries, the other app would be seconds late: before the gates
	// (gate.go) its max was 4.3 s.
	if p90 > 500*time.Millisecond || worst > 2*time.Second {
		t.Errorf("the other app's tasks were held up by the limited app: p90 %s, max %s late", p90, worst)
	}
}

// TestClusterMaxInFlight: two nodes, app "capped" with max_in_flight 3 and
// an endpoint that takes 300 ms: at no moment do more than 3 of its
// deliveries run at once across both nodes, and all 24 are delivered.
func TestClusterMaxInFlight(t *testing.T) {
	env := newClusterEnv(t)
	var mu sync.Mutex
	running, peak, done := 0, 0, map[string]bool{}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		running--
		done[r.Header.Get("Toc-Task-Id")] = true
		mu.Unlock()
	}))
	defer slow.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	if err := os.WriteFile(cfg, []byte("apps:\n  capped:\n    rate: {max_in_flight: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*child
	for i := range 2 {
		nodes = append(nodes, startChild(t, fmt.Sprintf("%s/n%d", dir, i), append(env.flags(), "--config", cfg)...))
	}
	ctx := context.Background()
	due := time.Now().Add(2 * time.Second)
	var reqs []client.ScheduleRequest
	for i := range 24 {
		reqs = append(reqs, client.ScheduleRequest{App: "capped", Key: fmt.Sprint(i), DueAt: &due,
			Target: task.Target{HTTP: &task.HTTPTarget{URL: slow.URL}}})
	}
	rs, err := nodes[0].client().ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	testkit.WaitFor(t, 60*time.Second, "24 deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 24
	})
	took := time.Since(due)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("24 deliveries of 300 ms with max_in_flight 3 over 2 nodes: peak %d at once, %s", peak, took.Round(time.Millisecond))
	if peak > 3 {
		t.Errorf("%d deliveries ran at once across the cluster, want at most 3", peak)
	}
	if peak < 2 {
		t.Errorf("at most %d delivery at once: the cap is not being used", peak)
	}
}
