package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// Connection deliveries (ReceiveRequest.Session: AMQP) live in memory
// (ADR 0014).
//
// A delivery to a connection is a lease that dies with the engine that
// granted it: when the process ends (kill -9, power loss, a clean stop)
// or, in a cluster, leadership moves, its connections are gone, and the
// engine that opens next must make the message deliverable at once. So
// such a lease is not written: the receive leaves the message's records as
// they were, and a restart finds the message as it was before the
// delivery, visible. (Until ADR 0014, every delivery wrote a state record
// with the lease and the receive count, which a restart then read only to
// end the lease; in a cluster that was one Raft proposal per consumer
// receive.) What a delivery changes that must outlive the engine is
// written when the delivery ends: an ack deletes the message, a nack, a
// reject with requeue and a channel or connection that closes write its
// state with the receive count (returns.go), a reject without requeue
// dead-letters it.
//
// What a crash forgets is the receive of a delivery still unacknowledged
// when the engine died: its receive count comes back one lower (as it
// could before, since leases were written without a sync), and, without
// more, the AMQP redelivered flag of its next delivery would be false for
// a message that was delivered before. The session mark keeps the flag:
// a per-queue record (sessionMarkKey) that is above the sequence number of
// every message delivered to a connection. A delivery past the mark
// raises it, sessionMarkStep ahead, in the receive's batch, so the mark
// costs one small write per sessionMarkStep deliveries in sequence order.
// The engine that opens next reads the mark, and every message below it
// that its records show as never received is marked maybeDelivered:
// delivered with Redelivered set. That may flag a few messages that were
// never delivered (at most about sessionMarkStep of each queue, and every
// message a FIFO queue's consumers skipped past): AMQP allows a
// redelivered flag on a message that was not delivered before ("may have
// been"), never a missing one.
//
// The mark is written without a sync, like the leases were: a crash can
// lose it together with the deliveries it covered only if no synced write
// (a send, a delete, an ack) followed them; then those deliveries come
// back without the flag, as their leases came back uncounted before.

// sessionMarkStep is how far past the delivered message a raised session
// mark goes.
const sessionMarkStep = 1024

// coverSessionLocked makes sure the session mark is above seq, the
// sequence number of a message being delivered to a connection, raising it
// in b when it is not.
func (q *queue) coverSessionLocked(seq uint64, b *store.Batch) {
	if seq < q.sessMark {
		return
	}
	q.sessMark = seq + sessionMarkStep
	b.Set(sessionMarkKey(q.id), binary.BigEndian.AppendUint64(nil, q.sessMark))
}

// noteMaybeDelivered marks m, just read from the store, when it may have
// been delivered to a connection of an earlier run (see above).
func (q *queue) noteMaybeDelivered(m *message) {
	if m.recvCount == 0 && m.seq < q.sessMarkOpen {
		m.maybeDelivered = true
	}
}

// recoverSessionMarks reads every queue's session mark. A mark of a queue
// that no longer exists (a receive's write that raced the queue's delete)
// is ignored; nothing else reads it.
func recoverSessionMarks(st store.Store, byID map[uint32]*queue) error {
	return st.Scan([]byte{prefixSessionMark}, func(k, v []byte) error {
		if len(k) != 5 || len(v) != 8 {
			return fmt.Errorf("%w: session mark %x", errCorrupt, k)
		}
		if q := byID[binary.BigEndian.Uint32(k[1:])]; q != nil {
			q.sessMark = binary.BigEndian.Uint64(v)
			q.sessMarkOpen = q.sessMark
		}
		return nil
	})
}

// lowerSessionMarks is Close's: on a queue where no delivery to a
// connection is still in flight (the front-ends returned them, with their
// receive counts, before closing the engine), every message this run
// delivered has been deleted or has a state record that counts the
// receive, so the mark goes back to where this run found it, and a clean
// restart flags no message that was never delivered. Best effort, and
// never waited for: the write is not synced (the store's close or the
// process's exit writes it out; a power cut may lose it), and a store that
// refuses it (a failed store, a cluster node that no longer leads, whose
// proposal may never commit) leaves the higher mark, which only flags
// more messages.
func (e *Engine) lowerSessionMarks() {
	if e.failed.Load() != nil {
		return
	}
	var b store.Batch
	for _, q := range e.allQueues() {
		q.mu.Lock()
		if !q.deleted && q.sessMark > q.sessMarkOpen && !q.sessionInFlightLocked() {
			q.sessMark = q.sessMarkOpen
			b.Set(sessionMarkKey(q.id), binary.BigEndian.AppendUint64(nil, q.sessMark))
		}
		q.mu.Unlock()
	}
	if b.Len() == 0 {
		return
	}
	if _, err := e.write(&b, false); err != nil {
		e.log.Info("closing: the AMQP session marks were not lowered; after the restart more messages than were delivered come back marked redelivered", "err", err)
	}
}

// sessionInFlightLocked reports whether a delivery to a connection is in
// flight on q. In-flight messages are always in memory.
func (q *queue) sessionInFlightLocked() bool {
	if q.nState[stateInFlight] == 0 {
		return false
	}
	for _, m := range q.msgs {
		if m.state == stateInFlight && m.session {
			return true
		}
	}
	return false
}
