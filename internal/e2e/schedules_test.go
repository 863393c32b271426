package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// TestClusterSchedulesNodeKilled: three nodes, 50 schedules firing every
// second for 20 s, one node SIGKILLed midway. Every occurrence due in that
// time is delivered; a duplicate is allowed only as the redelivery of an
// attempt in flight at the kill (at most one per schedule), and counted.
// The schedules of the dead node's shards are stepped by the node that
// takes them over: the occurrences due meanwhile are created late, not
// skipped, because that node was up while they fell due (catch-up applies
// only to what was due before a process started).
func TestClusterSchedulesNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster test; skipped with -short")
	}
	env := newClusterEnv(t)
	type occ struct {
		schedule string
		due      int64 // unix ms
	}
	var (
		mu  sync.Mutex
		got = map[occ]int{}
		bad []string
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		due, err := time.Parse(time.RFC3339Nano, r.Header.Get("Toc-Due-At"))
		o := occ{r.Header.Get("Toc-Schedule-Id"), due.UnixMilli()}
		mu.Lock()
		defer mu.Unlock()
		if o.schedule == "" || err != nil {
			bad = append(bad, fmt.Sprint(r.Header))
			return
		}
		got[o]++
	}))
	defer rcv.Close()

	dir := t.TempDir()
	var nodes []*child
	for i := range 3 {
		nodes = append(nodes, startChild(t, fmt.Sprintf("%s/n%d", dir, i), env.flags()...))
	}
	const schedules, occurrences = 50, 20
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add((occurrences - 1) * time.Second)
	ctx := context.Background()
	ids := make([]string, schedules)
	for i := range schedules {
		s, created, err := nodes[i%3].client().CreateSchedule(ctx, client.CreateScheduleRequest{
			App: "every", Key: fmt.Sprintf("s%d", i), Every: task.Duration(time.Second),
			StartAt: &start, EndAt: &end,
			Target: task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook"}},
		})
		if err != nil || !created {
			t.Fatalf("create schedule %d: %v (created %v)", i, err, created)
		}
		ids[i] = s.ID.String()
	}
	if time.Now().After(start) {
		t.Fatalf("creating %d schedules took too long: the first occurrence was due %s ago", schedules, time.Since(start))
	}

	time.Sleep(time.Until(start.Add(occurrences / 2 * time.Second)))
	nodes[2].kill(t)
	t.Logf("killed node 2 at +%s", time.Since(start).Round(time.Millisecond))

	want := map[occ]bool{}
	for _, id := range ids {
		for k := range occurrences {
			want[occ{id, start.Add(time.Duration(k) * time.Second).UnixMilli()}] = true
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	testkit.Until(wctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for o := range want {
			if got[o] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // late duplicates, or occurrences past end_at, show up now
	mu.Lock()
	defer mu.Unlock()
	missing, dups, extra := 0, 0, 0
	for o := range want {
		switch n := got[o]; {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	for o := range got {
		if !want[o] {
			extra++
			t.Errorf("an occurrence nobody asked for: %+v", o)
		}
	}
	t.Logf("%d occurrences due: %d missing, %d duplicate deliveries, %d unexpected", len(want), missing, dups, extra)
	if len(bad) > 0 {
		t.Errorf("deliveries without schedule headers: %v", bad[:min(len(bad), 3)])
	}
	if missing > 0 {
		for i, c := range nodes[:2] {
			out := c.stderr.String()
			t.Logf("node %d log (last 2000 bytes):\n%s", i, out[max(0, len(out)-2000):])
		}
		t.Fatalf("%d of %d occurrences never delivered", missing, len(want))
	}
	if dups > schedules {
		t.Errorf("%d duplicate deliveries; at most one per schedule (its attempt in flight at the kill) is allowed", dups)
	}
}
