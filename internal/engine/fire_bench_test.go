package engine

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// BenchmarkFirePush measures the engine's work per push fire on the
// embedded store: b.N push tasks, already due, are loaded, looked at,
// claimed, handed to a sink that returns at once, and their outcomes stored
// (group-committed, unsynced, as fireWrite does). The tasks are created by
// an engine that is stopped before the timer starts; a second engine over
// the same store fires them. The sink does no I/O, so ns/op and allocs/op
// are toc's own cost per fire (cpu-ns/op: the process's CPU time, every
// goroutine's, per fire; ns/op is wall time, which the pacing of the
// loader and the outcome batches also sets), without the HTTP request (see httpsink's
// BenchmarkDeliver for that).
//
//	go test -run '^$' -bench FirePush -benchmem ./internal/engine/
func BenchmarkFirePush(b *testing.B) {
	dir := b.TempDir()
	st, err := pebblestore.Open(pebblestore.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Store: st, Logger: logger}

	// b.N tasks due a second ago, written to the store directly (as an
	// engine creates them), so that none fires before the timer starts.
	mk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	target := task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:1/hook", Headers: map[string]string{"X-Bench": "1"}}}
	payload := []byte(`{"order":"0123456789abcdef","amount":4200,"currency":"EUR","x":1}`)
	for i := 0; i < b.N; i += 1000 {
		ts := make([]*task.Task, min(1000, b.N-i))
		for k := range ts {
			t, err := mk.rules.newTask(CreateParams{App: "bench", DueAt: now.Add(-time.Second), Target: target, Payload: payload}, now, nil)
			if err != nil {
				b.Fatal(err)
			}
			ts[k] = t
		}
		if _, err := st.Create(b.Context(), ts); err != nil {
			b.Fatal(err)
		}
	}

	// Fire them: all are due when the engine starts.
	var delivered atomic.Int64
	cfg.Sinks = map[string]sink.Sink{"http": sink.Func(func(context.Context, *task.Task) error {
		delivered.Add(1)
		return nil
	})}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	eng, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for delivered.Load() < int64(b.N) || eng.attemptsUnderway() > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d delivered, %d outcomes not stored after 5 minutes", delivered.Load(), b.N, eng.attemptsUnderway())
		}
		time.Sleep(time.Millisecond) // polling for the end of the run, not deciding an outcome
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if err := eng.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// attemptsUnderway is how many push attempts have no outcome stored yet.
func (e *Engine) attemptsUnderway() int {
	return e.attempts.count()
}
