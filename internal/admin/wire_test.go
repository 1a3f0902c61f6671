package admin

import (
	"slices"
	"testing"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestWireConstantsMatchEngine: package api is its own module and cannot
// import the engine, so it writes the engine's wire-visible values out
// again; this test fails when the two drift apart.
func TestWireConstantsMatchEngine(t *testing.T) {
	if api.MaxRedriveRate != engine.MaxMoveRate {
		t.Errorf("api.MaxRedriveRate = %d, engine.MaxMoveRate = %d", api.MaxRedriveRate, engine.MaxMoveRate)
	}
	reasons := []string{engine.ReasonMaxReceives, engine.ReasonTerminal, engine.ReasonExpired, engine.ReasonQueueFull, engine.ReasonDeliveryLimit}
	if got := api.DeadLetterReasons(); !slices.Equal(got, reasons) {
		t.Errorf("api.DeadLetterReasons() = %q, the engine's reasons are %q", got, reasons)
	}
	for _, c := range [][2]string{
		{api.TaskRunning, engine.TaskRunning}, {api.TaskCompleted, engine.TaskCompleted},
		{api.TaskCancelling, engine.TaskCancelling}, {api.TaskCancelled, engine.TaskCancelled},
		{api.TaskFailed, engine.TaskFailed}, {api.TaskPaused, engine.TaskPaused},
	} {
		if c[0] != c[1] {
			t.Errorf("api task status %q, engine's %q", c[0], c[1])
		}
	}
}
