package bench

import (
	"strings"
	"testing"
)

// TestOneNodeTargets: #12's one-node targets are marked from the cluster
// runs of a suite, met and missed by their figures.
func TestOneNodeTargets(t *testing.T) {
	none, grown := int64(0), int64(2000)
	results := []*Result{
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: WorkloadFire, N: 50000, SpreadSec: 5, LatenessMs: Lateness{P99: 40, Max: 300}},
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: WorkloadSchedule, Batch: 1, Concurrency: 16, SchedulePerSec: 12000},
		{System: "toc", Variant: "push, cluster", Nodes: 1, Workload: WorkloadSchedule, Batch: 1000, Concurrency: 16, SchedulePerSec: 30000},
		{System: "toc", Variant: "cluster", Nodes: 1, Workload: WorkloadPending, N: 1000, RedisPrefixBytes: &none},
		{System: "toc", Variant: "push, cluster", Nodes: 2, Workload: WorkloadFire, N: 50000, SpreadSec: 5, LatenessMs: Lateness{P99: 1, Max: 1}},
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
