package bench_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicemq/sluice/internal/server"
)

// TestProfileServer is a profiling hook, not a test. With
// SLUICE_PROFILE_SERVER=DIR it runs the broker in this process on DIR (ready
// file DIR/ready.json) until SIGTERM or SIGINT, so that
//
//	SLUICE_PROFILE_SERVER=/var/tmp/prof go test -run TestProfileServer -cpuprofile cpu.out ./internal/bench
//
// profiles the server alone while `sluice bench sqs -endpoint …` drives it
// from another process (see docs/benchmarks.md).
func TestProfileServer(t *testing.T) {
	dir := os.Getenv("SLUICE_PROFILE_SERVER")
	if dir == "" {
		t.Skip("set SLUICE_PROFILE_SERVER=DIR to run the broker under the profiler")
	}
	opts := server.DefaultOptions()
	opts.DataDir = filepath.Join(dir, "data")
	opts.SQSListen = "127.0.0.1:0"
	opts.AMQPListen = "127.0.0.1:0"
	opts.ReadyFile = filepath.Join(dir, "ready.json")
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(opts, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
