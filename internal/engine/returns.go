package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Requeue policies (QueueConfig.Requeue): where a delivery that failed and
// is returned for another try goes.
const (
	// RequeueHead puts it back at its original position, to be delivered
	// next: RabbitMQ's behaviour, and the default ("").
	RequeueHead = "head"
	// RequeueTail puts it behind the messages waiting now, so a poison
	// message cannot pin the head. On FIFO queues order within a group
	// is kept: the message stays at the head of its (unlocked) group.
	RequeueTail = "tail"
	// RequeueDelayed holds it for the queue's RetryPolicy backoff
	// (DefaultRetryPolicy without one), then makes it visible. On FIFO
	// queues it stays at the head of its group, which stays locked.
	RequeueDelayed = "delayed"
)

// Unknown-failure policies (QueueConfig.UnknownFailure, DLQ-20). The
// sources disagree: an unclassified failure is usually a bug, and bugs are
// deterministic (default to terminal); or it is a blip, and one retry too
// many is cheaper than a DLQ filled by a gateway hiccup (default to
// retry). Sluice defaults to retry, which is what a nack means in both
// protocols; the delivery limit bounds the cost.
const (
	UnknownRetry      = "retry"
	UnknownDeadLetter = "deadletter"
)

// Crash-loop defaults (DLQ-110): CrashLimit deliveries without a verdict
// within CrashWindow.
const (
	DefaultCrashLimit  = 3
	DefaultCrashWindow = 60 * time.Second
)

// DefaultRetryPolicy is the backoff RequeueDelayed uses on a queue without
// a RetryPolicy: full jitter, base 1 s, cap 30 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Strategy: RetryFullJitter, Base: time.Second, Cap: 30 * time.Second}
}

// returnKind says why deliveries come back to their queue.
type returnKind uint8

const (
	returnHead    returnKind = iota // explicit: original position (no policy)
	returnTail                      // explicit: behind the waiting messages
	returnNack                      // a failure verdict with requeue: the queue's policy
	returnAbandon                   // no verdict (connection lost): counted as a crash, then the policy
)

// Requeue ends the leases of the given deliveries now and returns them
// without counting a failure verdict or a crash: with front to their
// original position, otherwise to the back. Front-ends use it for
// deliveries that never reached the client (a consumer stopped between
// receive and write). A message whose receive count has reached the
// queue's DeadLetterPolicy.MaxReceiveCount is dead-lettered instead
// (ReasonDeliveryLimit), or dropped (counted) without a target.
func (e *Engine) Requeue(queue string, handles []string, front bool) ([]error, error) {
	k := returnTail
	if front {
		k = returnHead
	}
	return e.returnLeases(queue, handles, k)
}

// Nack returns deliveries whose consumer reported a failure and asked for
// another try (AMQP basic.nack or basic.reject with requeue=true). On a
// queue whose UnknownFailure is UnknownDeadLetter such a failure is
// terminal: the message is dead-lettered (ReasonTerminal) when the queue
// has a target. Otherwise the delivery limit is checked first: a message whose receive count has
// reached the queue's MaxReceiveCount is dead-lettered
// (ReasonDeliveryLimit), or dropped and counted without a target. The
// others go where the queue's Requeue policy says (RequeueHead,
// RequeueTail, RequeueDelayed). Durable when it returns.
func (e *Engine) Nack(queue string, handles []string) ([]error, error) {
	return e.returnLeases(queue, handles, returnNack)
}

// Abandon returns deliveries that ended without any verdict: the
// consumer's connection or channel was lost or closed, or its consumer
// timeout fired. Each counts as a crash: when the queue has a CrashLimit
// and a message has crashed that often within CrashWindow, it is
// dead-lettered with ReasonConsumerCrash (kept as it is when the queue has
// no dead-letter target: a crash loop is never a reason to lose a
// message). Otherwise it is treated like Nack. The crash history is part
// of the message's durable state. Durable when it returns.
func (e *Engine) Abandon(queue string, handles []string) ([]error, error) {
	return e.returnLeases(queue, handles, returnAbandon)
}

// Drop deletes deliveries that their consumer rejected without requeue on
// a queue with no dead-letter target (AMQP basic.reject or basic.nack with
// requeue=false). Unlike Delete it counts each message as dropped
// (QueueInfo.Dropped) and logs its id (at Info with Options.LogDrops,
// else at Debug): a drop is data loss and must be visible. Only current,
// in-flight leases are dropped; other handles are settled without effect.
// Durable when it returns.
func (e *Engine) Drop(name string, handles []string) ([]error, error) {
	return e.settleLeased(name, handles, func(q *queue, m *message, _ int64, b *store.Batch) {
		q.dropLocked(m, b)
		e.countDropLocked(q, m, ReasonTerminal) // rejected, with no target
	})
}

// settleLeased applies settle, in one update of queue name, to every
// message still in flight under the current lease of its handle (Drop,
// Reject). Handles whose lease is no longer current (settled by a failure
// report, expired) are settled without effect; malformed ones fail. The
// result has one entry per handle.
func (e *Engine) settleLeased(name string, handles []string, settle func(q *queue, m *message, now int64, b *store.Batch)) ([]error, error) {
	errs := make([]error, len(handles))
	err := e.update(name, func(q *queue, now int64, b *store.Batch) error {
		for i, h := range handles {
			m, current, _, err := q.lookupLeaseLocked(h)
			switch {
			case err != nil:
				errs[i] = err
			case m == nil || !current || m.state != stateInFlight:
				// Already settled: nothing to do.
			default:
				settle(q, m, now, b)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// countDropLocked counts and logs a message dropped from q.
func (e *Engine) countDropLocked(q *queue, m *message, reason string) {
	q.stats.dropped.Add(1)
	lvl := slog.LevelDebug
	if e.logDrops {
		lvl = slog.LevelInfo
	}
	e.log.Log(context.Background(), lvl, "message dropped: nowhere to dead-letter it",
		"queue", q.name, "reason", reason, "message", FormatID(m.id), "receives", m.recvCount)
}

// returnLeases implements Requeue, Nack and Abandon.
func (e *Engine) returnLeases(name string, handles []string, kind returnKind) ([]error, error) {
	errs := make([]error, len(handles))
	err := e.update(name, func(q *queue, now int64, b *store.Batch) error {
		e.returnLeasesLocked(q, handles, kind, errs, now, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// returnLeasesLocked returns (or dead-letters) each handle's delivery, one
// error per handle in errs.
func (e *Engine) returnLeasesLocked(q *queue, handles []string, kind returnKind, errs []error, now int64, b *store.Batch) {
	limit := 0
	if p := q.cfg.DeadLetter; p != nil {
		limit = p.MaxReceiveCount
	}
	for i, h := range handles {
		m, current, _, err := q.lookupLeaseLocked(h)
		switch {
		case err != nil:
			errs[i] = err
		case m == nil || !current:
			errs[i] = ErrMessageNotAvailable
		case m.state != stateInFlight:
			errs[i] = ErrMessageNotInflight
		case kind == returnAbandon && q.noteCrashLocked(m, now) && e.canDeadLetter(q):
			e.quarantineLocked(q, m, now, b)
		case kind == returnNack && q.cfg.UnknownFailure == UnknownDeadLetter && e.canDeadLetter(q):
			e.deadLetterLocked(q, m, ReasonTerminal, now, b)
		case limit > 0 && int(m.recvCount) >= limit:
			e.deadLetterLocked(q, m, ReasonDeliveryLimit, now, b)
		case m.ttlDue(now):
			q.expireLocked(m, now, b)
			q.reportExpiredLocked()
		default:
			q.placeReturnedLocked(m, kind, now)
			q.writeStateLocked(m, b)
		}
	}
	q.enforceLimitsLocked(now, b)
}

// placeReturnedLocked makes a returned in-flight message ready again where
// kind and the queue's Requeue policy say.
func (q *queue) placeReturnedLocked(m *message, kind returnKind, now int64) {
	mode := RequeueHead
	switch kind {
	case returnTail:
		mode = RequeueTail
	case returnNack, returnAbandon:
		if q.cfg.Requeue != "" {
			mode = q.cfg.Requeue
		}
	}
	m.parked = true // its wait (if any) is a retry delay, not a lease
	if kind == returnNack || kind == returnAbandon {
		if d := q.admitRetryLocked(m, now); d > 0 {
			m.visibleAt = now + int64(d)
			q.setStateLocked(m, stateDelayed)
			return
		}
	}
	if mode == RequeueDelayed {
		p := DefaultRetryPolicy()
		if q.cfg.Retry != nil {
			p = *q.cfg.Retry
		}
		if d := p.Backoff(m.id, int(m.recvCount)); d > 0 {
			m.visibleAt = now + int64(d)
			q.setStateLocked(m, stateDelayed)
			return
		}
	}
	m.visibleAt = now
	q.setStateLocked(m, stateVisible)
	if mode == RequeueHead && !q.fifo() {
		// setStateLocked appended it; move it to its original place
		// and its group to the front of the rotation.
		g := m.group
		g.msgs.remove(m)
		g.msgs.insertFromFront(m)
		if g.available && q.available.head != g {
			q.available.remove(g)
			q.available.pushFront(g)
		}
	}
}

// noteCrashLocked records that m's delivery ended without a verdict at now
// and reports whether it has now crashed CrashLimit times within
// CrashWindow. Queues without a CrashLimit keep no history.
func (q *queue) noteCrashLocked(m *message, now int64) bool {
	limit := q.cfg.CrashLimit
	if limit <= 0 {
		return false
	}
	window := q.cfg.CrashWindow
	if window <= 0 {
		window = DefaultCrashWindow
	}
	x := m.extension()
	kept := x.crashes[:0]
	for _, t := range x.crashes {
		if t > now-int64(window) {
			kept = append(kept, t)
		}
	}
	x.crashes = append(kept, now)
	if len(x.crashes) > limit {
		x.crashes = x.crashes[len(x.crashes)-limit:]
	}
	return len(x.crashes) >= limit
}

// quarantineLocked dead-letters a crash-looping message with
// ReasonConsumerCrash and says so in the log (the event operators look
// for: the consumer, not the message, may be what is broken).
func (e *Engine) quarantineLocked(q *queue, m *message, now int64, b *store.Batch) {
	n := len(m.ext.crashes)
	targets := e.deadLetterLocked(q, m, ReasonConsumerCrash, now, b)
	e.log.Warn("crash loop: message quarantined", "queue", q.name, "message", FormatID(m.id),
		"crashes", n, "window", q.crashWindow(), "receives", m.recvCount, "targets", targets)
}

func (q *queue) crashWindow() time.Duration {
	if q.cfg.CrashWindow > 0 {
		return q.cfg.CrashWindow
	}
	return DefaultCrashWindow
}

// verdictGiven reports whether m's consumer reported a failure for
// its current lease (then the lease's end is that verdict, not a crash).
func (m *message) verdictGiven() bool {
	return m.ext != nil && m.ext.failure != nil && m.ext.failure.Attempt == int(m.recvCount)
}

// leaseEndedLocked handles an in-flight message whose lease ran out (the
// timer in advanceLocked): without a verdict it counts as a crash, and a
// crash loop is quarantined. It reports whether m left the queue.
func (q *queue) leaseEndedLocked(m *message, now int64, b *store.Batch) bool {
	if q.cfg.CrashLimit <= 0 || m.verdictGiven() {
		return false
	}
	if x := m.ext; x != nil && len(x.crashes) > 0 && x.crashes[len(x.crashes)-1] >= m.visibleAt {
		// Already counted: recovery replays the end of a lease whose
		// crash was recorded before the restart.
		return false
	}
	if q.noteCrashLocked(m, now) && q.eng.canDeadLetter(q) {
		q.eng.quarantineLocked(q, m, now, b)
		return true
	}
	q.writeStateLocked(m, b)
	return false
}

// LeaseEnd returns when the current lease of the delivery with this
// receipt handle ends. ErrMessageNotAvailable when the handle is no longer
// the message's lease (or the message is gone), ErrMessageNotInflight when
// the lease was ended. A consumer extends its lease with ChangeVisibility
// (over SQS: ChangeMessageVisibility); the AMQP front-end reads it here to
// extend its consumer timeout to match.
func (e *Engine) LeaseEnd(queue, handle string) (time.Time, error) {
	q, err := e.lockQueue(queue)
	if err != nil {
		return time.Time{}, err
	}
	defer e.unlockAndInsertCopies(q)
	m, current, _, err := q.lookupLeaseLocked(handle)
	switch {
	case err != nil:
		return time.Time{}, err
	case m == nil || !current:
		return time.Time{}, ErrMessageNotAvailable
	case m.state != stateInFlight:
		return time.Time{}, ErrMessageNotInflight
	}
	return fromNanos(m.visibleAt), nil
}
