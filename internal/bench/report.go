package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Toc's targets, from the benchmark issue. Nothing enforces them: the
// benchmark reports whether a run met them.
const (
	TargetFireRate      = 10_000  // fires per second the lateness targets hold at
	TargetLatenessP99Ms = 5.0     // embedded, at TargetFireRate
	TargetLatenessMaxMs = 50.0    // embedded, at TargetFireRate
	TargetBatchPerSec   = 200_000 // in batches of 1000
	TargetSinglePerSec  = 40_000  // one per request, 16 clients
	TargetRSSPerTask    = 200.0   // bytes per far-future pending task
)

// TocTargets returns the targets that apply to r, a run against toc, each
// marked met or not. Fire targets apply from TargetFireRate on.
func TocTargets(r *Result) []Check {
	var cs []Check
	add := func(name string, met bool, format string, args ...any) {
		cs = append(cs, Check{Name: name, Met: met, Got: fmt.Sprintf(format, args...)})
	}
	switch r.Workload {
	case WorkloadFire:
		if r.SpreadSec > 0 && float64(r.N)/r.SpreadSec >= TargetFireRate*0.99 {
			l := r.LatenessMs
			add(fmt.Sprintf("lateness p99 <= %g ms at %d fires/s", TargetLatenessP99Ms, TargetFireRate), l.P99 <= TargetLatenessP99Ms && r.Missing == 0, "%.2f ms", l.P99)
			add(fmt.Sprintf("lateness max <= %g ms at %d fires/s", TargetLatenessMaxMs, TargetFireRate), l.Max <= TargetLatenessMaxMs && r.Missing == 0, "%.2f ms", l.Max)
		}
	case WorkloadSchedule:
		switch {
		case r.Batch >= 1000:
			add(fmt.Sprintf("schedule >= %d tasks/s in batches of 1000", TargetBatchPerSec), r.SchedulePerSec >= TargetBatchPerSec, "%.0f/s", r.SchedulePerSec)
		case r.Batch == 1 && r.Concurrency == 16:
			add(fmt.Sprintf("schedule >= %d tasks/s single from 16 clients", TargetSinglePerSec), r.SchedulePerSec >= TargetSinglePerSec, "%.0f/s", r.SchedulePerSec)
		}
	case WorkloadPending:
		if r.RSSBytes > 0 {
			add(fmt.Sprintf("rss <= %g B per pending task", TargetRSSPerTask), r.RSSPerTask <= TargetRSSPerTask, "%.0f B", r.RSSPerTask)
		}
	}
	return cs
}

// WriteTable writes r for people: one line per figure.
func WriteTable(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	title := r.System + " " + r.Workload
	if r.Variant != "" {
		title += " (" + r.Variant + ")"
	}
	fmt.Fprintf(tw, "%s: n=%d, batch %d, %d clients", title, r.N, r.Batch, r.Concurrency)
	if r.Nodes > 1 {
		fmt.Fprintf(tw, ", %d nodes", r.Nodes)
	}
	if r.SpreadSec > 0 {
		fmt.Fprintf(tw, ", spread %gs (%.0f/s)", r.SpreadSec, float64(r.N)/r.SpreadSec)
	}
	fmt.Fprintf(tw, ", %.1fs\n", r.ElapsedSec)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, args...)...)
	}
	if r.Workload != WorkloadPending {
		row("fired", "%d", r.Fired)
		row("missing", "%d", r.Missing)
		row("duplicates", "%d", r.Duplicates)
		row("early", "%d", r.Early)
		l := r.LatenessMs
		row("lateness ms", "p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (min %.2f)", l.P50, l.P90, l.P99, l.P999, l.Max, l.Min)
	}
	row("schedule", "%.0f tasks/s (%.3fs)", r.SchedulePerSec, r.ScheduleSec)
	if r.FillPerSec > 0 {
		row("fill", "%.0f tasks/s", r.FillPerSec)
	}
	if r.RSSBytes > 0 {
		row("rss", "%s%s", mib(r.RSSBytes), perTask(r.RSSPerTask))
	}
	if r.DiskBytes > 0 {
		row("disk", "%s%s", mib(r.DiskBytes), perTask(r.DiskPerTask))
	}
	if r.RedisBytes != nil {
		row("redis", "%+d B used_memory growth (%.1f B per pending task)", *r.RedisBytes, *r.RedisPerTask)
	}
	if r.RedisPrefixBytes != nil {
		row("redis prefix", "%+d B growth of the cluster's keys", *r.RedisPrefixBytes)
	}
	if r.SQLBytes != nil {
		row("sql", "%s growth (%.0f B per pending task)", mib(*r.SQLBytes), *r.SQLPerTask)
	}
	for _, c := range r.Targets {
		met := "MISSED"
		if c.Met {
			met = "met"
		}
		row("target", "%s: %s (%s)", c.Name, met, c.Got)
	}
	for _, n := range r.Notes {
		row("note", "%s", n)
	}
	return tw.Flush()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func perTask(b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f B per pending task)", b)
}
