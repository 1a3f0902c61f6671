// Package server wires Sluice together: the store, the engine, the
// protocol front-ends and the operator surfaces, with their listeners.
// cmd/sluice parses flags and calls New and Run; tests call the same
// functions to start a real broker on 127.0.0.1:0.
//
// Goroutines (besides the engine's scheduler and move tasks, and the
// per-connection goroutines of each front-end): one http.Server.Serve on the
// HTTP listener, one amqp.Server.Serve per AMQP listener, the alert
// evaluation loop and the dashboard sampler. Run blocks until its context
// ends, then stops, in order: alerts and dashboard (they read the engine),
// the listeners, the AMQP server, the engine, and last the store.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/buildinfo"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/dashboard"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/httpbody"
	"github.com/sluicemq/sluice/internal/metrics"
	"github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Server is a running Sluice.
type Server struct {
	opts Options
	log  *slog.Logger
	st   store.Store
	eng  *engine.Engine
	// remote, in a cluster with shards, is the AMQP server's engine for
	// the queues of other shards (remote.go); sessions are the callers
	// this server's leases went to over ShardEnginePath (shardengine.go).
	remote   *remoteEngine
	sessions leaseSessions
	clk      clock.Clock
	metrics  *metrics.Metrics
	alerts   *alerts.Manager
	dash     *dashboard.Dashboard
	amqp     *amqp.Server
	// budget bounds request bodies buffered across HTTP requests.
	budget *httpbody.Budget

	// freeBytes reads a directory's free space (a field so tests can
	// simulate a full disk). diskRefusing is the watermark's state, owned
	// by New and then by watchDisk.
	freeBytes    func(dir string) (uint64, error)
	diskRefusing bool
	// memHigh is the resolved memory_high_watermark (0: off).
	memHigh int64
	alarms  alarms

	// serving is true from the moment Run has its listeners serving until
	// shutdown begins: GET /ready answers 200 only then.
	serving atomic.Bool

	httpLn  net.Listener
	httpSrv *http.Server
	amqpLns []net.Listener // plain, then TLS
	// amqpPlainAddr and amqpsAddr are the AMQP and AMQPS listeners'
	// addresses, "" when off.
	amqpPlainAddr, amqpsAddr string
}

// New validates opts, opens the store and the engine, builds the front-ends
// and binds the listeners (so the addresses are known before Run). clk may
// be nil: the machine's clock with its steps slewed (clock.Slewed). On
// error everything opened so far is closed.
func New(opts Options, log *slog.Logger, clk clock.Clock) (_ *Server, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		// A step of the machine's clock (an NTP step, a resumed VM) would
		// otherwise move every deadline at once: a forward step made
		// in-flight messages visible early. Slewed turns it into 1 % of
		// real time, toward the machine's clock.
		clk = clock.NewSlewed(clock.Real{})
	}
	var tlsCfg *tls.Config
	cert, err := opts.TLS.Open(log.With("component", "tls"))
	if err != nil {
		return nil, err
	}
	if cert != nil {
		tlsCfg = cert.Config()
	}
	if opts.NodeShare > 1 {
		opts = opts.shared(opts.NodeShare)
	}
	s := &Server{clk: clk, opts: opts, log: log, freeBytes: FreeBytes, memHigh: memoryWatermark(opts.MemoryHighWatermark)}
	if opts.freeBytes != nil {
		s.freeBytes = opts.freeBytes
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	if opts.Build == (buildinfo.Info{}) {
		opts.Build = buildinfo.Read("", "", "")
		s.opts.Build = opts.Build
	}
	// Construction follows the dependencies: the engine's observers
	// (metrics, the alerts' dead-letter arrivals, the dashboard's
	// recorder) need no engine and are made first, since the engine
	// reports to them from Open on; the store reports its syncs to
	// metrics; then the engine; then what reads it (below).
	s.metrics = metrics.New(metrics.WithClock(clk), metrics.WithBuildInfo(opts.Build), metrics.WithMaxQueueSeries(opts.MetricsMaxQueueSeries))
	alertOpts := opts.Alerts.options()
	arrivals := alerts.NewArrivals(alertOpts, clk)
	dashRec := dashboard.NewRecorder(clk)
	switch {
	case opts.InjectedStore != nil:
		s.st = opts.InjectedStore
	case opts.Store == "memory":
		s.st = memstore.New()
	default:
		if opts.StoreFS == nil {
			if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
				return nil, fmt.Errorf("data_dir: %w", err)
			}
		}
		st, err := pebblestore.Open(opts.DataDir, pebblestore.Options{FS: opts.StoreFS, Logger: log.With("component", "store"), OnSync: s.metrics.ObserveSync})
		if err != nil {
			return nil, err
		}
		s.st = st
	}
	closers = append(closers, func() { _ = s.st.Close() }) // undoing a failed start: its error is the one reported

	// The AMQP topology routes dead letters for queues with an AMQP
	// dead-letter exchange; the engine needs it before it opens, since
	// its timers may dead-letter at once.
	topo := amqp.NewTopology()
	// Recovery allocates every message it loads at once (FIFO queues'
	// backlogs, each standard queue's window; all of them with the memory
	// store); with the default GC target the collector runs over and over
	// on a heap that only grows. Relax it while loading, then restore it.
	limitRuntimeMemory()
	gc := debug.SetGCPercent(400)
	// With the memory store a backlog is in memory wherever it is kept,
	// and its range reads sort every key: no ready window.
	readyWindow := 0
	if opts.Store == "memory" {
		readyWindow = -1
	}
	eng, err := engine.Open(engine.Options{
		Store:              s.st,
		Clock:              clk,
		Logger:             log.With("component", "engine"),
		Observer:           metrics.Multi(s.metrics, arrivals, dashRec),
		DeadLetterRouter:   topo,
		BodyMemoryBudget:   opts.BodyMemoryBudget,
		ReadyMemoryBudget:  opts.ReadyMemoryBudget,
		MaxQueues:          opts.MaxQueues,
		MaxQueueMessages:   opts.MaxQueueMessages,
		MaxQueueBytes:      opts.MaxQueueBytes,
		LogDrops:           opts.LogDrops,
		ReadyWindow:        readyWindow,
		NameTaken:          opts.NameTaken,
		QueueHeldElsewhere: opts.QueueHeldElsewhere,
		RouteElsewhere:     opts.RouteCall != nil,
		RouteLater:         opts.RouteLater && opts.RouteCall == nil && opts.ShardCall != nil,
		SourcesElsewhere:   opts.SourcesElsewhere,
		HoldDeleted:        opts.HoldDeleted,
		Deleted:            opts.Deleted,
	})
	debug.SetGCPercent(gc)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	closers = append(closers, func() { _ = eng.Close() })
	s.metrics.Registry().MustRegister(s.metrics.QueueCollector(eng))
	s.alerts = alerts.New(eng, arrivals, alertOpts, clk, log.With("component", "alerts"))
	// The overview's DLQ growth column counts over the same window as the
	// dlq_growth alert shown in its banner, so the two agree.
	dopts := dashboard.Options{Logger: log.With("component", "dashboard"), Clock: clk, Alerts: s.alerts}
	dopts.Placement = opts.Placement
	if opts.OtherShards != nil {
		dopts.OtherQueues = otherOverviews(opts.OtherShards)
		dopts.OtherFindings = otherFindings(opts.OtherShards)
	}
	if w := alertOpts.DLQGrowthWindow; w > 0 {
		dopts.GrowthWindow = w
		dopts.History = max(w, 15*time.Minute)
	}
	s.dash = dashboard.New(eng, dashRec, dopts)
	s.metrics.Registry().MustRegister(s.alerts.Collector())
	if cert != nil {
		s.metrics.Registry().MustRegister(cert.Collector())
	}
	if opts.Store != "memory" && !opts.ExternalDiskWatch {
		s.metrics.Registry().MustRegister(newDiskCollector(s))
	}

	// The AMQP server loads the topology even when no AMQP listener is
	// configured: the engine's dead-letter routing depends on it.
	aeng, remote := newRemoteEngine(eng, opts, log.With("component", "amqp"))
	s.remote = remote
	var elsewhere amqp.Elsewhere
	if remote != nil {
		elsewhere = remote
	}
	s.amqp, err = amqp.New(aeng, topo, amqp.Options{Logger: log.With("component", "amqp"), Clock: clk, Users: opts.amqpUsers(),
		MaxMessageSize: opts.AMQPMaxMessageSize, Product: opts.AMQPProduct,
		MaxPartialBytesPerConnection: opts.AMQPMaxPartialBytes, MaxTxBytesPerConnection: opts.AMQPMaxTxBytes,
		MaxConnectionsPerIP: opts.AMQPMaxConnectionsPerIP, MaxHandshakes: opts.AMQPMaxHandshakes,
		FlowMinBacklog: opts.AMQPFlowMinBacklog, FlowCreditFactor: opts.AMQPFlowCreditFactor,
		FlowMaxWait: time.Duration(opts.AMQPFlowMaxWait), Elsewhere: elsewhere})
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	closers = append(closers, func() { _ = s.amqp.Close() })
	if s.diskWatched() {
		if opts.MinFreeDisk < RestartReserve {
			log.Warn("min_free_disk is below what a restart may need to replay the store; a broker stopped at the watermark may not start again",
				"min_free_disk", opts.MinFreeDisk, "restart_reserve", int64(RestartReserve))
		}
		// Before any listener serves: a broker restarted at the
		// watermark refuses new messages from its first request (after the
		// AMQP server exists: the alarm blocks its publishers too).
		s.diskRefusing = s.checkDisk(false)
	}
	// Nothing is dropped without a count: records recovery dropped as
	// leftovers of deleted queues, and publishes the engine refused on
	// channels with neither confirms nor a transaction.
	s.metrics.Registry().MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_recovery_dropped_records_total",
			Help: "Records of deleted queues (writes that raced the delete) dropped by recovery at start."},
			func() float64 { return float64(eng.RecoveryDropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_amqp_refused_publishes_total",
			Help: "AMQP publishes without confirms or a transaction that the engine refused (full reject-publish queue, disk watermark, failed store) and that were dropped."},
			func() float64 { return float64(s.amqp.RefusedPublishes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_transfers_pending",
			Help: "Dead letters and redriven messages on their way from this shard to a queue on another shard (written out of their source, not yet imported there)."},
			func() float64 { return float64(eng.TransfersPending()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_amqp_panics_total",
			Help: "Panics in AMQP connection, channel and consumer goroutines, each contained to its connection (closed with 541)."},
			func() float64 { return float64(s.amqp.Panics()) }),
	)
	s.metrics.Registry().MustRegister(newAMQPCollector(s))
	// Declarations from the config are applied after the disk check: a
	// broker at the watermark still starts, and still refuses messages.
	if err := s.applyDefinitions(Definitions{Queues: opts.Queues, Exchanges: opts.Exchanges, AMQPQueues: opts.AMQPQueues, Bindings: opts.Bindings}); err != nil {
		return nil, fmt.Errorf("declarations in the config: %w", err)
	}

	s.budget = httpbody.NewBudget(opts.HTTPBodyBudget, 0, clk)
	s.httpSrv = &http.Server{
		Handler: s.routes(eng, clk),
		// Slow clients cannot hold a connection by trickling a request:
		// headers must arrive in 10 s and the whole request in 60 s.
		// There is no write timeout: long polls legitimately wait 20 s
		// and dashboard event streams stay open.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", opts.SQSListen)
	if err != nil {
		return nil, fmt.Errorf("sqs_listen: %w", err)
	}
	if opts.WrapListener != nil {
		ln = opts.WrapListener("http", ln)
	}
	closers = append(closers, func() { _ = ln.Close() })
	cl := newConnLimiter(ln, opts.MaxHTTPConnections, opts.MaxHTTPConnectionsPerIP)
	s.httpSrv.ConnState = cl.connState
	ln = cl
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.httpLn = ln
	for _, l := range []struct {
		key, addr string
		tls       bool
	}{{"amqp_listen", opts.AMQPListen, false}, {"amqps_listen", opts.AMQPSListen, true}} {
		if l.addr == "" {
			continue
		}
		aln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.key, err)
		}
		if opts.WrapListener != nil && !l.tls {
			aln = opts.WrapListener("amqp", aln)
		}
		closers = append(closers, func() { _ = aln.Close() })
		if l.tls {
			s.amqpsAddr = aln.Addr().String()
			aln = tls.NewListener(aln, tlsCfg)
		} else {
			s.amqpPlainAddr = aln.Addr().String()
		}
		s.amqpLns = append(s.amqpLns, aln)
	}
	return s, nil
}

// routes builds the HTTP surface: the SQS API (behind SigV4 when
// credentials are configured), the operator endpoints (behind token or
// basic auth when configured), and an open /health.
func (s *Server) routes(eng *engine.Engine, clk clock.Clock) http.Handler {
	opts := s.opts
	ops := http.NewServeMux()
	aopts := admin.Options{Logger: s.log.With("component", "admin"), Clock: clk, OnRequest: s.metrics.ObserveAdminRequest, CheckEnvelope: amqp.CheckEnvelope}
	if opts.OtherShards != nil {
		aopts.OtherQueues = otherAdminQueues(opts.OtherShards)
		aopts.OtherTasks = otherAdminTasks(opts.OtherShards)
	}
	adminH := admin.New(eng, aopts)
	ops.Handle(api.Prefix, adminH)
	if opts.OtherShards != nil {
		ops.Handle("GET /sluice/v1/alerts", s.alerts.Handler(otherAlerts(opts.OtherShards)))
	} else {
		ops.Handle("GET /sluice/v1/alerts", s.alerts)
	}
	ops.Handle("GET /metrics", s.metrics.Handler())
	ops.Handle("/ui/", s.dash)
	ops.Handle("/sluice/v1/dashboard/", s.dash)
	ops.Handle("GET /sluice/v1/advisor", s.dash)
	ops.Handle("GET /sluice/v1/amqp/topology", s.amqp.TopologyHandler())
	ops.Handle("/sluice/v1/definitions", s.definitionsHandler())
	ha := opts.HTTPAuth.Options()
	ha.Logger = s.log.With("component", "httpauth")
	guarded := httpauth.Middleware(ops, ha)

	// One budget for every request body buffered in memory, read once
	// (by SigV4 when it is on, else by the SQS handler).
	budget := s.budget
	var sqsEng sqs.Engine = eng
	if opts.OtherQueueNames != nil {
		sqsEng = listingEngine{Engine: sqsEng, other: opts.OtherQueueNames, log: s.log}
	}
	if s.remote != nil {
		sqsEng = elsewhereEngine{Engine: sqsEng, remote: s.remote}
	}
	sqsAPI := sqs.New(sqsEng, sqs.Options{AccountID: opts.AccountID, Region: opts.Region, Logger: s.log.With("component", "sqs"), Clock: clk, BodyBudget: budget,
		OnRequest: s.metrics.ObserveSQSRequest, SendFlowBacklog: opts.SQSSendFlowBacklog, SendFlowMaxWait: time.Duration(opts.SQSSendFlowMaxWait)})
	s.metrics.Registry().MustRegister(newSQSFlowCollector(sqsAPI))
	var sqsH http.Handler = sqsAPI
	if len(opts.SQSCredentials) > 0 {
		sqsH = sigv4.Middleware(sqsH, sigv4.Options{Region: opts.Region, Credentials: opts.sigv4Credentials(), Clock: clk,
			Logger: s.log.With("component", "sigv4"), BodyBudget: budget, ErrorWriter: sqsAPI.WriteAuthError})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /ready", s.ready)
	mux.Handle(api.Prefix, guarded) // also /sluice/v1/alerts, /dashboard/, /advisor
	mux.Handle("POST /sluice/v1/failures", s.failuresRoute(adminH, guarded, budget, clk))
	mux.Handle("GET /metrics", guarded)
	mux.Handle("/ui/", guarded)
	mux.Handle("/", sqsH)
	if opts.InternalHandler != nil {
		mux.Handle("/sluice/internal/", opts.InternalHandler)
	}
	if opts.ShardViews {
		s.shardViews(mux, adminH, s.dash, s.alerts)
	}
	// A browser opening the root gets the dashboard; an SQS Query GET
	// (it always has a query string) still reaches the SQS API.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			sqsH.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	return withHeaders(newBrowserGuard(mux, opts.AllowedHosts), opts.ResponseHeaders)
}

// withHeaders sets hdr on every response of h (h itself when hdr is
// empty).
func withHeaders(h http.Handler, hdr http.Header) http.Handler {
	if len(hdr) == 0 {
		return h
	}
	hdr = hdr.Clone()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header()[k] = slices.Clone(v)
		}
		h.ServeHTTP(w, r)
	})
}

// failuresRoute serves POST /sluice/v1/failures. Besides an operator
// credential (guarded), a worker may sign its report with its SQS key
// (SigV4, as the worker SDK does): the report is then accepted for the
// queues that key may use (the admin handler checks the allow-list), so
// workers need no admin token.
func (s *Server) failuresRoute(adminH, guarded http.Handler, budget *httpbody.Budget, clk clock.Clock) http.Handler {
	if len(s.opts.SQSCredentials) == 0 {
		return guarded
	}
	signed := sigv4.Middleware(adminH, sigv4.Options{Region: s.opts.Region, Credentials: s.opts.sigv4Credentials(), Clock: clk,
		Logger: s.log.With("component", "sigv4"), BodyBudget: budget,
		// In the admin API's error shape, which the worker SDK reads.
		ErrorWriter: func(w http.ResponseWriter, _ *http.Request, e sigv4.Error) { refuse(w, e.Status, e.Code, e.Message) }})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			signed.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// SQSAddr is the address of the HTTP listener (SQS API, admin API,
// dashboard, metrics).
func (s *Server) SQSAddr() string { return s.httpLn.Addr().String() }

// AMQPAddr is the address of the (first) AMQP listener, "" when off.
func (s *Server) AMQPAddr() string { return cmp.Or(s.amqpPlainAddr, s.amqpsAddr) }

// AMQPSAddr is the AMQPS listener's address ("" without amqps_listen).
func (s *Server) AMQPSAddr() string { return s.amqpsAddr }

// ServeAMQPConn serves an AMQP connection accepted elsewhere (a cluster
// node's public listener, while this server is its leader's) as if its
// own listener had accepted it, and calls done once the server is
// finished with it (amqp.Server.ServeConnThen). With AMQP off it closes
// nc and calls done.
func (s *Server) ServeAMQPConn(nc net.Conn, done func()) {
	if s.amqp == nil {
		_ = nc.Close() // no AMQP here: refused without a word
		done()
		return
	}
	s.amqp.ServeConnThen(nc, done)
}

// BufferedRequestBytes is the buffer capacity request bodies hold now,
// out of the http_body_budget.
func (s *Server) BufferedRequestBytes() int64 { return s.budget.InUse() }

// Engine returns the engine (for in-process tests and tools).
func (s *Server) Engine() *engine.Engine { return s.eng }

// health answers 200 while the broker can accept writes and 503 once its
// store has failed.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := s.eng.Failed(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "failed", "error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok"}) // a prober gone by now cannot be told
}

// ready answers 200 when the broker can take traffic: the store is open
// and has not failed, recovery is done (New returns only after the engine
// has loaded every queue and message, and the AMQP topology), and the
// listeners are serving (Run has started them and shutdown has not
// begun). Otherwise 503, naming the check that fails. Unlike /health,
// which says whether the process is alive and its store sound, /ready is
// for load balancers and orchestrators deciding whether to send traffic.
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	checks := map[string]string{"store": "open", "recovery": "done", "listeners": "serving"}
	ok := true
	if err := s.eng.Failed(); err != nil {
		checks["store"], ok = "failed: "+err.Error(), false
	}
	if !s.serving.Load() {
		checks["listeners"], ok = "not serving", false
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	status := "ready"
	if !ok {
		status = "not ready"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": checks})
}

// Run serves until ctx ends, then shuts down gracefully: background loops
// stop, listeners stop accepting, in-flight requests get a few seconds to
// finish (long polls are ended by closing the engine), AMQP connections are
// closed with connection.close, then the engine and the store close.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1+len(s.amqpLns))
	go func() { errc <- s.httpSrv.Serve(s.httpLn) }()
	for _, ln := range s.amqpLns {
		go func() { errc <- s.amqp.Serve(ln) }()
	}
	bg, stopBG := context.WithCancel(context.Background())
	alertsDone, dashDone, diskDone, memDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { s.alerts.Run(bg); close(alertsDone) }()
	go func() { s.dash.Run(bg); close(dashDone) }()
	go func() { s.watchDisk(bg, diskPollInterval); close(diskDone) }()
	go func() { s.watchMemory(bg, memPollInterval); close(memDone) }()
	var sessions sync.WaitGroup
	if s.opts.ShardViews {
		sessions.Go(func() { s.expireSessions(bg) })
	}
	if s.remote != nil {
		sessions.Go(func() { s.remote.keepalive(bg) })
	}
	if s.opts.ShardCall != nil {
		sessions.Go(func() { s.moveTransfers(bg) })
	}
	s.serving.Store(true)
	s.log.Info("sluice started", s.startedAttrs()...)
	if s.opts.ReadyFile != "" {
		if err := WriteReadyFile(s.opts.ReadyFile, s.SQSAddr(), s.amqpPlainAddr, s.amqpsAddr, s.opts.DebugAddr); err != nil {
			s.log.Error("cannot write ready file", "err", err)
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// Alerts (a bounded moment to deliver pending webhooks) and the
	// dashboard (its event streams would hold Shutdown) stop first.
	stopBG()
	<-alertsDone
	<-dashDone
	<-diskDone
	<-memDone
	sessions.Wait()
	s.shutdown()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if err == nil {
		s.log.Info("sluice stopped")
	}
	return err
}

// startedAttrs are the fields of the "sluice started" line: the build, the
// listeners, where the dashboard is, and the store (its data directory only
// when there is one).
func (s *Server) startedAttrs() []any {
	scheme := "http"
	if s.opts.TLS.Cert != "" {
		scheme = "https"
	}
	attrs := []any{
		"version", s.opts.Build.Version, "commit", s.opts.Build.ShortCommit(),
		"http", s.SQSAddr(), "amqp", s.AMQPAddr(),
		"dashboard", scheme + "://" + s.SQSAddr() + "/ui/",
		"store", s.opts.Store,
	}
	if s.opts.InjectedStore != nil {
		attrs[len(attrs)-1] = "injected"
	}
	if s.opts.Store != "memory" {
		attrs = append(attrs, "data_dir", s.opts.DataDir)
	}
	return attrs
}

func (s *Server) shutdown() {
	s.serving.Store(false)
	s.log.Info("sluice stopping")
	// AMQP first: its consumers requeue their unacknowledged deliveries
	// into the engine, which must still be open. Those of queues on
	// other shards get a moment (remoteGrace), not a call's 30 s each.
	if s.remote != nil {
		defer s.remote.closing(remoteGrace)()
	}
	if err := s.amqp.Close(); err != nil {
		s.log.Warn("closing the AMQP server", "err", err)
	}
	// Closing the engine ends parked long polls so Shutdown does not wait
	// out their 20 s.
	if err := s.eng.Close(); err != nil {
		s.log.Error("closing the engine", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.httpSrv.Shutdown(sctx); err != nil {
		s.log.Warn("HTTP shutdown did not finish within 5 s", "err", err)
	}
	if err := s.st.Close(); err != nil {
		s.log.Error("closing store", "err", err)
	}
}

// Close stops a server that was created but never Run.
func (s *Server) Close() {
	// Listeners that never served: closing them can only fail if they
	// are closed already.
	_ = s.httpLn.Close()
	for _, ln := range s.amqpLns {
		_ = ln.Close()
	}
	if err := s.amqp.Close(); err != nil {
		s.log.Warn("closing the AMQP server", "err", err)
	}
	if err := s.eng.Close(); err != nil {
		s.log.Error("closing the engine", "err", err)
	}
	if err := s.st.Close(); err != nil {
		s.log.Error("closing store", "err", err)
	}
}

// Handler is the HTTP API (SQS, admin, dashboard, metrics, health) as the
// server's own listener serves it. A cluster node that leads calls it
// directly for requests on its public listener instead of forwarding them
// to that listener over loopback.
func (s *Server) Handler() http.Handler { return s.httpSrv.Handler }

// MetricsGatherer gathers the metrics GET /metrics serves: the engine's,
// the APIs', the store's and the process's. A cluster node that leads
// serves them beside its own Raft metrics.
func (s *Server) MetricsGatherer() prometheus.Gatherer { return s.metrics.Registry() }

// WriteReadyFile writes, atomically (a temporary file renamed into place),
// the JSON {"sqs":…,"amqp":…,"pid":…} that tests and scripts read to find a
// broker started on port 0: "amqp" is the plain AMQP listener ("" when
// off), with "amqps" when there is an AMQPS listener and "debug" when
// there is a debug listener (Options.DebugAddr). Cluster nodes write
// theirs with it too.
func WriteReadyFile(path, httpAddr, amqpAddr, amqpsAddr, debugAddr string) error {
	m := map[string]any{"sqs": httpAddr, "amqp": amqpAddr, "pid": os.Getpid()}
	if amqpsAddr != "" {
		m["amqps"] = amqpsAddr
	}
	if debugAddr != "" {
		m["debug"] = debugAddr
	}
	data, _ := json.Marshal(m)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
