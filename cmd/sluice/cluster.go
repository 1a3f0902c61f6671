package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicemq/sluice/internal/cluster"
	"github.com/sluicemq/sluice/internal/server"
)

// runClusterNode runs `sluice server` with a [cluster] section (or
// --node-id/--peers): this process is one member of the Raft group.
func runClusterNode(opts server.Options, log *slog.Logger, stderr io.Writer) int {
	clk, err := nodeClock(log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice server: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Supervise restarts the node in place when a shard's store failed on
	// a full disk and space is back; every other failure ends it.
	started := false
	err = cluster.Supervise(ctx, cluster.Options{Server: opts, Logger: log, Clock: clk}, func(*cluster.Node) { started = true })
	switch {
	case err != nil && !started:
		fmt.Fprintf(stderr, "sluice server: %v\n", err)
		return 1
	case err != nil:
		log.Error("cluster node stopped", "err", err)
		return 1
	}
	return 0
}
