package bench_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/bench"
	"github.com/sluicemq/sluice/test/crash"
)

// TestRunSQSAgainstServer runs the load generator for about a second against
// the real sluice binary (built from ./cmd/sluice, or $SLUICE_BIN).
func TestRunSQSAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		var err error
		if bin, err = crash.Build(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	srv, err := crash.Start(context.Background(), bin, dir, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(10 * time.Second); err != nil {
			t.Log(err)
		}
	}()

	for _, run := range []struct {
		fifo    bool
		backlog int
	}{{false, 0}, {true, 0}, {false, 300}} {
		fifo := run.fifo
		o := bench.DefaultSQSOptions()
		o.Endpoint, o.Duration, o.Producers, o.Consumers, o.FIFO, o.PID = srv.URL(), time.Second, 2, 2, fifo, srv.PID
		o.Backlog = run.backlog
		var out strings.Builder
		res, err := bench.RunSQS(context.Background(), o, &out)
		t.Logf("fifo=%t\n%s", fifo, out.String())
		if err != nil {
			t.Fatalf("fifo=%t: %v\nserver log: %s", fifo, err, crash.Tail(dir))
		}
		if res.Sent == 0 || res.Deleted != res.Sent || res.Received < res.Sent {
			t.Errorf("fifo=%t: sent %d, received %d, deleted %d", fifo, res.Sent, res.Received, res.Deleted)
		}
		if len(res.Errors) != 0 {
			t.Errorf("fifo=%t: errors %v", fifo, res.Errors)
		}
		if res.Latency.Count != res.Received || res.Latency.P99 <= 0 {
			t.Errorf("fifo=%t: latency %+v", fifo, res.Latency)
		}
		if res.ServerCPU <= 0 {
			t.Errorf("fifo=%t: no server CPU measured", fifo)
		}
		// The old backlog is received before this run's messages (it was
		// sent first), except what the run's end leaves behind.
		if res.Backlog != run.backlog || res.Stale > uint64(run.backlog) || run.backlog > 0 && res.Stale == 0 {
			t.Errorf("backlog %d: reported %d, stale %d", run.backlog, res.Backlog, res.Stale)
		}
	}
}
