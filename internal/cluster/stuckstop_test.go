package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/testlog"
)

// TestStuckLeadershipEndLogsStacks: a leadership's end whose server does
// not stop logs, once the wait passes Node.stuckStop, every goroutine's
// stack — its own wait among them — and goes on waiting; when the
// server stops at last, end returns and says so.
func TestStuckLeadershipEndLogsStacks(t *testing.T) {
	log, logs := testlog.New(slog.LevelInfo)
	n := &Node{log: log, stuckStop: 20 * time.Millisecond}
	_, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l := &leadership{n: n, k: 2, term: 7, stop: cancel, done: done}
	ended := make(chan struct{})
	go func() { defer close(ended); l.end() }()
	poll.CheckFor(t, 20*time.Second, poll.True("the stuck stop to be logged", func() bool {
		return strings.Contains(logs.String(), "has not stopped")
	}))
	select {
	case <-ended:
		t.Fatal("end returned while the server had not stopped")
	default:
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "shard=2") || !strings.Contains(out, "term=7") ||
		!strings.Contains(out, "cluster.(*leadership).end") {
		t.Fatalf("the stuck stop's log lacks its level, shard, term or the waiting goroutine's stack:\n%.2000s", out)
	}
	close(done)
	<-ended
	if !strings.Contains(logs.String(), "has stopped at last") || l.stop != nil {
		t.Fatalf("end after the server stopped: stop %v, log:\n%.500s", l.stop != nil, logs.String())
	}
}
