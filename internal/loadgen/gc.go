package loadgen

import (
	"math"
	"runtime/metrics"
)

// GCCost is what the Go collector of this process did over a cost's
// window: filled only when the server runs in this process (embedded,
// or a baseline), where it is the server's collector. It tells whether a
// change moved the collector's work, which a busy machine's lateness and
// CPU figures hide.
type GCCost struct {
	// Cycles are the collections completed in the window.
	Cycles int64 `json:"cycles"`
	// CPUUsPerFire is the collector's CPU time per fire in µs (its
	// background marking, the mutators' assists, its pauses and idle
	// marking: /cpu/classes/gc/total); AssistUsPerFire is the part the
	// goroutines that allocated did while marking (mark assists), on the
	// fire path itself.
	CPUUsPerFire    float64 `json:"cpu_us_per_fire"`
	AssistUsPerFire float64 `json:"assist_us_per_fire"`
	// PauseMaxMs is the longest stop-the-world pause of the window, as
	// the runtime's histogram bounds it (its bucket's upper bound).
	PauseMaxMs float64 `json:"pause_max_ms"`
}

// The runtime metrics GCCost is made of.
var gcMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/sched/pauses/total/gc:seconds",
}

// gcSample reads gcMetrics.
func gcSample() []metrics.Sample {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}

// gcCost is the collector's work between the samples before and after,
// for fires; nil when a metric is missing.
func gcCost(before, after []metrics.Sample, fires int) *GCCost {
	for i := range before {
		if before[i].Value.Kind() == metrics.KindBad || after[i].Value.Kind() == metrics.KindBad {
			return nil
		}
	}
	c := &GCCost{Cycles: int64(after[0].Value.Uint64() - before[0].Value.Uint64())}
	if fires > 0 {
		c.CPUUsPerFire = round((after[1].Value.Float64()-before[1].Value.Float64())*1e6/float64(fires), 2)
		c.AssistUsPerFire = round((after[2].Value.Float64()-before[2].Value.Float64())*1e6/float64(fires), 2)
	}
	hb, ha := before[3].Value.Float64Histogram(), after[3].Value.Float64Histogram()
	for i := len(ha.Counts) - 1; i >= 0; i-- {
		if i < len(hb.Counts) && ha.Counts[i] > hb.Counts[i] {
			if hi := ha.Buckets[i+1]; !math.IsInf(hi, 1) {
				c.PauseMaxMs = round(hi*1e3, 3)
			} else {
				c.PauseMaxMs = round(ha.Buckets[i]*1e3, 3)
			}
			break
		}
	}
	return c
}
