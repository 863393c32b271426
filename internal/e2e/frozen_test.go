package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestClusterNodeFrozen: two nodes; one is frozen (SIGSTOP) for 10 s while
// its deliveries are under way at a receiver that answers in 500 ms, longer
// than their leases (a 1 s timeout + 5 s grace), so the other node takes
// its slots and delivers them again; then it resumes and records its
// attempts' late failures. Every task ends delivered, no task gets the
// same Toc-Attempt twice, and every attempt that reached the receiver is
// in the task's history (issue 22: the frozen node's late "no answer"
// landed over the task while the other node's attempt, numbered 1 too, was
// under way, whose success was then discarded and missing from the
// history, and the task delivered a third time).
func TestClusterNodeFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster fault test; skipped with -short")
	}
	env := newClusterEnv(t)
	var (
		mu       sync.Mutex
		arrivals = map[string][]string{} // task id → Toc-Attempt of each arrival
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		id := r.Header.Get("Toc-Task-Id")
		arrivals[id] = append(arrivals[id], r.Header.Get("Toc-Attempt"))
		mu.Unlock()
		select { // the receiver's latency, not a wait for a result
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
		}
	}))
	defer rcv.Close()
	dir := t.TempDir()
	nodes := []*child{
		startChild(t, dir+"/n0", env.flags()...),
		startChild(t, dir+"/n1", env.flags()...),
	}
	frozen := nodes[0]
	t.Cleanup(func() { _ = frozen.cmd.Process.Signal(syscall.SIGCONT) })

	const n = 200
	start := time.Now().Add(3 * time.Second)
	target := task.Target{HTTP: &task.HTTPTarget{URL: rcv.URL + "/hook", Timeout: task.Duration(time.Second)}}
	reqs := make([]client.ScheduleRequest, n)
	for i := range n {
		due := start.Add(time.Duration(i) * time.Second / n)
		reqs[i] = client.ScheduleRequest{App: "frozen", Key: strconv.Itoa(i), DueAt: &due, Target: target}
	}
	ctx := context.Background()
	rs, err := nodes[1].client().ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]task.ID, n)
	for i, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.Task.ID
	}
	// The fault's timing: frozen in the middle of the wave, for longer
	// than a lease.
	time.Sleep(time.Until(start.Add(700 * time.Millisecond)))
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	cl := nodes[1].client()
	check := func() (problems []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			tk, err := cl.Get(ctx, id)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", id, err))
				continue
			}
			got := arrivals[id.String()]
			var made []string
			for _, ev := range tk.History {
				if ev.What == "attempt" {
					made = append(made, strconv.Itoa(ev.Attempt))
				}
			}
			if tk.State != task.Delivered || len(made) < len(got) {
				problems = append(problems, fmt.Sprintf("%s: %s, attempts in its history %v, at the receiver %v", id, tk.State, made, got))
			}
		}
		return problems
	}
	// Poll with a deadline: the late outcomes land within a second or two
	// of the resume.
	deadline := time.Now().Add(60 * time.Second)
	for problems := check(); len(problems) > 0; problems = check() {
		if time.Now().After(deadline) {
			for _, p := range problems[:min(len(problems), 10)] {
				t.Log(p)
			}
			t.Fatalf("%d of %d tasks not delivered or missing attempts that reached the receiver from their history", len(problems), n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	again, thrice := 0, 0
	for _, id := range ids {
		got := arrivals[id.String()]
		if len(got) > 1 {
			again++
		}
		if len(got) > 2 {
			thrice++
		}
		seen := map[string]bool{}
		for _, a := range got {
			if seen[a] {
				t.Errorf("task %s: Toc-Attempt %s arrived twice (%v)", id, a, got)
			}
			seen[a] = true
		}
	}
	t.Logf("%d tasks: %d delivered more than once, %d more than twice", n, again, thrice)
	if again == 0 {
		t.Error("no task was delivered again: the node was not frozen past its leases while delivering")
	}
}
