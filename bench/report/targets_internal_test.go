package report

import (
	"math"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/loadgen"
)

// TestOneNodeTargets: #12's one-node targets are marked from the cluster
// runs of a suite, met and missed by their figures.
func TestOneNodeTargets(t *testing.T) {
	none, grown := int64(0), int64(2000)
	results := []*loadgen.Result{
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: loadgen.WorkloadFire, N: 50000, SpreadSec: 5, LatenessMs: loadgen.Lateness{P99: 40, Max: 300}},
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: loadgen.WorkloadSchedule, Batch: 1, Concurrency: 16, SchedulePerSec: 12000},
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: loadgen.WorkloadSchedule, Batch: 1000, Concurrency: 16, SchedulePerSec: 30000},
		{System: "toc", Variant: "cluster", Nodes: 1, Workload: loadgen.WorkloadPending, N: 1000, RedisPrefixBytes: &none},
		{System: "toc", Variant: "push, cluster", Nodes: 2, Workload: loadgen.WorkloadFire, N: 50000, SpreadSec: 5, LatenessMs: loadgen.Lateness{P99: 1, Max: 1}},
	}
	marks := func() map[string]bool {
		m := map[string]bool{}
		for _, st := range suiteTargets(results) {
			for _, what := range []string{"fire p99", "fire max", "one per request", "in batches", "grow with"} {
				if strings.HasPrefix(st.Name, "#12") && strings.Contains(st.Name, what) {
					m[what] = st.Met
				}
			}
		}
		return m
	}
	want := map[string]bool{
		"fire p99":        true,  // 40 ms <= 50
		"fire max":        false, // 300 ms > 250
		"one per request": true,  // 12 000/s >= 10 000
		"in batches":      false, // 30 000/s < 60 000
		"grow with":       true,  // 0 B per pending task
	}
	got := marks()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: met=%v (marked: %v), want met=%v", k, g, ok, v)
		}
	}
	results[3].RedisPrefixBytes = &grown // 2 B per pending task
	if marks()["grow with"] {
		t.Error("Redis growing 2 B per pending task marked met")
	}
}

// TestBurstAndPullTargets: #13's burst and pull targets apply to the runs
// they name, and are met or missed by their figures.
func TestBurstAndPullTargets(t *testing.T) {
	burst := func(variant string, fired int, maxMs float64) *loadgen.Result {
		n := max(fired, 100_000)
		if fired < 10_000 {
			n = fired
		}
		r := &loadgen.Result{System: "toc", Variant: variant, Workload: loadgen.WorkloadFire, N: n, Fired: fired, Missing: n - fired, LatenessMs: loadgen.Lateness{Max: maxMs}}
		if r.Fired > 0 && r.LatenessMs.Max > 0 { // as the fire workload sets it
			r.DrainPerSec = math.Round(float64(r.Fired) / (r.LatenessMs.Max / 1000))
		}
		return r
	}
	marked := func(r *loadgen.Result, name string) (met, ok bool) {
		for _, c := range TocTargets(r) {
			if strings.Contains(c.Name, name) {
				return c.Met, true
			}
		}
		return false, false
	}
	cases := []struct {
		name   string
		r      *loadgen.Result
		target string
		met    bool
	}{
		{"push burst, 100000 in 1.9 s", burst("push, embedded", 100_000, 1900), "by push", true},
		{"push burst, 100000 in 5 s", burst("push, embedded", 100_000, 5000), "by push", false},
		{"pull burst, 100000 in 0.6 s", burst("pull, embedded", 100_000, 600), "by pull", true},
		{"pull burst, 100000 in 1 s", burst("pull, embedded", 100_000, 1000), "by pull", false},
		{"pull burst with one missing", burst("pull, embedded", 99_999, 100), "by pull", false},
		{"pull at 50000/s, p99 30 ms", &loadgen.Result{System: "toc", Variant: "pull, embedded", Workload: loadgen.WorkloadFire, N: 250_000, SpreadSec: 5, LatenessMs: loadgen.Lateness{P99: 30}}, "pull fire p99", true},
		{"pull at 50000/s, p99 80 ms", &loadgen.Result{System: "toc", Variant: "pull, embedded", Workload: loadgen.WorkloadFire, N: 250_000, SpreadSec: 5, LatenessMs: loadgen.Lateness{P99: 80}}, "pull fire p99", false},
	}
	for _, c := range cases {
		met, ok := marked(c.r, c.target)
		if !ok || met != c.met {
			t.Errorf("%s: %q met=%v (marked: %v), want met=%v", c.name, c.target, met, ok, c.met)
		}
	}
	// Where they do not apply: a pull run at 2 000/s, a burst of 1000, a
	// push run spread out.
	for _, r := range []*loadgen.Result{
		{System: "toc", Variant: "pull, embedded", Workload: loadgen.WorkloadFire, N: 10_000, SpreadSec: 5},
		burst("push, embedded", 1000, 100),
		{System: "toc", Variant: "push, embedded", Workload: loadgen.WorkloadFire, N: 100_000, SpreadSec: 10},
	} {
		for _, name := range []string{"pull fire p99", "burst"} {
			if _, ok := marked(r, name); ok {
				t.Errorf("%s run of %d over %gs: %q marked", r.Variant, r.N, r.SpreadSec, name)
			}
		}
	}
	if r := burst("push, embedded", 100_000, 2000); r.DrainPerSec != 50_000 {
		t.Errorf("100000 drained in 2 s: %v/s, want 50000", r.DrainPerSec)
	}
}

// TestCPUPerTask: the results table's CPU per task is per fire for fire
// runs and per create for schedule runs.
func TestCPUPerTask(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	fire := &loadgen.Result{Workload: loadgen.WorkloadFire, Cost: &loadgen.Cost{CPUUsPerFire: loadgen.CPUCost{Toc: f(80)}}, CreateCost: &loadgen.Cost{CPUUsPerFire: loadgen.CPUCost{Toc: f(9)}}}
	sched := &loadgen.Result{Workload: loadgen.WorkloadSchedule, Cost: &loadgen.Cost{CPUUsPerFire: loadgen.CPUCost{Toc: f(80)}}, CreateCost: &loadgen.Cost{CPUUsPerFire: loadgen.CPUCost{Toc: f(12.5)}}}
	for _, c := range []struct {
		r    *loadgen.Result
		want string
	}{{fire, "80"}, {sched, "12.5"}, {&loadgen.Result{Workload: loadgen.WorkloadSchedule}, ""}} {
		if got := tocCPUPerTask(c.r); got != c.want {
			t.Errorf("%s: %q, want %q", c.r.Workload, got, c.want)
		}
	}
}

// TestPullAtItsRate: a pull run at #13's rate is held to its own target
// only, not to the lateness targets at 10 000 fires/s.
func TestPullAtItsRate(t *testing.T) {
	r := &loadgen.Result{System: "toc", Variant: "pull, embedded", Workload: loadgen.WorkloadFire, N: 250_000, SpreadSec: 5, LatenessMs: loadgen.Lateness{P99: 30, Max: 40}}
	var names []string
	for _, c := range TocTargets(r) {
		names = append(names, c.Name)
	}
	if len(names) != 1 || !strings.Contains(names[0], "pull fire p99") {
		t.Errorf("targets %q, want the pull one alone", names)
	}
}
