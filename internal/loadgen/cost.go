package loadgen

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"time"
)

// Defaults of [CostProbe].
const (
	// CostSettleDefault: the window of a cost closes this long after the
	// last delivery, so that the outcomes a server stores after delivering
	// count.
	CostSettleDefault = time.Second
	// PostgresStatsWait is how long after the last delivery PostgreSQL's
	// transaction counters are read: its backends flush their statistics
	// (pg_stat_database's among them) at most once a second while busy, and
	// 10 s after they go idle (PGSTAT_IDLE_INTERVAL).
	PostgresStatsWait = 11 * time.Second
	// costLead: the window opens this long before the first due time, to
	// leave the readings time to finish before it.
	costLead = 100 * time.Millisecond
)

// Cost is what the fires of a run cost, measured over its firing window:
// from just before the first job fell due to [CostProbe.Settle] after the
// last delivery (when jobs are missing: after the wait for them ended, so
// the idle wait counts too). Each figure is per fire: divided by the jobs
// delivered (duplicates not counted). A figure not measured is nil.
type Cost struct {
	// WindowSec is the window's length; Fires the jobs delivered.
	WindowSec float64 `json:"window_sec"`
	Fires     int     `json:"fires"`
	// CPUUsPerFire is the CPU time (user + system, from /proc/PID/stat) of
	// the processes of each part, per fire in µs; Total is the sum of the
	// parts measured. Empty when nothing fired.
	CPUUsPerFire CPUCost `json:"cpu_us_per_fire"`
	// SQLXactsPerFire are transactions committed or rolled back per fire:
	// of the cluster's databases (PostgreSQL's pg_stat_database), or of the
	// whole server (MySQL's Com_commit + Com_rollback: explicit COMMITs and
	// ROLLBACKs only, and other clients' too).
	SQLXactsPerFire *float64 `json:"sql_xacts_per_fire,omitempty"`
	// SQLStatementsPerFire are statements per fire: pg_stat_statements'
	// calls in the cluster's databases when the extension is installed in
	// them, MySQL's Questions (the whole server's); nil otherwise.
	SQLStatementsPerFire *float64 `json:"sql_statements_per_fire,omitempty"`
	// RedisCommandsPerFire are commands per fire as INFO commandstats
	// counts them (those run by Lua scripts included), over every master.
	RedisCommandsPerFire *float64 `json:"redis_commands_per_fire,omitempty"`
	// MachineCPUUsPerFire is the CPU time of the whole machine per fire in
	// µs: every process's (toc, clients, receiver, databases and whatever
	// else runs), the busy time of all CPUs from /proc/stat. On a busy
	// machine it measures the window more than the work. Nil when not read.
	MachineCPUUsPerFire *float64 `json:"machine_cpu_us_per_fire,omitempty"`
	// CPUPressure is the share of the window during which some task of the
	// machine was runnable but waiting for a CPU (/proc/pressure/cpu,
	// "some"): how busy the machine was. Nil where the kernel does not say.
	CPUPressure *float64 `json:"cpu_pressure,omitempty"`

	// The totals over the window behind the figures per fire.
	CPUSec        CPUCost  `json:"cpu_sec"`
	SQLXacts      *int64   `json:"sql_xacts,omitempty"`
	SQLStatements *int64   `json:"sql_statements,omitempty"`
	RedisCommands *int64   `json:"redis_commands,omitempty"`
	MachineCPUSec *float64 `json:"machine_cpu_sec,omitempty"`

	// GC is this process's collector over the window when the server runs
	// in it (embedded, baselines); nil otherwise.
	GC *GCCost `json:"gc,omitempty"`
}

// CPUCost is CPU time in all and by part; a part not measured is nil.
type CPUCost struct {
	Total float64 `json:"total"`
	// Toc is the toc servers: the nodes, or the bench process itself when
	// the server runs in it.
	Toc *float64 `json:"toc,omitempty"`
	// SQL is the SQL server's processes: a PostgreSQL postmaster and all
	// its children (backends and workers), or mysqld/mariadbd.
	SQL *float64 `json:"sql,omitempty"`
	// Redis is the redis-server of each master.
	Redis *float64 `json:"redis,omitempty"`
	// Load is the load generator (this process: its clients and the
	// receiver) when the server runs elsewhere; an embedded run counts it
	// in Toc, since the server runs in it.
	Load *float64 `json:"load,omitempty"`
}

// Servers is the CPU time of the servers alone: toc, SQL and Redis, the
// load generator left out.
func (c CPUCost) Servers() float64 {
	var t float64
	for _, p := range []*float64{c.Toc, c.SQL, c.Redis} {
		if p != nil {
			t += *p
		}
	}
	return t
}

// CostProbe says what [Fire] measures the cost of its fires on.
type CostProbe struct {
	// Toc are the pids of the toc servers (the nodes of a cluster, or
	// this process when the server runs in it). Their children count too.
	Toc []int
	// SQL reads the counters of the SQL service; nil when not measured.
	SQL func(context.Context) (SQLCounters, error)
	// Redis reads the counters of the Redis; nil when not measured.
	Redis func(context.Context) (RedisCounters, error)
	// Load are the pids of the load generator (this process, when the
	// servers are others): its clients and receiver cost CPU per fire too.
	Load []int
	// Settle: the window closes this long after the last delivery.
	// Default [CostSettleDefault].
	Settle time.Duration
	// SQLWait: the SQL counters are read again this long after the last
	// delivery, or at the window's close if that is later. PostgreSQL wants
	// [PostgresStatsWait]. Default 0.
	SQLWait time.Duration
}

// SQLCounters are an SQL service's cumulative counters at one moment.
type SQLCounters struct {
	// Xacts are the transactions committed and rolled back so far.
	Xacts int64
	// Statements are the statements run so far; -1 when unknown.
	Statements int64
	// OwnXacts and OwnStatements are the reading's own transactions and
	// statements that later readings count and its own does not: the cost
	// leaves them out.
	OwnXacts, OwnStatements int64
	// Servers are the pids of the service's processes (a PostgreSQL
	// postmaster: its children count too); none when unknown.
	Servers []int
}

// RedisCounters are a Redis's cumulative counters at one moment, summed
// over its masters.
type RedisCounters struct {
	// Commands are the calls of INFO commandstats, and OwnCommands the
	// reading's own that later readings count.
	Commands, OwnCommands int64
	// Servers are the masters' pids (INFO server's process_id).
	Servers []int
}

// The parts whose CPU time a cost sums.
const (
	partToc = iota
	partSQL
	partRedis
	partLoad
	numParts
)

var partNames = [numParts]string{"toc", "sql", "redis", "load generator"}

// procKey names a process across readings: a pid reused by another process
// has another start time.
type procKey struct {
	pid   int
	start int64
}

// cpuSample is the CPU time so far of each part's processes, at one
// moment: at is clock ticks after boot, read before the processes. A part
// not measured is nil.
type cpuSample struct {
	at    int64
	parts [numParts]map[procKey]int64
}

// sampleOf picks, from procs, each part's roots and their children.
func sampleOf(at int64, procs []ProcStat, roots [numParts][]int) cpuSample {
	s := cpuSample{at: at}
	for part, rs := range roots {
		if len(rs) == 0 {
			continue
		}
		m := map[procKey]int64{}
		for _, p := range procs {
			if slices.Contains(rs, p.PID) || slices.Contains(rs, p.PPID) {
				m[procKey{p.PID, p.Start}] = p.CPU
			}
		}
		s.parts[part] = m
	}
	return s
}

func sampleCPU(roots [numParts][]int) (cpuSample, error) {
	at, err := readUptime()
	if err != nil {
		return cpuSample{}, err
	}
	procs, err := ListProcs()
	if err != nil {
		return cpuSample{}, err
	}
	return sampleOf(at, procs, roots), nil
}

// cpuDelta is the CPU time, in clock ticks, that the processes of after
// used since before was sampled at beforeAt: the difference for those in
// both, all of it for those started since. Processes that exited in between
// are lost.
func cpuDelta(before map[procKey]int64, beforeAt int64, after map[procKey]int64) int64 {
	var d int64
	for k, t := range after {
		if b, ok := before[k]; ok {
			d += t - b
		} else if k.start >= beforeAt {
			d += t
		}
	}
	return d
}

// CostMeter measures one window.
type CostMeter struct {
	p     CostProbe
	start time.Time
	roots [numParts][]int
	cpu   *cpuSample
	sql   *SQLCounters
	redis *RedisCounters
	// machine is the machine's busy ticks at the start (-1: not read);
	// pressure its CPU pressure then (ok false: not read).
	machine  int64
	pressure time.Duration
	pressOK  bool
	// gc is this process's collector at the start when the server runs
	// in it (nil otherwise).
	gc []metrics.Sample
}

// begin opens the window: it reads the counters and the CPU time, noting in
// r what it could not read.
func (p *CostProbe) Begin(ctx context.Context, r *Result) *CostMeter {
	m := &CostMeter{p: *p}
	m.p.Settle = cmp.Or(m.p.Settle, CostSettleDefault)
	m.roots[partToc] = p.Toc
	m.roots[partLoad] = p.Load
	if p.SQL != nil {
		c, err := p.SQL(ctx)
		if err != nil {
			r.Notef("cost: sql: %v", err)
		} else {
			m.sql, m.roots[partSQL] = &c, c.Servers
		}
	}
	if p.Redis != nil {
		c, err := p.Redis(ctx)
		if err != nil {
			r.Notef("cost: redis: %v", err)
		} else {
			m.redis, m.roots[partRedis] = &c, c.Servers
		}
	}
	if s, err := sampleCPU(m.roots); err != nil {
		r.Notef("cost: cpu: %v", err)
	} else {
		m.cpu = &s
	}
	m.machine = -1
	if t, err := ReadMachineCPU(); err != nil {
		r.Notef("cost: %v", err)
	} else {
		m.machine = t
	}
	m.pressure, m.pressOK = cpuPressure()
	if slices.Contains(p.Toc, os.Getpid()) {
		m.gc = gcSample()
	}
	m.start = time.Now()
	return m
}

// end closes the window Settle after last, the last delivery, reads the
// SQL counters SQLWait after it, and returns the cost of fires.
func (m *CostMeter) End(ctx context.Context, r *Result, last time.Time, fires int) *Cost {
	sleep(ctx, time.Until(last.Add(m.p.Settle)))
	var redis *RedisCounters
	if m.redis != nil {
		c, err := m.p.Redis(ctx)
		if err != nil {
			r.Notef("cost: redis: %v", err)
		} else {
			redis = &c
		}
	}
	var ticks [numParts]*int64
	var procs [numParts]int
	if m.cpu != nil {
		after, err := sampleCPU(m.roots)
		if err != nil {
			r.Notef("cost: cpu: %v", err)
		}
		for part := range numParts {
			if err == nil && m.cpu.parts[part] != nil {
				d := cpuDelta(m.cpu.parts[part], m.cpu.at, after.parts[part])
				ticks[part], procs[part] = &d, len(after.parts[part])
			}
		}
	}
	machine := int64(-1)
	if m.machine >= 0 {
		if t, err := ReadMachineCPU(); err == nil {
			machine = t - m.machine
		}
	}
	pressure, pressOK := cpuPressure()
	var gcAfter []metrics.Sample
	if m.gc != nil {
		gcAfter = gcSample()
	}
	window := time.Since(m.start)
	var sql *SQLCounters
	if m.sql != nil {
		sleep(ctx, time.Until(last.Add(max(m.p.Settle, m.p.SQLWait))))
		c, err := m.p.SQL(ctx)
		if err != nil {
			r.Notef("cost: sql: %v", err)
		} else {
			sql = &c
		}
	}
	c := newCost(fires, window, ticks, m.sql, sql, m.redis, redis)
	if gcAfter != nil {
		c.GC = gcCost(m.gc, gcAfter, fires)
	}
	if machine >= 0 {
		sec := round(float64(machine)/ClockTicks, 2)
		c.MachineCPUSec = &sec
		if fires > 0 {
			us := round(float64(machine)/ClockTicks*1e6/float64(fires), 1)
			c.MachineCPUUsPerFire = &us
		}
	}
	if m.pressOK && pressOK && window > 0 {
		p := round(float64(pressure-m.pressure)/float64(window), 3)
		c.CPUPressure = &p
	}
	var parts []string
	for part, t := range ticks {
		if t != nil {
			parts = append(parts, fmt.Sprintf("%d %s", procs[part], partNames[part]))
		}
	}
	if len(parts) > 0 {
		r.Notef("cost: CPU of %s processes over %.2fs", joinSet(", ", parts...), c.WindowSec)
	}
	if m.sql != nil && m.sql.Servers == nil {
		r.Notef("cost: the SQL server's processes were not found: its CPU is not counted")
	}
	return c
}

// newCost is the cost of fires over window from the CPU clock ticks of each
// part (nil: not measured) and the counters before and after (nil: not
// read).
func newCost(fires int, window time.Duration, ticks [numParts]*int64, sqlBefore, sqlAfter *SQLCounters, redisBefore, redisAfter *RedisCounters) *Cost {
	c := &Cost{WindowSec: round(window.Seconds(), 3), Fires: fires}
	perFire := func(v float64, places int) *float64 {
		if fires == 0 {
			return nil
		}
		x := round(v/float64(fires), places)
		return &x
	}
	for part, t := range ticks {
		if t == nil {
			continue
		}
		sec := float64(*t) / ClockTicks
		us := perFire(sec*1e6, 1)
		c.CPUSec.Total += sec
		secp := &sec
		switch part {
		case partToc:
			c.CPUSec.Toc, c.CPUUsPerFire.Toc = secp, us
		case partSQL:
			c.CPUSec.SQL, c.CPUUsPerFire.SQL = secp, us
		case partRedis:
			c.CPUSec.Redis, c.CPUUsPerFire.Redis = secp, us
		case partLoad:
			c.CPUSec.Load, c.CPUUsPerFire.Load = secp, us
		}
	}
	c.CPUSec.Total = round(c.CPUSec.Total, 2)
	if fires > 0 {
		c.CPUUsPerFire.Total = round(c.CPUSec.Total*1e6/float64(fires), 1)
	}
	if sqlBefore != nil && sqlAfter != nil {
		if d := sqlAfter.Xacts - sqlBefore.Xacts - sqlBefore.OwnXacts; d >= 0 {
			c.SQLXacts, c.SQLXactsPerFire = &d, perFire(float64(d), 4)
		}
		if sqlBefore.Statements >= 0 && sqlAfter.Statements >= 0 {
			if d := sqlAfter.Statements - sqlBefore.Statements - sqlBefore.OwnStatements; d >= 0 {
				c.SQLStatements, c.SQLStatementsPerFire = &d, perFire(float64(d), 4)
			}
		}
	}
	if redisBefore != nil && redisAfter != nil {
		if d := redisAfter.Commands - redisBefore.Commands - redisBefore.OwnCommands; d >= 0 {
			c.RedisCommands, c.RedisCommandsPerFire = &d, perFire(float64(d), 4)
		}
	}
	return c
}

// round rounds x to places decimal places.
func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}
