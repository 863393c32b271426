package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
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

// Report is the outcome of a run of the whole suite (`toc bench suite`), as
// [WriteMarkdown] writes it to bench/RESULTS.md.
type Report struct {
	// Command is the command that wrote the file, like "toc bench suite
	// --peers=false".
	Command string
	// Written is when the suite ended; Took how long it ran.
	Written time.Time
	Took    time.Duration
	Machine Machine
	// Results are the runs, in the order they ran. The cluster's have a
	// variant that contains "cluster".
	Results []*Result
	// ClusterNodes are the node counts of the cluster section (1 2 3), and
	// ClusterMaxWait the --max-wait of its runs.
	ClusterNodes   []int
	ClusterMaxWait time.Duration
	// Skipped says, one line each, what was skipped or failed and why;
	// NodeNotes what the cluster's nodes logged or left behind.
	Skipped   []string
	NodeNotes []string
	// Commands are the commands as run, one line each.
	Commands []string
}

// Machine describes where a suite ran. Empty fields print as "?" or
// nothing.
type Machine struct {
	CPUs        int
	CPUModel    string
	MemoryBytes int64
	OS, Go, Toc string
	// The peers' versions (from bench/peers/go.mod) and their services'.
	Asynq, Redis, RedisAppendOnly    string
	River, RiverPGXv5, PGX, Postgres string
	// LoadBefore and LoadAfter are the 1, 5 and 15 min load averages.
	LoadBefore, LoadAfter string
}

// WriteMarkdown writes rep as bench/RESULTS.md: the machine, the targets,
// one table per section (fire and schedule, cluster, pending), the notes
// and the commands.
func WriteMarkdown(w io.Writer, rep *Report) error {
	b := new(strings.Builder)
	m := rep.Machine
	fmt.Fprintf(b, `# Benchmark results

Written by `+"`%s`"+` (`+"`bash bench/run.sh`"+` runs it) on %s in %ds; run it
again to regenerate this file. What the workloads do: `+"`toc help bench`"+` and
`+"`internal/bench`"+`. Go micro-benchmarks of the create path:
`+"`go test -run - -bench Create ./internal/bench/`"+`.

## Machine

| | |
|---|---|
`, rep.Command, rep.Written.UTC().Format("2006-01-02 15:04 UTC"), int64(rep.Took.Seconds()))
	cpu := strconv.Itoa(m.CPUs)
	if m.CPUModel != "" {
		cpu += " (" + m.CPUModel + ")"
	}
	redis, pg := cmp.Or(m.Redis, "?"), cmp.Or(m.Postgres, "?")
	for _, row := range [][2]string{
		{"CPUs (`nproc`)", cpu},
		{"memory", fmt.Sprintf("%.1f GiB", float64(m.MemoryBytes)/(1<<30))},
		{"OS", m.OS},
		{"Go", m.Go},
		{"toc", m.Toc},
		{"asynq", fmt.Sprintf("%s, Redis %s (appendonly %s)", m.Asynq, redis, cmp.Or(m.RedisAppendOnly, "?"))},
		{"river", fmt.Sprintf("%s, riverpgxv5 %s, pgx %s, PostgreSQL %s", m.River, m.RiverPGXv5, m.PGX, pg)},
		{"toc cluster", fmt.Sprintf("nodes with `toc serve`'s defaults (4 SQL tables, 64 slots, a 10 min hot window) over PostgreSQL %s and Redis %s, all on this machine", pg, redis)},
		{"load average (1, 5, 15 min)", fmt.Sprintf("before %s, after %s", m.LoadBefore, m.LoadAfter)},
	} {
		writeRow(b, row[:])
	}
	b.WriteString(`
The load average is other work on the machine: the figures are only as
quiet as it was.

## Targets

Nothing enforces them; each toc run says whether it met the ones that apply.

`)
	for _, r := range rep.Results {
		if r.System != "toc" {
			continue
		}
		for _, c := range r.Targets {
			met := "missed"
			if c.Met {
				met = "met"
			}
			fmt.Fprintf(b, "- %s: **%s** (%s; %s)\n", c.Name, met, c.Got, joinSet(", ", r.Workload, r.Variant))
		}
	}
	b.WriteString(`
## Fire and schedule

Lateness is the first delivery of each task minus its due time, in ms
(negative: early). fire: tasks due at instants spread evenly over the spread.
schedule: tasks/s accepted (the server answered), one per request or in
batches, then all fire at one instant and are counted, so lateness there is
how fast a burst drains. When scheduling outlasts the hold, sched/s counts
only the tasks accepted before the first was due (see the notes).

| system | variant | workload | n | spread s | batch | clients | fired | missing | dup | early | sched/s | p50 | p90 | p99 | p99.9 | max | min |
|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`)
	for _, r := range rep.Results {
		if r.Workload == WorkloadPending {
			continue
		}
		spread := ""
		if r.SpreadSec != 0 {
			spread = num(r.SpreadSec)
		}
		l := r.LatenessMs
		writeRow(b, []string{r.System, r.Variant, r.Workload, itoa(r.N), spread, itoa(r.Batch), itoa(r.Concurrency),
			itoa(r.Fired), itoa(r.Missing), itoa(r.Duplicates), itoa(r.Early), floor(r.SchedulePerSec),
			num(l.P50), num(l.P90), num(l.P99), num(l.P999), num(l.Max), num(l.Min)})
	}
	nodes := make([]string, len(rep.ClusterNodes))
	for i, n := range rep.ClusterNodes {
		nodes[i] = itoa(n)
	}
	fmt.Fprintf(b, `
## Cluster

toc's cluster mode: %d node counts (%s), every run on a fresh cluster (a new
database and Redis prefix, nodes started for it and stopped after). The
scheduling requests go round-robin over the nodes; every node delivers to
the one receiver. The issue's target for a cluster is lateness p99 <= 20 ms
at 10,000 fires/s; the fire runs here are at the rate in the table (set by
--cluster-fire-n over --cluster-fire-spread), and their missing tasks are those
not delivered within the wait (--max-wait %s after the last
due time). Lateness in ms; the rows are in the table below too.

| nodes | fire/s | fire p50 | fire p99 | fire max | missing | dup | single sched/s | single drain p99 | batch sched/s | batch drain p99 |
|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`, len(rep.ClusterNodes), strings.Join(nodes, " "), durationString(rep.ClusterMaxWait))
	for _, row := range clusterRows(rep.Results) {
		writeRow(b, row)
	}
	b.WriteString(`
missing and dup add up the node count's fire and schedule runs.

## Pending

Far-future tasks (due a day ahead) on a separate ` + "`toc serve`" + ` process, or on
a cluster of one node: RSS from /proc/PID/status (summed over a cluster's
nodes), the data directory's size (embedded), the growth of the SQL
database (pg_database_size) and of Redis (used_memory of the whole server,
so other clients of a shared Redis count too; and MEMORY USAGE of the keys
under the cluster's prefix, its own share), from before the fill to after.
A cluster keeps only tasks due within its hot window in Redis, so
far-future tasks should cost it SQL rows and next to no Redis memory.
sched/s is a probe scheduled on top of the pending tasks.

| system | variant | n | rss MiB | rss B/task | disk MiB | disk B/task | sql MiB grown | sql B/task | redis B grown | redis B/task | redis prefix B grown | fill/s | sched/s |
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`)
	for _, r := range rep.Results {
		if r.Workload != WorkloadPending {
			continue
		}
		var sqlMiB, sqlPer, redis, redisPer, prefix string
		if r.SQLBytes != nil {
			sqlMiB = mibCell(*r.SQLBytes)
		}
		if r.SQLPerTask != nil {
			sqlPer = floor(*r.SQLPerTask)
		}
		if r.RedisBytes != nil {
			redis = strconv.FormatInt(*r.RedisBytes, 10)
		}
		if r.RedisPerTask != nil {
			redisPer = num(math.Round(*r.RedisPerTask*10) / 10)
		}
		if r.RedisPrefixBytes != nil {
			prefix = strconv.FormatInt(*r.RedisPrefixBytes, 10)
		}
		writeRow(b, []string{r.System, r.Variant, itoa(r.N), mibCell(r.RSSBytes), floorNonZero(r.RSSPerTask),
			mibCell(r.DiskBytes), floorNonZero(r.DiskPerTask), sqlMiB, sqlPer, redis, redisPer, prefix,
			floorNonZero(r.FillPerSec), floor(r.SchedulePerSec)})
	}
	b.WriteString("\n## Notes\n\n")
	for _, r := range rep.Results {
		if len(r.Notes) > 0 {
			fmt.Fprintf(b, "- %s n=%d batch %d: %s\n", joinSet(" ", r.System, r.Workload, r.Variant), r.N, r.Batch, strings.Join(r.Notes, "; "))
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(b, "- %s\n", s)
	}
	for _, s := range rep.NodeNotes {
		fmt.Fprintf(b, "- cluster: %s\n", s)
	}
	b.WriteString(`- asynq keeps due times in whole seconds (ProcessAt is stored as a Unix
  second), so it delivers up to a second early; "early" counts those tasks.
- asynq's acceptance is a Redis write; with appendonly no it is not on disk.
  River's and toc's are fsync'd commits.
- Peers run with 1000 concurrent handlers (asynq Config.Concurrency, River
  MaxWorkers); toc's --max-in-flight is 1024.

## Commands

` + "```sh\n")
	for _, c := range rep.Commands {
		b.WriteString(c + "\n")
	}
	b.WriteString("```\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// clusterRows are the rows of the cluster table: one per node count, in
// increasing order, from its first fire run, its first schedule run of one
// task per request and its first in batches.
func clusterRows(results []*Result) [][]string {
	type runs struct{ fire, single, batch *Result }
	byNodes := map[int]*runs{}
	for _, r := range results {
		if r.System != "toc" || !strings.Contains(r.Variant, "cluster") {
			continue
		}
		g := byNodes[r.Nodes]
		if g == nil {
			g = new(runs)
			byNodes[r.Nodes] = g
		}
		switch {
		case r.Workload == WorkloadFire && g.fire == nil:
			g.fire = r
		case r.Workload == WorkloadSchedule && r.Batch == 1 && g.single == nil:
			g.single = r
		case r.Workload == WorkloadSchedule && r.Batch > 1 && g.batch == nil:
			g.batch = r
		}
	}
	var rows [][]string
	for _, nodes := range slices.Sorted(maps.Keys(byNodes)) {
		g := byNodes[nodes]
		row := []string{itoa(nodes), "", "", "", "", "", "", "", "", "", ""}
		var missing, dup int
		for _, r := range []*Result{g.fire, g.single, g.batch} {
			if r != nil {
				missing += r.Missing
				dup += r.Duplicates
			}
		}
		row[5], row[6] = itoa(missing), itoa(dup)
		if f := g.fire; f != nil {
			if f.SpreadSec != 0 {
				row[1] = floor(float64(f.N) / f.SpreadSec)
			}
			row[2], row[3], row[4] = num(f.LatenessMs.P50), num(f.LatenessMs.P99), num(f.LatenessMs.Max)
		}
		if s := g.single; s != nil {
			row[7], row[8] = floor(s.SchedulePerSec), num(s.LatenessMs.P99)
		}
		if s := g.batch; s != nil {
			row[9], row[10] = floor(s.SchedulePerSec), num(s.LatenessMs.P99)
		}
		rows = append(rows, row)
	}
	return rows
}

// writeRow writes one Markdown table row.
func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// joinSet joins the non-empty ones of parts with sep.
func joinSet(sep string, parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), sep)
}

func itoa(n int) string { return strconv.Itoa(n) }

// num is f in the fewest digits that read back as f, never in exponent
// form.
func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func floor(f float64) string { return num(math.Floor(f)) }

// floorNonZero is floor, or "" for 0 (a figure not measured).
func floorNonZero(f float64) string {
	if f == 0 {
		return ""
	}
	return floor(f)
}

// mibCell is b in MiB, to a tenth rounded down, or "" for 0.
func mibCell(b int64) string {
	if b == 0 {
		return ""
	}
	return num(math.Floor(float64(b)/(1<<20)*10) / 10)
}

// durationString is d as the flags take it, without zero units: "60s",
// "1m30s", "5m".
func durationString(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
