package baseline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/task"
)

// The push ceiling (issue #25): how many webhook POSTs per second this
// machine carries at all, with no timers and no toc. toc's push figures are
// set against it.
const (
	// WorkloadCeiling is the Workload of a push ceiling's [loadgen.Result].
	WorkloadCeiling = "ceiling"
	// VariantCeiling is its Variant.
	VariantCeiling = "back-to-back HTTP POSTs"
	// CeilingSendersDefault and CeilingDurationDefault are the issue's: 64
	// senders for 3 s.
	CeilingSendersDefault  = 64
	CeilingDurationDefault = 3 * time.Second
	// CeilingPayloadBytes is the size of the payload each POST carries.
	CeilingPayloadBytes = 64
)

// CeilingOptions configures [PushCeiling].
type CeilingOptions struct {
	// Senders POST back to back, each waiting for its answer before the
	// next, for Duration. Defaults [CeilingSendersDefault] and
	// [CeilingDurationDefault].
	Senders  int
	Duration time.Duration
	// App is the Toc-App header; default [loadgen.TocAppDefault].
	App string
}

// ceilingPayload is a JSON payload of exactly CeilingPayloadBytes bytes.
func ceilingPayload() []byte {
	b := []byte(`{"seq":0,"pad":"`)
	for len(b) < CeilingPayloadBytes-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// PushCeiling measures the push ceiling: o.Senders goroutines POST what
// toc's webhook sink sends for a task with a [CeilingPayloadBytes] payload
// (httpsink itself, over a transport configured as toc's) back to back to a
// receiver like [loadgen.Toc]'s in this process, for o.Duration. The result's
// DrainPerSec is the POSTs answered per second, Fired their count, and its
// Cost the CPU per POST: this process's (senders and receiver) and the
// machine's.
func PushCeiling(ctx context.Context, o CeilingOptions) (*loadgen.Result, error) {
	o.Senders = cmp.Or(o.Senders, CeilingSendersDefault)
	o.Duration = cmp.Or(o.Duration, CeilingDurationDefault)
	o.App = cmp.Or(o.App, loadgen.TocAppDefault)
	if o.Senders < 1 || o.Duration < 0 {
		return nil, fmt.Errorf("bench: push ceiling: senders must be at least 1 and the duration not negative, got %d and %s", o.Senders, o.Duration)
	}
	run := strconv.FormatInt(time.Now().UnixMilli(), 36)
	rec := loadgen.NewRecorder(o.Senders)
	recv, err := loadgen.StartReceiver(run, o.App, rec)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(httpsink.MaxIdleConnsPerHostDefault, o.Senders)
	tr.MaxIdleConns = 4 * tr.MaxIdleConnsPerHost
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	sink := httpsink.New(httpsink.Config{Client: hc})
	defer func() {
		hc.CloseIdleConnections()
		_ = recv.Close()
	}()

	r := &loadgen.Result{System: SystemBaseline, Variant: VariantCeiling, Workload: WorkloadCeiling, Batch: 1, Concurrency: o.Senders}
	payload := ceilingPayload()
	var ids task.IDGenerator
	now := time.Now()
	tasks := make([]*task.Task, o.Senders)
	for i := range tasks {
		tasks[i] = &task.Task{
			ID: ids.New(now, 0), App: o.App, Key: loadgen.JobKey(run, i), State: task.Delivering,
			Attempts: 1, DueAt: now, Payload: payload, Target: task.Target{HTTP: &task.HTTPTarget{URL: recv.URL}},
		}
	}
	// A first POST per sender before the window: the connections are made
	// and the code paged in, so that the window measures POSTs, not a
	// fresh process's start (CI's 300 ms windows, cold, counted 250 POSTs a
	// second at 3 ms of CPU each, or none at all).
	warm, cancelWarm := context.WithTimeout(ctx, 30*time.Second)
	var wg sync.WaitGroup
	for _, tk := range tasks {
		wg.Add(1)
		go func() { // owned by this function, which waits for it
			defer wg.Done()
			_ = sink.Deliver(warm, tk) // a failure shows in the window
		}()
	}
	wg.Wait()
	cancelWarm()
	probe := &loadgen.CostProbe{Toc: []int{os.Getpid()}, Settle: time.Millisecond}
	cost := probe.Begin(ctx, r)
	start := time.Now()
	end := start.Add(o.Duration)
	giveUp := end.Add(30 * time.Second) // a receiver that never answers
	var sent, failed atomic.Int64
	for _, tk := range tasks {
		wg.Add(1)
		go func() { // owned by this function, which waits for it
			defer wg.Done()
			// Until the window ends, and past it until a POST was answered:
			// on a starved machine a short window (the suite's tests use
			// 300 ms) could end while the first connections were still
			// being made. A POST under way at the end finishes and counts,
			// as its time does.
			for ctx.Err() == nil {
				if now := time.Now(); !now.Before(end) && (sent.Load() > 0 || !now.Before(giveUp)) {
					return
				}
				if err := sink.Deliver(ctx, tk); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: push ceiling: %w", err)
	}
	n := int(sent.Load())
	if n == 0 {
		return nil, errors.New("bench: push ceiling: no POST was answered")
	}
	r.N, r.Fired, r.ElapsedSec = n, n, round(took.Seconds(), 3)
	r.DrainPerSec = round(float64(n)/took.Seconds(), 0)
	r.Cost = cost.End(ctx, r, time.Now(), n)
	if f := failed.Load(); f > 0 {
		r.Notef("baseline: %d POSTs failed", f)
	}
	r.Notef("push ceiling: %d senders POSTing a %d-byte payload back to back for %s; drain_per_sec is the POSTs answered per second, the cost's toc CPU this process's (senders and receiver)", o.Senders, len(payload), o.Duration)
	return r, nil
}

// round rounds x to places decimal places, as the load generator's figures
// are.
func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}
