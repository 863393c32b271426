package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"time"
)

// WorkloadTwoApp is the workload of [TwoApp].
const WorkloadTwoApp = "twoapp"

// Defaults of TwoAppOptions.
const (
	QuietSpreadDefault = 5 * time.Second
	QuietEveryDefault  = 10 * time.Millisecond
)

// TwoAppOptions configures [TwoApp].
type TwoAppOptions struct {
	// N jobs of the burst app are due at one instant, Lead after the start
	// (default [LeadBase] plus [LeadPerJob] per job).
	N    int
	Lead time.Duration
	// The quiet app has a job due every Every (default
	// [QuietEveryDefault]) from that instant for Spread (default
	// [QuietSpreadDefault]): [TwoAppOptions.QuietN] jobs.
	Spread, Every time.Duration
	// Batch, Concurrency, Grace, MaxWait and Progress are as in
	// [FireOptions].
	Batch, Concurrency int
	Grace, MaxWait     time.Duration
	Progress           io.Writer
}

func (o *TwoAppOptions) setDefaults() {
	if o.Lead == 0 {
		o.Lead = LeadBase + time.Duration(o.N)*LeadPerJob
	}
	o.Spread = cmp.Or(o.Spread, QuietSpreadDefault)
	o.Every = cmp.Or(o.Every, QuietEveryDefault)
	o.Batch = cmp.Or(o.Batch, BatchDefault)
	o.Concurrency = cmp.Or(o.Concurrency, ConcurrencyDefault)
	o.Grace = cmp.Or(o.Grace, GraceDefault)
	o.MaxWait = cmp.Or(o.MaxWait, MaxWait)
}

// QuietN is the number of the quiet app's jobs: the size of its Recorder.
func (o TwoAppOptions) QuietN() int {
	o.setDefaults()
	return int(o.Spread/o.Every) + 1
}

// QuietApp is the quiet app of a [TwoApp] run: its jobs, how many were
// delivered, and their lateness, all of them and those due while the burst
// drained (up to its last first delivery).
type QuietApp struct {
	N          int      `json:"n"`
	Fired      int      `json:"fired"`
	Missing    int      `json:"missing"`
	LatenessMs Lateness `json:"lateness_ms"`
	// DuringDrain is the lateness of the jobs due before the burst's
	// last job was first delivered; DuringDrainN counts them.
	DuringDrainN  int      `json:"during_drain_n"`
	DuringDrainMs Lateness `json:"during_drain_lateness_ms"`
}

// TwoApp is fair dispatch under load: burst's N jobs fall due at one
// instant while quiet, another app of the same server, has a job due every
// few milliseconds; it reports the burst's drain (the Result's own
// figures, as a fire run with no spread) and the quiet app's lateness
// (Result.Quiet), which a server that serves its apps in turns keeps low
// however long the burst takes. Each recorder must be the one its system
// reports to, sized for o.N and o.QuietN().
func TwoApp(ctx context.Context, burst System, burstRec *Recorder, quiet System, quietRec *Recorder, o TwoAppOptions) (*Result, error) {
	o.setDefaults()
	if err := checkSizes(o.N, o.Batch, o.Concurrency, burstRec); err != nil {
		return nil, err
	}
	if quietRec == nil || len(quietRec.count) != o.QuietN() {
		return nil, errors.New("bench: the quiet app's recorder must be sized for QuietN jobs")
	}
	if o.Lead < 0 || o.Spread < 0 || o.Every <= 0 || o.Grace < 0 || o.MaxWait < 0 {
		return nil, errors.New("bench: lead, spread, grace and max wait must not be negative, every must be positive")
	}
	cpu0, psiOK := cpuPressure()
	start := time.Now()
	first := start.Add(o.Lead)
	qn := o.QuietN()
	qdue := func(seq int) time.Time { return first.Add(time.Duration(seq) * o.Every) }
	if _, err := scheduleAll(ctx, quiet, qn, o.Batch, o.Concurrency, qdue, o.Progress, "twoapp: scheduling the quiet app"); err != nil {
		return nil, err
	}
	took, err := scheduleAll(ctx, burst, o.N, o.Batch, o.Concurrency, func(int) time.Time { return first }, o.Progress, "twoapp: scheduling the burst")
	if err != nil {
		return nil, err
	}
	r := &Result{
		Workload:       WorkloadTwoApp,
		N:              o.N,
		Batch:          o.Batch,
		Concurrency:    o.Concurrency,
		SchedulePerSec: rate(o.N, took),
		ScheduleSec:    took.Seconds(),
	}
	if late := time.Since(first); late > 0 {
		r.Notef("scheduling ended %s after the burst was due: lateness includes it; raise --lead", late.Round(time.Millisecond))
	}
	if err := waitDeliveries(ctx, burstRec, first, o.Grace, o.MaxWait, o.Progress, "twoapp: burst delivered"); err != nil {
		return nil, err
	}
	if err := waitDeliveries(ctx, quietRec, qdue(qn-1), o.Grace, o.MaxWait, o.Progress, "twoapp: quiet app delivered"); err != nil {
		return nil, err
	}
	r.fill(burstRec, o.MaxWait)
	r.drained()
	q := quietRec.Tally()
	drain := time.Duration(r.LatenessMs.Max * float64(time.Millisecond))
	during := min(qn, int(drain/o.Every)+1)
	r.Quiet = &QuietApp{N: qn, Fired: q.Fired, Missing: q.Missing, LatenessMs: q.Lateness, DuringDrainN: during, DuringDrainMs: quietRec.lateness(during)}
	if q.Missing > 0 {
		r.Notef("quiet app: %d jobs not delivered when the wait ended", q.Missing)
	}
	r.ElapsedSec = time.Since(start).Seconds()
	if cpu1, ok := cpuPressure(); ok && psiOK {
		share := float64(cpu1-cpu0) / float64(time.Since(start))
		r.CPUPressure = &share
	}
	return r, nil
}

// lateness summarises the first deliveries of jobs 0 to n-1 (those
// delivered).
func (r *Recorder) lateness(n int) Lateness {
	var ds []time.Duration
	for seq := range min(n, len(r.count)) {
		if r.count[seq].Load() > 0 {
			ds = append(ds, time.Duration(r.late[seq].Load()))
		}
	}
	return Summarize(ds)
}

// cpuPressure reads the time some task of the machine was runnable and
// waiting for a CPU, since boot (Linux's /proc/pressure/cpu, "some ...
// total=" in µs); false where the kernel does not say.
func cpuPressure() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if !bytes.HasPrefix(line, []byte("some ")) {
			continue
		}
		for _, f := range bytes.Fields(line) {
			if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
				us, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil {
					return 0, false
				}
				return time.Duration(us) * time.Microsecond, true
			}
		}
	}
	return 0, false
}
