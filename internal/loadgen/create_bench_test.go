package loadgen_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// The create benchmarks run the HTTP create path end to end in one process:
// the Go client, the API, the engine and a Pebble store in a temp dir with
// fsync on, as `toc serve` runs it. Tasks are due in a day, so none fires.
// Parallel ones run 8 goroutines per CPU (16 on the 2-core reference
// machine): creates wait on the disk, and concurrent ones share an fsync.

// startAPI starts engine, store and API, and returns a client for it.
func startAPI(b *testing.B) *client.Client {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir(), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(engine.Config{
		Store:  st,
		Sinks:  map[string]sink.Sink{"http": httpsink.New(httpsink.Config{})},
		Logger: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Engine: eng, Logger: log}))
	b.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			b.Error(err)
		}
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	return client.New(client.Config{BaseURL: hs.URL, HTTPClient: loadgen.NewHTTPClient(64)})
}

var seq atomic.Int64

func request(due time.Time) client.ScheduleRequest {
	n := seq.Add(1)
	return client.ScheduleRequest{
		App:     "bench",
		Key:     "k" + strconv.FormatInt(n, 10),
		DueAt:   &due,
		Payload: []byte(`{"order":12345}`),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:9/hook"}},
	}
}

func BenchmarkCreate(b *testing.B) {
	due := time.Now().Add(24 * time.Hour)
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		c := startAPI(b)
		for b.Loop() {
			if _, _, err := c.Schedule(ctx, request(due)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	})
	b.Run("single/parallel", func(b *testing.B) {
		c := startAPI(b)
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := c.Schedule(ctx, request(due)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	})
	for _, size := range []int{100, 1000} {
		batch := func() []client.ScheduleRequest {
			reqs := make([]client.ScheduleRequest, size)
			for i := range reqs {
				reqs[i] = request(due)
			}
			return reqs
		}
		name := "batch=" + strconv.Itoa(size)
		b.Run(name, func(b *testing.B) {
			c := startAPI(b)
			for b.Loop() {
				if _, err := c.ScheduleBatch(ctx, batch()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			c := startAPI(b)
			b.SetParallelism(2)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.ScheduleBatch(ctx, batch()); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
		})
		// As toc bench schedules: answers with the ids alone.
		b.Run(name+"/parallel/minimal", func(b *testing.B) {
			c := startAPI(b)
			b.SetParallelism(2)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.ScheduleBatchMinimal(ctx, batch()); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}
