//go:build !faultclock

package main

import (
	"log/slog"

	"github.com/sluicemq/sluice/internal/clock"
)

// nodeClock returns nil: a release build's cluster node runs on the real
// clock (faultclock.go is the test build's).
func nodeClock(*slog.Logger) (clock.Clock, error) { return nil, nil }
