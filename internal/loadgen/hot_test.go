package loadgen_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/task"
)

// TestHot: a hot instant fires every job, GETs ids only during the drain,
// reads the RSS then, and reports the drain rate from the first due time.
func TestHot(t *testing.T) {
	t.Parallel()
	const n = 400
	rec := loadgen.NewRecorder(n)
	// The last jobs come 300 ms after the spread's end, so that the drain
	// lasts long enough for a few GETs and RSS readings.
	sys := &fakeSystem{rec: rec, late: func(seq int) time.Duration {
		if seq >= n-10 {
			return 300 * time.Millisecond
		}
		return 0
	}}
	defer sys.stop()
	var (
		mu      sync.Mutex
		getAt   []time.Time
		rssRead atomic.Int64
	)
	var gen task.IDGenerator
	ids := []task.ID{gen.New(time.Now(), 0), gen.New(time.Now(), 0)}
	res, err := loadgen.Hot(context.Background(), sys, rec, loadgen.HotOptions{
		N: n, Spread: 200 * time.Millisecond, Lead: 300 * time.Millisecond, Batch: 100, Concurrency: 2, Grace: time.Second,
		GetRate: 100, IDs: func() []task.ID { return ids },
		Get: func(ctx context.Context, id task.ID) error {
			mu.Lock()
			defer mu.Unlock()
			getAt = append(getAt, time.Now())
			if id == ids[1] {
				return errors.New("not found")
			}
			return nil
		},
		RSS:      func() (int64, error) { return 1000 + rssRead.Add(1), nil },
		RSSEvery: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := res.Hot
	if res.Workload != loadgen.WorkloadHot || res.Fired != n || res.Missing != 0 || h == nil {
		t.Fatalf("result %+v, want a hot instant of %d, all fired, with its stats", res, n)
	}
	// The drain: from the first due time to the last delivery, about
	// 200 + 300 ms.
	if h.DrainSec < 0.45 || res.DrainPerSec <= 0 || res.DrainPerSec > n/0.45 {
		t.Errorf("drain %v s at %v/s, want about 0.5 s", h.DrainSec, res.DrainPerSec)
	}
	mu.Lock()
	gets := len(getAt)
	mu.Unlock()
	if h.Gets != gets || h.Gets < 5 || h.GetErrors != gets/2 {
		t.Errorf("stats %+v, want the %d GETs made, half of them failed", h, gets)
	}
	if h.RSSAtDueBytes < 1001 || h.PeakRSSBytes <= h.RSSAtDueBytes || h.PeakRSSBytes != 1000+rssRead.Load() {
		t.Errorf("rss at due %d, peak %d after %d readings: want the first reading, then the most", h.RSSAtDueBytes, h.PeakRSSBytes, rssRead.Load())
	}
}

func TestHotRequiresGet(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(1)
	if _, err := loadgen.Hot(context.Background(), &fakeSystem{rec: rec}, rec, loadgen.HotOptions{N: 1}); err == nil {
		t.Error("Hot without Get and IDs: no error")
	}
}
