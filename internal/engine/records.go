package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// recordScan says what scanRecords does with a queue's message records.
type recordScan struct {
	// content is called for each content record, before it is decoded:
	// skip leaves that message out (its state record too), stop ends the
	// scan there (scanRecords then reports seq as where it stopped). Nil
	// decodes every message.
	content func(seq uint64) (skip, stop bool)
	// keepBody says whether the message about to be decoded keeps its body
	// in memory (see decodeContentBody).
	keepBody func() bool
	// message receives each message assembled from its content record and,
	// when one follows, its state record, with the group named in the
	// content and the content record's length. m.stateRec says whether a
	// state record was found (stateRecUnknown) or not (stateRecNone). An
	// error (store.ErrStopScan included) ends the scan with it.
	message func(m *message, group string, contentLen int) error
	// orphanState is told of a state record without its content record
	// (nil: ignored).
	orphanState func(key []byte, seq uint64)
}

// scanRecords reads q's message records in [start, end) in key order and
// assembles each message from its content record (kind 0) and the state
// record (kind 1) that follows it, if any: the one place that turns
// message records back into messages (recovery, refills, in-place scans of
// the cold part, promotion of one cold message). It returns the sequence
// number at which s.content stopped the scan, and whether it did.
func (q *queue) scanRecords(start, end []byte, s recordScan) (stopAt uint64, stopped bool, err error) {
	var cur *message
	var curGroup string
	var curLen int
	emit := func() error {
		if cur == nil {
			return nil
		}
		m := cur
		cur = nil
		q.noteMaybeDelivered(m)
		return s.message(m, curGroup, curLen)
	}
	skipping := false
	err = q.eng.st.ScanRange(start, end, func(k, v []byte) error {
		if len(k) != 14 {
			return fmt.Errorf("%w: message key %x", errCorrupt, k)
		}
		seq := binary.BigEndian.Uint64(k[5:])
		switch k[13] {
		case kindContent:
			if err := emit(); err != nil {
				return err
			}
			skipping = false
			if s.content != nil {
				skip, stop := s.content(seq)
				if stop {
					stopAt, stopped = seq, true
					return store.ErrStopScan
				}
				if skip {
					skipping = true
					return nil
				}
			}
			m := &message{seq: seq}
			g, err := decodeContentBody(m, v, s.keepBody())
			if err != nil {
				return fmt.Errorf("message %d of queue %q: %w", seq, q.name, err)
			}
			// Content comes before state in key order: until a state
			// record shows up, the store holds none for this message,
			// so its end needs no delete for one (dropLocked).
			m.stateRec = stateRecNone
			cur, curGroup, curLen = m, g, len(v)
		case kindState:
			if skipping {
				return nil
			}
			if cur == nil || cur.seq != seq {
				if s.orphanState != nil {
					s.orphanState(k, seq)
				}
				return nil
			}
			if err := decodeState(cur, v); err != nil {
				return fmt.Errorf("message state %d of queue %q: %w", seq, q.name, err)
			}
			cur.stateRec = stateRecUnknown // written before; how often is unknown
		default:
			return fmt.Errorf("%w: message key kind %x", errCorrupt, k[13])
		}
		return nil
	})
	if err == nil {
		err = emit()
	}
	return stopAt, stopped, err
}

// keepBodies reports whether a message read from the store now may keep its
// body in memory: while the engine's body budget allows. Oldest messages are
// read first, so they are the ones that keep theirs.
func (e *Engine) keepBodies() bool {
	return e.bodyBudget < 0 || e.memBodies.Load() < e.bodyBudget
}
