package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// seqBase makes FIFO sequence numbers look like SQS's: 20-digit decimals
// that only grow.
const seqBase = 10_000_000_000_000_000_000

func formatSeq(seq uint64) string { return strconv.FormatUint(seqBase+seq, 10) }

// newID draws a random (version 4) UUID.
func newID() [16]byte {
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], rand.Uint64())
	binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// FormatID renders a message id as a UUID string.
func FormatID(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

// newReceipt draws a non-zero receipt number.
func newReceipt() uint64 {
	for {
		if r := rand.Uint64(); r != 0 {
			return r
		}
	}
}

// Send stores messages in the queue. Each message gets its own SendResult;
// a message that fails validation (size, FIFO ids, delay) fails alone. The
// returned error is for the whole call (queue missing, storage failed).
//
// When Send returns, every successful message is durable: it survives a
// crash and will be delivered at least once (unless deleted, purged or
// expired). A FIFO message whose deduplication id was seen within
// DedupWindow is accepted (with the original MessageID) but not stored again.
func (e *Engine) Send(name string, msgs []Message) ([]SendResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := e.admit(); err != nil {
		return nil, err
	}
	// Random inputs are drawn before the change is applied.
	ids := make([][16]byte, len(msgs))
	for i := range ids {
		ids[i] = newID()
	}
	q, err := e.lockQueue(name)
	if err != nil {
		return nil, err
	}
	now := e.now()
	b := store.Batch{Ops: make([]store.Op, 0, len(msgs)+2)}
	q.advanceLocked(now, &b)
	results := make([]SendResult, len(msgs))
	added := 0
	for i := range msgs {
		var stored bool
		results[i], stored = q.sendOneLocked(&msgs[i], ids[i], now, &b)
		if stored {
			added++
		}
	}
	if added > 0 {
		b.Set(qidPrefix(prefixSeq, q.id), binary.BigEndian.AppendUint64(nil, q.nextSeq.Load()-1))
	}
	q.stats.sent.Add(uint64(added))
	if added > 0 {
		e.obs.Sent(q.name, added)
	}
	ord := q.dedupWrittenLocked()
	if err := e.commitUnlock(q, &b); err != nil {
		return nil, err
	}
	q.dedupSettled(ord)
	return results, nil
}

// sendOneLocked validates and stores one message. stored is false for a
// failed or deduplicated message.
func (q *queue) sendOneLocked(in *Message, id [16]byte, now int64, b *store.Batch) (res SendResult, stored bool) {
	if size := in.Size(); size > q.cfg.MaxMessageSize {
		return SendResult{Err: &MessageTooLargeError{Size: size, Limit: q.cfg.MaxMessageSize}}, false
	}
	delay := q.cfg.Delay
	if in.DelaySet {
		if q.fifo() && in.Delay != 0 {
			return SendResult{Err: ErrDelayNotAllowed}, false
		}
		if !q.fifo() {
			delay = in.Delay
		}
	}
	if delay < 0 || delay > MaxDelay {
		return SendResult{Err: &ConfigError{Setting: "DelaySeconds", Reason: "must be between 0 and 900 seconds"}}, false
	}
	dedupID := in.DedupID
	var stale *dedupEntry // an expired record at the key this send's entry takes
	if q.fifo() {
		if in.GroupID == "" {
			return SendResult{Err: ErrMissingGroupID}, false
		}
		if dedupID == "" {
			if !q.cfg.ContentBasedDedup {
				return SendResult{Err: ErrMissingDedupID}, false
			}
			sum := sha256.Sum256(in.Body)
			dedupID = hex.EncodeToString(sum[:])
		}
		hit, err := q.findDedupLocked(dedupID, in.GroupID, now)
		if err != nil {
			return SendResult{Err: q.eng.fail(fmt.Errorf("reading the deduplication records of queue %q: %w", q.name, err))}, false
		}
		if hit.live != nil {
			return SendResult{MessageID: FormatID(hit.live.msgID), SequenceNumber: formatSeq(hit.live.seq)}, false
		}
		stale = hit.stale
	}
	m := &message{
		id:         id,
		body:       in.Body,
		attrs:      in.Attributes,
		dedupID:    dedupID,
		sender:     in.SenderID,
		sentAt:     now,
		enqueuedAt: now,
		visibleAt:  now + int64(delay),
		state:      stateVisible,
		hasMD5:     in.BodyMD5Set,
		bodyMD5:    in.BodyMD5,
		prio:       in.Priority,
	}
	if in.TraceHeader != "" || len(in.Envelope) > 0 {
		m.ext = &messageExt{trace: in.TraceHeader, envelope: in.Envelope}
	}
	if ttl, ok := q.ttlFor(in); ok {
		m.ttlAt = now + int64(ttl)
	}
	if q.overCapLocked(len(in.Body)) {
		return SendResult{Err: ErrQueueFull}, false
	}
	if q.fullLocked(len(in.Body)) {
		switch q.cfg.Overflow {
		case OverflowRejectPublish:
			return SendResult{Err: ErrQueueFull}, false
		case OverflowRejectPublishDLX:
			// The rejected message itself is dead-lettered; the
			// sender is told it was not enqueued. It never joined a
			// group of this queue.
			m.group = &group{id: in.GroupID}
			if in.BodyBorrowed {
				m.body = bytes.Clone(in.Body)
			}
			q.eng.routeDeadLetterLocked(q, m, ReasonQueueFull, now, b)
			return SendResult{Err: ErrQueueFull}, false
		}
	}
	if delay > 0 {
		m.state = stateDelayed
	}
	seq := q.nextSeq.Add(1) - 1
	m.seq = seq
	if delay > 0 {
		m.delayRec = true
		b.Set(delayKey(q.id, seq), binary.AppendVarint(nil, m.visibleAt))
	}
	if q.goesColdLocked(m) {
		// Only in the store until a refill reads it (cold.go). It
		// never joins a group of this queue while cold.
		m.group = &group{id: in.GroupID}
		rec := encodeContent(m)
		b.Set(messageKey(q.id, seq, kindContent), rec)
		q.indexLocked(m, true, b)
		q.addColdLocked(seq, len(rec), m.state == stateDelayed)
		if m.state == stateDelayed {
			q.cold.addDelayed(m.visibleAt, now)
		}
	} else {
		m.group = q.groupLocked(in.GroupID)
		// Encode before adding: beyond the body budget, adding drops
		// the body from memory.
		rec, bodyAt := encodeContentBodyAt(m)
		b.Set(messageKey(q.id, seq, kindContent), rec)
		m.stateRec = stateRecNone // a fresh sequence number: no state record yet
		m.noPrioRec = !q.indexLocked(m, false, b)
		if in.BodyBorrowed {
			m.body = ownBody(rec, bodyAt, in.Body)
		}
		q.addLocked(m)
	}
	q.enforceLimitsLocked(now, b)
	res = SendResult{MessageID: FormatID(id)}
	if q.fifo() {
		res.SequenceNumber = formatSeq(seq)
		ent := &dedupEntry{id: dedupID, group: in.GroupID, msgID: id, seq: seq, expiresAt: now + int64(DedupWindow)}
		q.addDedupLocked(ent, stale, b)
	}
	return res, true
}

// ownBody is the engine's own copy of a borrowed body that was encoded at
// rec[bodyAt:]: the record's bytes themselves (the store copies what it is
// given, and the record is never modified), saving a copy per message,
// unless the rest of the record is more than an eighth of the body: a
// body kept in memory keeps its whole record alive, and the body budget
// counts only the body.
func ownBody(rec []byte, bodyAt int, body []byte) []byte {
	n := len(body)
	if n > 0 && 8*(len(rec)-n) <= n {
		return rec[bodyAt : bodyAt+n : bodyAt+n]
	}
	return bytes.Clone(body)
}

// ttlFor is a new message's TTL: the smaller of its own and the queue's.
func (q *queue) ttlFor(in *Message) (time.Duration, bool) {
	ttl, ok := q.cfg.MessageTTL, q.cfg.HasMessageTTL
	if in.TTLSet && (!ok || in.TTL < ttl) {
		ttl, ok = in.TTL, true
	}
	return max(ttl, 0), ok
}

// Receive leases up to req.Max messages. It waits up to the long-poll time
// for the first message and returns as soon as at least one is available.
// Every receive issues a new receipt handle and increments the message's
// receive count. A message whose receive count has already reached its
// queue's DeadLetterPolicy.MaxReceiveCount is moved to the dead-letter queue
// instead of being returned. An empty result is not an error.
func (e *Engine) Receive(ctx context.Context, name string, req ReceiveRequest) ([]Delivery, error) {
	if req.Max < 1 {
		req.Max = 1
	}
	if req.Max > MaxBatch {
		req.Max = MaxBatch
	}
	q, err := e.lockQueue(name)
	if err != nil {
		return nil, err
	}
	wait := q.cfg.ReceiveWait
	if req.WaitSet {
		wait = req.Wait
	}
	var timer <-chan time.Time
	expired := wait <= 0
	// Without its lease (store.Leaser) a receive, even a short poll,
	// waits up to leaseGrace for it to come back: a leader under load can
	// miss it briefly, and a deposed one is torn down within that time.
	staleUntil := e.now() + int64(leaseGrace)
	for {
		now := e.now()
		q.room.receivedAt.Store(now)
		b := store.Batch{Ops: make([]store.Op, 0, req.Max)}
		q.advanceLocked(now, &b)
		var out []Delivery
		var overLimit bool
		// A leader that may have been replaced hands out nothing
		// (store.Leaser): the messages it holds may be deleted already. A
		// long poll waits for the lease to come back.
		stale := !e.leased()
		if !stale {
			if a := q.attemptLocked(req.AttemptID, now); a != nil {
				out = a
			} else {
				out, overLimit = e.takeLocked(q, now, &req, &b)
			}
		}
		if len(out) > 0 && req.OnTake != nil {
			req.OnTake(len(out))
		}
		if b.Len() > 0 {
			// Leases are not synced: they become durable with the next
			// synced write. Losing one in a crash makes the message
			// visible early and its receive count one lower, which
			// at-least-once delivery allows.
			if _, err := e.write(&b, false); err != nil {
				e.unlockAndInsertCopies(q)
				return nil, err
			}
			q.cold.settled()
		}
		e.scheduleLocked(q)
		var ch <-chan struct{}
		var retry clock.Timer
		switch {
		case stale && (!expired || now < staleUntil):
			retry = e.clock.NewTimer(leaseRetry)
		case len(out) == 0 && !expired && q.cold.on && q.lowLocked() && !q.cfg.Paused && !overLimit && e.failed.Load() == nil:
			// The refills found only messages that were not receivable
			// (expired, in flight, delayed) and more are cold: a long
			// poll reads on rather than waiting for a send. Not when the
			// window is full (a FIFO queue's window of locked groups):
			// no refill would read more until something changes.
			again := make(chan struct{})
			close(again)
			ch = again
		case len(out) == 0 && !expired:
			ch = q.waitChanLocked()
		}
		e.unlockAndInsertCopies(q)
		if len(out) > 0 {
			return out, nil
		}
		if overLimit {
			return nil, ErrOverLimit
		}
		if expired && retry == nil {
			return nil, nil
		}
		if timer == nil && !expired {
			// Parked from here until it returns, whatever it waits for
			// on each pass (a message, or the lease of a store view).
			// Counted before its timer exists: whoever sees the timer
			// (a fake clock's parked count) sees the count too.
			q.room.waiting.Add(1)
			defer q.room.waiting.Add(-1)
			t := e.clock.NewTimer(wait)
			defer t.Stop()
			timer = t.C()
		}
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C()
		}
		select {
		case <-ch:
		case <-retryC:
		case <-timer:
			expired = true
		case <-ctxDone(ctx):
			stopTimer(retry)
			return nil, ctx.Err()
		case <-e.done:
			stopTimer(retry)
			return nil, ErrClosed
		}
		stopTimer(retry)
		q.mu.Lock()
		if q.deleted {
			e.unlockAndInsertCopies(q)
			return nil, ErrQueueNotFound
		}
	}
}

// attemptLocked returns the deliveries of an earlier FIFO receive with the
// same attempt id, if it is still valid: within AttemptIDWindow and with
// every message still under the same, unchanged lease.
func (q *queue) attemptLocked(id string, now int64) []Delivery {
	if id == "" || !q.fifo() {
		return nil
	}
	a := q.attempts[id]
	if a == nil || a.expiresAt <= now {
		return nil
	}
	for _, l := range a.leases {
		m := q.msgs[l.seq]
		if m == nil || m.receipt != l.receipt || m.state != stateInFlight || m.visibleAt != l.visibleAt {
			delete(q.attempts, id)
			return nil
		}
	}
	return a.deliveries
}

// takeLocked leases up to req.Max messages, dead-lettering on the way those
// whose receive count has reached the limit.
func (e *Engine) takeLocked(q *queue, now int64, req *ReceiveRequest, b *store.Batch) ([]Delivery, bool) {
	if q.cfg.Paused {
		return nil, false // delivery held (SetPaused)
	}
	vis := q.cfg.Visibility
	if req.VisibilitySet {
		vis = req.Visibility
	}
	var out []Delivery
	// Not for a receive attempt, whose deliveries are kept for its retries.
	if n := min(req.Max, q.nState[stateVisible]); cap(req.Reuse) >= n && n > 0 && req.AttemptID == "" {
		out = req.Reuse[:0]
	} else {
		out = make([]Delivery, 0, n)
	}
	var leases []lease
	if req.AttemptID != "" {
		leases = make([]lease, 0, cap(out))
	}
	limit := 0
	if dl := q.cfg.DeadLetter; dl != nil {
		limit = dl.MaxReceiveCount
	}
	// Whether q has somewhere to send dead letters is asked once a message
	// is over the limit, once per receive: for a target on another shard
	// it is a store lookup, which most receives need not make.
	canDL, asked := false, false
	redelivered := 0
	take := func(m *message) {
		if limit > 0 && int(m.recvCount) >= limit {
			if !asked {
				canDL, asked = e.canDeadLetter(q), true
			}
			if canDL {
				e.deadLetterLocked(q, m, ReasonMaxReceives, now, b)
				return
			}
		}
		if m.recvCount > 0 {
			redelivered++
		} else {
			q.noteFirstDeliveryLocked(now)
		}
		m.parked = false
		m.session = req.Session
		m.recvCount++
		if m.firstRecvAt == 0 {
			m.firstRecvAt = now
		}
		m.receipt = newReceipt()
		m.leaseAt = now
		m.visibleAt = now + int64(vis)
		q.setStateLocked(m, stateInFlight)
		if req.Session {
			q.coverSessionLocked(m.seq, b)
		} else {
			q.writeStateLocked(m, b)
		}
		d, err := q.deliveryLocked(m)
		if err != nil {
			return // the engine has failed; the lease runs out
		}
		out = append(out, d)
		if req.AttemptID != "" {
			leases = append(leases, lease{seq: m.seq, receipt: m.receipt, visibleAt: m.visibleAt})
		} else {
			// Not for a receive attempt: it keeps its deliveries,
			// bodies and all, for its retries, so they stay counted.
			q.dropDeliveredBodyLocked(m)
		}
	}
	if q.fifo() {
		q.topUpLocked(now, b) // the window, in sequence order (cold.go)
		looked := false
		for len(out) < req.Max {
			g := q.available.head
			if g == nil {
				// Every group in memory is locked: look past the
				// window for other groups (fifocold.go), once.
				if looked || len(out) > 0 || !q.cold.on || q.lookAheadLocked(now) == 0 {
					break
				}
				looked = true
				q.advanceLocked(now, b)
				continue
			}
			for m := g.msgs.head; m != nil && m.state == stateVisible && len(out) < req.Max; {
				next := m.next
				take(m)
				m = next
			}
		}
	} else {
		if q.nState[stateInFlight] >= MaxInFlight {
			return nil, true
		}
		q.topUpLocked(now, b)
		if q.available.head == nil && q.cold.on && q.lookAheadLocked(now) > 0 {
			// The window holds only delayed messages: cold ones whose
			// delay has ended are loaded from past it (fifocold.go).
			q.advanceLocked(now, b)
		}
		// Round-robin over groups: one message from each in turn.
		for len(out) < req.Max {
			g := q.available.head
			if g == nil {
				break
			}
			take(g.msgs.head)
			if g.available && g != q.available.tail {
				q.available.remove(g)
				q.available.pushBack(g)
			}
		}
	}
	if len(out) > 0 {
		q.stats.received.Add(uint64(len(out)))
		q.stats.redelivered.Add(uint64(redelivered))
		e.obs.Received(q.name, len(out), redelivered)
		if req.AttemptID != "" && q.fifo() {
			if q.attempts == nil {
				q.attempts = make(map[string]*attemptEntry)
			}
			q.attempts[req.AttemptID] = &attemptEntry{expiresAt: now + int64(AttemptIDWindow), deliveries: out, leases: leases}
		}
	}
	return out, false
}

// deadLetterTarget resolves a dead-letter queue, or nil when it is missing
// or refuses q as a source (then the message stays and is delivered: never
// dropped).
func (e *Engine) deadLetterTarget(q *queue, name string) *queue {
	t, err := e.lookup(name)
	if err != nil || t == q || t.isFIFO != q.isFIFO || !t.accepts(q.name) {
		return nil
	}
	return t
}

// deliveryLocked renders m for a client. Body and Attributes share memory
// with the queue: front-ends must treat them as read-only.
func (q *queue) deliveryLocked(m *message) (Delivery, error) {
	body, err := q.bodyLocked(m)
	if err != nil {
		return Delivery{}, err
	}
	d := Delivery{
		MessageID:        FormatID(m.id),
		ReceiptHandle:    encodeReceipt(q.eng.receiptKey, q.id, m),
		Body:             body,
		Attributes:       m.attrs,
		TraceHeader:      m.traceHeader(),
		SenderID:         m.sender,
		SentAt:           fromNanos(m.sentAt),
		FirstReceiveAt:   fromNanos(m.firstRecvAt),
		ReceiveCount:     int(m.recvCount),
		GroupID:          m.groupID(),
		DeadLetterSource: m.deadLetterSource(),
		Envelope:         m.envelope(),
		Redelivered:      m.recvCount > 1 || m.maybeDelivered,
		BodyMD5:          m.bodyMD5,
		BodyMD5Set:       m.hasMD5,
		Priority:         m.prio,
	}
	if x := m.ext; x != nil {
		d.DeadLetter, d.LastFailure, d.Redrive = x.dead, x.failure, x.redrive
	}
	if q.fifo() {
		d.DedupID = m.dedupID
		d.SequenceNumber = formatSeq(m.seq)
	}
	return d, nil
}

// lookupLeaseLocked resolves a receipt handle to its message. m is nil when
// the message no longer exists; current reports whether the handle is the
// message's latest lease; lost reports a handle issued by a receive whose
// lease a crash lost: the stored state is older than the handle (a lower
// receive count), so no receive since recovery can have issued a newer
// one for that count.
func (q *queue) lookupLeaseLocked(handle string) (m *message, current, lost bool, err error) {
	h, ok := decodeReceipt(handle)
	if !ok || h.qid != q.id {
		return nil, false, false, ErrReceiptHandleInvalid
	}
	m = q.msgs[h.seq]
	if m == nil {
		m = q.promoteColdLocked(h.seq)
	}
	if m == nil {
		return nil, false, false, nil
	}
	if h.v2 && h.idTag != binary.BigEndian.Uint64(m.id[:8]) {
		// Another message under the same sequence number: the
		// handle's message is gone.
		return nil, false, false, nil
	}
	if m.receipt == h.receipt {
		return m, true, false, nil
	}
	return m, false, h.v2 && int64(h.count) > int64(m.recvCount) && h.validMAC(q.eng.receiptKey), nil
}

// Delete removes the messages leased with the given receipt handles. The
// result has one entry per handle (nil on success). Deleting an already
// deleted message succeeds. A stale handle (the message was leased again
// since) succeeds without deleting on a standard queue; on a FIFO queue a
// handle whose lease has expired fails with ErrReceiptHandleExpired. When
// Delete returns, successful deletes are durable.
func (e *Engine) Delete(name string, handles []string) ([]error, error) {
	return e.deleteMessagesIf(name, handles, false, true)
}

// deleteMessagesIf deletes by receipt handle; leasedOnly restricts it to
// messages still in flight under that very lease (see DeleteLeased), and
// durable false does not wait for the sync (see updateAs).
func (e *Engine) deleteMessagesIf(name string, handles []string, leasedOnly, durable bool) ([]error, error) {
	errs := make([]error, len(handles))
	err := e.updateAs(name, durable, func(q *queue, now int64, b *store.Batch) error {
		e.deleteLocked(q, handles, leasedOnly, errs, now, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// deleteLocked deletes by receipt handle, one error per handle in errs.
func (e *Engine) deleteLocked(q *queue, handles []string, leasedOnly bool, errs []error, now int64, b *store.Batch) {
	deleted := 0
	for i, h := range handles {
		m, current, lost, err := q.lookupLeaseLocked(h)
		switch {
		case err != nil:
			errs[i] = err
		case m == nil:
			// Already deleted (or expired, purged, dead-lettered):
			// deleting again succeeds.
		case lost && !leasedOnly && (!q.fifo() || m.state != stateInFlight):
			// The handle's lease was lost in a crash: the consumer
			// did receive (and has processed) this message, so the
			// delete it asks for is honoured. On a FIFO queue only
			// while no one else holds the message: once it is leased
			// again its group is in other hands (below).
			q.dropLocked(m, b)
			deleted++
		case leasedOnly && (!current || m.state != stateInFlight):
			// The lease this ack belongs to was ended (a failure
			// report scheduled a retry): nothing to delete.
		case q.fifo() && (!current || m.state != stateInFlight):
			// The lease ended; the group may already be in other hands.
			errs[i] = ErrReceiptHandleExpired
		case !current:
			// Standard queue, stale handle: the message was leased
			// again since. Succeed without deleting another
			// consumer's lease.
		default:
			q.dropLocked(m, b)
			deleted++
			if m.leaseAt != 0 {
				e.obs.Deleted(q.name, time.Duration(now-m.leaseAt))
			}
		}
	}
	q.stats.deleted.Add(uint64(deleted))
}

// ChangeVisibility sets, counting from now, the remaining lease of each
// message to its Timeout; 0 makes it visible at once. As on SQS it works
// after the lease lapsed (a visible message is leased again for Timeout,
// so a worker that extends late keeps its job), and on a standard queue
// any receipt handle of the message applies to its current state, even
// one from an earlier receive. On a FIFO queue a handle from an earlier
// receive fails with ErrMessageNotAvailable, as does any handle of a
// deleted message; a message waiting out a retry backoff fails with
// ErrMessageNotInflight.
func (e *Engine) ChangeVisibility(name string, changes []VisibilityChange) ([]error, error) {
	errs := make([]error, len(changes))
	err := e.update(name, func(q *queue, now int64, b *store.Batch) error {
		q.changeVisibilityLocked(changes, errs, now, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// changeVisibilityLocked applies changes, one error per change in errs.
func (q *queue) changeVisibilityLocked(changes []VisibilityChange, errs []error, now int64, b *store.Batch) {
	for i, c := range changes {
		m, current, _, err := q.lookupLeaseLocked(c.ReceiptHandle)
		switch {
		case err != nil:
			errs[i] = err
		case m == nil || m.receipt == 0 || (!current && q.fifo()):
			// Deleted, never received, or (FIFO) leased again since:
			// the group may be in other hands.
			errs[i] = ErrMessageNotAvailable
		case m.state == stateDelayed:
			// Waiting out a retry backoff chosen after its lease.
			errs[i] = ErrMessageNotInflight
		case c.Timeout < 0 || now+int64(c.Timeout)-m.leaseAt > int64(MaxVisibility):
			errs[i] = ErrVisibilityLimit
		default:
			m.visibleAt = now + int64(c.Timeout)
			if c.Timeout == 0 {
				m.parked = true // released on purpose: no retry backoff
				q.setStateLocked(m, stateVisible)
			} else {
				q.setStateLocked(m, stateInFlight)
			}
			q.writeStateLocked(m, b)
		}
	}
}

// noteReturn tells a move task that a message it moved was dead-lettered
// again; the task pauses when that happens too often, too soon.
func (e *Engine) noteReturn(r *RedriveInfo, f *FailureRecord, at time.Time) {
	e.tasks.mu.Lock()
	tk := e.tasks.byID[r.TaskID]
	trip := tk != nil && e.noteReturnLocked(tk, r, f, at)
	var reason string
	if trip {
		reason = fmt.Sprintf("Sluice.SafetyStop: %d redriven messages were dead-lettered again within %s of their move", tk.Returned, tk.SafetyWindow)
		if len(tk.ReturnedClasses) > 0 {
			reason += " (error classes: " + strings.Join(tk.ReturnedClasses, ", ") + ")"
		}
		reason += "; the fix is not working yet. Resume or cancel the task."
	}
	e.tasks.mu.Unlock()
	if trip {
		_ = e.transition(tk, reason, func(tk *task) (string, error) {
			if tk.Status != TaskRunning {
				return "", ErrTaskNotRunning
			}
			tk.StopRule = StopReturned
			return TaskPaused, nil
		})
	}
}

// leaseRetry is how often a receive on a store without its lease looks
// again (store.Leaser; a leader regains it within a heartbeat or two), for
// at most leaseGrace beyond its own wait.
const (
	leaseRetry = 20 * time.Millisecond
	leaseGrace = 2 * time.Second
)

// leased reports whether the store's writer holds its lease
// (store.Leaser); a store without leases always does.
func (e *Engine) leased() bool {
	return e.leaser == nil || e.leaser.Leased()
}

// stopTimer stops t if there is one.
func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}
