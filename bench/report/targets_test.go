package report_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toc-dev/toc/bench/report"
	"github.com/toc-dev/toc/internal/loadgen"
)

func TestTocTargets(t *testing.T) {
	t.Parallel()
	met := func(cs []loadgen.Check) []bool {
		var m []bool
		for _, c := range cs {
			m = append(m, c.Met)
		}
		return m
	}
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		r    *loadgen.Result
		want []bool
	}{
		// p99 <= 5 ms, max <= 50 ms; #13's p99 <= 20 ms, max <= 100 ms.
		{"fire", &loadgen.Result{Workload: "fire", Variant: "push, embedded", N: 100_000, SpreadSec: 10, LatenessMs: loadgen.Lateness{P99: 4, Max: 60}},
			[]bool{true, false, true, true}},
		{"fire, pull: not #13's", &loadgen.Result{Workload: "fire", Variant: "pull, embedded", N: 100_000, SpreadSec: 10, LatenessMs: loadgen.Lateness{P99: 4, Max: 60}},
			[]bool{true, false}},
		{"fire at 100/s", &loadgen.Result{Workload: "fire", N: 100, SpreadSec: 1}, nil},
		{"single", &loadgen.Result{Workload: "schedule", Batch: 1, Concurrency: 16, SchedulePerSec: 21_000}, []bool{false, true}},
		{"batch", &loadgen.Result{Workload: "schedule", Batch: 1000, Concurrency: 16, SchedulePerSec: 150_000}, []bool{false, true}},
		{"pending", &loadgen.Result{Workload: "pending", RSSBytes: 1 << 30, RSSPerTask: 150}, []bool{true}},
		// #12's cost targets, at one node: SQL, Redis, CPU.
		{"cost, one node", &loadgen.Result{Workload: "fire", Nodes: 1, N: 20_000, SpreadSec: 5, Cost: &loadgen.Cost{
			SQLXactsPerFire: f(0.05), RedisCommandsPerFire: f(0.6),
			CPUUsPerFire: loadgen.CPUCost{Total: 99, Toc: f(50), SQL: f(30), Redis: f(19)},
		}}, []bool{true, false, true}},
		{"cost, CPU of the node only", &loadgen.Result{Workload: "fire", Nodes: 1, Cost: &loadgen.Cost{
			RedisCommandsPerFire: f(0.4), CPUUsPerFire: loadgen.CPUCost{Total: 20, Toc: f(20)},
		}}, []bool{true}},
		{"cost, embedded", &loadgen.Result{Workload: "fire", Nodes: 1, Cost: &loadgen.Cost{CPUUsPerFire: loadgen.CPUCost{Total: 20, Toc: f(20)}}}, nil},
		{"cost, two nodes", &loadgen.Result{Workload: "fire", Nodes: 2, Cost: &loadgen.Cost{SQLXactsPerFire: f(0.01)}}, nil},
	} {
		got := report.TocTargets(tc.r)
		if d := cmp.Diff(tc.want, met(got)); d != "" {
			t.Errorf("%s: targets met (-want +got):\n%s\n%+v", tc.name, d, got)
		}
	}
	cost := report.TocTargets(&loadgen.Result{Workload: "fire", Nodes: 1, N: 20_000, SpreadSec: 5, Cost: &loadgen.Cost{SQLXactsPerFire: f(0.0123)}})
	if len(cost) != 1 || cost[0].Name != "#12: SQL transactions per fire <= 0.05, one node" || cost[0].Got != "0.0123 at 4000 fires/s" {
		t.Errorf("cost target %+v", cost)
	}
}
