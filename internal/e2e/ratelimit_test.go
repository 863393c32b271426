package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestClusterRateLimit: two nodes, app "limited" at 200 deliveries/s, 2000
// of its tasks due at once: they go out at about 200/s in total (the limit
// holds across the nodes, not per node). App "free"'s tasks, due meanwhile,
// are all delivered; their lateness is reported.
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
	waitUntil(wctx, func() bool {
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
	// Reported, not asserted: in cluster mode every admission check of the
	// limited app costs a SQL transaction, so its burst delays the other
	// app by up to seconds on this machine (known gap, issue #4; the
	// embedded engine's isolation is asserted in internal/engine).
	t.Logf("the other app meanwhile: p50 %s, max %s late", late[len(late)/2], late[len(late)-1])
}
