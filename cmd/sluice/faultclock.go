//go:build faultclock

package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// EnvFaultClockOffset moves a cluster node's wall clock in a test build
// (go build -tags faultclock): the cluster fault harness runs one node
// ahead of the others to check that a failover keeps the cluster's time.
// Release builds have no such setting (faultclock_off.go).
const EnvFaultClockOffset = "SLUICE_FAULT_CLOCK_OFFSET"

// nodeClock returns the clock a cluster node runs on: the wall clock moved
// by SLUICE_FAULT_CLOCK_OFFSET when set, else nil (the real one).
func nodeClock(log *slog.Logger) (clock.Clock, error) {
	s := os.Getenv(EnvFaultClockOffset)
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", EnvFaultClockOffset, s, err)
	}
	log.Warn("test build: this node's clock is offset", "env", EnvFaultClockOffset, "offset", d)
	return clock.Offset{By: d}, nil
}
