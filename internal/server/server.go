// Package server builds a whole toc from [Options]: the backend (the
// embedded Pebble store, or SQL and Redis as a cluster node), the engine,
// the HTTP API with its metrics and dashboard, and the live configuration
// (reloaded on a change of the file or on SIGHUP), as nats-server's
// server.NewServer does. `toc serve` maps its flags and the configuration
// file onto Options; `toc bench --embedded` starts one in its process.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/clock"
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

// ErrUsage is wrapped by every error that comes from the options
// themselves (a missing or malformed setting) rather than from running;
// the command line is the same error, and toc exits with status 2 for it.
var ErrUsage = errors.New("toc: usage error")

// Options are what a server runs with: the flags of `toc serve`, with the
// configuration file filling what the command line did not set (the
// command line maps both onto Options). [DefaultOptions] are the flags'
// defaults; each field's comment names its flag.
type Options struct {
	ConfigPath      string       // --config; "": no file, and no reload
	ConfigStamp     FileStamp    // the file as it was when File was loaded from it (StampOf before the read)
	File            *config.File // the configuration file's content; nil: empty
	Data            string       // --data
	Listen          string       // --listen
	Retention       time.Duration
	ShutdownTimeout time.Duration // --shutdown-timeout: how long the command line's Shutdown may take
	MaxPayload      int
	MaxLoaded       int
	MaxInFlight     int
	Window          time.Duration
	AMQP            string // --amqp
	NATS            string // --nats
	TLSCert         string
	TLSKey          string
	Insecure        bool
	AllowPrivate    *bool // --allow-private-targets; nil: true only in local development mode
	ReloadEvery     time.Duration
	MaxConns        int // --max-connections; 0: from the file limit
	MaxConnsClient  int // --max-connections-per-client
	IdleTimeout     time.Duration
	MaxBodyMemory   int64

	// Cluster mode.
	SQL         []string // --sql, the DSNs
	Redis       []string // --redis, the addresses
	SQLTables   int
	SQLMinConns int
	Slots       int
	HotWindow   time.Duration
	RedisPrefix string
	DebugListen string

	// TestClock runs toc on a test clock that stands still until POST
	// /v1/admin/clock moves it (--test-clock), from TestClockStart (zero:
	// the wall clock's time at New). Embedded store only.
	TestClock      bool
	TestClockStart time.Time

	Logger *slog.Logger // nil: nothing logged
	Stdout io.Writer    // gets "toc listening on URL" once the server listens; nil: none
}

// DefaultOptions are the defaults of `toc serve`'s flags.
func DefaultOptions() Options {
	return Options{
		Data:            "./toc-data",
		Listen:          "127.0.0.1:7070",
		Retention:       engine.RetentionDefault,
		ShutdownTimeout: engine.ShutdownDefault,
		MaxPayload:      task.DefaultMaxPayload,
		MaxLoaded:       engine.MaxLoadedDefault,
		MaxInFlight:     engine.MaxInFlightDefault,
		Window:          engine.WindowDefault,
		ReloadEvery:     2 * time.Second,
		IdleTimeout:     httpapi.IdleTimeoutDefault,
		MaxBodyMemory:   httpapi.MaxBodyMemoryDefault,
		SQLTables:       sqlstore.TablesDefault,
		SQLMinConns:     16,
		Slots:           redisindex.SlotsDefault,
		HotWindow:       redisindex.HotWindowDefault,
		RedisPrefix:     redisindex.PrefixDefault,
	}
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
	pushes       atomic.Pointer[pushSettings] // of file: set with it (set)
	allowPrivate bool                         // server-wide default, fixed at start
}

// pushSettings are the settings of each app's pushes, taken from one
// version of the file once (config.File.Effective copies an app's whole
// settings, and a push needs three of them: its secrets, its signature
// scheme and its address policy).
type pushSettings struct {
	apps map[string]*appPush // the declared apps
	def  *appPush            // every other app's: the defaults
}

// appPush is what a push of one app reads of its settings.
type appPush struct {
	secrets   []string
	signature string
	policy    netguard.Policy
}

// set makes f the live configuration, with its apps' push settings.
func (lv *live) set(f *config.File) {
	of := func(a config.App) *appPush {
		allow := lv.allowPrivate // the server-wide default
		if a.AllowPrivateTargets != nil {
			allow = *a.AllowPrivateTargets
		}
		return &appPush{secrets: a.SigningSecrets, signature: a.Signature, policy: netguard.Policy{AllowPrivate: allow, AllowedHosts: a.AllowedHosts}}
	}
	ps := &pushSettings{apps: make(map[string]*appPush, len(f.Apps)), def: of(f.Defaults)}
	for name := range f.Apps {
		ps.apps[name] = of(f.Effective(name))
	}
	lv.file.Store(f)
	lv.pushes.Store(ps)
}

// push returns app's push settings, as of the live configuration.
func (lv *live) push(app string) *appPush {
	ps := lv.pushes.Load()
	if a, ok := ps.apps[app]; ok {
		return a
	}
	return ps.def
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

// Server is a whole toc: its backend (embedded or a cluster node), the
// engine, the HTTP API with its metrics and dashboard, and the live
// configuration, reloaded when the file changes or on SIGHUP. New checks
// the options, Start opens the store and starts serving, Shutdown stops
// it all.
type Server struct {
	o    Options
	log  *slog.Logger
	file *config.File // as loaded at start
	lv   *live
	acc  *httpapi.Access

	be         *backend
	eng        *engine.Engine
	srv        *http.Server
	ln         net.Listener
	scheme     string
	served     chan error // the HTTP server's end
	failed     chan error // the HTTP server's error when it stopped by itself
	closers    []func()   // run in reverse at the end of Shutdown (or of a failed Start)
	closeErr   error      // the backend's
	cancelReqs context.CancelFunc
	stopOnce   sync.Once
	stopErr    error
	clk        clock.Clock // nil: the wall clock
}

// New checks the options and returns a server to Start.
func New(o Options) (*Server, error) {
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrUsage)
	}
	if o.MaxConns < 0 || o.MaxConnsClient < 0 || o.IdleTimeout < 0 {
		return nil, fmt.Errorf("%w: --max-connections, --max-connections-per-client and --idle-timeout must not be negative", ErrUsage)
	}
	if o.MaxBodyMemory < config.MinBodyMemory {
		return nil, fmt.Errorf("%w: --max-body-memory must be at least %d (64 MiB: two batches at their 32 MiB cap), got %d", ErrUsage, config.MinBodyMemory, o.MaxBodyMemory)
	}
	file := o.File
	if file == nil {
		file = &config.File{}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(reqlog.NewHandler(log.Handler())) // request_id on lines logged with a request's context
	devMode := !file.Tokens() && isLoopback(o.Listen)
	if !file.Tokens() && !isLoopback(o.Listen) && !o.Insecure {
		return nil, fmt.Errorf("%w: refusing to serve %s without any token: configure admin_tokens or apps.<app>.tokens in --config, listen on a loopback address, or pass --insecure", ErrUsage, o.Listen)
	}
	lv := &live{allowPrivate: devMode}
	if o.AllowPrivate != nil {
		lv.allowPrivate = *o.AllowPrivate
	}
	if err := checkBrokerTargets(file, o); err != nil {
		return nil, err
	}
	lv.set(file)
	acc, err := access(file)
	if err != nil {
		return nil, err
	}
	clk, err := testClock(o, file, log)
	if err != nil {
		return nil, err
	}
	return &Server{o: o, log: log, file: file, lv: lv, acc: acc, clk: clk, served: make(chan error, 1), failed: make(chan error, 1)}, nil
}

// Start opens the backend, starts the engine (and joins the cluster) and
// serves the API; it returns once the server listens (Addr). ctx is the
// server's life, as a signal ends it: ctx ending while the store opens (a
// SIGTERM while Pebble is stuck on a full disk) makes Start give up; once
// it ends, no write waits for disk space and the configuration is no
// longer reloaded, and Shutdown is to be called. Requests' contexts carry
// ctx's values. After a failed Start, everything it opened is closed
// again.
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.runClosers()
		}
	}()
	c, file, log, lv := s.o, s.file, s.log, s.lv
	stopTracing, err := telemetry.Start(ctx, log) // OTEL_* variables; off without them
	if err != nil {
		return err
	}
	// The first closer, so the last to run: it flushes the spans of the
	// deliveries that ended in the engine's Stop.
	s.closers = append(s.closers, stopTracing)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bm := metrics.NewBackend(reg)
	be, err := openBackend(ctx, c, log, bm)
	if err != nil {
		return err
	}
	s.be = be
	s.closers = append(s.closers, func() { s.closeErr = be.close() })
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
	m.SetWindow(c.Window)

	amqpSink := amqpsink.New(amqpsink.Config{DefaultURL: c.AMQP, Logger: log, Clock: s.clk,
		Resolve: lv.broker("amqp", c.AMQP), Guard: lv.policy})
	s.closers = append(s.closers, func() { _ = amqpSink.Close() })
	natsSink := natssink.New(natssink.Config{DefaultURL: c.NATS, Logger: log,
		Resolve: lv.broker("nats", c.NATS), Guard: lv.policy})
	s.closers = append(s.closers, func() { _ = natsSink.Close() })
	httpSink := newHTTPSink(lv, c.MaxInFlight, s.clk)

	eng, err = engine.New(engine.Config{
		Store:        st,
		Sinks:        map[string]sink.Sink{"http": httpSink, "amqp": amqpSink, "nats": natsSink},
		Logger:       log,
		Window:       c.Window,
		MaxLoaded:    c.MaxLoaded,
		MaxInFlight:  c.MaxInFlight,
		MaxPayload:   c.MaxPayload,
		Retention:    c.Retention,
		Index:        be.index(),
		Limiter:      be.limiter(),
		Hooks:        m.Hooks(),
		ShardFor:     be.shardFor,
		CheckTarget:  lv.checkTarget(c.AMQP, c.NATS),
		OwnsSchedule: be.ownsSchedule(),
		Clock:        s.clk,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	s.eng = eng
	if c.DebugListen != "" {
		stopDebug, err := serveDebug(c.DebugListen, log)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, stopDebug)
	}
	eng.SetPolicies(policies(file))
	if be.node != nil {
		be.node.Attach(eng.Cluster())
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

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		_ = eng.Stop(context.Background())
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	// Connections are capped below the file limit, idle ones closed to
	// make room (httpapi.ConnLimiter).
	conns := httpapi.NewConnLimiter(httpapi.ConnLimits{Max: cmp.Or(c.MaxConns, httpapi.MaxConnsDefault(FileLimit())),
		PerClient: c.MaxConnsClient, Logger: log})
	ln = conns.Listener(ln)
	registerConnMetrics(reg, conns)
	api := httpapi.New(httpapi.Config{Engine: eng, Logger: log, MaxPayload: c.MaxPayload, Access: s.acc, Health: health,
		MaxBodyMemory: c.MaxBodyMemory, AllowedOrigins: file.AllowedOrigins,
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
	s.cancelReqs = cancelReqs
	s.closers = append(s.closers, cancelReqs)
	srv := &http.Server{
		Handler:           telemetry.Handler(reqlog.RequestID(api, log), api.Route),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      engine.MaxWait + 30*time.Second, // a claim may wait 30s
		IdleTimeout:       c.IdleTimeout,
		ConnState:         conns.ConnState,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.srv, s.ln = srv, ln
	serve := func() error { return srv.Serve(ln) }
	s.scheme = "http"
	if c.TLSCert != "" {
		s.scheme = "https"
		serve = func() error { return srv.ServeTLS(ln, c.TLSCert, c.TLSKey) }
	}
	go func() {
		err := serve()
		if !errors.Is(err, http.ErrServerClosed) {
			s.failed <- err
		}
		s.served <- err
	}()
	maxConns, perClient := conns.Limits()
	log.Info("toc serving", slog.String("addr", s.URL()), slog.String("store", be.describe),
		slog.Bool("tokens", s.acc != nil), slog.Bool("allow_private_targets", lv.allowPrivate),
		slog.Int("max_connections", maxConns), slog.Int("max_connections_per_client", perClient),
		slog.Duration("idle_timeout", c.IdleTimeout), slog.Int64("max_body_memory", c.MaxBodyMemory))
	if c.Stdout != nil {
		fmt.Fprintf(c.Stdout, "toc listening on %s\n", s.URL())
	}

	reloadDone := make(chan struct{})
	reloadCtx, stopReload := context.WithCancel(ctx)
	go func() {
		defer close(reloadDone)
		watchConfig(reloadCtx, c.ConfigPath, c.ConfigStamp, c.ReloadEvery, log, func(f *config.File) error {
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
			lv.set(f)
			eng.SetPolicies(policies(f))
			api.SetAccess(a)
			return nil
		})
	}()
	s.closers = append(s.closers, func() { stopReload(); <-reloadDone })
	return nil
}

// Addr is the address the API listens on (nil before Start).
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// URL is the API's base URL, like http://127.0.0.1:7070.
func (s *Server) URL() string { return s.scheme + "://" + s.Addr().String() }

// Failed delivers the HTTP server's error if it stops serving by itself
// (not by Shutdown); Shutdown must still be called.
func (s *Server) Failed() <-chan error { return s.failed }

// Shutdown stops the server gracefully: it stops accepting requests, ends
// long polls, leaves the cluster, lets in-flight deliveries finish (or
// puts them back) until ctx ends, and closes the store. It returns ctx's
// error when ctx ran out first (the server is stopped all the same), or
// the store's close error. Only the first call does the work; later ones
// return its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.shutdown(ctx) })
	return s.stopErr
}

func (s *Server) shutdown(ctx context.Context) error {
	if s.srv == nil { // not started, or Start failed and cleaned up
		return nil
	}
	log := s.log
	attrs := []any{}
	if d, ok := ctx.Deadline(); ok {
		attrs = append(attrs, slog.Duration("timeout", time.Until(d).Round(time.Millisecond)))
	}
	log.Info("toc shutting down", attrs...)
	if s.be.disk != nil {
		// From here on, no write waits for disk space (a disk full past
		// the store's reserve) beyond the shutdown.
		s.be.disk.StopWaiting()
	}
	var errs []error
	s.cancelReqs() // long polls end at once
	if err := s.srv.Shutdown(ctx); err != nil {
		log.Warn("http shutdown", slog.String("error", err.Error()))
		_ = s.srv.Close()
		errs = append(errs, err)
	}
	<-s.served
	if s.be.node != nil {
		// Leave first, so the other nodes take this node's share at once;
		// in-flight attempts still end here (claims are atomic).
		if err := s.be.node.Stop(ctx); err != nil {
			log.Warn("leave the cluster", slog.String("error", err.Error()))
			errs = append(errs, err)
		}
	}
	if err := s.eng.Stop(ctx); err != nil {
		// The shutdown timeout ran out: the engine is stopped all the same.
		log.Warn("stop engine", slog.String("error", err.Error()))
		errs = append(errs, err)
	}
	log.Info("toc stopped")
	s.runClosers()
	var ctxErr error
	if len(errs) > 0 && ctx.Err() != nil {
		ctxErr = fmt.Errorf("shutdown: %w", ctx.Err())
	}
	return errors.Join(ctxErr, s.closeErr)
}

// runClosers closes what Start opened, last first.
func (s *Server) runClosers() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
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

func openBackend(ctx context.Context, c Options, log *slog.Logger, bm *metrics.Backend) (*backend, error) {
	if len(c.SQL) == 0 && len(c.Redis) == 0 {
		st, err := openPebble(ctx, pebblestore.Options{Dir: c.Data, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open store in %s: %w", c.Data, err)
		}
		return &backend{store: st, describe: "embedded:" + c.Data, closers: []func() error{st.Close}, disk: st}, nil
	}
	if len(c.SQL) == 0 || len(c.Redis) == 0 {
		return nil, fmt.Errorf("%w: cluster mode needs both --sql and --redis", ErrUsage)
	}
	b := &backend{describe: "cluster"}
	dsns := c.SQL
	for _, dsn := range dsns {
		if err := sqlstore.CheckDSN(dsn); err != nil {
			return nil, fmt.Errorf("%w: --sql %w", ErrUsage, err) // the password masked
		}
	}
	st, err := sqlstore.Open(ctx, sqlstore.Options{DSNs: dsns, Tables: c.SQLTables, MinConns: c.SQLMinConns, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the SQL task library: %w (Options.DSNs is --sql, Options.Tables is --sql-tables; a database an earlier toc set up without --sql-tables has 16)", err)
	}
	b.store, b.shardFor, b.home = st, st.ShardFor, st.Home
	b.closers = append(b.closers, st.Close)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: c.Redis})
	rdb.AddHook(redisindex.MetricsHook(bm))
	b.closers = append(b.closers, rdb.Close)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = b.close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", strings.Join(c.Redis, ","), err)
	}
	x, err := redisindex.New(redisindex.Options{Client: rdb, Prefix: c.RedisPrefix, Slots: c.Slots, HotWindow: c.HotWindow})
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	node, err := cluster.New(cluster.Config{Redis: rdb, Index: x, SQL: st, Prefix: c.RedisPrefix, Logger: log, Near: max(c.Window*3, cluster.NearDefault)})
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	b.node = node
	b.rate = cluster.NewRateLimiter(rdb, c.RedisPrefix+":rate", c.RedisPrefix+":wake")
	return b, nil
}

// newHTTPSink signs each app's pushes with its first signing secret and
// checks every connection's address against the app's callback policy (at
// connect time, so DNS rebinding cannot get around it). Both read the live
// configuration, so a reload applies to the next push. It keeps as many idle
// connections to a receiver as pushes may run at once (maxInFlight).
func newHTTPSink(lv *live, maxInFlight int, clk clock.Clock) *httpsink.Sink {
	return httpsink.New(httpsink.Config{
		Clock:               clk,
		MaxIdleConnsPerHost: maxInFlight,
		Secrets:             func(app string) []string { return lv.push(app).secrets },
		Signature:           func(app string) string { return lv.push(app).signature },
		Guard:               lv.policy,
	})
}

// policy is the address policy of app's connections to what the operator
// did not name: its callback URLs, and brokers it is not allowed.
func (lv *live) policy(app string) netguard.Policy {
	return lv.push(app).policy
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
func checkBrokerTargets(f *config.File, c Options) error {
	err := f.ValidateTargets(c.AMQP, c.NATS)
	var ce *config.Error
	if errors.As(err, &ce) {
		ce.Path = c.ConfigPath
	}
	return err
}

// FileStamp is what tells a file's versions apart: its modification time
// and size (size -1: the file could not be read).
type FileStamp struct {
	mod  time.Time
	size int64
}

// StampOf is the stamp of the file at path now: taken before the file is
// loaded, a change after the read is seen.
func StampOf(path string) FileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return FileStamp{size: -1}
	}
	return FileStamp{mod: fi.ModTime(), size: fi.Size()}
}

// watchConfig reloads the file at path when it changes (checked every
// `every`) or on SIGHUP, and hands each valid version to apply. A file that
// does not parse is logged and ignored: the running settings stay.
//
// The server, not main, listens for SIGHUP: the signal means nothing to
// toc's other commands.
func watchConfig(ctx context.Context, path string, loaded FileStamp, every time.Duration, log *slog.Logger, apply func(*config.File) error) {
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
		now := StampOf(path)
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

// testClock returns the clock the server runs on: nil (the wall clock)
// without Options.TestClock, else a test clock, refused in cluster mode
// and when tokens are configured without an admin token (nobody could
// move it).
func testClock(o Options, file *config.File, log *slog.Logger) (clock.Clock, error) {
	if !o.TestClock {
		return nil, nil
	}
	if len(o.SQL) > 0 || len(o.Redis) > 0 {
		return nil, fmt.Errorf("%w: --test-clock runs on the embedded store only: a cluster's nodes share the wall clock; drop --sql and --redis (or --test-clock)", ErrUsage)
	}
	if file.Tokens() && len(file.AdminTokens) == 0 {
		return nil, fmt.Errorf("%w: --test-clock with tokens configured needs an admin token to move the clock: add admin_tokens to --config (or configure no tokens)", ErrUsage)
	}
	start := o.TestClockStart
	if start.IsZero() {
		start = time.Now()
	}
	tc := clock.NewTest(start)
	log.Warn("running on a test clock: time stands still until POST /v1/admin/clock moves it", slog.Time("now", tc.Now()))
	return tc, nil
}
