package sqs

import (
	"context"
	"sync/atomic"
	"time"
)

// Send back-pressure (issue #13), off unless Options.SendFlowBacklog is
// set (the server's sqs_send_flow_backlog, off by default). A SendMessage
// or SendMessageBatch to a queue that receivers are draining (a receive
// within sendFlowReceiverWindow) and whose visible backlog is over
// SendFlowBacklog waits, before its write, until its receivers have made
// the backlog smaller than it was when the send began to wait, or it is
// back to half the mark, or SendFlowMaxWait passes, whichever comes first;
// then it is stored and answered as usual. It is never refused for this:
// the only effect is a slower answer, which slows the senders that wait
// for it to the pace of the receivers, so that the backlog of a queue
// being drained stops growing past the mark while senders outrun its
// receivers, and a backlog that is already shrinking (receivers back
// after an outage) costs a send the wait for the next receive, not the
// whole bound. A queue nobody receives from is never slowed (a backlog
// for absent consumers is the normal case; the memory and disk
// watermarks bound it).
//
// The rule looks at depth, not growth, which is why it is opt-in: senders
// to a queue whose old backlog is over the mark wait for its receives even
// while the receivers keep pace with them (docs/benchmarks.md, "SQS send
// back-pressure at a mark of 2,000").
//
// The wait runs on the wall clock, not Options.Clock: it paces a live
// request, like the HTTP server's own timeouts.

const (
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
// with receivers active, and the backlog it saw.
func (h *Handler) overBacklog(queue string) (int, bool) {
	f := &h.flow
	n, ok := h.eng.VisibleHint(queue)
	if !ok || n <= f.backlog {
		return n, false
	}
	at, ok := h.eng.ReceivedAtHint(queue)
	return n, ok && !at.IsZero() && h.clock.Now().Sub(at) <= sendFlowReceiverWindow
}

// slowSend is called before a send's write: over the mark it waits as the
// package comment says. It returns early when ctx ends (the client gave
// up; the send then fails as it would have anyway).
func (h *Handler) slowSend(ctx context.Context, queue string) {
	f := &h.flow
	if f.backlog == 0 {
		return
	}
	began, over := h.overBacklog(queue)
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
		case <-poll.C:
			if n, ok := h.eng.VisibleHint(queue); !ok || n < began || n <= f.backlog/2 {
				return
			}
		}
	}
}
