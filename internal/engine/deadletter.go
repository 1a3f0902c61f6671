package engine

import (
	"encoding/binary"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// DeadLetterRouter routes dead letters for queues whose DeadLetterPolicy is
// Routed (AMQP dead-letter exchanges). The engine calls it with the source
// queue's lock held: it must be fast and must not call the Engine.
type DeadLetterRouter interface {
	// RouteDeadLetter returns the queues the message goes to (none: it is
	// dropped and counted) and its envelope there (nil: unchanged), e.g.
	// with an x-death history added.
	RouteDeadLetter(source string, dl *DeadLetter) (targets []string, envelope []byte)
}

// RouteWaiter may be implemented by a DeadLetterRouter whose topology can
// be incomplete for a while: a cluster's shard 0 restoring, after its
// leader starts, the bindings to queues of other shards, through which it
// would route a dead letter nowhere (or to some of its targets only) and
// drop it. While RouteReady is false, an engine opened with
// Options.RouteLater writes each dead letter of a Routed queue as a route
// transfer (routed.go), which its own mover routes with ImportRouted once
// the router is ready, instead of routing it now. RouteReady is called
// with a queue's lock held: it must be fast and must not call the Engine.
type RouteWaiter interface {
	RouteReady() bool
}

// DeadLetter describes a message being dead-lettered, for a router.
type DeadLetter struct {
	MessageID    string
	Reason       string
	Envelope     []byte
	Attributes   []Attribute
	ReceiveCount int
	SentAt       time.Time
	Time         time.Time
}

// pendingCopy is a message copied into another queue — a dead letter into
// its dead-letter queue, or a redrive (move task) into its destination —
// written to the store under the source's lock; the target's memory is
// updated after that lock is released and after the write is durable (see
// insertCopies). ("Move task" names only the operator's redrive; the
// engine calls the per-message step a copy.)
type pendingCopy struct {
	target *queue
	m      *message
	group  string
	// purges is the target's purge count when the copy's sequence number
	// was reserved; see insertCopies.
	purges uint64
	size   int64 // body bytes reserved in target.room
	recLen int   // length of the content record written (what a cold target counts)
	// dead is set for a dead-letter move: what Observer.DeadLettered is
	// told once the copy is in its target (never before: an observer
	// that reads the target then, like the alert manager's growth rule,
	// must find the copy there).
	dead *deadLetterEvent
}

// deadLetterEvent is one Observer.DeadLettered call, deferred to the
// copy's insert.
type deadLetterEvent struct {
	source, reason string
	age            time.Duration
}

// unlockAndInsertCopies releases q's lock, then inserts into their targets'
// memory the copies (dead letters, redrives: pendingCopy) decided under it,
// once the store has synced everything written so far (a sync barrier; see
// insertCopies). Every operation that may dead-letter (receive, failure
// reports, expiry, overflow, requeue — anything that ran advanceLocked)
// writes its batch and then unlocks with it (or with
// unlockAndInsertCopiesAfter); one that fails after advanceLocked uses
// writeUnlock.
func (e *Engine) unlockAndInsertCopies(q *queue) { e.unlockAndInsertCopiesAfter(q, nil) }

// unlockAndInsertCopiesAfter is unlockAndInsertCopies for a caller whose
// batch, carrying q's copies, was written durably as p: the copies wait for p instead of a barrier of
// their own. A nil p means "the batch was written without a sync (or not
// at all, after a failure)": a sync barrier is written.
//
// The wait happens after q's lock is released, so it holds up only the
// caller (a receive that dead-lettered answers after one fsync; the
// timer goroutine waits for one before its next queue).
func (e *Engine) unlockAndInsertCopiesAfter(q *queue, p store.Pending) {
	out := q.outbox
	q.outbox = nil
	e.pokeTransfersLocked(q)
	q.publishRoomLocked()
	q.mu.Unlock()
	e.insertCopiesAfter(out, p)
}

// insertCopiesAfter inserts copies decided under locks already released,
// once p is durable; a nil p writes a sync barrier first (the batch that
// carried them was written without a sync, or not at all).
func (e *Engine) insertCopiesAfter(copies []pendingCopy, p store.Pending) {
	if len(copies) == 0 {
		return
	}
	if p == nil {
		var err error
		if p, err = e.write(&store.Batch{}, true); err != nil {
			p = store.Done{Err: err}
		}
	}
	_ = e.insertCopies(copies, p) // a failure fails the engine
}

// writeUnlock is unlockAndInsertCopies for an operation that fails after advanceLocked
// (or anything else that may have dead-lettered into b): b is written
// without a sync first, so the moves it carries are in the store before
// the barrier that publishes them.
func (e *Engine) writeUnlock(q *queue, b *store.Batch) {
	if b.Len() > 0 {
		_, _ = e.write(b, false) // a failure fails the engine; the barrier then fails too
	}
	e.unlockAndInsertCopies(q)
}

// canDeadLetter reports whether q has somewhere to send dead letters.
func (e *Engine) canDeadLetter(q *queue) bool {
	p := q.cfg.DeadLetter
	switch {
	case p == nil:
		return false
	case p.Routed:
		return e.router != nil || p.RoutedElsewhere && e.routeElsewhere
	default:
		return e.deadLetterTarget(q, p.Target) != nil || e.heldElsewhere(p.Target)
	}
}

// deadLetterLocked removes m from q and dead-letters it (see
// routeDeadLetterLocked). It returns the targets that took it.
func (e *Engine) deadLetterLocked(q *queue, m *message, reason string, now int64, b *store.Batch) []string {
	q.dropLocked(m, b)
	return e.routeDeadLetterLocked(q, m, reason, now, b)
}

// routeDeadLetterLocked writes a copy of m (no longer, or never, in q) into
// each dead-letter target in batch b, so the removal and the copies are one
// atomic write: after a crash the message is in exactly one place. A
// target held elsewhere (another shard of a cluster) gets a transfer in b
// instead (transfer.go), which the mover carries there. With no target the
// message is dropped, and counted, never silently.
func (e *Engine) routeDeadLetterLocked(q *queue, m *message, reason string, now int64, b *store.Batch) []string {
	var targets []*queue
	var remote []string // targets held elsewhere (another shard): transfers
	env := m.envelope()
	if p := q.cfg.DeadLetter; p != nil && p.Routed && (p.RoutedElsewhere && e.routeElsewhere || e.routeLaterLocked()) {
		e.routeTransferLocked(q, m, reason, env, now, b)
		return nil // its targets are chosen where (and when) it is routed
	}
	if p := q.cfg.DeadLetter; p != nil {
		if p.Routed {
			if e.router != nil {
				names, newEnv := e.router.RouteDeadLetter(q.name, &DeadLetter{
					MessageID: FormatID(m.id), Reason: reason, Envelope: env, Attributes: m.attrs,
					ReceiveCount: int(m.recvCount), SentAt: fromNanos(m.sentAt), Time: fromNanos(now),
				})
				if newEnv != nil {
					env = newEnv
				}
				for _, n := range names {
					if t, err := e.lookup(n); err == nil {
						if t.isFIFO == q.isFIFO {
							targets = append(targets, t)
						}
					} else if e.heldElsewhere(n) {
						remote = append(remote, n)
					}
				}
			}
		} else if t := e.deadLetterTarget(q, p.Target); t != nil {
			targets = append(targets, t)
		} else if e.heldElsewhere(p.Target) {
			remote = append(remote, p.Target)
		}
	}
	full := 0
	size := int64(m.bodyLen)
	kept := targets[:0]
	for _, t := range targets {
		if t.room.reserve(t.snap.Load(), size, false) {
			kept = append(kept, t)
			continue
		}
		// DLQ-97: a full target whose overflow refuses new messages
		// (reject-publish) refuses the dead letter too, as RabbitMQ's
		// dead-lettering does; it is never inserted and trimmed after.
		full++
		e.log.Warn("dead letter refused: target queue is full", "queue", q.name, "target", t.name, "reason", reason, "message", FormatID(m.id))
	}
	targets = kept
	if len(targets) == 0 && len(remote) == 0 {
		if full > 0 {
			reason = ReasonTargetFull
		}
		e.countDropLocked(q, m, reason)
		return nil
	}
	q.stats.deadLettered.Add(1)
	names := make([]string, len(targets), len(targets)+len(remote))
	e.noteDeadLetterClass(q, m, reason)
	for _, n := range remote {
		// On another shard: a transfer, moved there by the mover (its
		// import checks the target's type and room).
		e.transferDeadLetterLocked(q, m, &Transfer{Target: n, Source: q.name, Reason: reason}, env, now, b)
		names = append(names, n)
	}
	for i, t := range targets {
		names[i] = t.name
		mv := e.copyDeadLetterLocked(q, m, t, reason, env, now, b)
		mv.size = size
		mv.dead = &deadLetterEvent{source: q.name, reason: reason, age: time.Duration(now - m.sentAt)}
		q.outbox = append(q.outbox, mv)
	}
	e.log.Debug("dead-lettered", "queue", q.name, "reason", reason, "message", FormatID(m.id), "receives", m.recvCount, "targets", names)
	return names
}

// routeLaterLocked reports whether a Routed queue's dead letter waits as a
// route transfer for the router to be ready (Options.RouteLater,
// RouteWaiter).
func (e *Engine) routeLaterLocked() bool {
	if !e.routeLater || e.router == nil {
		return false
	}
	w, ok := e.router.(RouteWaiter)
	return ok && !w.RouteReady()
}

// noteDeadLetterClass tells an ErrorClassObserver that m left q as a dead
// letter, with its failure's error class.
func (e *Engine) noteDeadLetterClass(q *queue, m *message, reason string) {
	if co, ok := e.obs.(ErrorClassObserver); ok {
		class := ""
		if m.ext != nil && m.ext.failure != nil {
			class = m.ext.failure.ErrorClass
		}
		co.DeadLetteredClass(q.name, reason, class)
	}
}

// copyDeadLetterLocked writes m's copy for target t, keeping its
// MessageId, body, attributes, send time and receive count and adding its
// dead-letter context.
func (e *Engine) copyDeadLetterLocked(q *queue, m *message, t *queue, reason string, env []byte, now int64, b *store.Batch) pendingCopy {
	n := e.deadLetterCopyLocked(q, m, reason, env, now, t.isFIFO)
	n.seq = t.nextSeq.Add(1) - 1
	if cfg := t.snap.Load(); cfg.HasMessageTTL { // t.cfg needs t's lock
		n.ttlAt = now + int64(cfg.MessageTTL)
	}
	n.group = &group{id: m.groupID()} // replaced by the target's group on insert
	t.cold.addPending(n.seq)          // not refilled before insertCopies inserts it
	recLen := t.writeCopy(n, b)
	b.Set(movedSeqKey(t.id, q.id), binary.BigEndian.AppendUint64(nil, n.seq))
	return pendingCopy{target: t, m: n, group: m.groupID(), purges: t.purges.Load(), recLen: recLen}
}

// deadLetterCopyLocked is m's dead-letter copy for a target of type fifo,
// without what depends on the target itself (sequence number, TTL, group):
// what a local target holds (copyDeadLetterLocked) and what a transfer
// carries to a target elsewhere (transferDeadLetterLocked).
func (e *Engine) deadLetterCopyLocked(q *queue, m *message, reason string, env []byte, now int64, fifo bool) *message {
	body, _ := q.bodyLocked(m) // a failed read fails the engine
	n := &message{
		id:          m.id,
		body:        body,
		attrs:       m.attrs,
		dedupID:     m.dedupID,
		sender:      m.sender,
		sentAt:      m.sentAt,
		enqueuedAt:  m.enqueuedAt,
		visibleAt:   now,
		firstRecvAt: m.firstRecvAt,
		recvCount:   m.recvCount,
		state:       stateVisible,
		hasMD5:      m.hasMD5,
		bodyMD5:     m.bodyMD5,
		prio:        m.prio,
		ext: &messageExt{
			trace:     m.traceHeader(),
			dlqSource: q.name,
			envelope:  env,
			dead: &DeadLetterInfo{
				SourceQueue:    q.name,
				Reason:         reason,
				Attempts:       int(m.recvCount),
				FirstReceiveAt: fromNanos(m.firstRecvAt),
				LastReceiveAt:  fromNanos(m.leaseAt),
				DeadLetteredAt: fromNanos(now),
			},
		},
	}
	if m.ext != nil {
		n.ext.failure, n.ext.redrive = m.ext.failure, m.ext.redrive
	}
	if fifo {
		// SQS: on FIFO the enqueue time resets and the dedup id becomes
		// the message id.
		n.enqueuedAt = now
		n.dedupID = FormatID(m.id)
	}
	return n
}

// insertCopies inserts copies into their targets' memory once p, the
// durability of the write that carries them, has succeeded: a copy is
// never receivable (SQS receive, AMQP delivery, browse) before its move
// is on disk, so a consumer can never receive and delete a copy that a
// power cut then puts back in its source. When p fails the engine has
// failed: the copies are never published, their room is released and
// the error is returned (after a restart the messages are wherever the
// disk says). Called without any queue lock held.
//
// A purge of the target between the copy's write (in the source's batch)
// and its insert here may have deleted the copy's content record: the
// purge's range ends at the target's next sequence number, which the copy
// had already reserved. The copy is then written again, durably, and
// inserted only once that write is synced (and no purge came meanwhile):
// it arrived after the purge. Otherwise the target would hold in memory a
// message with no record on disk, whose later state records recovery
// could not explain.
func (e *Engine) insertCopies(moves []pendingCopy, p store.Pending) error {
	if len(moves) == 0 {
		return nil
	}
	if err := e.wait(p); err != nil {
		for _, mv := range moves {
			mv.target.mu.Lock()
			mv.target.cold.donePending(mv.m.seq)
			mv.target.room.release(mv.size)
			e.unlockAndInsertCopies(mv.target)
		}
		return err
	}
	var failed error
	for _, mv := range moves {
		t := mv.target
		t.mu.Lock()
		for failed == nil && !t.deleted && t.purges.Load() != mv.purges {
			mv.purges = t.purges.Load()
			var b store.Batch
			mv.recLen = t.writeCopy(mv.m, &b)
			rewrite, err := e.write(&b, true)
			e.unlockAndInsertCopies(t)
			if err == nil {
				err = e.wait(rewrite)
			}
			if err != nil {
				failed = err // the engine has failed
			}
			t.mu.Lock()
		}
		t.room.release(mv.size)
		t.cold.donePending(mv.m.seq)
		if failed != nil {
			e.unlockAndInsertCopies(t)
			continue
		}
		if !t.deleted {
			t.insertMovedLocked(mv.m, mv.group, mv.recLen)
			t.stats.sent.Add(1)
			var b store.Batch
			t.enforceLimitsLocked(e.now(), &b)
			if b.Len() > 0 {
				_, _ = e.write(&b, false) // a failure fails the engine; the barrier in unlockAndInsertCopies then fails too
			}
			e.scheduleLocked(t)
		}
		e.unlockAndInsertCopies(t)
		if d := mv.dead; d != nil {
			e.obs.DeadLettered(d.source, t.name, d.reason, d.age)
		}
		if x := mv.m.ext; x != nil && x.dead != nil {
			e.noteRefill(t.name, x.dead.DeadLetteredAt)
			if x.redrive != nil && x.redrive.TaskID != "" {
				e.noteReturn(x.redrive, x.failure, x.dead.DeadLetteredAt)
			}
		}
	}
	return failed
}

// expireLocked ends a message whose TTL ran out: dead-lettered
// (ReasonExpired) when the queue has a target, dropped and counted
// otherwise.
func (q *queue) expireLocked(m *message, now int64, b *store.Batch) {
	if q.eng.canDeadLetter(q) {
		q.eng.deadLetterLocked(q, m, ReasonExpired, now, b)
		return
	}
	q.dropLocked(m, b)
	q.noteExpiredLocked(true)
}

// ttlDue reports whether m's TTL has run out at now.
func (m *message) ttlDue(now int64) bool { return m.ttlAt != 0 && m.ttlAt <= now }

// readyLocked returns the number and body bytes of ready messages (visible
// or delayed; not in flight), which length limits count. Cold messages
// count as ready, by their records' size (see coldPart).
func (q *queue) readyLocked() (int, int64) {
	return q.nState[stateVisible] + q.nState[stateDelayed] + q.cold.n,
		q.nBytes[stateVisible] + q.nBytes[stateDelayed] + q.cold.bytes
}

// fullLocked reports whether adding size bytes would break a length limit.
func (q *queue) fullLocked(size int) bool {
	n, bytes := q.readyLocked()
	// Moves decided elsewhere but not yet inserted hold their room.
	in, inBytes := q.room.pending()
	n, bytes = n+int(in), bytes+inBytes
	return (q.cfg.MaxLength > 0 && n+1 > q.cfg.MaxLength) ||
		(q.cfg.MaxLengthBytes > 0 && bytes+int64(size) > q.cfg.MaxLengthBytes)
}

// enforceLimitsLocked drops (dead-letters, reason maxlen) the queue's head
// (headReadyLocked) while it is over a length limit with drop-head
// overflow.
func (q *queue) enforceLimitsLocked(now int64, b *store.Batch) {
	if q.cfg.MaxLength == 0 && q.cfg.MaxLengthBytes == 0 {
		return
	}
	if o := q.cfg.Overflow; o != "" && o != OverflowDropHead {
		return
	}
	promoted := false
	for {
		n, bytes := q.readyLocked()
		if !(q.cfg.MaxLength > 0 && n > q.cfg.MaxLength) && !(q.cfg.MaxLengthBytes > 0 && bytes > q.cfg.MaxLengthBytes) {
			return
		}
		if !promoted {
			// A priority queue's head may be a higher priority on
			// disk: load those first (within their memory bound).
			promoted = true
			q.promotePrioritiesLocked(b)
		}
		m := q.headReadyLocked()
		if m == nil && q.cold.on && q.refillLocked(now) > 0 {
			m = q.headReadyLocked()
		}
		if m == nil {
			return
		}
		if !q.eng.canDeadLetter(q) {
			q.dropLocked(m, b)
			q.eng.countDropLocked(q, m, ReasonQueueFull)
			continue
		}
		q.eng.deadLetterLocked(q, m, ReasonQueueFull, now, b)
	}
}

// headReadyLocked finds the queue's head, the message a drop-head
// overflow drops: among the first visible message of each group's list
// (the first not in flight, for FIFO), the one with the lowest sequence
// number, or on a priority queue the highest band first, as RabbitMQ
// drops a priority queue's highest priority first. O(groups); only used
// at a length limit.
func (q *queue) headReadyLocked() *message {
	var best *message
	for _, g := range q.groups {
		for m := g.msgs.head; m != nil; m = m.next {
			if m.state == stateVisible {
				if best == nil || q.band(m) > q.band(best) || q.band(m) == q.band(best) && m.seq < best.seq {
					best = m
				}
				break
			}
		}
	}
	return best
}
