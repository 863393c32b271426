package loadgen

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// Field 3 on: state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime vsize ...
	const rest = " S 2215 2215 2215 0 -1 4194560 812 0 0 0 1234 567 90 12 20 0 1 0 4242 229019648 3000"
	for _, tc := range []struct {
		name, stat string
		want       ProcStat
	}{
		{"postgres backend", "2301 (postgres)" + rest, ProcStat{PID: 2301, PPID: 2215, Comm: "postgres", Start: 4242, CPU: 1234 + 567}},
		{"comm with spaces and parentheses", "77 (a (b) c)" + rest, ProcStat{PID: 77, PPID: 2215, Comm: "a (b) c", Start: 4242, CPU: 1801}},
		{"newline at the end", "9 (redis-server)" + rest + "\n", ProcStat{PID: 9, PPID: 2215, Comm: "redis-server", Start: 4242, CPU: 1801}},
	} {
		got, err := ParseStat([]byte(tc.stat))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	for _, bad := range []string{"", "12 postgres S 1", "x (y)" + rest, "12 (y) S 1 2 3", "12 (y)" + strings.Replace(rest, "1234", "12x4", 1)} {
		if got, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) = %+v, want an error", bad, got)
		}
	}
	// This process, for real.
	self, err := ReadProcStat(os.Getpid())
	if err != nil || self.PID != os.Getpid() || self.PPID != os.Getppid() || self.Start <= 0 {
		t.Errorf("ReadProcStat(self) = %+v, %v", self, err)
	}
}

func TestParseUptime(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"350.27 601.12\n": 35027, "12.5 1.0": 1250, "7 1": 700} {
		if got, err := ParseUptime([]byte(in)); err != nil || got != want {
			t.Errorf("ParseUptime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x 1", "-3 1"} {
		if _, err := ParseUptime([]byte(bad)); err == nil {
			t.Errorf("ParseUptime(%q): no error", bad)
		}
	}
	if up, err := readUptime(); err != nil || up <= 0 {
		t.Errorf("readUptime = %d, %v", up, err)
	}
}

// TestCPUSample: each part is its roots and their children; the delta
// counts processes in both samples by their difference, processes started
// since the first in full, and neither those that exited nor a reused pid's
// earlier process.
func TestCPUSample(t *testing.T) {
	t.Parallel()
	before := []ProcStat{
		{PID: 10, PPID: 1, Comm: "toc", Start: 100, CPU: 500},
		{PID: 20, PPID: 1, Comm: "postgres", Start: 50, CPU: 40},   // postmaster
		{PID: 21, PPID: 20, Comm: "postgres", Start: 60, CPU: 300}, // a backend
		{PID: 22, PPID: 20, Comm: "postgres", Start: 900, CPU: 7},  // exits before the second sample
		{PID: 23, PPID: 20, Comm: "postgres", Start: 70, CPU: 80},  // exits; its pid is reused
		{PID: 30, PPID: 1, Comm: "redis-server", Start: 40, CPU: 1000},
		{PID: 40, PPID: 1, Comm: "other", Start: 40, CPU: 9999},
	}
	after := []ProcStat{
		{PID: 10, PPID: 1, Comm: "toc", Start: 100, CPU: 650},
		{PID: 20, PPID: 1, Comm: "postgres", Start: 50, CPU: 41},
		{PID: 21, PPID: 20, Comm: "postgres", Start: 60, CPU: 390},
		{PID: 23, PPID: 20, Comm: "postgres", Start: 1005, CPU: 12}, // new process, same pid
		{PID: 24, PPID: 20, Comm: "postgres", Start: 1010, CPU: 30}, // a new backend
		{PID: 30, PPID: 1, Comm: "redis-server", Start: 40, CPU: 1100},
		{PID: 40, PPID: 1, Comm: "other", Start: 40, CPU: 99999},
	}
	roots := [numParts][]int{partToc: {10}, partSQL: {20}, partRedis: nil}
	b, a := sampleOf(1000, before, roots), sampleOf(2000, after, roots)
	if b.parts[partRedis] != nil {
		t.Errorf("redis not measured, sampled %v", b.parts[partRedis])
	}
	if got := len(b.parts[partSQL]); got != 4 {
		t.Errorf("postgres processes before: %d, want the postmaster and its 3 children", got)
	}
	if got := cpuDelta(b.parts[partToc], b.at, a.parts[partToc]); got != 150 {
		t.Errorf("toc delta %d, want 150", got)
	}
	// 1 (postmaster) + 90 (backend 21) + 12 (the new 23) + 30 (24).
	if got := cpuDelta(b.parts[partSQL], b.at, a.parts[partSQL]); got != 133 {
		t.Errorf("postgres delta %d, want 133", got)
	}
}

func TestNewCost(t *testing.T) {
	t.Parallel()
	ticks := func(n int64) *int64 { return &n }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	sqlB := &SQLCounters{Xacts: 1000, Statements: -1, OwnXacts: 1}
	sqlA := &SQLCounters{Xacts: 1201, Statements: -1, OwnXacts: 1}
	redisB := &RedisCounters{Commands: 5000, OwnCommands: 2}
	redisA := &RedisCounters{Commands: 15002, OwnCommands: 2}
	// 4000 fires; toc 1.5 s, sql 0.3 s, redis 0.2 s, the load generator
	// 0.4 s of CPU.
	got := newCost(4000, 3210*time.Millisecond, [numParts]*int64{ticks(150), ticks(30), ticks(20), ticks(40)}, sqlB, sqlA, redisB, redisA)
	want := &Cost{
		WindowSec: 3.21, Fires: 4000,
		CPUUsPerFire:    CPUCost{Total: 600, Toc: f(375), SQL: f(75), Redis: f(50), Load: f(100)},
		SQLXactsPerFire: f(0.05), RedisCommandsPerFire: f(2.5),
		CPUSec:   CPUCost{Total: 2.4, Toc: f(1.5), SQL: f(0.3), Redis: f(0.2), Load: f(0.4)},
		SQLXacts: i(200), RedisCommands: i(10000),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("newCost (-want +got):\n%s", d)
	}
	if s := got.CPUUsPerFire.Servers(); s != 500 {
		t.Errorf("Servers() = %g µs per fire, want 500: toc, SQL and Redis without the load generator", s)
	}

	// Statements known (MySQL's Questions); only the toc part measured.
	got = newCost(3, time.Second, [numParts]*int64{ticks(1)}, &SQLCounters{Xacts: 5, Statements: 10, OwnStatements: 1}, &SQLCounters{Xacts: 6, Statements: 18}, nil, nil)
	want = &Cost{
		WindowSec: 1, Fires: 3,
		CPUUsPerFire:    CPUCost{Total: 3333.3, Toc: f(3333.3)},
		SQLXactsPerFire: f(0.3333), SQLStatementsPerFire: f(2.3333),
		CPUSec:   CPUCost{Total: 0.01, Toc: f(0.01)},
		SQLXacts: i(1), SQLStatements: i(7),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("newCost, statements known (-want +got):\n%s", d)
	}

	// Nothing fired: totals, no figures per fire. Counters that went back
	// (a stats reset) give no figure.
	got = newCost(0, time.Second, [numParts]*int64{ticks(7)}, sqlA, sqlB, nil, nil)
	want = &Cost{WindowSec: 1, CPUSec: CPUCost{Total: 0.07, Toc: f(0.07)}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("newCost, no fires (-want +got):\n%s", d)
	}
}

func TestParentNamed(t *testing.T) {
	t.Parallel()
	procs := map[int]ProcStat{
		1:  {PID: 1, Comm: "init"},
		20: {PID: 20, PPID: 1, Comm: "postgres"},
		21: {PID: 21, PPID: 20, Comm: "postgres"},
		50: {PID: 50, PPID: 1, Comm: "sleep"}, // a pid of a container's postgres, here another process
	}
	read := func(pid int) (ProcStat, error) {
		p, ok := procs[pid]
		if !ok {
			return ProcStat{}, errors.New("no such process")
		}
		return p, nil
	}
	for _, tc := range []struct {
		pids []int
		want int
	}{
		{[]int{99, 50, 21}, 20}, // gone, not postgres, a backend
		{[]int{20}, 0},          // the postmaster's parent is not postgres
		{[]int{50, 99}, 0},
		{nil, 0},
	} {
		if got := parentNamed(tc.pids, "postgres", read); got != tc.want {
			t.Errorf("parentNamed(%v) = %d, want %d", tc.pids, got, tc.want)
		}
	}
	self, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := PIDsNamed([]int{os.Getpid(), os.Getppid()}, self.Comm); len(got) != 1 || got[0] != os.Getpid() {
		t.Errorf("PIDsNamed(self, parent; %q) = %v, want self only", self.Comm, got)
	}
}

// TestGCCost: a window of this process's with a collection in it counts
// the collection, its CPU and a pause; a window of another process's has
// no collector figures (its collector is not this one).
func TestGCCost(t *testing.T) {
	var r Result
	m := (&CostProbe{Toc: []int{os.Getpid()}, Settle: time.Millisecond}).Begin(t.Context(), &r)
	runtime.GC()
	c := m.End(t.Context(), &r, time.Now(), 10)
	if c.GC == nil {
		t.Fatal("no collector figures for a window of this process")
	}
	if g := c.GC; g.Cycles < 1 || g.CPUUsPerFire <= 0 || g.AssistUsPerFire < 0 || g.PauseMaxMs <= 0 {
		t.Errorf("collector figures %+v, want a cycle, its CPU and a pause", *g)
	}
	other := (&CostProbe{Toc: []int{os.Getppid()}, Settle: time.Millisecond}).Begin(t.Context(), &r)
	runtime.GC()
	if c := other.End(t.Context(), &r, time.Now(), 10); c.GC != nil {
		t.Errorf("collector figures %+v for another process's window", *c.GC)
	}
}
