package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// serveConfig is what `toc serve` runs with.
type serveConfig struct {
	data            string
	listen          string
	retention       time.Duration
	shutdownTimeout time.Duration
	maxPayload      int
	maxLoaded       int
	maxInFlight     int
	window          time.Duration
	logFormat       string
	logLevel        string
}

// runServe runs the service until ctx is done, then shuts down gracefully:
// it stops accepting requests, ends long polls, lets in-flight deliveries
// finish (or puts them back) within --shutdown-timeout, and closes the store.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.data, "data", "./toc-data", "directory of the embedded store (created if missing)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7070", "address of the HTTP API (host:port; port 0 picks a free one)")
	fs.DurationVar(&c.retention, "retention", engine.RetentionDefault, "how long finished tasks and their keys are kept")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", engine.ShutdownDefault, "how long a shutdown waits for in-flight deliveries")
	fs.IntVar(&c.maxPayload, "max-payload", task.DefaultMaxPayload, "largest payload in bytes")
	fs.IntVar(&c.maxLoaded, "max-loaded", engine.MaxLoadedDefault, "most tasks held in memory (the timing wheel's cap)")
	fs.IntVar(&c.maxInFlight, "max-in-flight", engine.MaxInFlightDefault, "most concurrent push deliveries")
	fs.DurationVar(&c.window, "window", engine.WindowDefault, "how far ahead tasks are loaded into memory")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: toc serve [flags]\n\nRuns toc on an embedded store.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", ErrUsage, fs.Args())
	}
	log, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		return err
	}
	return serve(ctx, c, log, stdout)
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level: %v", ErrUsage, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format must be text or json, got %q", ErrUsage, format)
}

func serve(ctx context.Context, c serveConfig, log *slog.Logger, stdout io.Writer) (err error) {
	st, err := pebblestore.Open(pebblestore.Options{Dir: c.data, Logger: log})
	if err != nil {
		return fmt.Errorf("open store in %s: %w", c.data, err)
	}
	defer func() {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()

	eng, err := engine.New(engine.Config{
		Store:       st,
		Sinks:       map[string]sink.Sink{"http": httpsink.New(httpsink.Config{})},
		Logger:      log,
		Window:      c.window,
		MaxLoaded:   c.maxLoaded,
		MaxInFlight: c.maxInFlight,
		MaxPayload:  c.maxPayload,
		Retention:   c.retention,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if err := eng.Start(ctx); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		_ = eng.Stop(context.Background())
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	// Requests get a context that shutdown cancels, so long polls end at once.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	srv := &http.Server{
		Handler:           httpapi.New(httpapi.Config{Engine: eng, Logger: log, MaxPayload: c.maxPayload}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      engine.MaxWait + 30*time.Second, // a claim may wait 30s
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("toc serving", slog.String("addr", "http://"+ln.Addr().String()), slog.String("data", c.data))
	fmt.Fprintf(stdout, "toc listening on http://%s\n", ln.Addr())

	select {
	case <-ctx.Done():
	case err := <-served:
		_ = eng.Stop(context.Background())
		return fmt.Errorf("http server: %w", err)
	}

	log.Info("toc shutting down", slog.Duration("timeout", c.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	cancelReqs()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", slog.String("error", err.Error()))
		_ = srv.Close()
	}
	<-served
	if err := eng.Stop(sctx); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	log.Info("toc stopped")
	return nil
}
