package amqp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/flowrule"
)

// Publisher flow control (issue #13): credit per queue, as RabbitMQ's
// credit flow but decided by the queue's backlog.
//
// The rule. A queue is over its high-water mark when it has at least one
// consumer and more messages ready (visible in the engine) than
//
//	high = max(Options.FlowMinBacklog, Options.FlowCreditFactor × Σ credit)
//
// where a consumer's credit is its prefetch count (flowUnlimitedCredit
// for a consumer without one, flowNoAckCredit in no-ack mode), and also
// more than its floor plus high/2, where the floor is the lowest ready
// count seen since its consumers began to drain it (flowrule: a backlog
// left by a consumer outage is not held against the publishers while the
// consumers shrink it; they are slowed only if they make it grow by half
// a mark). It is back under when its ready count is at most the higher
// of high/2 and floor + high/4 (the low-water mark), or when its last
// consumer goes. A queue without consumers is never over: a backlog kept
// for absent consumers is the normal case, and the memory and disk alarms
// (alarm.go) bound it. From an empty queue the floor is 0, and the marks
// are high and high/2.
//
// The mechanism. The channel goroutine routes a batch of publishes; when a
// queue it routed to is over its mark it raises the queue's gate and puts
// the connection in debt to it (conn.flowDebt). The connection's reader,
// about to hand the next basic.publish to a channel, pays the debt: it
// stops reading the socket (TCP back-pressure: the publisher's writes and
// then its confirms stall) until the gate opens, FlowMaxWait passes, or
// the server closes. Consumers open the gate: after each receive from the
// engine, a consumer whose queue's gate is raised checks the low-water
// mark.
//
// Never a deadlock. The reader only waits while its connection holds no
// unacknowledged consumer delivery: a connection that also consumes must
// go on reading its acks, so the wait ends as soon as one of its consumers
// (on any queue) has a delivery outstanding, and does not start while one
// has. Such connections are therefore throttled little or not at all;
// publish and consume on separate connections (as RabbitMQ recommends) to
// get the back-pressure. The wait is also bounded (FlowMaxWait per
// publish frame), so a queue that consumers stopped draining without
// leaving slows its publishers to a batch per FlowMaxWait instead of
// stopping them. The alarm's wait (waitAlarm) is separate and unbounded.
//
// The backlog is therefore bounded by the high-water mark plus what was in
// flight when the reader stopped: per publishing connection, the commands
// in its channels' inboxes and in its socket buffers (for a confirming
// publisher, at most its window of unconfirmed publishes).

// Flow-control defaults (Options.FlowMinBacklog, FlowCreditFactor,
// FlowMaxWait).
const (
	DefaultFlowMinBacklog   = 1000
	DefaultFlowCreditFactor = 4
	DefaultFlowMaxWait      = time.Second
	// flowUnlimitedCredit is the credit counted for a consumer without a
	// prefetch limit in the high-water mark.
	flowUnlimitedCredit = 1000
	// flowNoAckCredit is the credit counted for a no-ack consumer. It
	// holds no deliveries (each is settled once queued for writing); its
	// buffer is its connection's outgoing queue, so a short ready list
	// keeps it fed and a long one only adds latency.
	flowNoAckCredit = 100
	// flowPoll is how often a throttled reader re-checks what the gate
	// does not signal: its own connection's unacknowledged deliveries,
	// the queue losing its consumers or being purged.
	flowPoll = 20 * time.Millisecond
)

// flowGate is a queue's publisher throttle: raised while the queue is over
// its high-water mark. mu is a leaf lock.
type flowGate struct {
	raised atomic.Bool // fast check for consumers
	mu     sync.Mutex
	open   chan struct{} // closed when the raised gate opens; nil when not raised
}

// raise raises the gate if it is not already; it reports whether this
// call raised it.
func (g *flowGate) raise() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		return false
	}
	g.open = make(chan struct{})
	g.raised.Store(true)
	return true
}

// lower opens the gate, releasing every reader waiting on it; it reports
// whether the gate was raised.
func (g *flowGate) lower() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		return false
	}
	close(g.open)
	g.open = nil
	g.raised.Store(false)
	return true
}

// waitChan returns the channel closed when the gate opens, nil when it is
// not raised.
func (g *flowGate) waitChan() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// flowEnabled reports whether publisher flow control is on.
func (s *Server) flowEnabled() bool { return s.opts.FlowMaxWait > 0 }

// highWater returns q's high-water mark, or 0 when q has no consumer (it
// is then never throttled).
func (s *Server) highWater(q *queue) int {
	t := s.topo
	t.mu.RLock()
	credit := 0
	for cs := range q.consumers {
		switch {
		case cs.noAck:
			credit += flowNoAckCredit
		case cs.prefetch > 0:
			credit += cs.prefetch
		default:
			credit += flowUnlimitedCredit
		}
	}
	n := len(q.consumers)
	t.mu.RUnlock()
	if n == 0 {
		return 0
	}
	return max(s.opts.FlowMinBacklog, s.opts.FlowCreditFactor*credit)
}

// overHighWater reports whether publishes to q should be slowed now: it
// has consumers and more ready messages than its high-water mark. The
// common case (a short queue) costs one lock-free read.
func (s *Server) overHighWater(q *queue) bool {
	ready, ok := s.eng.VisibleHint(q.engine)
	if !ok {
		return false
	}
	if ready <= s.opts.FlowMinBacklog {
		q.trend.Lower(ready, time.Now())
		return false
	}
	hw := s.highWater(q)
	floor := q.trend.Observe(ready, hw > 0, time.Now())
	return flowrule.Over(ready, floor, hw)
}

// relieved reports whether q no longer holds its publishers back: it lost
// its consumers, is gone, or is at or under its low-water mark.
func (s *Server) relieved(q *queue) bool {
	ready, ok := s.eng.VisibleHint(q.engine)
	if !ok {
		return true
	}
	hw := s.highWater(q)
	if hw == 0 {
		return true
	}
	return flowrule.Relieved(ready, q.trend.Observe(ready, true, time.Now()), hw)
}

// noteRouted is called by the channel goroutine after a batch of
// publishes reached q: over q's high-water mark, the connection owes q
// credit and its reader will pause before the next publish.
func (c *conn) noteRouted(q *queue) {
	s := c.s
	if !s.flowEnabled() || !s.overHighWater(q) {
		return
	}
	if q.flow.raise() {
		s.flowQueues.Add(1)
	}
	c.flowDebt.Store(q)
}

// checkFlow is called by a consumer after it took messages from q: when
// q's gate is raised and q is back at its low-water mark, the gate opens.
func (s *Server) checkFlow(q *queue) {
	if !q.flow.raised.Load() || !s.relieved(q) {
		return
	}
	if q.flow.lower() {
		s.flowQueues.Add(-1)
	}
}

// hasUnacked reports whether any channel of the connection has a
// delivery waiting for the client's ack.
func (c *conn) hasUnacked() bool {
	c.chMu.Lock()
	chans := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chans = append(chans, ch)
	}
	c.chMu.Unlock()
	for _, ch := range chans {
		ch.mu.Lock()
		n := len(ch.unacked)
		ch.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// waitFlow pays the connection's flow debt before the reader hands on a
// basic.publish: it stops reading until the queue's gate opens, the queue
// is relieved, the connection has a delivery to be acked, FlowMaxWait
// passes or the connection closes. false means the server is closing.
func (c *conn) waitFlow() bool {
	q := c.flowDebt.Swap(nil)
	if q == nil {
		return true
	}
	s := c.s
	open := q.flow.waitChan()
	if open == nil || c.hasUnacked() {
		return true
	}
	if s.relieved(q) {
		s.checkFlow(q)
		return true
	}
	// Not a silent peer: the reader stopped on purpose.
	c.readBusy.Store(true)
	defer c.readBusy.Store(false)
	start := time.Now()
	s.flowPaused.Add(1)
	defer func() {
		s.flowPaused.Add(-1)
		s.flowWaits.Add(1)
		s.flowWaitNanos.Add(time.Since(start).Nanoseconds())
	}()
	limit := time.NewTimer(s.opts.FlowMaxWait)
	defer limit.Stop()
	poll := time.NewTicker(flowPoll)
	defer poll.Stop()
	for {
		select {
		case <-open:
			return true
		case <-limit.C:
			s.flowTimeouts.Add(1)
			return true
		case <-s.quit:
			return false
		case <-poll.C:
			if c.closing.Load() || c.hasUnacked() {
				return true
			}
			if s.relieved(q) {
				s.checkFlow(q)
				return true
			}
		}
	}
}

// FlowStats are the publisher flow-control counters since the server
// started.
type FlowStats struct {
	// ThrottledPublishes counts the times a connection's reader paused
	// before a basic.publish because a queue it published to was over its
	// high-water mark; TimedOut counts the pauses that ended at
	// FlowMaxWait rather than with the queue relieved.
	ThrottledPublishes, TimedOut uint64
	// ThrottledSeconds is the time readers spent paused, summed over
	// connections.
	ThrottledSeconds float64
	// ThrottlingQueues is how many queues hold their publishers back now,
	// and PausedConnections how many connections' readers are paused
	// for them now.
	ThrottlingQueues, PausedConnections int
}

// FlowStats returns the flow-control counters (lock-free).
func (s *Server) FlowStats() FlowStats {
	return FlowStats{
		ThrottledPublishes: s.flowWaits.Load(),
		TimedOut:           s.flowTimeouts.Load(),
		ThrottledSeconds:   float64(s.flowWaitNanos.Load()) / 1e9,
		ThrottlingQueues:   int(s.flowQueues.Load()),
		PausedConnections:  int(s.flowPaused.Load()),
	}
}
