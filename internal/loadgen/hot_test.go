package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// TestServeGetProbe: the probe's process reads where to GET and the ids,
// GETs them round robin at the rate until its input ends, and writes what
// it measured.
func TestServeGetProbe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testServeGetProbe)
}

func testServeGetProbe(t *testing.T) {
	var gen task.IDGenerator
	ids := []task.ID{gen.New(time.Now(), 0), gen.New(time.Now(), 0)}
	pr, pw := io.Pipe()
	var (
		mu     sync.Mutex
		got    = map[task.ID]int{}
		server string
	)
	newGet := func(s, token string) func(context.Context, task.ID) error {
		server = s + " " + token
		return func(_ context.Context, id task.ID) error {
			mu.Lock()
			defer mu.Unlock()
			got[id]++
			if id == ids[1] {
				return errors.New("not found")
			}
			return nil
		}
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- loadgen.ServeGetProbe(context.Background(), pr, &out, newGet) }()
	fmt.Fprintf(pw, "{\"server\":\"http://127.0.0.1:1\",\"token\":\"s3\",\"rate\":200}\n%s\n%s\n\n", ids[0], ids[1])
	time.Sleep(200*time.Millisecond + time.Millisecond) // 40 GETs, on the bubble's clock
	synctest.Wait()
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var g loadgen.HotGets
	if err := json.Unmarshal(out.Bytes(), &g); err != nil {
		t.Fatalf("answer %q: %v", out.String(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if server != "http://127.0.0.1:1 s3" || g.Gets != 40 || g.Gets != got[ids[0]]+got[ids[1]] || g.Errors != got[ids[1]] || len(g.LatUs) != got[ids[0]] || got[ids[0]]-got[ids[1]] > 1 {
		t.Errorf("server %q, answer %+v, GETs by id %v: want every GET round robin at 200/s, the failed ones counted", server, g, got)
	}

	// A start line without a rate is refused.
	if err := loadgen.ServeGetProbe(context.Background(), strings.NewReader("{\"server\":\"x\"}\n\n"), io.Discard, newGet); err == nil {
		t.Error("no rate: no error")
	}
}
