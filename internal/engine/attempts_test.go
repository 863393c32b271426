package engine

import (
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

// TestAttemptsCounts: the counts read without the lock (pushes, by the
// outcomes batcher; pulls, by the fire path and the pull cap) follow the
// map through reservations, starts, pull leases and their ends.
func TestAttemptsCounts(t *testing.T) {
	var g task.IDGenerator
	now := time.Now()
	a := newAttempts()
	push, pull := g.New(now, 0), g.New(now, 0)
	check := func(step string, pushes, pulls int64) {
		t.Helper()
		if a.pushes.Load() != pushes || a.pulls.Load() != pulls {
			t.Fatalf("%s: pushes %d, pulls %d; want %d, %d", step, a.pushes.Load(), a.pulls.Load(), pushes, pulls)
		}
	}
	if !a.reserve(push) || a.reserve(push) {
		t.Fatal("reserve: the first must win, the second lose")
	}
	check("reserved", 1, 0)
	a.put(push, &attempt{base: &task.Task{ID: push}, t: &task.Task{ID: push, Lease: "p"}})
	lt := &task.Task{ID: pull, App: "app", Lease: "l"}
	a.put(pull, &attempt{base: &task.Task{ID: pull}, t: lt, pull: true})
	check("started", 1, 1)
	if !a.busy() {
		t.Fatal("busy: a push attempt is under way")
	}
	os := []outcome{{id: push, lease: "p"}, {id: pull, lease: "l"}}
	as := a.of(os)
	if as[0] == nil || as[1] == nil {
		t.Fatalf("of: %v", as)
	}
	ids, apps := a.end(os, as, []bool{false, false})
	if len(ids) != 1 || ids[0] != pull || len(apps) != 1 || apps[0] != "app" {
		t.Fatalf("end: pull leases ended %v %v; want %s of app", ids, apps, pull)
	}
	check("ended", 0, 0)
	if a.busy() || a.count() != 0 {
		t.Fatalf("after the ends: busy %v, %d attempts", a.busy(), a.count())
	}
}

// TestLocalIndex: one node claims every task, numbers an attempt one more
// than the attempts stored, and knows one live process: itself.
func TestLocalIndex(t *testing.T) {
	x := &localIndex{boot: "b0000001"}
	got, err := x.Claim(t.Context(), []*task.Task{{Attempts: 0}, {Attempts: 3}}, nil, time.Now())
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Fatalf("Claim: %v, %v; want [1 4]", got, err)
	}
	if !x.Live("b0000001") || x.Live("b0000002") || !x.Watches(&task.Task{}) {
		t.Fatal("Live or Watches")
	}
	if x.fireGather() != 0 || (clusterIndex{}).fireGather() != fireGather {
		t.Fatal("fireGather: none on one node, fireGather in a cluster")
	}
}
