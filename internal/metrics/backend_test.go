package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/internal/store/storetest"
	"github.com/toc-dev/toc/task"
)

// TestBackendSchedules runs the schedules' suite through the wrapper: it
// finds the store's Schedules underneath (store.As).
func TestBackendSchedules(t *testing.T) {
	storetest.RunSchedules(t, func(*testing.T) store.Store {
		return metrics.NewBackend(prometheus.NewRegistry()).Store(memstore.New())
	})
}

func TestBackendStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := metrics.NewBackend(reg)
	inner := memstore.New()
	s := b.Store(inner)
	if _, ok := s.(store.Counter); !ok {
		t.Error("the wrapped memstore lost its Counter")
	}
	if sc, ok := store.As[store.Schedules](s); !ok || sc != store.Schedules(inner) {
		t.Errorf("store.As[store.Schedules] of the wrapped memstore = %v, %v; want the memstore", sc, ok)
	}
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now().UTC().Truncate(time.Millisecond)
	tk := &task.Task{ID: g.New(now, 0), App: "a", DueAt: now, NextAttemptAt: now, WakeAt: now, State: task.Scheduled,
		Target: task.Target{Pull: &task.PullTarget{}}, CreatedAt: now, UpdatedAt: now}
	if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, g.New(now, 0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	refuse := errors.New("conflict")
	if _, err := s.Update(ctx, tk.ID, nil, func(*task.Task) error { return refuse }); err != refuse {
		t.Fatalf("fn's error came back as %v", err)
	}
	s.Close()
	if _, err := s.Get(ctx, tk.ID); !errors.Is(err, store.ErrClosed) {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "toc_store_duration_seconds"); n != 3 { // create, get, update series
		t.Errorf("%d duration series, want 3", n)
	}
	// Not found and the engine's refusal are not errors; a closed store is.
	want := "\n# HELP toc_store_errors_total Store calls that failed (not found and conflicts excluded).\n# TYPE toc_store_errors_total counter\ntoc_store_errors_total{op=\"get\"} 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "toc_store_errors_total"); err != nil {
		t.Error(err)
	}
}

type fakeDisk struct {
	full bool
	errs uint64
}

func (f *fakeDisk) DiskFull() bool           { return f.full }
func (f *fakeDisk) BackgroundErrors() uint64 { return f.errs }

// TestWatchDisk: the embedded store's disk is read at scrape time.
func TestWatchDisk(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := &fakeDisk{full: true, errs: 431}
	metrics.NewBackend(reg).WatchDisk(reg, d)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			got[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			got[mf.GetName()] = m.GetCounter().GetValue()
		}
	}
	if got["toc_store_disk_full"] != 1 || got["toc_store_background_errors_total"] != 431 {
		t.Errorf("got %v, want toc_store_disk_full 1 and toc_store_background_errors_total 431", got)
	}
}
