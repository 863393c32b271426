package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testkit/stack"
)

// The create benchmarks run the server's side of a create, as `toc serve`
// wires it (the request id and log middleware, the API handler, the engine
// and a Pebble store in a temp dir), without the network: each op hands a
// request to the handler and waits for its answer. The request is the one
// `toc bench --workload schedule` sends (an app, a key, a due time, a small
// JSON payload and a webhook target), due in a day so that none fires.
//
//	go test -run '^$' -bench Create -benchmem ./internal/httpapi/
//
// cpu-ns/op is the process's CPU time per create (every goroutine's: the
// engine's and Pebble's included), which holds still better than ns/op on a
// shared machine. The nosync runs leave the fsync out to show the CPU path
// alone; the others wait on the disk as the product does, and their
// parallel runs (16 requests at once, as the bench's 16 clients) share
// fsyncs through the group commit.

// benchAPI is the handler over an engine over a Pebble store, behind the
// request-id middleware, as the server wires it.
func benchAPI(b *testing.B, noSync bool) http.Handler {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir(), Logger: log, NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { // after the stack's Stop (cleanups run last first)
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	s := stack.Start(b, stack.Options{Store: st, Logger: log,
		Handler: func(h http.Handler) http.Handler { return reqlog.RequestID(h, log) }})
	return s.Handler
}

var benchSeq atomic.Int64

// createBody appends the JSON of one create request to buf.
func createBody(buf []byte, due string) []byte {
	n := benchSeq.Add(1)
	buf = append(buf, `{"app":"bench","key":"run-`...)
	buf = strconv.AppendInt(buf, n, 10)
	buf = append(buf, `","due_at":"`...)
	buf = append(buf, due...)
	buf = append(buf, `","payload":{"seq":`...)
	buf = strconv.AppendInt(buf, n, 10)
	return append(buf, `},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}`...)
}

// discard is a ResponseWriter that keeps the status alone.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(s int)           { d.status = s }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// serveOne sends body to h as a request to path, and fails unless the
// answer is want.
func serveOne(b *testing.B, h http.Handler, path string, body []byte, want int, minimal bool) {
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:7070"+path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	if minimal {
		r.Header.Set("Prefer", "return=minimal")
	}
	r.RemoteAddr = "127.0.0.1:40000"
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if w.status != want {
		b.Errorf("POST %s: status %d, want %d", path, w.status, want)
	}
}

func BenchmarkCreate(b *testing.B) {
	due := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339Nano)
	for _, noSync := range []bool{true, false} {
		name := "single/sync"
		if noSync {
			name = "single/nosync"
		}
		b.Run(name, func(b *testing.B) {
			h := benchAPI(b, noSync)
			var buf []byte
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				buf = createBody(buf[:0], due)
				serveOne(b, h, "/v1/tasks", buf, http.StatusCreated, false)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(name+"-parallel", func(b *testing.B) {
			h := benchAPI(b, noSync)
			b.ReportAllocs()
			b.SetParallelism(8) // 16 on 2 CPUs, as the bench's 16 clients
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				var buf []byte
				for pb.Next() {
					buf = createBody(buf[:0], due)
					serveOne(b, h, "/v1/tasks", buf, http.StatusCreated, false)
				}
			})
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
		})
	}
	const batch = 1000
	b.Run(fmt.Sprintf("batch=%d/minimal/nosync", batch), func(b *testing.B) {
		h := benchAPI(b, true)
		var buf []byte
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		for b.Loop() {
			buf = append(buf[:0], `{"tasks":[`...)
			for i := range batch {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = createBody(buf, due)
			}
			buf = append(buf, "]}"...)
			serveOne(b, h, "/v1/tasks:batch", buf, http.StatusOK, true)
		}
		b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*batch), "cpu-ns/task")
	})
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
