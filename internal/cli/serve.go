package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/toc-dev/toc/internal/config"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/server"
)

// serveFlags are the flags of `toc serve` that are not an Options field as
// they are: lists given separated by commas, and the logger's settings.
type serveFlags struct {
	sql, redis          string // comma-separated DSNs, addresses
	allowPrivate        string // "", "true" or "false"
	logFormat, logLevel string
	testClock           testClockFlag // testclock.go
}

// runServe runs the service until ctx is done, then shuts down gracefully:
// it stops accepting requests, ends long polls, lets in-flight deliveries
// finish (or puts them back) within --shutdown-timeout, and closes the store.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := server.DefaultOptions()
	var sf serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.ConfigPath, "config", "", "YAML configuration file (apps, tokens, limits); flags override it")
	fs.StringVar(&c.Data, "data", c.Data, "directory of the embedded store (created if missing)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "address of the HTTP API (host:port; port 0 picks a free one)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "how long finished tasks and their keys are kept")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a shutdown waits for in-flight deliveries")
	fs.IntVar(&c.MaxPayload, "max-payload", c.MaxPayload, "largest payload in bytes")
	fs.IntVar(&c.MaxLoaded, "max-loaded", c.MaxLoaded, "most tasks held in memory (the timing wheel's cap)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most concurrent push deliveries (one app gets half unless configured, at most three quarters)")
	fs.DurationVar(&c.Window, "window", c.Window, "how far ahead tasks are loaded into memory")
	fs.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.AMQP, "amqp", "", "default RabbitMQ URL for amqp targets, like amqp://guest:guest@127.0.0.1:5672/")
	fs.StringVar(&c.NATS, "nats", "", "default NATS URL for nats targets, like nats://127.0.0.1:4222")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM); needs --tls-key")
	fs.StringVar(&c.TLSKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow serving without any token on a non-loopback address")
	fs.StringVar(&sf.allowPrivate, "allow-private-targets", "", "let tasks call loopback/private/link-local addresses: true or false (default: true only in local development mode)")
	fs.IntVar(&c.MaxConns, "max-connections", 0, fmt.Sprintf("most client connections open at once; past it the oldest idle one is closed to make room, or the new one refused (default: half the process's file limit, at most 16384: %d here)", httpapi.MaxConnsDefault(server.FileLimit())))
	fs.IntVar(&c.MaxConnsClient, "max-connections-per-client", 0, "most connections open at once from one client address (an IPv6 /64) (default: a quarter of --max-connections)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection is kept open")
	fs.Int64Var(&c.MaxBodyMemory, "max-body-memory", c.MaxBodyMemory, "bytes of request bodies held in memory at once; past it a request waits up to 1s, then gets 503 (at least 64 MiB)")
	fs.DurationVar(&c.ReloadEvery, "config-check", c.ReloadEvery, "how often the configuration file is checked for changes (SIGHUP reloads at once)")
	fs.StringVar(&sf.sql, "sql", "", "cluster mode: SQL task library, DSN[,DSN...]: postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db (also mariadb://, or the MySQL driver's form user:pass@tcp(host:3306)/db)")
	fs.StringVar(&sf.redis, "redis", "", "cluster mode: Redis address[,address...] (several: Redis Cluster)")
	fs.IntVar(&c.SQLTables, "sql-tables", c.SQLTables, "cluster mode: task tables per database (fixed at first start)")
	fs.IntVar(&c.SQLMinConns, "sql-min-conns", c.SQLMinConns, "cluster mode: connections to each database set up at start, so a burst of due tasks does not wait for new ones (at most 32)")
	fs.IntVar(&c.Slots, "slots", c.Slots, "cluster mode: Redis slots per app (a power of two)")
	fs.DurationVar(&c.HotWindow, "hot-window", c.HotWindow, "cluster mode: tasks due within it are kept in Redis")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", c.RedisPrefix, "cluster mode: prefix of every Redis key")
	fs.Var(&sf.testClock, "test-clock", testClockUsage)
	fs.StringVar(&c.DebugListen, "debug-listen", "", "serve Go's profiler (/debug/pprof/) on this address, like 127.0.0.1:6060 (off when empty; keep it on loopback)")
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
	file := &config.File{}
	if c.ConfigPath != "" {
		c.ConfigStamp = server.StampOf(c.ConfigPath) // before the read: a change after it is seen
		f, err := config.Load(c.ConfigPath)
		if err != nil {
			return err
		}
		file = f
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fill(&c, &sf, file, set)
	if sf.allowPrivate != "" && sf.allowPrivate != "true" && sf.allowPrivate != "false" {
		return fmt.Errorf("%w: --allow-private-targets must be true or false", ErrUsage)
	}
	if sf.allowPrivate != "" {
		allow := sf.allowPrivate == "true"
		c.AllowPrivate = &allow
	}
	c.SQL, c.Redis = splitList(sf.sql), splitList(sf.redis)
	c.TestClock, c.TestClockStart = sf.testClock.on, sf.testClock.start
	c.File, c.Stdout = file, stdout
	log, err := newLogger(stderr, sf.logFormat, sf.logLevel)
	if err != nil {
		return err
	}
	c.Logger = log
	defaultGC()
	return serve(ctx, c)
}

// serve runs a server with the options until ctx is done, then shuts it
// down within o.ShutdownTimeout.
func serve(ctx context.Context, o server.Options) error {
	srv, err := server.New(o)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	var failed error
	select {
	case <-ctx.Done():
	case err := <-srv.Failed():
		failed = fmt.Errorf("http server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if failed != nil {
		return failed
	}
	// The shutdown timeout running out is logged, and the server is stopped
	// all the same: toc exits 0 for it, as after any graceful shutdown.
	return withoutDeadline(err)
}

// withoutDeadline is err without the context deadline it may join.
func withoutDeadline(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var rest []error
	for _, e := range j.Unwrap() {
		if !errors.Is(e, context.DeadlineExceeded) {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// splitList splits a flag's comma-separated list; nil when empty.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// defaultGC sets the collector's target to gcPercentDefault unless GOGC is
// set. toc bench does so too, and so do the baselines of the bench module
// (bench/baseline), so that they run as toc does.
func defaultGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentDefault)
	}
}

// gcPercentDefault is the Go collector's target (GOGC) toc serve runs with
// unless GOGC is set. The fire path allocates per task (HTTP requests and
// responses, store reads): at the runtime's 100 the collector ran every
// few hundred milliseconds at 10 000 fires/s. Measured with toc bench
// (embedded, 10 000 fires/s, alternating runs): at 200 the CPU per fire
// fell from 111-137 µs to 91-94, p90 lateness from 13-26 ms to 2-3, with
// RSS per far-future pending task 111 B instead of 99 (1 000 000 pending);
// 400 saved little more CPU for 155 B.
const gcPercentDefault = 200

// fill takes from the file every setting whose flag was not given.
func fill(c *server.Options, sf *serveFlags, f *config.File, set map[string]bool) {
	str := func(flag string, dst *string, v string) {
		if !set[flag] && v != "" {
			*dst = v
		}
	}
	str("listen", &c.Listen, f.Listen)
	str("data", &c.Data, f.Data)
	str("amqp", &c.AMQP, f.AMQP)
	str("nats", &c.NATS, f.NATS)
	str("log-format", &sf.logFormat, f.LogFormat)
	str("log-level", &sf.logLevel, f.LogLevel)
	str("tls-cert", &c.TLSCert, f.TLSCert)
	str("tls-key", &c.TLSKey, f.TLSKey)
	str("sql", &sf.sql, strings.Join(f.SQL, ","))
	str("redis", &sf.redis, strings.Join(f.Redis, ","))
	str("redis-prefix", &c.RedisPrefix, f.RedisPrefix)
	fillIf(set, "sql-tables", &c.SQLTables, f.SQLTables)
	fillIf(set, "slots", &c.Slots, f.Slots)
	fillIf(set, "hot-window", &c.HotWindow, f.HotWindow.Std())
	fillIf(set, "retention", &c.Retention, f.Retention.Std())
	fillIf(set, "shutdown-timeout", &c.ShutdownTimeout, f.ShutdownTimeout.Std())
	fillIf(set, "max-payload", &c.MaxPayload, f.MaxPayload)
	fillIf(set, "max-in-flight", &c.MaxInFlight, f.MaxInFlight)
	fillIf(set, "max-connections", &c.MaxConns, f.MaxConnections)
	fillIf(set, "max-connections-per-client", &c.MaxConnsClient, f.MaxConnectionsPerClient)
	fillIf(set, "idle-timeout", &c.IdleTimeout, f.IdleTimeout.Std())
	fillIf(set, "max-body-memory", &c.MaxBodyMemory, f.MaxBodyMemory)
	if !set["insecure"] && f.Insecure {
		c.Insecure = true
	}
	if !set["allow-private-targets"] && f.AllowPrivateTargets != nil {
		sf.allowPrivate = fmt.Sprint(*f.AllowPrivateTargets)
	}
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

// fillIf sets *dst to v, a value of the config file, when the flag name
// was not given and v is set (positive).
func fillIf[T int | int64 | time.Duration](set map[string]bool, name string, dst *T, v T) {
	if !set[name] && v > 0 {
		*dst = v
	}
}
