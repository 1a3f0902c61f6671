package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/server"
)

// skewedClock is the wall clock moved by a fixed offset: a node whose time
// sync is off.
type skewedClock struct {
	clock.Real
	by time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Add(c.by) }

func (c skewedClock) NewTimerAt(t time.Time) clock.Timer { return c.Real.NewTimerAt(t.Add(-c.by)) }

// lockedBuffer is a log sink safe for the node's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClockOffsetMeasured: each follower measures its wall clock against
// the leader's at every status report and the leader's view shows every
// member's offset, so a node whose clock is 3 s off is seen (view,
// /metrics, a warning in its log) before it ever leads; nodes in sync
// show about 0 and do not warn.
func TestClockOffsetMeasured(t *testing.T) {
	skew := []time.Duration{0, 0, 3 * time.Second}
	logs := make([]*lockedBuffer, 3)
	i := 0
	nodes := threeNodesWith(t, func(*server.Options) {}, func(n *Node) {
		n.clk = skewedClock{by: skew[i]}
		logs[i] = &lockedBuffer{}
		n.log = slog.New(slog.NewTextHandler(logs[i], nil))
		i++
	})
	var v ClusterView
	poll.CheckFor(t, 30*time.Second, poll.True("every member's clock offset in the leader's view", func() bool {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if v, err = nodes[0].leaderView(ctx); err != nil || len(v.Members) != 3 {
			return false
		}
		for _, m := range v.Members {
			if m.ClockOffsetMs == nil {
				return false
			}
		}
		return true
	}))
	leader := int(v.Leader) - 1
	for _, m := range v.Members {
		want := (skew[m.ID-1] - skew[leader]).Seconds() * 1000
		if got := *m.ClockOffsetMs; math.Abs(got-want) > 200 {
			t.Errorf("member %d: clock offset %.1f ms in the view, want about %.0f ms", m.ID, got, want)
		}
	}

	for k, n := range nodes {
		if k == leader {
			continue
		}
		vals, _ := scrape(t, n)
		want := (skew[k] - skew[leader]).Seconds()
		if got, ok := vals["sluice_cluster_clock_offset_seconds"]; !ok || math.Abs(got-want) > 0.2 {
			t.Errorf("node %d: sluice_cluster_clock_offset_seconds = %v (exported: %v), want about %.1f", k+1, got, ok, want)
		}
		warned := strings.Contains(logs[k].String(), "clock disagrees with the leader")
		if off := skew[k] - skew[leader]; off.Abs() > clockSkewWarn && !warned {
			t.Errorf("node %d, %v off the leader's clock, logged no warning:\n%s", k+1, off, logs[k])
		} else if off.Abs() < clockSkewWarn && warned {
			t.Errorf("node %d, in sync with the leader, warned:\n%s", k+1, logs[k])
		}
	}
	if vals, _ := scrape(t, nodes[leader]); vals["sluice_cluster_clock_offset_seconds"] != 0 {
		t.Errorf("the leader's own offset = %v, want 0", vals["sluice_cluster_clock_offset_seconds"])
	}
}
