package report_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/bench/report"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/loadgen"
)

// suiteResults are results as `toc bench --json` and the peers print them,
// from the run that wrote bench/RESULTS.md with run.sh and jq; the
// cluster's variants as the suite rewrites them.
const suiteResults = `
{"system":"toc","variant":"push, embedded","workload":"fire","nodes":1,"n":50000,"batch":1000,"concurrency":16,"spread_sec":5,"fired":50000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":28827.6,"lateness_ms":{"min":0.149,"p50":2.005,"p90":64.767,"p99":146.164,"p999":199.078,"max":251.988},"rss_bytes":1,"disk_bytes":1,"notes":["embedded: the server runs in the bench process; rss_bytes is that process (server, bench clients and receiver)"]}
{"system":"toc","variant":"push, embedded","workload":"schedule","nodes":1,"n":20000,"batch":1,"concurrency":16,"fired":20000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":5665.3,"lateness_ms":{"min":69.691,"p50":929.539,"p90":1454.893,"p99":1576.678,"p999":1584.873,"max":1587.649},"rss_bytes":1,"disk_bytes":1}
{"system":"toc","variant":"server","workload":"pending","nodes":1,"n":1000000,"batch":1000,"concurrency":16,"fired":0,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":24996.2,"lateness_ms":{"min":0,"p50":0,"p90":0,"p99":0,"p999":0,"max":0},"rss_bytes":154800000,"disk_bytes":270500000,"rss_bytes_per_task":102.9,"disk_bytes_per_task":245.3,"fill_per_sec":19183.7,"notes":["1100000 jobs pending (1000000 + a probe of 100000); per-task figures are growth from before the fill"]}
{"system":"baseline","variant":"timers + HTTP push","workload":"fire","n":50000,"batch":1000,"concurrency":16,"spread_sec":5,"fired":50000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":725302,"lateness_ms":{"min":0.03,"p50":0.64,"p90":1.14,"p99":4.14,"p999":11.79,"max":13.83},"rss_bytes":0,"disk_bytes":0,"cost":{"window_sec":5.2,"fires":50000,"cpu_us_per_fire":{"total":61.2,"toc":61.2},"cpu_sec":{"total":3.06,"toc":3.06}}}
{"system":"baseline","variant":"HTTP + log fsync, group commit","workload":"schedule","n":20000,"batch":1,"concurrency":16,"fired":0,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":14427.9,"lateness_ms":{"min":0,"p50":0,"p90":0,"p99":0,"p999":0,"max":0},"rss_bytes":0,"disk_bytes":0}
{"system":"toc","variant":"push, cluster, 1 node","workload":"fire","nodes":1,"n":20000,"batch":1000,"concurrency":16,"spread_sec":5,"fired":20000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":12664.2,"lateness_ms":{"min":4.394,"p50":280.272,"p90":708.25,"p99":1303.319,"p999":1632.649,"max":1880.889},"rss_bytes":0,"disk_bytes":0,"cost":{"window_sec":6.1,"fires":20000,"cpu_us_per_fire":{"total":222.5,"toc":120,"sql":50.5,"redis":27,"load":25},"sql_xacts_per_fire":0.05,"redis_commands_per_fire":10.7,"cpu_sec":{"total":4.45,"toc":2.4,"sql":1.01,"redis":0.54,"load":0.5},"sql_xacts":1000,"redis_commands":214000}}
{"system":"toc","variant":"push, cluster, 3 nodes","workload":"fire","nodes":3,"n":20000,"batch":1000,"concurrency":16,"spread_sec":5,"fired":20000,"missing":0,"duplicates":1,"early":0,"schedule_per_sec":9000.5,"lateness_ms":{"min":5,"p50":900,"p90":3000,"p99":4200.5,"p999":4300,"max":4400},"rss_bytes":0,"disk_bytes":0,"cost":{"window_sec":7,"fires":20000,"cpu_us_per_fire":{"total":240,"toc":160,"sql":50,"redis":30},"sql_xacts_per_fire":0.04,"redis_commands_per_fire":11,"cpu_sec":{"total":4.8,"toc":3.2,"sql":1,"redis":0.6}}}
{"system":"toc","variant":"push, cluster, 1 node","workload":"schedule","nodes":1,"n":5000,"batch":1,"concurrency":16,"fired":5000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":1140.9,"lateness_ms":{"min":49.314,"p50":1013.732,"p90":1584.042,"p99":1782.19,"p999":1796.098,"max":1796.215},"rss_bytes":0,"disk_bytes":0}
{"system":"toc","variant":"push, cluster, 1 node","workload":"schedule","nodes":1,"n":10000,"batch":1000,"concurrency":16,"fired":10000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":10208.1,"lateness_ms":{"min":79.3,"p50":1699.784,"p90":2829.043,"p99":3119.561,"p999":3128.933,"max":3143.854},"rss_bytes":0,"disk_bytes":0}
{"system":"toc","variant":"cluster, 1 node","workload":"pending","nodes":1,"n":100000,"batch":1000,"concurrency":16,"fired":0,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":18766.9,"lateness_ms":{"min":0,"p50":0,"p90":0,"p99":0,"p999":0,"max":0},"rss_bytes":126800000,"disk_bytes":0,"rss_bytes_per_task":732.4,"fill_per_sec":15799.1,"redis_bytes":145304,"redis_bytes_per_task":1.2978,"redis_prefix_bytes":0,"sql_bytes":64850000,"sql_bytes_per_task":589.5}
{"system":"toc","variant":"push, cluster, 3 nodes","workload":"schedule","nodes":3,"n":5000,"batch":1,"concurrency":16,"fired":5000,"missing":2,"duplicates":3,"early":0,"schedule_per_sec":941.2,"lateness_ms":{"min":214.771,"p50":1665.959,"p90":2517.758,"p99":2731.447,"p999":2739.791,"max":2739.895},"rss_bytes":0,"disk_bytes":0}
{"system":"asynq","variant":"tight poll (DelayedTaskCheckInterval=1ms, TaskCheckInterval=1ms)","workload":"fire","n":50000,"batch":1000,"concurrency":16,"spread_sec":5,"fired":50000,"missing":0,"duplicates":0,"early":7696,"schedule_per_sec":25551.9,"lateness_ms":{"min":-977.506,"p50":1008.147,"p90":2197.27,"p99":2723.641,"p999":2910.006,"max":3015.186},"rss_bytes":0,"disk_bytes":0,"notes":["asynq has no batch enqueue: a batch is that many Enqueue calls in a row"]}
`

func suiteReport(t *testing.T) *report.Report {
	t.Helper()
	rep := &report.Report{
		Command: "bash bench/run.sh",
		Written: time.Date(2026, 11, 23, 18, 31, 5, 0, time.UTC),
		Took:    336*time.Second + 700*time.Millisecond,
		Machine: report.Machine{
			CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 24_641_544 << 10, OS: "Linux 6.18.44-fc-v769", Go: "go1.26.8", Toc: "37e4c54",
			Asynq: "v0.26.0", Redis: "7.0.15", RedisAppendOnly: "no",
			River: "v0.51.1", RiverPGXv5: "v0.51.1", PGX: "v5.12.0", Postgres: "15.20 (Debian 15.20-0+deb12u1)",
			LoadBefore: "1.45 4.07 4.27", LoadAfter: "3.08 4.11 4.23",
		},
		ClusterNodes:   []int{1, 2, 3},
		ClusterMaxWait: time.Minute,
		Skipped:        []string{"skipped river: PostgreSQL on 127.0.0.1:5432 did not answer"},
		NodeNotes:      []string{"c1-fire: when the nodes stopped, 0 members were left in Redis store queues and 129 in prepare queues"},
		Commands: []string{
			"toc bench --embedded --workload fire --n 50000 --spread 5s",
			"(cd bench/peers && go run . --system asynq --poll tight --redis-db 13 --workload fire --n 50000 --spread 5s)",
		},
	}
	for line := range strings.Lines(strings.TrimSpace(suiteResults)) {
		r := new(loadgen.Result)
		if err := json.Unmarshal([]byte(line), r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.System == "toc" {
			r.Targets = report.TocTargets(r)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

// TestWriteMarkdown holds the suite's Markdown to the rows run.sh's jq
// wrote from the same results (copied from bench/RESULTS.md), and to its
// sections in order.
func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := report.WriteMarkdown(&b, suiteReport(t)); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	lines := strings.Split(got, "\n")

	// Key rows, each exactly as run.sh wrote it.
	for _, want := range []string{
		"Written by `bash bench/run.sh` (the bench module's command) on 2026-11-23 18:31 UTC in 336s;",
		"| CPUs (`nproc`) | 2 (AMD EPYC) |",
		"| memory | 23.5 GiB |",
		"| OS | Linux 6.18.44-fc-v769 |",
		"| toc | 37e4c54 |",
		"| asynq | v0.26.0, Redis 7.0.15 (appendonly no) |",
		"| river | v0.51.1, riverpgxv5 v0.51.1, pgx v5.12.0, PostgreSQL 15.20 (Debian 15.20-0+deb12u1) |",
		"| toc cluster | nodes with `toc serve`'s defaults (4 SQL tables, 64 slots, a 10 min hot window) over PostgreSQL 15.20 (Debian 15.20-0+deb12u1) and Redis 7.0.15, all on this machine |",
		"| load average (1, 5, 15 min) | before 1.45 4.07 4.27, after 3.08 4.11 4.23 |",
		"- lateness p99 <= 5 ms at 10000 fires/s: **missed** (146.16 ms; fire, push, embedded)",
		"- lateness max <= 50 ms at 10000 fires/s: **missed** (251.99 ms; fire, push, embedded)",
		"- schedule >= 40000 tasks/s single from 16 clients: **missed** (5665/s; schedule, push, embedded)",
		"- rss <= 200 B per pending task: **met** (103 B; pending, server)",
		"- rss <= 200 B per pending task: **missed** (732 B; pending, cluster, 1 node)",
		"| toc | push, embedded | fire | 50000 | 5 | 1000 | 16 | 50000 | 0 | 0 | 0 | 28827 |  |  | 2.005 | 64.767 | 146.164 | 199.078 | 251.988 | 0.149 |",
		"| toc | push, embedded | schedule | 20000 |  | 1 | 16 | 20000 | 0 | 0 | 0 | 5665 |  |  | 929.539 | 1454.893 | 1576.678 | 1584.873 | 1587.649 | 69.691 |",
		"| toc | push, cluster, 1 node | fire | 20000 | 5 | 1000 | 16 | 20000 | 0 | 0 | 0 | 12664 |  | 120 | 280.272 | 708.25 | 1303.319 | 1632.649 | 1880.889 | 4.394 |",
		"| asynq | tight poll (DelayedTaskCheckInterval=1ms, TaskCheckInterval=1ms) | fire | 50000 | 5 | 1000 | 16 | 50000 | 0 | 0 | 7696 | 25551 |  |  | 1008.147 | 2197.27 | 2723.641 | 2910.006 | 3015.186 | -977.506 |",
		"toc's cluster mode: 3 node counts (1 2 3), every run on a fresh cluster (a new",
		"not delivered within the wait (--max-wait 1m after the last",
		"| 1 | 4000 | 280.272 | 1303.319 | 1880.889 | 0 | 0 | 1140 | 1782.19 | 10208 | 3119.561 | 222.5 | 120 | 50.5 | 27 | 25 | 0.05 | 10.7 |",
		// 3 nodes: no batch run; the fire and single runs' missing and dup.
		"| 3 | 4000 | 900 | 4200.5 | 4400 | 2 | 4 | 941 | 2731.447 |  |  | 240 | 160 | 50 | 30 |  | 0.04 | 11 |",
		// The baselines beside toc's runs of the same size, and the
		// targets that set runs side by side.
		"| baseline | timers + HTTP push | fire | 50000 | 5 | 1000 | 16 | 50000 | 0 | 0 | 0 | 725302 |  | 61.2 | 0.64 | 1.14 | 4.14 | 11.79 | 13.83 | 0.03 |",
		"| fire | push, embedded | 50000 | 1000 | 16 | p99 ms | 4.14 | 146.164 | 35.31 |",
		"| fire | push, embedded | 50000 | 1000 | 16 | max ms | 13.83 | 251.988 | 18.22 |",
		"| schedule | push, embedded | 20000 | 1 | 16 | tasks/s | 14427 | 5665 | 0.39 |",
		"- #13: push fire p99 <= 20 ms at 10000 fires/s: **missed** (146.16 ms; fire, push, embedded)",
		"- #13: schedule >= 20000 tasks/s single from 16 clients: **missed** (5665/s; schedule, push, embedded)",
		"- #13 goal: fire p99 <= 3x the baseline's at 10000 fires/s: **missed** (146.16 ms, 35.3x the baseline's 4.14 ms; fire, push, embedded)",
		"- #12: SQL transactions per fire <= 0.05, one node: **met** (0.05 at 4000 fires/s; fire, push, cluster, 1 node)",
		"- #12: Redis commands per fire <= 0.5, one node: **missed** (10.7 at 4000 fires/s; fire, push, cluster, 1 node)",
		// The load generator's 25 µs count in the table's total, not in
		// #12's figure of the servers.
		"- #12: CPU per fire <= 100 µs (node, PostgreSQL and Redis), one node: **missed** (197.5 µs at 4000 fires/s; fire, push, cluster, 1 node)",
		"- #12: three nodes' fire p99 <= 2x one node's: **missed** (4200.50 ms, 3.22x one node's 1303.32 ms; fire, cluster, 3 nodes against 1)",
		"- #12: three nodes' CPU per fire <= 1.3x one node's: **met** (240 µs, 1.08x one node's 222.5 µs; fire, cluster, 3 nodes against 1)",
		"| toc | server | 1000000 | 147.6 | 102 | 257.9 | 245 |  |  |  |  |  | 19183 | 24996 |",
		"| toc | cluster, 1 node | 100000 | 120.9 | 732 |  |  | 61.8 | 589 | 145304 | 1.3 | 0 | 15799 | 18766 |",
		"- toc fire push, embedded n=50000 batch 1000: embedded: the server runs in the bench process; rss_bytes is that process (server, bench clients and receiver)",
		"- toc pending server n=1000000 batch 1000: 1100000 jobs pending (1000000 + a probe of 100000); per-task figures are growth from before the fill",
		"- asynq fire tight poll (DelayedTaskCheckInterval=1ms, TaskCheckInterval=1ms) n=50000 batch 1000: asynq has no batch enqueue: a batch is that many Enqueue calls in a row",
		"- skipped river: PostgreSQL on 127.0.0.1:5432 did not answer",
		"- cluster: c1-fire: when the nodes stopped, 0 members were left in Redis store queues and 129 in prepare queues",
		"toc bench --embedded --workload fire --n 50000 --spread 5s",
		"(cd bench/peers && go run . --system asynq --poll tight --redis-db 13 --workload fire --n 50000 --spread 5s)",
	} {
		found := false
		for _, l := range lines {
			if l == want {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no line\n%s\nin\n%s", want, got)
		}
	}

	// The sections and tables in order, as in bench/RESULTS.md.
	var heads []string
	for _, l := range lines {
		if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "|--") || strings.HasPrefix(l, "|---") || l == "```sh" {
			heads = append(heads, l)
		}
	}
	want := []string{
		"# Benchmark results",
		"## Machine",
		"|---|---|",
		"## Targets",
		"## Fire and schedule",
		"|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
		"## Baseline",
		"|---|---|--:|--:|--:|---|--:|--:|--:|",
		"## Cost against the machine",
		"|---|---|--:|--:|--:|--:|--:|--:|--:|",
		"## Cluster",
		"|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
		"## Pending",
		"|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
		"## Notes",
		"## Commands",
		"```sh",
	}
	if diff := cmp.Diff(want, heads); diff != "" {
		t.Errorf("sections (-want +got):\n%s", diff)
	}
	// Rows per table: fire and schedule (all but pending), baseline (the
	// embedded fire's p99 and max, and the single schedule's rate), cluster
	// (node counts with runs), pending.
	if n := countRows(got, "## Fire and schedule"); n != 10 {
		t.Errorf("fire and schedule table: %d rows, want 10", n)
	}
	if n := countRows(got, "## Baseline"); n != 3 {
		t.Errorf("baseline table: %d rows, want 3", n)
	}
	if n := countRows(got, "## Cluster"); n != 2 {
		t.Errorf("cluster table: %d rows, want 2", n)
	}
	if n := countRows(got, "## Pending"); n != 2 {
		t.Errorf("pending table: %d rows, want 2", n)
	}
	if !strings.HasSuffix(got, "```\n") {
		t.Errorf("does not end with the commands' closing fence:\n%s", got)
	}
}

// countRows counts the rows of the table under heading, its header and
// separator excluded.
func countRows(doc, heading string) int {
	_, rest, _ := strings.Cut(doc, heading+"\n")
	n := 0
	in := false
	for l := range strings.Lines(rest) {
		switch {
		case strings.HasPrefix(l, "|"):
			in = true
			n++
		case in:
			return n - 2
		}
	}
	return n - 2
}

// TestWriteMarkdownEmpty: a suite with no results still writes every
// section, with empty tables.
func TestWriteMarkdownEmpty(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := report.WriteMarkdown(&b, &report.Report{Command: "bash bench/run.sh"}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"| asynq | , Redis ? (appendonly ?) |", "toc's cluster mode: 0 node counts ()", "## Commands\n\n```sh\n```\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	for _, h := range []string{"## Fire and schedule", "## Baseline", "## Cluster", "## Pending"} {
		if n := countRows(got, h); n != 0 {
			t.Errorf("%s: %d rows, want 0", h, n)
		}
	}
}

// TestWriteMarkdownTwoApp: a twoapp run gets a section of its own with the
// quiet app's figures; a suite without one has no such section.
func TestWriteMarkdownTwoApp(t *testing.T) {
	t.Parallel()
	const line = `{"system":"toc","variant":"push, embedded","workload":"twoapp","nodes":1,"n":50000,"batch":1000,"concurrency":16,"fired":50000,"missing":0,"duplicates":0,"early":0,"schedule_per_sec":20000,"lateness_ms":{"min":60,"p50":3700,"p90":5600,"p99":6055,"p999":6120,"max":6125},"drain_per_sec":8163,"quiet":{"n":501,"fired":501,"missing":0,"lateness_ms":{"min":0.2,"p50":30.5,"p90":94.6,"p99":135.8,"p999":171.3,"max":171.3},"during_drain_n":501,"during_drain_lateness_ms":{"min":0.2,"p50":30.5,"p90":94.6,"p99":135.8,"p999":171.3,"max":171.3}},"cpu_pressure":0.99,"rss_bytes":0,"disk_bytes":0}`
	r := new(loadgen.Result)
	if err := json.Unmarshal([]byte(line), r); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := report.WriteMarkdown(&b, &report.Report{Command: "bash bench/run.sh", Results: []*loadgen.Result{r}}); err != nil {
		t.Fatal(err)
	}
	want := "| push, embedded | 50000 | 8163 | 6125 | 501 | 0 | 30.5 | 135.8 | 171.3 | 501 | 135.8 | 99% |"
	if got := b.String(); !strings.Contains(got, "## Two apps") || !strings.Contains(got, want) {
		t.Errorf("lacks the two apps' section or its row %q:\n%s", want, got)
	}
	b.Reset()
	if err := report.WriteMarkdown(&b, &report.Report{Command: "bash bench/run.sh"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "## Two apps") {
		t.Error("a suite without a twoapp run has a two apps' section")
	}
}
