package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/internal/loadgen"
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

// The targets of issue #13 (embedded mode at the physical limit) and #12
// (cluster mode), as the benchmark marks them. Fire targets apply from
// TargetFireRate on, to push deliveries; cost targets to one node of a
// cluster at any rate (the issue's are at TargetFireRate: the line says the
// rate); the ratios to a baseline or to one node to runs of one suite.
const (
	Target13FireP99Ms     = 20.0
	Target13FireMaxMs     = 100.0
	Target13SinglePerSec  = 20_000 // one per request, 16 clients
	Target13BatchPerSec   = 150_000
	Target13BaselineRatio = 3.0 // the goal: fire p99 within 3x the baseline's
	Target13PullRate      = 50_000
	Target13PullP99Ms     = 50.0 // pull consumers, at Target13PullRate
	Target13BurstN        = 100_000
	Target13BurstPush     = 50_000  // a burst of Target13BurstN drained per second, by push
	Target13BurstPull     = 150_000 // the same, by pull consumers claiming 1000 at a time

	Target12SQLXactsPerFire   = 0.05
	Target12RedisCmdsPerFire  = 0.5
	Target12CPUUsPerFire      = 100.0 // node, PostgreSQL and Redis together
	Target12NodesP99Ratio     = 2.0   // three nodes' fire p99 over one node's
	Target12NodesCPURatio     = 1.3   // three nodes' CPU per fire over one node's
	Target12FireP99Ms         = 50.0  // one node, at TargetFireRate
	Target12FireMaxMs         = 250.0 // one node, at TargetFireRate
	Target12SinglePerSec      = 10_000
	Target12BatchPerSec       = 60_000
	Target12RedisBytesPerTask = 1.0 // far-future pending tasks: Redis does not grow with them
)

// TocTargets returns the targets that apply to r, a run against toc, each
// marked met or not. Fire targets apply from TargetFireRate on.
func TocTargets(r *loadgen.Result) []loadgen.Check {
	var cs []loadgen.Check
	add := func(name string, met bool, format string, args ...any) {
		cs = append(cs, loadgen.Check{Name: name, Met: met, Got: fmt.Sprintf(format, args...)})
	}
	switch r.Workload {
	case loadgen.WorkloadFire:
		pull := strings.HasPrefix(r.Variant, loadgen.DeliveryPull)
		rate := 0.0 // fires/s; 0 for a burst
		if r.SpreadSec > 0 {
			rate = float64(r.N) / r.SpreadSec
		}
		switch {
		case rate == 0 && r.N >= Target13BurstN && pull:
			add(fmt.Sprintf("#13: a burst of %d drained >= %d/s by pull consumers", r.N, Target13BurstPull), r.DrainPerSec >= Target13BurstPull && r.Missing == 0, "%.0f/s", r.DrainPerSec)
		case rate == 0 && r.N >= Target13BurstN:
			add(fmt.Sprintf("#13: a burst of %d drained >= %d/s by push", r.N, Target13BurstPush), r.DrainPerSec >= Target13BurstPush && r.Missing == 0, "%.0f/s", r.DrainPerSec)
		case pull && rate >= Target13PullRate*0.99:
			add(fmt.Sprintf("#13: pull fire p99 <= %g ms at %d fires/s", Target13PullP99Ms, Target13PullRate), r.LatenessMs.P99 <= Target13PullP99Ms && r.Missing == 0, "%.2f ms", r.LatenessMs.P99)
		}
		// The first targets are at TargetFireRate: a pull run at #13's
		// rate has its own.
		if rate >= TargetFireRate*0.99 && (!pull || rate < Target13PullRate*0.99) {
			l := r.LatenessMs
			add(fmt.Sprintf("lateness p99 <= %g ms at %d fires/s", TargetLatenessP99Ms, TargetFireRate), l.P99 <= TargetLatenessP99Ms && r.Missing == 0, "%.2f ms", l.P99)
			add(fmt.Sprintf("lateness max <= %g ms at %d fires/s", TargetLatenessMaxMs, TargetFireRate), l.Max <= TargetLatenessMaxMs && r.Missing == 0, "%.2f ms", l.Max)
		}
		if rate >= TargetFireRate*0.99 && !pull {
			l := r.LatenessMs
			add(fmt.Sprintf("#13: push fire p99 <= %g ms at %d fires/s", Target13FireP99Ms, TargetFireRate), l.P99 <= Target13FireP99Ms && r.Missing == 0, "%.2f ms", l.P99)
			add(fmt.Sprintf("#13: push fire max <= %g ms at %d fires/s", Target13FireMaxMs, TargetFireRate), l.Max <= Target13FireMaxMs && r.Missing == 0, "%.2f ms", l.Max)
		}
		cs = append(cs, costTargets(r)...)
	case loadgen.WorkloadSchedule:
		switch {
		case r.Batch >= 1000:
			add(fmt.Sprintf("schedule >= %d tasks/s in batches of 1000", TargetBatchPerSec), r.SchedulePerSec >= TargetBatchPerSec, "%.0f/s", r.SchedulePerSec)
			add(fmt.Sprintf("#13: schedule >= %d tasks/s in batches of 1000", Target13BatchPerSec), r.SchedulePerSec >= Target13BatchPerSec, "%.0f/s", r.SchedulePerSec)
		case r.Batch == 1 && r.Concurrency == 16:
			add(fmt.Sprintf("schedule >= %d tasks/s single from 16 clients", TargetSinglePerSec), r.SchedulePerSec >= TargetSinglePerSec, "%.0f/s", r.SchedulePerSec)
			add(fmt.Sprintf("#13: schedule >= %d tasks/s single from 16 clients", Target13SinglePerSec), r.SchedulePerSec >= Target13SinglePerSec, "%.0f/s", r.SchedulePerSec)
		}
	case loadgen.WorkloadPending:
		if r.RSSBytes > 0 {
			add(fmt.Sprintf("rss <= %g B per pending task", TargetRSSPerTask), r.RSSPerTask <= TargetRSSPerTask, "%.0f B", r.RSSPerTask)
		}
	}
	return cs
}

// costTargets are #12's cost targets for a fire run on one node of a
// cluster (one whose SQL or Redis was measured), each that was measured.
func costTargets(r *loadgen.Result) []loadgen.Check {
	c := r.Cost
	if c == nil || r.Nodes != 1 || (c.SQLXactsPerFire == nil && c.RedisCommandsPerFire == nil) {
		return nil
	}
	at := ""
	if r.SpreadSec > 0 {
		at = fmt.Sprintf(" at %.0f fires/s", float64(r.N)/r.SpreadSec)
	}
	var cs []loadgen.Check
	if v := c.SQLXactsPerFire; v != nil {
		cs = append(cs, loadgen.Check{Name: fmt.Sprintf("#12: SQL transactions per fire <= %g, one node", Target12SQLXactsPerFire),
			Met: *v <= Target12SQLXactsPerFire, Got: fmt.Sprintf("%s%s", num(*v), at)})
	}
	if v := c.RedisCommandsPerFire; v != nil {
		cs = append(cs, loadgen.Check{Name: fmt.Sprintf("#12: Redis commands per fire <= %g, one node", Target12RedisCmdsPerFire),
			Met: *v <= Target12RedisCmdsPerFire, Got: fmt.Sprintf("%s%s", num(*v), at)})
	}
	if u := c.CPUUsPerFire; u.Toc != nil && u.SQL != nil && u.Redis != nil {
		cs = append(cs, loadgen.Check{Name: fmt.Sprintf("#12: CPU per fire <= %g µs (node, PostgreSQL and Redis), one node", Target12CPUUsPerFire),
			Met: u.Servers() <= Target12CPUUsPerFire, Got: fmt.Sprintf("%s µs%s", num(u.Servers()), at)})
	}
	return cs
}

// Report is the outcome of a run of the whole suite (bench/suite), as
// [WriteMarkdown] writes it to bench/RESULTS.md.
type Report struct {
	// Command is the command that wrote the file, like "bash bench/run.sh
	// --peers=false".
	Command string
	// Written is when the suite ended; Took how long it ran.
	Written time.Time
	Took    time.Duration
	Machine Machine
	// Results are the runs, in the order they ran. The cluster's have a
	// variant that contains "cluster".
	Results []*loadgen.Result
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

Written by `+"`%s`"+` (the bench module's command) on %s in %ds;
run it again to regenerate this file. What the workloads do: `+"`toc help bench`"+`
(the load generator, `+"`internal/loadgen`"+`) and `+"`bash bench/run.sh baseline -h`"+`
(the baselines, `+"`bench/baseline`"+`). Go micro-benchmarks of the create path:
`+"`go test -run - -bench Create ./internal/loadgen/`"+`.

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
	for _, t := range append(suiteTargets(rep.Results), issue25Targets(rep.Results)...) {
		met := "missed"
		if t.Met {
			met = "met"
		}
		fmt.Fprintf(b, "- %s: **%s** (%s; %s)\n", t.Name, met, t.Got, t.of)
	}
	b.WriteString(`
## Fire and schedule

Lateness is the first delivery of each task minus its due time, in ms
(negative: early). fire: tasks due at instants spread evenly over the spread.
schedule: tasks/s accepted (the server answered), one per request or in
batches, then all fire at one instant and are counted, so lateness there is
how fast a burst drains. When scheduling outlasts the hold, sched/s counts
only the tasks accepted before the first was due (see the notes). A fire run
with no spread is a burst: all its tasks are due at one instant. drain/s,
for the runs whose tasks were all due at one instant, is the tasks fired
per second from that instant to the last first delivery (fired over max).
CPU µs/task is what each task cost the toc processes (for embedded runs the
bench process: server, bench clients and receiver): per fire for fire runs,
per create over the scheduling window for schedule runs.

| system | variant | workload | n | spread s | batch | clients | fired | missing | dup | early | sched/s | drain/s | CPU µs/task | p50 | p90 | p99 | p99.9 | max | min |
|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`)
	for _, r := range rep.Results {
		if r.Workload == loadgen.WorkloadPending || r.Workload == loadgen.WorkloadTwoApp { // sections of their own
			continue
		}
		spread := ""
		if r.SpreadSec != 0 {
			spread = num(r.SpreadSec)
		}
		l := r.LatenessMs
		writeRow(b, []string{r.System, r.Variant, r.Workload, itoa(r.N), spread, itoa(r.Batch), itoa(r.Concurrency),
			itoa(r.Fired), itoa(r.Missing), itoa(r.Duplicates), itoa(r.Early), floor(r.SchedulePerSec),
			floorNonZero(r.DrainPerSec), tocCPUPerTask(r),
			num(l.P50), num(l.P90), num(l.P99), num(l.P999), num(l.Max), num(l.Min)})
	}
	writeTwoApp(b, rep.Results)
	b.WriteString(`
## Baseline

The physical limit of this machine, measured in the same run (issue #13):
` + "`bash bench/run.sh baseline`" + ` runs the same workload with no toc. fire: a Go runtime
timer per task (time.AfterFunc) POSTs what toc's webhook sink sends to the
same kind of receiver at the task's due time. schedule: the same create
requests, answered by a handler that appends each body to a log file and
answers once an fsync has covered it, one fsync for all the requests that
came while the previous one ran (group commit). The baseline rows are in the
table above too; here each toc run is set beside the baseline of the same
size (n, batch, clients, spread), and the ratio is toc's figure over the
baseline's. The schedule baseline delivers nothing: its rows above show 0
fired.

| workload | toc variant | n | batch | clients | figure | baseline | toc | toc / baseline |
|---|---|--:|--:|--:|---|--:|--:|--:|
`)
	for _, row := range baselineRows(rep.Results) {
		writeRow(b, row)
	}
	b.WriteString(`
## Cost against the machine

Issue #25's baselines, all without toc, in the same run: the *push ceiling*
(` + "`bash bench/run.sh baseline --workload ceiling`" + `: 64 senders POSTing a 64-byte
payload back to back to the receiver for 3 s); *timers + HTTP* at R = min(10 000/s,
half the ceiling), at most 512 POSTs in flight (the suite's push fire runs at
R); *create* (a server that decodes each create, appends a record per task to
a file and answers after a group-committed fdatasync); *pull* (` + "`baseline --pull`" + `:
a claim server holding the due tasks in memory, answering claims of 1000 in
toc's form and batch acks after a group-committed fdatasync of the acked ids,
4 consumers). Each row sets a toc figure beside its baseline's, then the CPU
µs per operation (per fire, per create) of the measured processes (for
embedded toc and the baselines the bench process: server or baseline,
clients, receiver) and of the whole machine (every process, /proc/stat: on a
busy machine it measures the window more than the work).

| run | figure | toc | baseline | toc / baseline | CPU µs/op toc | CPU µs/op baseline | machine µs/op toc | machine µs/op baseline |
|---|---|--:|--:|--:|--:|--:|--:|--:|
`)
	for _, row := range costRows(rep.Results) {
		writeRow(b, row)
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

The last seven columns are what each fire cost (issue #12), over the firing
window (from just before the first task fell due to a second after the last
delivery), per task fired: the CPU time (user + system, from
/proc/PID/stat at 100 ticks/s) of the nodes, of every PostgreSQL process
(the postmaster and all its children), of the redis-server and of the load
generator (its clients and the receiver, which an embedded run's figure
counts too), in µs, and their sum; the
transactions of the cluster's database (pg_stat_database's xact_commit +
xact_rollback, read 11 s after the last delivery, once PostgreSQL has
flushed its backends' statistics, so the nodes' idle transactions of those
seconds count too: a few a second); and the Redis commands (INFO
commandstats, commands run by Lua scripts included, the benchmark's own
INFO calls left out). PostgreSQL and Redis are measured whole: the work of
their other clients counts too.

| nodes | fire/s | fire p50 | fire p99 | fire max | missing | dup | single sched/s | single drain p99 | batch sched/s | batch drain p99 | CPU µs/fire | toc | postgres | redis | load gen | SQL xacts/fire | Redis cmds/fire |
|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`, len(rep.ClusterNodes), strings.Join(nodes, " "), DurationString(rep.ClusterMaxWait))
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
		if r.Workload != loadgen.WorkloadPending {
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

// tocCPUPerTask is the toc processes' CPU µs per fire (fire runs) or per
// create (schedule runs), or "" when not measured.
func tocCPUPerTask(r *loadgen.Result) string {
	c := r.Cost
	if r.Workload == loadgen.WorkloadSchedule {
		c = r.CreateCost
	}
	if c == nil || c.CPUUsPerFire.Toc == nil {
		return ""
	}
	return num(*c.CPUUsPerFire.Toc)
}

// clusterRuns are a node count's runs in the cluster table.
type clusterRuns struct{ fire, single, batch *loadgen.Result }

// clusterGroups groups the cluster's runs by node count: the first fire
// run, the first schedule run of one task per request and the first in
// batches of each.
func clusterGroups(results []*loadgen.Result) map[int]*clusterRuns {
	byNodes := map[int]*clusterRuns{}
	for _, r := range results {
		if r.System != "toc" || !strings.Contains(r.Variant, "cluster") {
			continue
		}
		g := byNodes[r.Nodes]
		if g == nil {
			g = new(clusterRuns)
			byNodes[r.Nodes] = g
		}
		switch {
		case r.Workload == loadgen.WorkloadFire && g.fire == nil:
			g.fire = r
		case r.Workload == loadgen.WorkloadSchedule && r.Batch == 1 && g.single == nil:
			g.single = r
		case r.Workload == loadgen.WorkloadSchedule && r.Batch > 1 && g.batch == nil:
			g.batch = r
		}
	}
	return byNodes
}

// clusterRows are the rows of the cluster table: one per node count, in
// increasing order.
func clusterRows(results []*loadgen.Result) [][]string {
	byNodes := clusterGroups(results)
	var rows [][]string
	for _, nodes := range slices.Sorted(maps.Keys(byNodes)) {
		g := byNodes[nodes]
		row := make([]string, 18)
		row[0] = itoa(nodes)
		var missing, dup int
		for _, r := range []*loadgen.Result{g.fire, g.single, g.batch} {
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
			if c := f.Cost; c != nil && c.Fires > 0 {
				row[11] = num(c.CPUUsPerFire.Total)
				row[12], row[13], row[14] = numPtr(c.CPUUsPerFire.Toc), numPtr(c.CPUUsPerFire.SQL), numPtr(c.CPUUsPerFire.Redis)
				row[15], row[16], row[17] = numPtr(c.CPUUsPerFire.Load), numPtr(c.SQLXactsPerFire), numPtr(c.RedisCommandsPerFire)
			}
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

// baselineOf returns the first baseline run of results that r, a toc run,
// is set beside: the same workload, delivery (push or pull), n, batch,
// clients and spread. Nil when there is none.
func baselineOf(results []*loadgen.Result, r *loadgen.Result) *loadgen.Result {
	if r.System != "toc" || (r.Workload != loadgen.WorkloadFire && r.Workload != loadgen.WorkloadSchedule) {
		return nil
	}
	for _, b := range results {
		if b.System == baseline.SystemBaseline && b.Workload == r.Workload && isPull(b) == isPull(r) && b.N == r.N && b.Batch == r.Batch &&
			b.Concurrency == r.Concurrency && b.SpreadSec == r.SpreadSec {
			return b
		}
	}
	return nil
}

// baselineRows are the rows of the baseline table: for each toc run with a
// baseline, its fire p99 and max, or its schedule rate, beside the
// baseline's.
func baselineRows(results []*loadgen.Result) [][]string {
	var rows [][]string
	for _, r := range results {
		base := baselineOf(results, r)
		if base == nil {
			continue
		}
		add := func(figure string, b, t float64) {
			ratio := ""
			if b > 0 {
				ratio = num(round(t/b, 2))
			}
			rows = append(rows, []string{r.Workload, r.Variant, itoa(r.N), itoa(r.Batch), itoa(r.Concurrency), figure, num(round(b, 3)), num(round(t, 3)), ratio})
		}
		switch {
		case r.Workload == loadgen.WorkloadFire && r.SpreadSec == 0:
			add("drained/s", base.DrainPerSec, r.DrainPerSec)
			add("max ms", base.LatenessMs.Max, r.LatenessMs.Max)
		case r.Workload == loadgen.WorkloadFire:
			add("p99 ms", base.LatenessMs.P99, r.LatenessMs.P99)
			add("max ms", base.LatenessMs.Max, r.LatenessMs.Max)
		default:
			add("tasks/s", math.Floor(base.SchedulePerSec), math.Floor(r.SchedulePerSec))
		}
	}
	return rows
}

// suiteTarget is a target that sets runs of one suite side by side; of
// says which.
type suiteTarget struct {
	loadgen.Check
	of string
}

// suiteTargets are the targets of runs side by side: #13's goal, a toc
// push fire's p99 within Target13BaselineRatio times the baseline's; and
// #12's, three nodes' fire p99 and CPU per fire against one node's.
func suiteTargets(results []*loadgen.Result) []suiteTarget {
	var ts []suiteTarget
	for _, r := range results {
		base := baselineOf(results, r)
		if base == nil || r.Workload != loadgen.WorkloadFire || r.SpreadSec == 0 {
			continue
		}
		ratio := math.Inf(1)
		if base.LatenessMs.P99 > 0 {
			ratio = r.LatenessMs.P99 / base.LatenessMs.P99
		}
		at := ""
		if r.SpreadSec > 0 {
			at = fmt.Sprintf(" at %.0f fires/s", float64(r.N)/r.SpreadSec)
		}
		ts = append(ts, suiteTarget{
			Check: loadgen.Check{
				Name: fmt.Sprintf("#13 goal: fire p99 <= %gx the baseline's%s", Target13BaselineRatio, at),
				Met:  ratio <= Target13BaselineRatio && r.Missing == 0,
				Got:  fmt.Sprintf("%.2f ms, %.1fx the baseline's %.2f ms", r.LatenessMs.P99, ratio, base.LatenessMs.P99),
			},
			of: joinSet(", ", r.Workload, r.Variant),
		})
	}
	groups := clusterGroups(results)
	ts = append(ts, oneNodeTargets(groups[1], results)...)
	one, three := groups[1], groups[3]
	if one == nil || three == nil || one.fire == nil || three.fire == nil {
		return ts
	}
	of := "fire, cluster, 3 nodes against 1"
	p1, p3 := one.fire.LatenessMs.P99, three.fire.LatenessMs.P99
	ts = append(ts, suiteTarget{Check: loadgen.Check{
		Name: fmt.Sprintf("#12: three nodes' fire p99 <= %gx one node's", Target12NodesP99Ratio),
		Met:  p3 <= Target12NodesP99Ratio*p1 && three.fire.Missing == 0,
		Got:  fmt.Sprintf("%.2f ms, %sx one node's %.2f ms", p3, ratioString(p3, p1), p1),
	}, of: of})
	c1, c3 := one.fire.Cost, three.fire.Cost
	if c1 != nil && c3 != nil && c1.Fires > 0 && c3.Fires > 0 {
		u1, u3 := c1.CPUUsPerFire.Total, c3.CPUUsPerFire.Total
		ts = append(ts, suiteTarget{Check: loadgen.Check{
			Name: fmt.Sprintf("#12: three nodes' CPU per fire <= %gx one node's", Target12NodesCPURatio),
			Met:  u3 <= Target12NodesCPURatio*u1,
			Got:  fmt.Sprintf("%s µs, %sx one node's %s µs", num(u3), ratioString(u3, u1), num(u1)),
		}, of: of})
	}
	return ts
}

// oneNodeTargets are #12's targets for one cluster node: fire lateness at
// TargetFireRate (and never early), creates one per request and in
// batches, and no Redis growth with far-future pending tasks.
func oneNodeTargets(one *clusterRuns, results []*loadgen.Result) []suiteTarget {
	if one == nil {
		return nil
	}
	var ts []suiteTarget
	add := func(of, name string, met bool, format string, args ...any) {
		ts = append(ts, suiteTarget{Check: loadgen.Check{Name: name, Met: met, Got: fmt.Sprintf(format, args...)}, of: of})
	}
	if f := one.fire; f != nil && f.SpreadSec > 0 && float64(f.N)/f.SpreadSec >= TargetFireRate*0.99 {
		of := "fire, cluster, 1 node"
		l := f.LatenessMs
		add(of, fmt.Sprintf("#12: one node's fire p99 <= %g ms at %d fires/s", Target12FireP99Ms, TargetFireRate), l.P99 <= Target12FireP99Ms && f.Missing == 0, "%.2f ms", l.P99)
		add(of, fmt.Sprintf("#12: one node's fire max <= %g ms at %d fires/s, never early", Target12FireMaxMs, TargetFireRate), l.Max <= Target12FireMaxMs && f.Early == 0 && f.Missing == 0, "%.2f ms, %d early", l.Max, f.Early)
	}
	if r := one.single; r != nil && r.Concurrency == 16 {
		add("schedule, cluster, 1 node", fmt.Sprintf("#12: one node's creates >= %d/s one per request from 16 clients", Target12SinglePerSec), r.SchedulePerSec >= Target12SinglePerSec, "%.0f/s", r.SchedulePerSec)
	}
	if r := one.batch; r != nil && r.Batch >= 1000 {
		add("schedule, cluster, 1 node", fmt.Sprintf("#12: one node's creates >= %d/s in batches of 1000", Target12BatchPerSec), r.SchedulePerSec >= Target12BatchPerSec, "%.0f/s", r.SchedulePerSec)
	}
	for _, r := range results {
		if r.System == "toc" && r.Workload == loadgen.WorkloadPending && strings.Contains(r.Variant, "cluster") && r.RedisPrefixBytes != nil && r.N > 0 {
			per := float64(*r.RedisPrefixBytes) / float64(r.N)
			add("pending, cluster, 1 node", fmt.Sprintf("#12: Redis does not grow with far-future pending tasks (<= %g B each under the prefix)", Target12RedisBytesPerTask), per <= Target12RedisBytesPerTask, "%.2f B per task", per)
			break
		}
	}
	return ts
}

// ratioString is a/b to two places, or "?" when b is not positive.
func ratioString(a, b float64) string {
	if b <= 0 {
		return "?"
	}
	return num(round(a/b, 2))
}

func numPtr(f *float64) string {
	if f == nil {
		return ""
	}
	return num(*f)
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

// DurationString is d as the flags take it, without zero units: "60s",
// "1m30s", "5m".
func DurationString(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writeTwoApp writes the section of the twoapp runs, if any.
func writeTwoApp(b *strings.Builder, results []*loadgen.Result) {
	var rows [][]string
	for _, r := range results {
		q := r.Quiet
		if r.Workload != loadgen.WorkloadTwoApp || q == nil {
			continue
		}
		pressure := ""
		if r.CPUPressure != nil {
			pressure = fmt.Sprintf("%.0f%%", *r.CPUPressure*100)
		}
		l, d := q.LatenessMs, q.DuringDrainMs
		rows = append(rows, []string{r.Variant, itoa(r.N), floorNonZero(r.DrainPerSec), num(r.LatenessMs.Max),
			itoa(q.N), itoa(q.Missing), num(l.P50), num(l.P99), num(l.Max), itoa(q.DuringDrainN), num(d.P99), pressure})
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString(`
## Two apps

Fair dispatch (` + "`--workload twoapp`" + `): one app's burst of n tasks due at one
instant, and another app's tasks due every 10 ms from that instant for 5 s;
the quiet app's lateness, in ms, of all its tasks and of those due while the
burst drained (its last first delivery). CPU pressure is the share of the
run some task of the machine waited for a CPU (/proc/pressure/cpu "some"):
other work on the machine counts.

| variant | burst n | drain/s | burst max | quiet n | missing | quiet p50 | quiet p99 | quiet max | due in drain | their p99 | CPU pressure |
|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`)
	for _, row := range rows {
		writeRow(b, row)
	}
}

func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}
