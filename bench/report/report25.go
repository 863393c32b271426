package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/internal/loadgen"
)

// The targets of issue #25: toc's cost per timer set against what the work
// itself costs on the same machine, in the same run (the push ceiling, the
// timers + HTTP, create and pull baselines).
const (
	Target25FireP99Ratio   = 2.0 // push fire p99 <= max(2x the timers baseline's, it + 5 ms)
	Target25FireP99SlackMs = 5.0
	Target25FireCPURatio   = 1.5 // CPU per fire of the processes against the timers baseline's
	Target25BurstPush      = 0.8 // a push burst drained at >= 0.8x the push ceiling
	Target25BurstPull      = 0.5 // a pull burst drained at >= 0.5x the pull baseline's
	Target25PullP99Ms      = 50.0
	Target25PullRateR      = 5.0 // pull tasks due evenly at min(5 R, 0.3x the pull baseline's drain rate)
	Target25PullRateBase   = 0.3
	Target25Single         = 0.7 // creates one per request >= 0.7x the create baseline
	Target25Batch          = 0.5 // creates in batches of 1000 >= 0.5x the batched create baseline
	Target25ClusterP99x    = 3.0 // one node's fire p99 <= 3x embedded's + 10 ms
	Target25ClusterP99Ms   = 10.0
	Target25ClusterCPU     = 2.0 // one node's CPU per fire <= 2x embedded's
	Target25ClusterCreate  = 0.5 // one node's creates >= 0.5x embedded's
	Target25HotDrain       = 0.8 // a hot instant drained at >= 0.8x the push ceiling
	Target25HotGetP99Ms    = 50.0
	// Target25RateMax is the cap of R, the push rate the fire targets are
	// measured at: R = min(Target25RateMax, half the push ceiling).
	Target25RateMax = 10_000
)

// PushRate is R, the rate of issue #25's push fire targets: half the push
// ceiling, at most max (Target25RateMax in the suite).
func PushRate(ceilingPerSec, max float64) float64 {
	if ceilingPerSec <= 0 {
		return max
	}
	return math.Min(max, ceilingPerSec/2)
}

// PullRate is the rate of issue #25's evenly due pull run: min(5 R, 0.3x the
// pull baseline's drain rate).
func PullRate(r, pullBaseline float64) float64 {
	if pullBaseline <= 0 {
		return Target25PullRateR * r
	}
	return math.Min(Target25PullRateR*r, Target25PullRateBase*pullBaseline)
}

// embeddedRun is the first embedded toc run of workload whose variant
// starts with delivery ("" for schedule runs) that match says is the one.
func embeddedRun(results []*loadgen.Result, workload string, match func(*loadgen.Result) bool) *loadgen.Result {
	for _, r := range results {
		if r.System == "toc" && r.Workload == workload && strings.Contains(r.Variant, "embedded") && match(r) {
			return r
		}
	}
	return nil
}

// ceilingOf is the suite's push ceiling run, or nil.
func ceilingOf(results []*loadgen.Result) *loadgen.Result {
	for _, r := range results {
		if r.System == baseline.SystemBaseline && r.Workload == baseline.WorkloadCeiling {
			return r
		}
	}
	return nil
}

func isPull(r *loadgen.Result) bool { return strings.HasPrefix(r.Variant, loadgen.DeliveryPull) }

// processCPU is the CPU per operation of the measured processes (toc's
// part: with embedded runs and the baselines the bench process), or 0.
func processCPU(r *loadgen.Result) float64 {
	if p := processCPUOf(r); p != nil {
		return *p
	}
	return 0
}

// processCPUOf is processCPU, nil when not measured.
func processCPUOf(r *loadgen.Result) *float64 {
	c := r.Cost
	if r.Workload == loadgen.WorkloadSchedule {
		c = r.CreateCost
	}
	if c == nil {
		return nil
	}
	return c.CPUUsPerFire.Toc
}

// machineCPUOf is the machine's CPU per operation of r, or nil.
func machineCPUOf(r *loadgen.Result) *float64 {
	c := r.Cost
	if r.Workload == loadgen.WorkloadSchedule {
		c = r.CreateCost
	}
	if c == nil {
		return nil
	}
	return c.MachineCPUUsPerFire
}

// issue25Targets are issue #25's targets, each whose runs are in results.
func issue25Targets(results []*loadgen.Result) []suiteTarget {
	var ts []suiteTarget
	add := func(of, name string, met bool, format string, args ...any) {
		ts = append(ts, suiteTarget{Check: loadgen.Check{Name: "#25: " + name, Met: met, Got: fmt.Sprintf(format, args...)}, of: of})
	}
	ceil := ceilingOf(results)
	fire := embeddedRun(results, loadgen.WorkloadFire, func(r *loadgen.Result) bool { return !isPull(r) && r.SpreadSec > 0 })
	if fire != nil {
		if base := baselineOf(results, fire); base != nil {
			of := joinSet(", ", fire.Workload, fire.Variant)
			at := fmt.Sprintf(" at %.0f fires/s", float64(fire.N)/fire.SpreadSec)
			b := base.LatenessMs.P99
			limit := math.Max(Target25FireP99Ratio*b, b+Target25FireP99SlackMs)
			add(of, fmt.Sprintf("push fire p99 <= max(%gx the timers baseline's, it + %g ms), none missing or early%s", Target25FireP99Ratio, Target25FireP99SlackMs, at),
				fire.LatenessMs.P99 <= limit && fire.Missing == 0 && fire.Early == 0,
				"%.2f ms against %.2f ms (baseline %.2f ms), %d missing, %d early", fire.LatenessMs.P99, limit, b, fire.Missing, fire.Early)
			if t, bc := processCPU(fire), processCPU(base); t > 0 && bc > 0 {
				add(of, fmt.Sprintf("push CPU per fire of the processes <= %gx the timers baseline's%s", Target25FireCPURatio, at),
					t <= Target25FireCPURatio*bc, "%s µs, %sx the baseline's %s µs", num(t), ratioString(t, bc), num(bc))
			}
		}
	}
	if burst := embeddedRun(results, loadgen.WorkloadFire, func(r *loadgen.Result) bool { return !isPull(r) && r.SpreadSec == 0 }); burst != nil && ceil != nil {
		add(joinSet(", ", burst.Workload, burst.Variant), fmt.Sprintf("a push burst of %d drained at >= %gx the push ceiling", burst.N, Target25BurstPush),
			burst.DrainPerSec >= Target25BurstPush*ceil.DrainPerSec && burst.Missing == 0,
			"%.0f/s, %sx the ceiling's %.0f/s", burst.DrainPerSec, ratioString(burst.DrainPerSec, ceil.DrainPerSec), ceil.DrainPerSec)
	}
	if hot := embeddedRun(results, loadgen.WorkloadHot, func(r *loadgen.Result) bool { return r.Hot != nil }); hot != nil {
		of, h := joinSet(", ", hot.Workload, hot.Variant), hot.Hot
		if ceil != nil {
			add(of, fmt.Sprintf("a hot instant of %d due within %gs drained at >= %gx the push ceiling", hot.N, hot.SpreadSec, Target25HotDrain),
				hot.DrainPerSec >= Target25HotDrain*ceil.DrainPerSec && hot.Missing == 0,
				"%.0f/s, %sx the ceiling's %.0f/s, %d missing; the server's RSS %s at the first due time, peak %s during the drain",
				hot.DrainPerSec, ratioString(hot.DrainPerSec, ceil.DrainPerSec), ceil.DrainPerSec, hot.Missing, mibOf(h.RSSAtDueBytes), mibOf(h.PeakRSSBytes))
		}
		add(of, fmt.Sprintf("GETs by id during a hot instant's drain (%s/s) p99 <= %g ms", num(h.GetRate), Target25HotGetP99Ms),
			h.Gets > 0 && h.GetErrors == 0 && h.GetMs.P99 <= Target25HotGetP99Ms,
			"p99 %.2f ms, max %.2f ms, %d GETs, %d failed", h.GetMs.P99, h.GetMs.Max, h.Gets, h.GetErrors)
	}
	var pullBase *loadgen.Result
	if pb := embeddedRun(results, loadgen.WorkloadFire, func(r *loadgen.Result) bool { return isPull(r) && r.SpreadSec == 0 }); pb != nil {
		if pullBase = baselineOf(results, pb); pullBase != nil {
			add(joinSet(", ", pb.Workload, pb.Variant), fmt.Sprintf("a pull burst of %d drained at >= %gx the pull baseline's, each acked once", pb.N, Target25BurstPull),
				pb.DrainPerSec >= Target25BurstPull*pullBase.DrainPerSec && pb.Missing == 0 && pb.Duplicates == 0,
				"%.0f/s, %sx the baseline's %.0f/s; %d missing, %d duplicates", pb.DrainPerSec, ratioString(pb.DrainPerSec, pullBase.DrainPerSec), pullBase.DrainPerSec, pb.Missing, pb.Duplicates)
		}
	}
	if pf := embeddedRun(results, loadgen.WorkloadFire, func(r *loadgen.Result) bool { return isPull(r) && r.SpreadSec > 0 }); pf != nil {
		rate := float64(pf.N) / pf.SpreadSec
		got := fmt.Sprintf("%.2f ms at %.0f/s, %d missing", pf.LatenessMs.P99, rate, pf.Missing)
		met := pf.LatenessMs.P99 <= Target25PullP99Ms && pf.Missing == 0
		name := fmt.Sprintf("pull p99 <= %g ms, none missing, due evenly at min(%g R, %gx the pull baseline's drain rate)", Target25PullP99Ms, Target25PullRateR, Target25PullRateBase)
		if pullBase != nil && fire != nil && fire.SpreadSec > 0 {
			want := PullRate(float64(fire.N)/fire.SpreadSec, pullBase.DrainPerSec)
			if rate < 0.99*want {
				met = false
				got += fmt.Sprintf(" (below the target's rate %.0f/s)", want)
			}
		}
		add(joinSet(", ", pf.Workload, pf.Variant), name, met, "%s", got)
	}
	for _, c := range []struct {
		batch int
		ratio float64
		name  string
	}{
		{1, Target25Single, "creates one per request >= %gx the create baseline"},
		{1000, Target25Batch, "creates in batches of 1000 >= %gx the batched create baseline"},
	} {
		r := embeddedRun(results, loadgen.WorkloadSchedule, func(r *loadgen.Result) bool { return r.Batch == c.batch })
		if r == nil {
			continue
		}
		if base := baselineOf(results, r); base != nil {
			add(joinSet(", ", r.Workload, r.Variant), fmt.Sprintf(c.name, c.ratio)+fmt.Sprintf(" (%d clients)", r.Concurrency),
				r.SchedulePerSec >= c.ratio*base.SchedulePerSec,
				"%.0f/s, %sx the baseline's %.0f/s", r.SchedulePerSec, ratioString(r.SchedulePerSec, base.SchedulePerSec), base.SchedulePerSec)
		}
	}
	one := clusterGroups(results)[1]
	if one == nil {
		return ts
	}
	if f := one.fire; f != nil && fire != nil {
		of := "fire, cluster, 1 node against embedded"
		limit := Target25ClusterP99x*fire.LatenessMs.P99 + Target25ClusterP99Ms
		add(of, fmt.Sprintf("one node's fire p99 <= %gx embedded's + %g ms", Target25ClusterP99x, Target25ClusterP99Ms),
			f.LatenessMs.P99 <= limit && f.Missing == 0,
			"%.2f ms at %.0f/s against %.2f ms (embedded %.2f ms at %.0f/s)", f.LatenessMs.P99, rateOf(f), limit, fire.LatenessMs.P99, rateOf(fire))
		if f.Cost != nil && f.Cost.Fires > 0 {
			if e := processCPU(fire); e > 0 {
				u := f.Cost.CPUUsPerFire.Total
				add(of, fmt.Sprintf("one node's CPU per fire (toc, PostgreSQL, Redis, load generator) <= %gx embedded's", Target25ClusterCPU),
					u <= Target25ClusterCPU*e, "%s µs, %sx embedded's %s µs", num(u), ratioString(u, e), num(e))
			}
		}
	}
	for _, c := range []struct {
		r     *loadgen.Result
		batch int
	}{{one.single, 1}, {one.batch, 1000}} {
		e := embeddedRun(results, loadgen.WorkloadSchedule, func(r *loadgen.Result) bool { return r.Batch == c.batch })
		if c.r == nil || e == nil {
			continue
		}
		add("schedule, cluster, 1 node against embedded", fmt.Sprintf("one node's creates (batch %d) >= %gx embedded's", c.batch, Target25ClusterCreate),
			c.r.SchedulePerSec >= Target25ClusterCreate*e.SchedulePerSec,
			"%.0f/s, %sx embedded's %.0f/s", c.r.SchedulePerSec, ratioString(c.r.SchedulePerSec, e.SchedulePerSec), e.SchedulePerSec)
	}
	return ts
}

func rateOf(r *loadgen.Result) float64 {
	if r.SpreadSec <= 0 {
		return 0
	}
	return float64(r.N) / r.SpreadSec
}

// costRows are the rows of the cost table: each toc run with a baseline,
// its headline figure beside the baseline's, and what each cost per
// operation, the measured processes' CPU and the whole machine's.
func costRows(results []*loadgen.Result) [][]string {
	var rows [][]string
	cell := func(f *float64) string {
		if f == nil {
			return ""
		}
		return num(*f)
	}
	if c := ceilingOf(results); c != nil {
		rows = append(rows, []string{"push ceiling (" + itoa(c.Concurrency) + " senders)", "POSTs/s", "", floor(c.DrainPerSec), "",
			"", cell(processCPUOf(c)), "", cell(machineCPUOf(c))})
	}
	if c, hot := ceilingOf(results), embeddedRun(results, loadgen.WorkloadHot, func(r *loadgen.Result) bool { return r.Hot != nil }); c != nil && hot != nil {
		what := joinSet(", ", hot.Workload, hot.Variant, "n "+itoa(hot.N), "due within "+num(hot.SpreadSec)+" s", "against the push ceiling")
		rows = append(rows, []string{what, "drained/s", num(math.Round(hot.DrainPerSec)), floor(c.DrainPerSec), ratioString(hot.DrainPerSec, c.DrainPerSec),
			cell(processCPUOf(hot)), cell(processCPUOf(c)), cell(machineCPUOf(hot)), cell(machineCPUOf(c))})
	}
	for _, r := range results {
		base := baselineOf(results, r)
		if base == nil {
			continue
		}
		what := joinSet(", ", r.Workload, r.Variant, "n "+itoa(r.N), "batch "+itoa(r.Batch), itoa(r.Concurrency)+" clients")
		var figure string
		var t, b float64
		switch {
		case r.Workload == loadgen.WorkloadFire && r.SpreadSec == 0:
			figure, t, b = "drained/s", r.DrainPerSec, base.DrainPerSec
		case r.Workload == loadgen.WorkloadFire:
			figure, t, b = "p99 ms", r.LatenessMs.P99, base.LatenessMs.P99
		default:
			figure, t, b = "tasks/s", math.Floor(r.SchedulePerSec), math.Floor(base.SchedulePerSec)
		}
		rows = append(rows, []string{what, figure, num(round(t, 3)), num(round(b, 3)), ratioString(t, b),
			cell(processCPUOf(r)), cell(processCPUOf(base)), cell(machineCPUOf(r)), cell(machineCPUOf(base))})
	}
	return rows
}

// mibOf is b bytes in MiB, "?" when unknown (0).
func mibOf(b int64) string {
	if b <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}
