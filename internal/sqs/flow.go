package sqs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/flowrule"
)

// Send back-pressure (issue #13), on by default in the server
// (sqs_send_flow_backlog, 2,000; 0 turns it off). A SendMessage or
// SendMessageBatch to a queue that receivers are draining (a receive
// within sendFlowReceiverWindow) whose visible backlog is over the mark
// SendFlowBacklog and over its floor plus half the mark waits, before its
// write, until its receivers have made the backlog smaller than it was when
// the send began to wait, or it is back to the higher of half the mark and
// the floor plus a quarter of the mark, or SendFlowMaxWait passes,
// whichever comes first; then it is stored and answered as usual. It is
// never refused for this: the only effect is a slower answer, which slows
// the senders that wait for it to the pace of the receivers.
//
// The floor (flowrule) is the lowest backlog seen since receivers began to
// drain the queue. From an empty queue it is 0, and the rule holds the
// backlog of a queue whose senders outrun its receivers near the mark. A
// backlog left by an outage is not held against the senders: while the
// receivers shrink it, the floor follows it down and no send waits; if
// the senders outrun the receivers there, they wait once they have added
// half a mark above the floor. A queue nobody receives from is never
// slowed (a backlog for absent consumers is the normal case; the memory
// and disk watermarks bound it).
//
// The wait runs on the wall clock, not Options.Clock: it paces a live
// request, like the HTTP server's own timeouts.

const (
	// DefaultSendFlowBacklog is the server's default mark
	// (sqs_send_flow_backlog): just under the engine's 2,048-message ready
	// window, so that a queue whose senders outrun its receivers stays
	// warm in memory.
	DefaultSendFlowBacklog = 2000
	// DefaultSendFlowMaxWait is SendFlowMaxWait when SendFlowBacklog is
	// set and SendFlowMaxWait is not.
	DefaultSendFlowMaxWait = 200 * time.Millisecond
	// MaxSendFlowMaxWait bounds SendFlowMaxWait.
	MaxSendFlowMaxWait = time.Second
	// sendFlowReceiverWindow: a queue received from within this time
	// has active receivers.
	sendFlowReceiverWindow = time.Second
	// sendFlowPoll is how often a waiting send re-reads the backlog.
	sendFlowPoll = 5 * time.Millisecond
)

// sendFlow holds the back-pressure settings and counters.
type sendFlow struct {
	backlog int           // 0: off
	maxWait time.Duration // > 0 when backlog is set
	waiting atomic.Int64  // sends waiting now
	waits   atomic.Uint64 // sends that waited
	timeout atomic.Uint64 // of which waited the whole maxWait
	nanos   atomic.Int64  // time spent waiting
	trends  sync.Map      // queue name → *flowrule.Trend, its backlog's floor
	made    atomic.Uint64 // trends made, for sweeping
}

// sendFlowSweepEvery: every this many trends made, the ones of queues that
// no longer exist are dropped (a queue deleted over SQS drops its own at
// once; one deleted over AMQP or the admin API is found by the sweep), so
// the map holds at most the live queues plus this many.
const sendFlowSweepEvery = 64

// trend returns queue's backlog floor tracker. exists reports whether a
// queue name still names a queue (for the sweep).
func (f *sendFlow) trend(queue string, exists func(string) bool) *flowrule.Trend {
	if t, ok := f.trends.Load(queue); ok {
		return t.(*flowrule.Trend)
	}
	t, loaded := f.trends.LoadOrStore(queue, new(flowrule.Trend))
	if !loaded && f.made.Add(1)%sendFlowSweepEvery == 0 {
		f.trends.Range(func(k, _ any) bool {
			if name := k.(string); name != queue && !exists(name) {
				f.trends.Delete(name)
			}
			return true
		})
	}
	return t.(*flowrule.Trend)
}

// SendFlowStats are the send back-pressure counters since the handler
// was made.
type SendFlowStats struct {
	// Throttled counts sends (SendMessage or SendMessageBatch requests)
	// that waited; TimedOut those that waited the whole SendFlowMaxWait.
	Throttled, TimedOut uint64
	// ThrottledSeconds is the time they waited, summed.
	ThrottledSeconds float64
	// Waiting is the number of sends waiting now.
	Waiting int64
}

// SendFlowStats returns the send back-pressure counters (lock-free).
func (h *Handler) SendFlowStats() SendFlowStats {
	f := &h.flow
	return SendFlowStats{Throttled: f.waits.Load(), TimedOut: f.timeout.Load(),
		ThrottledSeconds: float64(f.nanos.Load()) / 1e9, Waiting: f.waiting.Load()}
}

// overBacklog reports whether queue is over the send back-pressure mark
// with receivers active (see the package comment), the backlog it saw and
// the queue's trend (nil when there is no such queue: a name that is not
// a queue makes no map entry).
func (h *Handler) overBacklog(queue string) (int, *flowrule.Trend, bool) {
	f := &h.flow
	n, ok := h.eng.VisibleHint(queue)
	if !ok {
		return n, nil, false
	}
	tr := f.trend(queue, h.queueExists)
	if n <= f.backlog {
		tr.Lower(n, time.Now())
		return n, tr, false
	}
	at, ok := h.eng.ReceivedAtHint(queue)
	draining := ok && !at.IsZero() && h.clock.Now().Sub(at) <= sendFlowReceiverWindow
	floor := tr.Observe(n, draining, time.Now())
	return n, tr, draining && flowrule.Over(n, floor, f.backlog)
}

// queueExists reports whether name is a queue now (without a lock).
func (h *Handler) queueExists(name string) bool {
	_, ok := h.eng.VisibleHint(name)
	return ok
}

// slowSend is called before a send's write: over the mark it waits as the
// package comment says. It returns early when ctx ends (the client gave
// up; the send then fails as it would have anyway).
func (h *Handler) slowSend(ctx context.Context, queue string) {
	f := &h.flow
	if f.backlog == 0 {
		return
	}
	began, tr, over := h.overBacklog(queue)
	if !over {
		return
	}
	start := time.Now()
	f.waiting.Add(1)
	defer func() {
		f.waiting.Add(-1)
		f.waits.Add(1)
		f.nanos.Add(time.Since(start).Nanoseconds())
	}()
	limit := time.NewTimer(f.maxWait)
	defer limit.Stop()
	poll := time.NewTicker(sendFlowPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			f.timeout.Add(1)
			return
		case now := <-poll.C:
			n, ok := h.eng.VisibleHint(queue)
			if !ok || n < began || flowrule.Relieved(n, tr.Observe(n, true, now), f.backlog) {
				return
			}
		}
	}
}
