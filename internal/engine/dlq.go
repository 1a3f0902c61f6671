package engine

import (
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the result stays valid UTF-8.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// ReportFailure records a consumer's failure for the delivery whose lease
// handle is given, and settles what happens next:
//
//   - Terminal, or the receive count has reached the queue's
//     maxReceiveCount: the message is dead-lettered now, with its context.
//     Terminal on a queue without a dead-letter queue fails with
//     ErrNoDeadLetterQueue and changes nothing.
//   - Otherwise the lease ends and the message becomes visible again after
//     RetryAfter if given, else after the queue's RetryPolicy backoff; with
//     neither, the lease simply runs to its end (plain SQS behaviour), with
//     the context recorded.
//
// The context (error class, message, trace, consumer) is kept with the
// message and travels with it to the dead-letter queue. A stale or invalid
// handle fails like ChangeVisibility does. The change is durable when
// ReportFailure returns.
func (e *Engine) ReportFailure(name, handle string, f Failure) (FailureOutcome, error) {
	var out FailureOutcome
	err := e.update(name, func(q *queue, now int64, b *store.Batch) error {
		m, current, _, err := q.lookupLeaseLocked(handle)
		switch {
		case err != nil:
		case m == nil || !current:
			err = ErrMessageNotAvailable
		case m.state != stateInFlight:
			err = ErrMessageNotInflight
		case f.RetryAfterSet && (f.RetryAfter < 0 || f.RetryAfter > MaxVisibility):
			err = ErrVisibilityLimit
		}
		if err != nil {
			return err
		}
		canDL := e.canDeadLetter(q)
		if f.Terminal && !canDL {
			return ErrNoDeadLetterQueue
		}
		m.extension().failure = newFailureRecord(&f, m, now)
		var targets []string
		dl := q.cfg.DeadLetter
		switch {
		case f.Terminal:
			targets = e.deadLetterLocked(q, m, ReasonTerminal, now, b)
			out.DeadLettered = true
		case canDL && dl.MaxReceiveCount > 0 && int(m.recvCount) >= dl.MaxReceiveCount:
			// The threshold is checked when the failure is recorded, before
			// any retry: the last attempt failed, so there is no next one.
			targets = e.deadLetterLocked(q, m, ReasonMaxReceives, now, b)
			out.DeadLettered = true
		default:
			var delay time.Duration
			park := true
			switch {
			case f.RetryAfterSet:
				delay = f.RetryAfter
			case q.cfg.Retry != nil:
				delay = q.cfg.Retry.Backoff(m.id, int(m.recvCount))
			default:
				park = false // plain SQS: the lease runs to its end
			}
			if park {
				m.visibleAt = now + int64(delay)
				m.parked = true
				if delay == 0 {
					q.setStateLocked(m, stateVisible)
				} else {
					q.setStateLocked(m, stateDelayed)
				}
			}
			out.VisibleAt = fromNanos(m.visibleAt)
			q.writeStateLocked(m, b)
		}
		out.Target = strings.Join(targets, ",")
		return nil
	})
	if err != nil {
		return FailureOutcome{}, err
	}
	return out, nil
}

// newFailureRecord is the failure context f reports for m, bounded.
func newFailureRecord(f *Failure, m *message, now int64) *FailureRecord {
	return &FailureRecord{
		ErrorClass:      truncate(f.ErrorClass, MaxErrorClass),
		Message:         truncate(f.Message, MaxErrorText),
		Trace:           truncate(f.Trace, MaxTrace),
		ConsumerID:      truncate(f.ConsumerID, MaxConsumerID),
		ConsumerVersion: truncate(f.ConsumerVersion, MaxConsumerID),
		ReportedAt:      fromNanos(now),
		Attempt:         int(m.recvCount),
	}
}

// Reject settles deliveries their consumer rejected as terminal failures
// (AMQP basic.reject or basic.nack with requeue=false), all in one durable
// write: each message still in flight under its handle's lease is
// dead-lettered (ReasonTerminal) with f as its failure context when the
// queue has a dead-letter target, or else dropped and counted as a drop
// (see Drop). It is ReportFailure with f.Terminal followed by Drop when
// that finds no target, for many handles at once. Handles whose lease is
// no longer current (a failure report settled it, it expired) are settled
// without effect; malformed ones fail with ErrReceiptHandleInvalid. The
// result has one entry per handle. Durable when it returns.
func (e *Engine) Reject(name string, handles []string, f Failure) ([]error, error) {
	return e.settleLeased(name, handles, func(q *queue, m *message, now int64, b *store.Batch) {
		if !e.canDeadLetter(q) {
			q.dropLocked(m, b)
			e.countDropLocked(q, m, ReasonTerminal)
			return
		}
		m.extension().failure = newFailureRecord(&f, m, now)
		e.deadLetterLocked(q, m, ReasonTerminal, now, b)
	})
}

// matches reports whether m passes f.
func (f *Filter) matches(m *message) bool {
	if !f.SentAfter.IsZero() && m.sentAt < f.SentAfter.UnixNano() {
		return false
	}
	if !f.SentBefore.IsZero() && m.sentAt >= f.SentBefore.UnixNano() {
		return false
	}
	if f.Reason != "" || f.SourceQueue != "" {
		if m.ext == nil || m.ext.dead == nil {
			return false
		}
		if f.Reason != "" && m.ext.dead.Reason != f.Reason {
			return false
		}
		if f.SourceQueue != "" && m.ext.dead.SourceQueue != f.SourceQueue {
			return false
		}
	}
	if f.ErrorClass != "" && (m.ext == nil || m.ext.failure == nil || m.ext.failure.ErrorClass != f.ErrorClass) {
		return false
	}
	if f.AttributeName != "" {
		i := slices.IndexFunc(m.attrs, func(a Attribute) bool { return a.Name == f.AttributeName })
		if i < 0 || (f.AttributeValue != "" && m.attrs[i].StringValue != f.AttributeValue) {
			return false
		}
	}
	if len(f.MessageIDs) > 0 && !slices.Contains(f.MessageIDs, FormatID(m.id)) {
		return false
	}
	return true
}

// sortedSeqsLocked returns the queue's sequence numbers above after, in
// order. Browsing is an operator's action on (usually small) dead-letter
// queues; the hot paths never sort.
func (q *queue) sortedSeqsLocked(after uint64) []uint64 {
	seqs := make([]uint64, 0, len(q.msgs))
	for s := range q.msgs {
		if s > after {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	return seqs
}

func (q *queue) viewLocked(m *message) View {
	d, _ := q.deliveryLocked(m) // a failed body read fails the engine
	d.ReceiptHandle = ""        // browsing leases nothing
	v := View{Delivery: d, LastReceived: fromNanos(m.leaseAt), cursor: m.seq}
	switch m.state {
	case stateVisible:
		v.State = "visible"
	case stateInFlight:
		v.State = "inflight"
		v.VisibleAt = fromNanos(m.visibleAt)
	default:
		v.State = "delayed"
		v.VisibleAt = fromNanos(m.visibleAt)
	}
	v.DeadLetter, v.LastFailure, v.Redrive = d.DeadLetter, d.LastFailure, d.Redrive
	return v
}

// Browse lists messages in queue order without changing them (no receive
// count, no visibility change). limit is capped at 1000.
func (e *Engine) Browse(name string, f Filter, cursor uint64, limit int) (Page, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	q, err := e.lockQueue(name)
	if err != nil {
		return Page{}, err
	}
	defer e.unlockAndInsertCopies(q)
	var b store.Batch
	now := e.now()
	q.advanceLocked(now, &b)
	if b.Len() > 0 {
		if _, err := e.write(&b, false); err != nil {
			return Page{}, err
		}
	}
	// Up to limit+1 matches from memory and as many from the cold part
	// (read from the store, not loaded), merged in queue order.
	var hot, cold []*message
	for _, s := range q.sortedSeqsLocked(cursor) {
		if m := q.msgs[s]; f.matches(m) {
			if hot = append(hot, m); len(hot) > limit {
				break
			}
		}
	}
	err = q.scanColdLocked(cursor, now, true, func(m *message, _ int) error {
		if f.matches(m) {
			if cold = append(cold, m); len(cold) > limit {
				return store.ErrStopScan
			}
		}
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	var page Page
	for len(hot)+len(cold) > 0 {
		var m *message
		if len(cold) == 0 || (len(hot) > 0 && hot[0].seq < cold[0].seq) {
			m, hot = hot[0], hot[1:]
		} else {
			m, cold = cold[0], cold[1:]
		}
		if len(page.Messages) == limit {
			page.Next = page.Messages[len(page.Messages)-1].cursor
			break
		}
		page.Messages = append(page.Messages, q.viewLocked(m))
	}
	return page, nil
}

// DeleteMatching deletes the messages that match f, in any state (an
// operator's delete from a dead-letter queue). It returns how many were
// deleted; the deletes are durable when it returns.
func (e *Engine) DeleteMatching(name string, f Filter) (int, error) {
	q, err := e.lockQueue(name)
	if err != nil {
		return 0, err
	}
	now := e.now()
	var b store.Batch
	q.advanceLocked(now, &b)
	n := 0
	for _, m := range q.msgs { // order does not matter for a delete
		if !f.matches(m) {
			continue
		}
		q.dropLocked(m, &b)
		n++
	}
	// Cold messages are deleted where they are, without loading them.
	var coldN int
	var coldBytes int64
	err = q.scanColdLocked(0, now, false, func(m *message, contentLen int) error {
		if f.matches(m) {
			q.cold.leftCold(m)
			q.noteDroppedLocked(m)
			b.Delete(messageKey(q.id, m.seq, kindContent))
			b.Delete(messageKey(q.id, m.seq, kindState))
			if m.delayRec {
				b.SingleDelete(delayKey(q.id, m.seq))
			}
			q.dropPrioRecordLocked(m, &b)
			coldN++
			coldBytes += int64(contentLen)
		}
		return nil
	})
	if err != nil {
		e.writeUnlock(q, &b)
		return 0, err
	}
	q.cold.n -= coldN
	q.cold.bytes -= coldBytes
	n += coldN
	q.stats.deleted.Add(uint64(n))
	return n, e.commitUnlock(q, &b)
}

// parseID parses a UUID string into an id.
func parseID(s string) ([16]byte, bool) {
	var id [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, false
	}
	return id, true
}

// errImport describes an unusable imported message.
var errImport = errors.New("engine: imported message needs a MessageId in UUID form and a body")

// Import adds messages to queue as they were exported: keeping their
// MessageId, send time, receive count and failure context. Used to restore
// a dead-letter queue from an export.
func (e *Engine) Import(name string, views []View) (int, error) {
	if err := e.admit(); err != nil {
		return 0, err
	}
	q, err := e.lockQueue(name)
	if err != nil {
		return 0, err
	}
	now := e.now()
	var b store.Batch
	q.advanceLocked(now, &b)
	// Validate everything before changing anything: an import is all or
	// nothing.
	for i := range views {
		v := &views[i]
		if _, ok := parseID(v.MessageID); !ok || len(v.Body) == 0 {
			e.writeUnlock(q, &b)
			return 0, errImport
		}
		if q.fifo() && v.GroupID == "" {
			e.writeUnlock(q, &b)
			return 0, ErrMissingGroupID
		}
	}
	n := 0
	for i := range views {
		v := &views[i]
		id, _ := parseID(v.MessageID)
		m := &message{
			seq:         q.nextSeq.Add(1) - 1,
			id:          id,
			body:        v.Body,
			attrs:       v.Attributes,
			dedupID:     v.DedupID,
			sender:      v.SenderID,
			sentAt:      nanos(v.SentAt),
			enqueuedAt:  now,
			visibleAt:   now,
			firstRecvAt: nanos(v.FirstReceiveAt),
			recvCount:   int32(v.ReceiveCount),
			state:       stateVisible,
			prio:        v.Priority,
		}
		if m.sentAt == 0 {
			m.sentAt = now
		}
		if v.DeadLetter != nil || v.LastFailure != nil || v.Redrive != nil || v.TraceHeader != "" || v.DeadLetterSource != "" || len(v.Envelope) > 0 {
			m.ext = &messageExt{dead: v.DeadLetter, failure: v.LastFailure, redrive: v.Redrive,
				trace: v.TraceHeader, dlqSource: v.DeadLetterSource, envelope: v.Envelope}
		}
		if q.fifo() && q.goesColdLocked(m) {
			// Behind a cold FIFO backlog: cold too, so that it follows
			// the cold messages of its group (cold.go).
			m.group = &group{id: v.GroupID}
			q.addColdLocked(m.seq, q.writeCopy(m, &b), false)
			n++
			continue
		}
		m.group = q.groupLocked(v.GroupID)
		q.writeCopy(m, &b) // with its priority record, if any
		m.noPrioRec = q.band(m) == 0
		q.addLocked(m)
		n++
	}
	if n > 0 {
		b.Set(qidPrefix(prefixSeq, q.id), binaryUint64(q.nextSeq.Load()-1))
	}
	q.stats.sent.Add(uint64(n))
	return n, e.commitUnlock(q, &b)
}
