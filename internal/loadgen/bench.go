// Package loadgen is the load generator of `toc bench`: it schedules jobs on a
// system under test (toc, or a peer such as asynq or River in bench/peers),
// records when each one is delivered, and summarises throughput, lateness,
// memory and disk in a [Result].
//
// # Workloads
//
//   - [Fire]: n jobs due at known instants spread over a duration, starting
//     a little ahead; lateness is receive time minus due time.
//   - [Schedule]: how many jobs per second the system accepts durably, one
//     per request or in batches, from concurrent clients; afterwards the jobs
//     fire and every one is checked off.
//   - [Pending]: n far-future jobs; the server's memory and disk per pending
//     job, and schedule throughput while they are pending.
//   - [TwoApp]: one app's burst of n jobs due at one instant, and another
//     app's jobs due while it drains; the other app's lateness.
//
// # Systems
//
// A [System] schedules jobs; it reports each delivery to the [Recorder] it
// was built with. [Toc] drives a toc server through its Go client, with a
// webhook receiver (push) or claiming consumers (pull).
//
// # Baselines
//
// The physical limit of the machine, measured in the same run as toc with
// no toc, is the benchmark suite's (package baseline of the bench module,
// bench/baseline); it drives its servers with this package's workloads and
// receives on its [Receiver].
//
// # Cost per fire
//
// With [FireOptions.Cost], a fire run measures what its fires cost over the
// firing window ([Cost]): the CPU time of the toc servers, of the SQL
// server and of Redis (from /proc), the SQL transactions and statements,
// and the Redis commands, each per fire. The counters of the services are
// read by functions the caller gives ([CostProbe]): this package imports no
// driver (the bench module's bench/storesize does, for cli.BenchStores).
package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Workload names, as given to --workload and written in [Result.Workload].
const (
	WorkloadFire     = "fire"
	WorkloadSchedule = "schedule"
	WorkloadPending  = "pending"
)

// Job is one task a workload schedules.
type Job struct {
	// Seq numbers the job within its run, from 0 to n-1. A system carries it
	// to the receiving side (in a key or payload) so that the delivery can be
	// checked off.
	Seq int
	// DueAt is when the job must fire.
	DueAt time.Time
}

// System is the scheduler under test.
type System interface {
	// Schedule schedules jobs durably: it returns once the system has
	// accepted all of them. Workloads call it from many goroutines at once,
	// with one job or a batch.
	Schedule(ctx context.Context, jobs []Job) error
}

// Result is the outcome of one workload run. Its JSON form is what
// `toc bench --json` and the peers command print; the keys are stable.
type Result struct {
	// System is what was measured: "toc", "asynq", "river".
	System string `json:"system"`
	// Variant says how: "push", "pull", "defaults", "tight poll".
	Variant  string `json:"variant,omitempty"`
	Workload string `json:"workload"`

	// Nodes is the number of servers the jobs were scheduled on: the nodes
	// of one toc cluster, or 1. 0 when the system does not say (the peers).
	Nodes int `json:"nodes,omitempty"`

	// N is the number of jobs the workload scheduled and expects delivered.
	N           int     `json:"n"`
	Batch       int     `json:"batch"`       // jobs per Schedule call
	Concurrency int     `json:"concurrency"` // concurrent scheduling clients
	SpreadSec   float64 `json:"spread_sec,omitempty"`

	// Fired counts jobs delivered at least once; Missing those never
	// delivered within the wait; Duplicates the deliveries beyond the
	// first; Early the jobs first delivered before their due time.
	// Pending runs deliver nothing: all four are 0.
	Fired      int `json:"fired"`
	Missing    int `json:"missing"`
	Duplicates int `json:"duplicates"`
	Early      int `json:"early"`

	// SchedulePerSec is jobs accepted per second: all N for fire and
	// schedule, the probe scheduled on top of the N pending ones for
	// pending. ScheduleSec is how long that took.
	SchedulePerSec float64 `json:"schedule_per_sec"`
	ScheduleSec    float64 `json:"schedule_sec"`

	// LatenessMs is the first delivery of each job minus its due time, in
	// milliseconds. For schedule runs every job is due at the same instant,
	// so it measures how fast a burst drains, not timer accuracy.
	LatenessMs Lateness `json:"lateness_ms"`
	// Timeline is the lateness per bucket of due time, TimelineMs wide,
	// from the first due time on (fire runs with [FireOptions.Timeline]
	// only): where in the run the late deliveries fall.
	TimelineMs float64  `json:"timeline_ms,omitempty"`
	Timeline   []Bucket `json:"timeline,omitempty"`
	// DrainPerSec, when every job was due at one instant (a fire run of no
	// spread, a burst; and schedule runs), is the jobs delivered per second
	// from that instant to the last first delivery: Fired over the max
	// lateness; for a hot instant ([Hot]), from the first due time to the
	// last first delivery. 0 otherwise, or when nothing fired.
	DrainPerSec float64 `json:"drain_per_sec,omitempty"`

	// RSSBytes is the server's resident memory at the end, summed over the
	// nodes of a cluster (0 when unknown); DiskBytes the size on disk of its
	// data directory (0 when unknown).
	RSSBytes  int64 `json:"rss_bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	// Pending only: growth per pending job from before the fill to after.
	RSSPerTask  float64 `json:"rss_bytes_per_task,omitempty"`
	DiskPerTask float64 `json:"disk_bytes_per_task,omitempty"`
	// Pending only: the rate of the fill itself.
	FillPerSec float64 `json:"fill_per_sec,omitempty"`
	// Pending on a cluster only, each nil when not measured: the growth from
	// before the fill to after of the Redis's used_memory (all of it: other
	// clients of a shared Redis count too), of the memory of the keys under
	// the cluster's prefix (its own share), and of the size of its SQL
	// databases. The PerTask fields divide the growth by the pending jobs.
	RedisBytes       *int64   `json:"redis_bytes,omitempty"`
	RedisPerTask     *float64 `json:"redis_bytes_per_task,omitempty"`
	RedisPrefixBytes *int64   `json:"redis_prefix_bytes,omitempty"`
	SQLBytes         *int64   `json:"sql_bytes,omitempty"`
	SQLPerTask       *float64 `json:"sql_bytes_per_task,omitempty"`

	// Hot is what a hot instant ([Hot]) measures besides lateness: GETs
	// during the drain and the server's peak RSS; nil for other runs.
	Hot *HotStats `json:"hot,omitempty"`
	// Quiet is the quiet app of a twoapp run ([TwoApp]); nil otherwise.
	Quiet *QuietApp `json:"quiet,omitempty"`
	// CPUPressure is the share of the run's wall time during which some
	// task of the machine was runnable but waiting for a CPU (Linux's
	// /proc/pressure/cpu, "some"): how busy the machine was (twoapp runs
	// only; nil where the kernel does not say).
	CPUPressure *float64 `json:"cpu_pressure,omitempty"`

	// Cost is what the fires cost (fire runs with a [CostProbe] only).
	Cost *Cost `json:"cost,omitempty"`
	// CreateCost is what the creates cost (schedule runs with a
	// [CostProbe] only): the same figures over the scheduling window, per
	// job accepted instead of per fire.
	CreateCost *Cost `json:"create_cost,omitempty"`

	ElapsedSec float64  `json:"elapsed_sec"`
	Targets    []Check  `json:"targets,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

// Lateness summarises lateness in milliseconds. Values are nearest-rank
// percentiles of the first delivery of each job; negative means early, and
// Min is the earliest.
type Lateness struct {
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Check is one target the result is held against.
type Check struct {
	Name string `json:"name"` // like "lateness p99 <= 5 ms"
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

func (r *Result) Notef(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// MarshalIndent is the JSON of r as printed by --json.
func (r *Result) MarshalIndent() ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}
