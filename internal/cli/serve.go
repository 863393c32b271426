package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/cluster"
	"github.com/toc-dev/toc/internal/config"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/openapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/sink/amqpsink"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/sink/natssink"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/internal/ui"
	"github.com/toc-dev/toc/task"
)

// serveConfig is what `toc serve` runs with: the flags, with the
// configuration file filling what the command line did not set.
type serveConfig struct {
	configPath      string
	loaded          fileStamp // the config file as it was loaded (watchConfig)
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
	amqp            string
	nats            string
	tlsCert         string
	tlsKey          string
	insecure        bool
	allowPrivate    string // "", "true" or "false"
	reloadEvery     time.Duration
	maxConns        int
	maxConnsClient  int
	idleTimeout     time.Duration
	maxBodyMemory   int64

	// Cluster mode.
	sql         string // comma-separated DSNs
	redis       string // comma-separated addresses
	sqlTables   int
	sqlMinConns int
	slots       int
	hotWindow   time.Duration
	prefix      string
	debugListen string
}

// runServe runs the service until ctx is done, then shuts down gracefully:
// it stops accepting requests, ends long polls, lets in-flight deliveries
// finish (or puts them back) within --shutdown-timeout, and closes the store.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.configPath, "config", "", "YAML configuration file (apps, tokens, limits); flags override it")
	fs.StringVar(&c.data, "data", "./toc-data", "directory of the embedded store (created if missing)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7070", "address of the HTTP API (host:port; port 0 picks a free one)")
	fs.DurationVar(&c.retention, "retention", engine.RetentionDefault, "how long finished tasks and their keys are kept")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", engine.ShutdownDefault, "how long a shutdown waits for in-flight deliveries")
	fs.IntVar(&c.maxPayload, "max-payload", task.DefaultMaxPayload, "largest payload in bytes")
	fs.IntVar(&c.maxLoaded, "max-loaded", engine.MaxLoadedDefault, "most tasks held in memory (the timing wheel's cap)")
	fs.IntVar(&c.maxInFlight, "max-in-flight", engine.MaxInFlightDefault, "most concurrent push deliveries (one app gets half unless configured, at most three quarters)")
	fs.DurationVar(&c.window, "window", engine.WindowDefault, "how far ahead tasks are loaded into memory")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.amqp, "amqp", "", "default RabbitMQ URL for amqp targets, like amqp://guest:guest@127.0.0.1:5672/")
	fs.StringVar(&c.nats, "nats", "", "default NATS URL for nats targets, like nats://127.0.0.1:4222")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM); needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.BoolVar(&c.insecure, "insecure", false, "allow serving without any token on a non-loopback address")
	fs.StringVar(&c.allowPrivate, "allow-private-targets", "", "let tasks call loopback/private/link-local addresses: true or false (default: true only in local development mode)")
	fs.IntVar(&c.maxConns, "max-connections", 0, fmt.Sprintf("most client connections open at once; past it the oldest idle one is closed to make room, or the new one refused (default: half the process's file limit, at most 16384: %d here)", httpapi.MaxConnsDefault(fileLimit())))
	fs.IntVar(&c.maxConnsClient, "max-connections-per-client", 0, "most connections open at once from one client address (an IPv6 /64) (default: a quarter of --max-connections)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", httpapi.IdleTimeoutDefault, "how long an idle keep-alive connection is kept open")
	fs.Int64Var(&c.maxBodyMemory, "max-body-memory", httpapi.MaxBodyMemoryDefault, "bytes of request bodies held in memory at once; past it a request waits up to 1s, then gets 503 (at least 64 MiB)")
	fs.DurationVar(&c.reloadEvery, "config-check", 2*time.Second, "how often the configuration file is checked for changes (SIGHUP reloads at once)")
	fs.StringVar(&c.sql, "sql", "", "cluster mode: SQL task library, DSN[,DSN...]: postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db (also mariadb://, or the MySQL driver's form user:pass@tcp(host:3306)/db)")
	fs.StringVar(&c.redis, "redis", "", "cluster mode: Redis address[,address...] (several: Redis Cluster)")
	fs.IntVar(&c.sqlTables, "sql-tables", sqlstore.TablesDefault, "cluster mode: task tables per database (fixed at first start)")
	fs.IntVar(&c.sqlMinConns, "sql-min-conns", 16, "cluster mode: connections to each database set up at start, so a burst of due tasks does not wait for new ones (at most 32)")
	fs.IntVar(&c.slots, "slots", redisindex.SlotsDefault, "cluster mode: Redis slots per app (a power of two)")
	fs.DurationVar(&c.hotWindow, "hot-window", redisindex.HotWindowDefault, "cluster mode: tasks due within it are kept in Redis")
	fs.StringVar(&c.prefix, "redis-prefix", redisindex.PrefixDefault, "cluster mode: prefix of every Redis key")
	fs.StringVar(&c.debugListen, "debug-listen", "", "serve Go's profiler (/debug/pprof/) on this address, like 127.0.0.1:6060 (off when empty; keep it on loopback)")
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
	if c.configPath != "" {
		c.loaded = stampOf(c.configPath) // before the read: a change after it is seen
		f, err := config.Load(c.configPath)
		if err != nil {
			return err
		}
		file = f
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.fill(file, set)
	if c.allowPrivate != "" && c.allowPrivate != "true" && c.allowPrivate != "false" {
		return fmt.Errorf("%w: --allow-private-targets must be true or false", ErrUsage)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrUsage)
	}
	if c.maxConns < 0 || c.maxConnsClient < 0 || c.idleTimeout < 0 {
		return fmt.Errorf("%w: --max-connections, --max-connections-per-client and --idle-timeout must not be negative", ErrUsage)
	}
	if c.maxBodyMemory < config.MinBodyMemory {
		return fmt.Errorf("%w: --max-body-memory must be at least %d (64 MiB: two batches at their 32 MiB cap), got %d", ErrUsage, config.MinBodyMemory, c.maxBodyMemory)
	}
	log, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		return err
	}
	defaultGC()
	return serve(ctx, c, file, log, stdout)
}

// defaultGC sets the collector's target to gcPercentDefault unless GOGC is
// set. toc bench does so too, so that its baselines run as toc does.
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
func (c *serveConfig) fill(f *config.File, set map[string]bool) {
	str := func(flag string, dst *string, v string) {
		if !set[flag] && v != "" {
			*dst = v
		}
	}
	str("listen", &c.listen, f.Listen)
	str("data", &c.data, f.Data)
	str("amqp", &c.amqp, f.AMQP)
	str("nats", &c.nats, f.NATS)
	str("log-format", &c.logFormat, f.LogFormat)
	str("log-level", &c.logLevel, f.LogLevel)
	str("tls-cert", &c.tlsCert, f.TLSCert)
	str("tls-key", &c.tlsKey, f.TLSKey)
	str("sql", &c.sql, strings.Join(f.SQL, ","))
	str("redis", &c.redis, strings.Join(f.Redis, ","))
	str("redis-prefix", &c.prefix, f.RedisPrefix)
	fillIf(set, "sql-tables", &c.sqlTables, f.SQLTables)
	fillIf(set, "slots", &c.slots, f.Slots)
	fillIf(set, "hot-window", &c.hotWindow, f.HotWindow.Std())
	fillIf(set, "retention", &c.retention, f.Retention.Std())
	fillIf(set, "shutdown-timeout", &c.shutdownTimeout, f.ShutdownTimeout.Std())
	fillIf(set, "max-payload", &c.maxPayload, f.MaxPayload)
	fillIf(set, "max-in-flight", &c.maxInFlight, f.MaxInFlight)
	fillIf(set, "max-connections", &c.maxConns, f.MaxConnections)
	fillIf(set, "max-connections-per-client", &c.maxConnsClient, f.MaxConnectionsPerClient)
	fillIf(set, "idle-timeout", &c.idleTimeout, f.IdleTimeout.Std())
	fillIf(set, "max-body-memory", &c.maxBodyMemory, f.MaxBodyMemory)
	if !set["insecure"] && f.Insecure {
		c.insecure = true
	}
	if !set["allow-private-targets"] && f.AllowPrivateTargets != nil {
		c.allowPrivate = fmt.Sprint(*f.AllowPrivateTargets)
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

// isLoopback reports whether a listen address only accepts local
// connections.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// live is the part of the configuration a reload changes.
type live struct {
	file         atomic.Pointer[config.File]
	allowPrivate bool // server-wide default, fixed at start
}

// policies turns the file's apps into the engine's policies.
func policies(f *config.File) engine.Policies {
	conv := func(a config.App) engine.AppPolicy {
		return engine.AppPolicy{
			Target: a.Target, Retry: a.Retry, MaxPayload: a.MaxPayload,
			DeliveriesPerSecond: a.Rate.DeliveriesPerSecond, Burst: a.Rate.Burst,
			MaxInFlight: a.Rate.MaxInFlight, CreatesPerSecond: a.Rate.CreatesPerSecond,
			MaxSchedules: a.MaxSchedules,
			Weight:       a.Weight,
		}
	}
	p := engine.Policies{Default: conv(f.Defaults), Apps: map[string]engine.AppPolicy{}}
	for name := range f.Apps {
		p.Apps[name] = conv(f.Effective(name))
	}
	return p
}

// access turns the file's token digests into the API's grants; nil when
// none is configured.
func access(f *config.File) (*httpapi.Access, error) {
	if !f.Tokens() {
		return nil, nil
	}
	apps := map[string][]string{}
	for name, a := range f.Apps {
		apps[name] = a.Tokens
	}
	return httpapi.NewAccess(f.AdminTokens, apps)
}

func serve(ctx context.Context, c serveConfig, file *config.File, log *slog.Logger, stdout io.Writer) (err error) {
	log = slog.New(reqlog.NewHandler(log.Handler())) // request_id on lines logged with a request's context
	stopTracing, err := telemetry.Start(ctx, log)    // OTEL_* variables; off without them
	if err != nil {
		return err
	}
	defer stopTracing() // last: flushes the spans of the deliveries that ended in eng.Stop
	devMode := !file.Tokens() && isLoopback(c.listen)
	if !file.Tokens() && !isLoopback(c.listen) && !c.insecure {
		return fmt.Errorf("%w: refusing to serve %s without any token: configure admin_tokens or apps.<app>.tokens in --config, listen on a loopback address, or pass --insecure", ErrUsage, c.listen)
	}
	lv := &live{allowPrivate: devMode}
	if c.allowPrivate != "" {
		lv.allowPrivate = c.allowPrivate == "true"
	}
	if err := checkBrokerTargets(file, c); err != nil {
		return err
	}
	lv.file.Store(file)
	acc, err := access(file)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bm := metrics.NewBackend(reg)
	be, err := openBackend(ctx, c, log, bm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := be.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	st := bm.Store(be.store) // every store call measured
	if be.node != nil {
		bm.WatchCluster(reg, be.node.Share)
	}
	var health func() error
	if be.disk != nil {
		bm.WatchDisk(reg, be.disk)
		health = be.disk.Health
	}
	counts, _ := st.(store.Counter)
	var eng *engine.Engine
	m := metrics.New(reg, func() engine.Stats { return eng.Stats() }, counts)
	m.SetWindow(c.window)

	amqpSink := amqpsink.New(amqpsink.Config{DefaultURL: c.amqp, Logger: log,
		Resolve: lv.broker("amqp", c.amqp), Guard: lv.policy})
	defer amqpSink.Close()
	natsSink := natssink.New(natssink.Config{DefaultURL: c.nats, Logger: log,
		Resolve: lv.broker("nats", c.nats), Guard: lv.policy})
	defer natsSink.Close()
	httpSink := newHTTPSink(lv, c.maxInFlight)

	eng, err = engine.New(engine.Config{
		Store:        st,
		Sinks:        map[string]sink.Sink{"http": httpSink, "amqp": amqpSink, "nats": natsSink},
		Logger:       log,
		Window:       c.window,
		MaxLoaded:    c.maxLoaded,
		MaxInFlight:  c.maxInFlight,
		MaxPayload:   c.maxPayload,
		Retention:    c.retention,
		Index:        be.index(),
		Limiter:      be.limiter(),
		Hooks:        m.Hooks(),
		ShardFor:     be.shardFor,
		CheckTarget:  lv.checkTarget(c.amqp, c.nats),
		OwnsSchedule: be.ownsSchedule(),
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if c.debugListen != "" {
		stopDebug, err := serveDebug(c.debugListen, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	eng.SetPolicies(policies(file))
	if be.node != nil {
		be.node.Attach(eng)
	}
	if err := eng.Start(ctx); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	if be.node != nil {
		if err := be.node.Start(ctx); err != nil {
			_ = eng.Stop(context.Background())
			return fmt.Errorf("join the cluster: %w", err)
		}
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		_ = eng.Stop(context.Background())
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	// Connections are capped below the file limit, idle ones closed to
	// make room (httpapi.ConnLimiter).
	conns := httpapi.NewConnLimiter(httpapi.ConnLimits{Max: cmp.Or(c.maxConns, httpapi.MaxConnsDefault(fileLimit())),
		PerClient: c.maxConnsClient, Logger: log})
	ln = conns.Listener(ln)
	registerConnMetrics(reg, conns)
	api := httpapi.New(httpapi.Config{Engine: eng, Logger: log, MaxPayload: c.maxPayload, Access: acc, Health: health,
		MaxBodyMemory: c.maxBodyMemory, AllowedOrigins: file.AllowedOrigins,
		Mount: map[string]http.Handler{
			"GET /metrics":  m.Handler(),
			"GET /v1/stats": ui.StatsHandler(m, m, eng.Stats), // m caches the counts
		},
		Public: map[string]http.Handler{
			"GET /ui/":          ui.Handler(),
			"GET /{$}":          http.RedirectHandler("/ui/", http.StatusFound), // a browser pointed at toc finds the dashboard
			"GET /openapi.json": openapi.Handler(),
		},
	})
	// Requests get a context that shutdown cancels, so long polls end at once.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	srv := &http.Server{
		Handler:           telemetry.Handler(reqlog.RequestID(api, log), api.Route),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      engine.MaxWait + 30*time.Second, // a claim may wait 30s
		IdleTimeout:       c.idleTimeout,
		ConnState:         conns.ConnState,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	scheme := "http"
	if c.tlsCert != "" {
		scheme = "https"
		go func() { served <- srv.ServeTLS(ln, c.tlsCert, c.tlsKey) }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	maxConns, perClient := conns.Limits()
	log.Info("toc serving", slog.String("addr", scheme+"://"+ln.Addr().String()), slog.String("store", be.describe),
		slog.Bool("tokens", acc != nil), slog.Bool("allow_private_targets", lv.allowPrivate),
		slog.Int("max_connections", maxConns), slog.Int("max_connections_per_client", perClient),
		slog.Duration("idle_timeout", c.idleTimeout), slog.Int64("max_body_memory", c.maxBodyMemory))
	fmt.Fprintf(stdout, "toc listening on %s://%s\n", scheme, ln.Addr())

	reloadDone := make(chan struct{})
	reloadCtx, stopReload := context.WithCancel(ctx)
	go func() {
		defer close(reloadDone)
		watchConfig(reloadCtx, c.configPath, c.loaded, c.reloadEvery, log, func(f *config.File) error {
			if err := checkBrokerTargets(f, c); err != nil {
				return err
			}
			a, err := access(f)
			if err != nil {
				return err
			}
			if err := api.SetAllowedOrigins(f.AllowedOrigins); err != nil {
				return err
			}
			lv.file.Store(f)
			eng.SetPolicies(policies(f))
			api.SetAccess(a)
			return nil
		})
	}()
	defer func() { stopReload(); <-reloadDone }()

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
	if be.node != nil {
		// Leave first, so the other nodes take this node's share at once;
		// in-flight attempts still end here (claims are atomic).
		if err := be.node.Stop(sctx); err != nil {
			log.Warn("leave the cluster", slog.String("error", err.Error()))
		}
	}
	if err := eng.Stop(sctx); err != nil {
		// The shutdown timeout ran out: the engine is stopped all the same.
		log.Warn("stop engine", slog.String("error", err.Error()))
	}
	log.Info("toc stopped")
	return nil
}

// registerConnMetrics exports the connection limiter's counts.
func registerConnMetrics(reg *prometheus.Registry, l *httpapi.ConnLimiter) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toc_http_connections",
			Help: "Client connections open (--max-connections caps them)."},
			func() float64 { return float64(l.Stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toc_http_connections_refused_total",
			Help: "Client connections closed at once: at a connection cap, with no idle connection to close."},
			func() float64 { return float64(l.Stats().Refused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toc_http_connections_reclaimed_total",
			Help: "Idle client connections closed to make room for new ones at a connection cap."},
			func() float64 { return float64(l.Stats().Reclaimed) }),
	)
}

// backend is where tasks live: Pebble on a single node, or SQL and Redis
// with this process as a cluster node.
type backend struct {
	store    store.Store
	node     *cluster.Node // nil on a single node
	rate     *cluster.RateLimiter
	shardFor func(app, key string, id task.ID) uint16
	home     func(id task.ID) int // the SQL shard a schedule lives in
	describe string
	closers  []func() error
	disk     *pebblestore.Store // embedded: its disk's health; nil in a cluster
}

// openPebble opens the embedded store, or gives up when ctx ends first (a
// SIGTERM while Pebble is stuck opening, as on a full disk): the open is
// then left to the process's exit, and a store it opens after all is
// closed.
func openPebble(ctx context.Context, o pebblestore.Options) (*pebblestore.Store, error) {
	type opened struct {
		st  *pebblestore.Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		st, err := pebblestore.Open(o)
		done <- opened{st, err}
	}()
	select {
	case r := <-done:
		if r.st != nil {
			// From SIGTERM on, no write waits for disk space (a disk full
			// past the store's reserve) beyond the shutdown.
			context.AfterFunc(ctx, r.st.StopWaiting)
		}
		return r.st, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.st != nil {
				_ = r.st.Close()
			}
		}()
		return nil, fmt.Errorf("stopped while opening the store: %w", context.Cause(ctx))
	}
}

func (b *backend) index() engine.Index {
	if b.node == nil {
		return nil // a typed nil would not be nil
	}
	return b.node
}

func (b *backend) limiter() engine.Limiter {
	if b.rate == nil {
		return nil // a typed nil would not be nil
	}
	return b.rate
}

// ownsSchedule gives a cluster node's schedule loop the schedules of the
// SQL shards it owns (a schedule lives in its home shard: the one its id
// names, modulo the shards, see sqlstore.Store.Home); nil on a single node,
// which acts on all.
func (b *backend) ownsSchedule() func(task.ID) bool {
	if b.node == nil {
		return nil
	}
	return func(id task.ID) bool { return b.node.OwnsShard(b.home(id)) }
}

func (b *backend) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	return errors.Join(errs...)
}

func openBackend(ctx context.Context, c serveConfig, log *slog.Logger, bm *metrics.Backend) (*backend, error) {
	if c.sql == "" && c.redis == "" {
		st, err := openPebble(ctx, pebblestore.Options{Dir: c.data, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open store in %s: %w", c.data, err)
		}
		return &backend{store: st, describe: "embedded:" + c.data, closers: []func() error{st.Close}, disk: st}, nil
	}
	if c.sql == "" || c.redis == "" {
		return nil, fmt.Errorf("%w: cluster mode needs both --sql and --redis", ErrUsage)
	}
	b := &backend{describe: "cluster"}
	dsns := strings.Split(c.sql, ",")
	for _, dsn := range dsns {
		if err := sqlstore.CheckDSN(dsn); err != nil {
			return nil, fmt.Errorf("%w: --sql %w", ErrUsage, err) // the password masked
		}
	}
	st, err := sqlstore.Open(ctx, sqlstore.Options{DSNs: dsns, Tables: c.sqlTables, MinConns: c.sqlMinConns, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the SQL task library: %w (Options.DSNs is --sql, Options.Tables is --sql-tables; a database an earlier toc set up without --sql-tables has 16)", err)
	}
	b.store, b.shardFor, b.home = st, st.ShardFor, st.Home
	b.closers = append(b.closers, st.Close)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(c.redis, ",")})
	rdb.AddHook(redisindex.MetricsHook(bm))
	b.closers = append(b.closers, rdb.Close)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = b.close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", c.redis, err)
	}
	x, err := redisindex.New(redisindex.Options{Client: rdb, Prefix: c.prefix, Slots: c.slots, HotWindow: c.hotWindow})
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	node, err := cluster.New(cluster.Config{Redis: rdb, Index: x, SQL: st, Prefix: c.prefix, Logger: log, Near: max(c.window*3, cluster.NearDefault)})
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	b.node = node
	b.rate = cluster.NewRateLimiter(rdb, c.prefix+":rate", c.prefix+":wake")
	return b, nil
}

// newHTTPSink signs each app's pushes with its first signing secret and
// checks every connection's address against the app's callback policy (at
// connect time, so DNS rebinding cannot get around it). Both read the live
// configuration, so a reload applies to the next push. It keeps as many idle
// connections to a receiver as pushes may run at once (maxInFlight).
func newHTTPSink(lv *live, maxInFlight int) *httpsink.Sink {
	return httpsink.New(httpsink.Config{
		MaxIdleConnsPerHost: maxInFlight,
		Secrets:             func(app string) []string { return lv.file.Load().Effective(app).SigningSecrets },
		Signature:           func(app string) string { return lv.file.Load().Effective(app).Signature },
		Guard:               lv.policy,
	})
}

// policy is the address policy of app's connections to what the operator
// did not name: its callback URLs, and brokers it is not allowed.
func (lv *live) policy(app string) netguard.Policy {
	a := lv.file.Load().Effective(app)
	allow := lv.allowPrivate // the server-wide default
	if a.AllowPrivateTargets != nil {
		allow = *a.AllowPrivateTargets
	}
	return netguard.Policy{AllowPrivate: allow, AllowedHosts: a.AllowedHosts}
}

// broker is the sinks' view of the broker rule (config.File.Broker) for
// targets of kind ("amqp" or "nats"), whose server default is def (fixed
// at start, like the sinks' DefaultURL). It reads the live configuration.
func (lv *live) broker(kind, def string) func(app, ref string) (string, bool, error) {
	return func(app, ref string) (string, bool, error) {
		return lv.file.Load().Broker(app, kind, ref, def)
	}
}

// checkTarget refuses at create an amqp or nats target that names a broker
// the app may not use (400 naming target.amqp.url or target.nats.url).
func (lv *live) checkTarget(amqpDefault, natsDefault string) func(app string, t task.Target) error {
	return func(app string, t task.Target) error {
		f := lv.file.Load()
		switch {
		case t.AMQP != nil:
			if err := f.CheckBroker(app, "amqp", t.AMQP.URL, amqpDefault); err != nil {
				return &task.FieldError{Field: "target.amqp.url", Message: err.Error()}
			}
		case t.NATS != nil:
			if err := f.CheckBroker(app, "nats", t.NATS.URL, natsDefault); err != nil {
				return &task.FieldError{Field: "target.nats.url", Message: err.Error()}
			}
		}
		return nil
	}
}

// checkBrokerTargets checks the apps' default targets against the broker
// rule with the server's default brokers, which flags may have set.
func checkBrokerTargets(f *config.File, c serveConfig) error {
	err := f.ValidateTargets(c.amqp, c.nats)
	var ce *config.Error
	if errors.As(err, &ce) {
		ce.Path = c.configPath
	}
	return err
}

// watchConfig reloads the file at path when it changes (checked every
// `every`) or on SIGHUP, and hands each valid version to apply. A file that
// does not parse is logged and ignored: the running settings stay.
//
// serve is the one long-running command, so it, not main, listens for
// SIGHUP: the signal means nothing to the other commands.
// fillIf sets *dst to v, a value of the config file, when the flag name
// was not given and v is set (positive).
func fillIf[T int | int64 | time.Duration](set map[string]bool, name string, dst *T, v T) {
	if !set[name] && v > 0 {
		*dst = v
	}
}

// fileStamp is what tells a file's versions apart: its modification time
// and size (size -1: the file could not be read).
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}

func watchConfig(ctx context.Context, path string, loaded fileStamp, every time.Duration, log *slog.Logger, apply func(*config.File) error) {
	if path == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The file as it was when it was loaded at start, not as it is now: an
	// edit made while the server started is a change to apply.
	last := loaded
	tick := time.NewTicker(cmp.Or(every, 2*time.Second))
	defer tick.Stop()
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-hup:
			forced = true
		case <-tick.C:
		}
		now := stampOf(path)
		if !forced && now == last {
			continue
		}
		last = now
		f, err := config.Load(path)
		if err == nil {
			err = apply(f)
		}
		if err != nil {
			log.Error("config reload failed; keeping the running settings", slog.String("error", err.Error()))
			continue
		}
		log.Info("config reloaded", slog.String("path", path))
	}
}
