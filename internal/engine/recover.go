package engine

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/sluicemq/sluice/internal/store"
)

// recover rebuilds memory from the store. A record that fails to decode
// stops the start with an error naming its key: Sluice never skips data it
// cannot read. It returns the number of messages loaded.
func (e *Engine) recover() (int, error) {
	now := e.now()
	err := e.st.Scan([]byte{prefixNextID}, func(k, v []byte) error {
		if len(v) != 4 {
			return fmt.Errorf("%w: next queue id", errCorrupt)
		}
		e.nextQID = binary.BigEndian.Uint32(v)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}
	if err := e.recoverGone(); err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}
	byID := make(map[uint32]*queue)
	err = e.st.Scan([]byte{prefixQueue}, func(k, v []byte) error {
		r, err := decodeQueue(v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", k[1:], err)
		}
		q := newQueue(e, r.ID, r.Name, r.Config)
		q.tags = r.Tags
		q.createdAt, q.modifiedAt = r.CreatedAt, r.ModifiedAt
		q.nextSeq.Store(1)
		e.queues[r.Name] = q
		byID[r.ID] = q
		if r.ID >= e.nextQID {
			e.nextQID = r.ID + 1
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}
	err = e.st.Scan([]byte{prefixSeq}, func(k, v []byte) error {
		// A queue's own record (5 bytes) or one per source that moves
		// copies into it (9 bytes, movedSeqKey): the largest wins.
		if (len(k) != 5 && len(k) != 9) || len(v) != 8 {
			return fmt.Errorf("%w: sequence record", errCorrupt)
		}
		if q := byID[binary.BigEndian.Uint32(k[1:])]; q != nil {
			if s := binary.BigEndian.Uint64(v) + 1; s > q.nextSeq.Load() {
				q.nextSeq.Store(s)
			}
		}
		return nil
	})
	if err == nil {
		err = recoverSessionMarks(e.st, byID)
	}
	if err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}

	// Messages (recoverMessages). Records that cannot be attached are
	// classified (see recoveryAudit): leftovers of deleted queues are
	// dropped below, loudly; anything else stops the start before
	// anything is changed.
	audit := newRecoveryAudit(e.nextQID)
	var orphans store.Batch // the dedup upgrade and leftovers of deleted queues
	delays, err := scanDelays(e.st, func(qid uint32) bool { return byID[qid] != nil }, now, audit)
	var loaded int
	if err == nil {
		loaded, err = e.recoverMessages(byID, delays, audit, now)
	}
	if err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}
	for _, q := range byID {
		// Messages sent from now on were never delivered by an earlier
		// run, even below its mark: the mark comes down to the next
		// sequence number, in the store too, so that a later restart
		// does not take them for deliveries of this one (session.go).
		if next := q.nextSeq.Load(); q.sessMark > next {
			q.sessMark, q.sessMarkOpen = next, next
			orphans.Set(sessionMarkKey(q.id), binary.BigEndian.AppendUint64(nil, next))
		}
	}

	// Dedup records are not read (dedup.go), except once to upgrade
	// the layout of an older release (written below with the leftovers).
	upgrade, err := e.upgradeDedup(byID, audit, now)
	if err != nil {
		return 0, fmt.Errorf("engine: recover: %w", err)
	}
	for _, q := range byID {
		q.publishRoomLocked()
	}
	if len(audit.unexplained) > 0 {
		e.log.Error("recovery found records it cannot explain; refusing to start without a repair",
			"records", len(audit.unexplained), "first", audit.describe(3))
		return 0, fmt.Errorf("%w: %d record(s): %s; nothing was changed: see what `sluice repair --data-dir DIR --dry-run` would drop, then run it without --dry-run",
			ErrNeedsRepair, len(audit.unexplained), audit.describe(10))
	}
	if audit.sessions > 0 {
		e.log.Info("requeued deliveries whose connections ended with the previous run (AMQP unacknowledged messages)",
			"messages", audit.sessions)
	}
	for qid, n := range audit.perQueue {
		e.log.Warn("recovery dropped records of a deleted queue (writes that raced its delete)",
			"queue_id", qid, "records", n)
	}
	e.recoveryDropped.Add(int64(audit.leftoverCount()))
	for _, op := range upgrade.Ops {
		if op.Kind == store.OpSet {
			orphans.Set(op.Key, op.Value)
		} else {
			orphans.Delete(op.Key)
		}
	}
	for _, op := range audit.leftovers.Ops {
		orphans.Delete(op.Key)
	}
	if orphans.Len() > 0 {
		p, err := e.write(&orphans, true)
		if err == nil {
			err = e.wait(p)
		}
		if err != nil {
			return 0, fmt.Errorf("engine: recover: removing leftovers: %w", err)
		}
	}
	for _, q := range byID {
		if q.fifo() {
			if err := q.loadDedupExpiryLocked(); err != nil {
				return 0, fmt.Errorf("engine: recover: queue %q: %w", q.name, err)
			}
		}
		e.scheduleLocked(q)
	}
	return loaded, nil
}

// recoverMessages loads the first window of each queue's messages (the
// rest is counted as cold from keys and value lengths, see cold.go). Key
// ranges between known queues are read key by key for the audit (records
// of deleted or unknown queues).
func (e *Engine) recoverMessages(byID map[uint32]*queue, delays map[uint32][]pendingDelay, audit *recoveryAudit, now int64) (int, error) {
	ids := make([]uint32, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	gap := func(lo, hi []byte) error {
		return e.st.ScanLengths(lo, hi, func(k []byte, _ int) error {
			if len(k) != 14 {
				return fmt.Errorf("%w: message key %x", errCorrupt, k)
			}
			audit.unknownQueue(k, binary.BigEndian.Uint32(k[1:]))
			return nil
		})
	}
	loaded := 0
	lo := []byte{prefixMessage}
	for _, id := range ids {
		if err := gap(lo, qidPrefix(prefixMessage, id)); err != nil {
			return 0, err
		}
		n, err := e.recoverQueueMessages(byID[id], delays[id], audit, now)
		if err != nil {
			return 0, err
		}
		loaded += n
		lo = qidPrefix(prefixMessage, id+1)
	}
	if err := gap(lo, []byte{prefixMessage + 1}); err != nil {
		return 0, err
	}
	return loaded, nil
}

// recoverQueueMessages loads q's messages (the first window, or all when
// no window is set) and counts the rest as cold. Content and state records
// of one message are adjacent (kind 0 then 1), so one pass rebuilds each
// message.
func (e *Engine) recoverQueueMessages(q *queue, delays []pendingDelay, audit *recoveryAudit, now int64) (int, error) {
	windowed := e.window > 0
	var loadedBody int64
	loaded := 0
	stopAt, stopped, err := q.scanRecords(qidPrefix(prefixMessage, q.id), qidPrefix(prefixMessage, q.id+1), recordScan{
		content: func(uint64) (skip, stop bool) {
			return false, windowed && e.windowFull(loaded, loadedBody)
		},
		keepBody: e.keepBodies,
		message: func(m *message, group string, _ int) error {
			if m.seq >= q.nextSeq.Load() {
				q.nextSeq.Store(m.seq + 1)
			}
			loadedBody += int64(max(m.bodyLen, int32(len(m.body))))
			if q.restoreLocked(m, group, now) {
				audit.sessions++
			}
			loaded++
			return nil
		},
		orphanState: func(k []byte, seq uint64) { audit.stateWithoutContent(k, q.name, seq) },
	})
	if err != nil {
		return 0, err
	}
	if stopped {
		if err := q.countColdLocked(stopAt, now, delays, audit); err != nil {
			return 0, err
		}
		if q.maxPrio > 0 {
			// Priority records may exist in any band: the first
			// receive looks at each from its start.
			q.cold.prioFrom = make(map[uint8]uint64, q.maxPrio)
			for b := uint8(1); b <= q.maxPrio && b != 0; b++ {
				q.cold.prioFrom[b] = 0
			}
		}
	}
	return loaded, nil
}

// restoreLocked inserts a recovered message in the state its times imply.
// A lease that ended while the broker was down ends now; one still running
// keeps running, unless it was a connection's (restoredState). It reports
// whether it ended a connection's lease. (Recovery runs before any other
// goroutine sees q.)
func (q *queue) restoreLocked(m *message, groupID string, now int64) (endedSession bool) {
	session := m.session
	m.state = restoredState(m, now)
	m.group = q.groupLocked(groupID)
	q.addLocked(m)
	return session && !m.session
}

// restoredState is the state a message read from the store is in at now.
// A connection's lease (message.session) was granted by an engine that is
// gone, with its connections: it ends now, visible at once without a
// retry backoff (parked), its receive count kept. Nothing is written: a
// later restart that finds the same record ends it again.
func restoredState(m *message, now int64) uint8 {
	switch {
	case m.receipt != 0 && m.leaseAt != 0 && !m.parked && m.session:
		m.session = false
		m.parked = true
		m.visibleAt = now
		return stateVisible
	case m.receipt != 0 && m.leaseAt != 0 && !m.parked:
		// A lease, running or ended while the broker was down: the
		// first advance ends it exactly as it would have (including a
		// retry backoff).
		return stateInFlight
	case m.visibleAt <= now:
		return stateVisible
	default:
		return stateDelayed
	}
}
