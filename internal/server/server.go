// Package server wires Sluice together: the store, the engine and the
// protocol front-ends, with their listeners. cmd/sluice parses flags and
// calls New and Run; tests call the same functions to start a real broker
// on 127.0.0.1:0.
//
// Goroutines: one per listener (http.Server.Serve) plus the engine's
// scheduler; Run blocks until its context ends, then shuts the listeners
// down, closes the engine and finally the store.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/metrics"
	"github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Server is a running Sluice.
type Server struct {
	opts    Options
	log     *slog.Logger
	st      store.Store
	eng     *engine.Engine
	metrics *metrics.Metrics
	alerts  *alerts.Manager
	sqsLn   net.Listener
	sqsSrv  *http.Server
}

// New validates opts, opens the store and the engine, and binds the
// listeners (so the addresses are known before Run). Clock may be nil.
func New(opts Options, log *slog.Logger, clk clock.Clock) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	s := &Server{opts: opts, log: log}
	s.metrics = metrics.New(metrics.WithClock(clk))
	s.alerts = alerts.New(nil, opts.Alerts.options(), clk, log.With("component", "alerts"))
	switch opts.Store {
	case "memory":
		s.st = memstore.New()
	default:
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("data_dir: %w", err)
		}
		st, err := pebblestore.Open(opts.DataDir, pebblestore.Options{Logger: log.With("component", "store"), OnSync: s.metrics.ObserveSync})
		if err != nil {
			return nil, err
		}
		s.st = st
	}
	// Recovery allocates every queued message at once; with the default GC
	// target the collector runs over and over on a heap that only grows.
	// Relax it while loading, then restore it.
	gc := debug.SetGCPercent(400)
	eng, err := engine.Open(engine.Options{
		Store:    s.st,
		Clock:    clk,
		Logger:   log.With("component", "engine"),
		Observer: metrics.Multi(s.metrics, s.alerts.Observer()),
	})
	debug.SetGCPercent(gc)
	if err != nil {
		s.st.Close()
		return nil, err
	}
	s.eng = eng
	s.metrics.Attach(eng)
	s.alerts.Attach(eng)
	s.metrics.Registry().MustRegister(s.alerts.Collector())
	ln, err := net.Listen("tcp", opts.SQSListen)
	if err != nil {
		eng.Close()
		s.st.Close()
		return nil, fmt.Errorf("sqs_listen: %w", err)
	}
	s.sqsLn = ln
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.Handle(admin.Prefix, admin.New(eng, admin.Options{Logger: log.With("component", "admin"), Clock: clk}))
	mux.Handle("GET /sluice/v1/alerts", s.alerts)
	mux.Handle("GET /metrics", s.metrics.Handler())
	mux.Handle("/", sqs.New(eng, sqs.Options{AccountID: opts.AccountID, Region: opts.Region, Logger: log.With("component", "sqs"), Clock: clk}))
	s.sqsSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// SQSAddr is the address the SQS API listens on.
func (s *Server) SQSAddr() string { return s.sqsLn.Addr().String() }

// Engine returns the engine (for in-process tests and tools).
func (s *Server) Engine() *engine.Engine { return s.eng }

// health answers 200 while the broker can accept writes and 503 once its
// store has failed.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := s.eng.Failed(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"status": "failed", "error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
}

// Run serves until ctx ends, then shuts down gracefully: listeners stop
// accepting, in-flight requests get a few seconds to finish (long polls are
// ended by closing the engine), then the engine and store close.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.sqsSrv.Serve(s.sqsLn) }()
	actx, stopAlerts := context.WithCancel(context.Background())
	alertsDone := make(chan struct{})
	go func() { s.alerts.Run(actx); close(alertsDone) }()
	defer func() { stopAlerts(); <-alertsDone }()
	s.log.Info("sluice started", "sqs", s.SQSAddr(), "store", s.opts.Store, "data_dir", s.opts.DataDir)
	if s.opts.ReadyFile != "" {
		if err := writeReadyFile(s.opts.ReadyFile, s.SQSAddr()); err != nil {
			s.log.Error("cannot write ready file", "err", err)
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// Alerts stop first (they read the engine, and get a bounded moment
	// to deliver pending webhooks), then the listeners, engine and store.
	stopAlerts()
	<-alertsDone
	s.shutdown()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) shutdown() {
	s.log.Info("sluice stopping")
	// Closing the engine first ends parked long polls so Shutdown does
	// not wait out their 20 s.
	s.eng.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.sqsSrv.Shutdown(sctx)
	if err := s.st.Close(); err != nil {
		s.log.Error("closing store", "err", err)
	}
}

// Close stops a server that was created but never Run.
func (s *Server) Close() {
	s.sqsLn.Close()
	s.eng.Close()
	s.st.Close()
}

func writeReadyFile(path, sqsAddr string) error {
	data, _ := json.Marshal(map[string]any{"sqs": sqsAddr, "pid": os.Getpid()})
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
