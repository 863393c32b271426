package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// serveDebug serves Go's profiler (net/http/pprof) on addr until ctx ends,
// on a listener of its own so that the API's tokens, limits and timeouts
// do not apply and a profile is never one request away from the public
// API. It returns once the listener is open; the returned func stops it.
//
// Profiles for the benchmark section of the README, on a node started
// with --debug-listen 127.0.0.1:6060:
//
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=5
//	go tool pprof -top -sample_index=alloc_space http://127.0.0.1:6060/debug/pprof/allocs
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/mutex
func serveDebug(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listener on %s: %w", addr, err)
	}
	// Sample contended mutexes (1 in 100) and blocking events (one per
	// 10 µs blocked) for /debug/pprof/mutex and /block; a little overhead,
	// paid only when the profiler is asked for.
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(10_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener", slog.String("error", err.Error()))
		}
	}()
	log.Info("profiler listening", slog.String("addr", "http://"+ln.Addr().String()+"/debug/pprof/"))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
