package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

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
		if len(r.Timeline) > 0 {
			row("timeline", "lateness ms per %g ms of due time, from the first due time", r.TimelineMs)
		}
		for _, b := range r.Timeline {
			row(fmt.Sprintf("  +%.3fs", b.FromMs/1000), "n %-6d p50 %-8.2f p99 %-8.2f max %.2f", b.N, b.P50, b.P99, b.Max)
		}
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
	if c := r.Cost; c != nil {
		row("cost", "%d fires over %.2fs (from just before the first due time to after the last delivery)", c.Fires, c.WindowSec)
		row("cpu µs/fire", "%s%s", cpuParts(c.CPUUsPerFire), machineCPU(c))
		if c.SQLXactsPerFire != nil {
			stmts := "n/a"
			if c.SQLStatementsPerFire != nil {
				stmts = num(*c.SQLStatementsPerFire)
			}
			row("sql/fire", "%s transactions, %s statements", num(*c.SQLXactsPerFire), stmts)
		}
		if c.RedisCommandsPerFire != nil {
			row("redis/fire", "%s commands", num(*c.RedisCommandsPerFire))
		}
		if g := c.GC; g != nil {
			row("gc", "%d cycles, %s µs/fire (assists %s), longest pause ≤ %s ms", g.Cycles, num(g.CPUUsPerFire), num(g.AssistUsPerFire), num(g.PauseMaxMs))
		}
	}
	if c := r.CreateCost; c != nil {
		row("create cost", "%d creates over %.2fs (the scheduling window)", c.Fires, c.WindowSec)
		row("cpu µs/create", "%s%s", cpuParts(c.CPUUsPerFire), machineCPU(c))
		if c.SQLXactsPerFire != nil {
			row("sql/create", "%s transactions", num(*c.SQLXactsPerFire))
		}
		if c.RedisCommandsPerFire != nil {
			row("redis/create", "%s commands", num(*c.RedisCommandsPerFire))
		}
	}
	if r.DrainPerSec > 0 && r.Hot != nil {
		row("drained", "%.0f tasks/s (from the first due time to the last first delivery, %s s)", r.DrainPerSec, num(r.Hot.DrainSec))
	} else if r.DrainPerSec > 0 {
		row("drained", "%.0f tasks/s (all due at one instant: fired over max lateness)", r.DrainPerSec)
	}
	if h := r.Hot; h != nil {
		l := h.GetMs
		row("get ms", "p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  (%d GETs by id at %s/s during the drain, %d failed)", l.P50, l.P90, l.P99, l.Max, h.Gets, num(h.GetRate), h.GetErrors)
		if h.PeakRSSBytes > 0 {
			row("rss, drain", "%s at the first due time, peak %s during the drain", mib(h.RSSAtDueBytes), mib(h.PeakRSSBytes))
		}
	}
	if q := r.Quiet; q != nil {
		row("quiet app", "%d jobs, one every few ms from the burst's due time: %d fired, %d missing", q.N, q.Fired, q.Missing)
		l := q.LatenessMs
		row("quiet ms", "p50 %.2f  p90 %.2f  p99 %.2f  max %.2f", l.P50, l.P90, l.P99, l.Max)
		l = q.DuringDrainMs
		row("quiet ms, drain", "p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  (the %d due while the burst drained)", l.P50, l.P90, l.P99, l.Max, q.DuringDrainN)
	}
	if p := r.CPUPressure; p != nil {
		row("cpu pressure", "%.0f%% of the run some task waited for a CPU (/proc/pressure/cpu)", *p*100)
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

// machineCPU is "; machine 123.4 (CPU pressure 40%)", what the whole
// machine spent per operation and how busy it was, as far as measured.
func machineCPU(c *Cost) string {
	s := ""
	if c.MachineCPUUsPerFire != nil {
		s = "; machine " + num(*c.MachineCPUUsPerFire)
	}
	if c.CPUPressure != nil {
		s += fmt.Sprintf(" (CPU pressure %.0f%% of the window)", *c.CPUPressure*100)
	}
	return s
}

// cpuParts is "total 123.4 (toc 80, sql 20.3, redis 23.1)", the parts
// measured only.
func cpuParts(c CPUCost) string {
	var parts []string
	for _, p := range []struct {
		name string
		v    *float64
	}{{"toc", c.Toc}, {"sql", c.SQL}, {"redis", c.Redis}} {
		if p.v != nil {
			parts = append(parts, p.name+" "+num(*p.v))
		}
	}
	return fmt.Sprintf("total %s (%s)", num(c.Total), strings.Join(parts, ", "))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func perTask(b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f B per pending task)", b)
}
func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// joinSet joins the parts that are not empty.
func joinSet(sep string, parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), sep)
}
