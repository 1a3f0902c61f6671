package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// DebugServer serves the Go runtime's profiles (net/http/pprof) on a
// loopback listener of its own, for diagnosing a running broker: heap and
// goroutine profiles, CPU profiles and execution traces. Nothing else is
// served there, and the profiles are never served on the API listener.
// It has no authentication, which is why Options.Validate accepts only a
// loopback debug_listen: reach it from the broker's host, or through an
// SSH tunnel or kubectl port-forward.
//
// The process owns one, whatever runs in it (a server restarted in
// place by Supervise, every shard of a cluster node): profiles are of the
// whole process.
type DebugServer struct {
	ln  net.Listener
	srv *http.Server
}

// ListenDebug listens on addr (Options.DebugListen, validated) for
// Serve.
func ListenDebug(addr string, log *slog.Logger) (*DebugServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return &DebugServer{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// A CPU profile or trace runs as long as its seconds parameter
		// says; no write timeout.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
}

// Addr is the address the debug listener bound (port 0 resolved).
func (d *DebugServer) Addr() string { return d.ln.Addr().String() }

// Serve serves until Close; it returns nil after Close.
func (d *DebugServer) Serve() error {
	if err := d.srv.Serve(d.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the listener and closes every connection at once, cutting
// off a profile being taken.
func (d *DebugServer) Close() error {
	err := d.srv.Close()
	_ = d.ln.Close() // closed already by srv.Close once Serve has run
	return err
}
