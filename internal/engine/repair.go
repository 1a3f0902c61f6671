package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/internal/store"
)

// ErrNeedsRepair is returned (wrapped, with the records it is about) by Open
// when the store holds records recovery cannot explain. Open changes
// nothing then; `sluice repair --data-dir DIR --dry-run` lists what a
// repair would drop, and `sluice repair --data-dir DIR` drops it.
var ErrNeedsRepair = errors.New("engine: the store holds records recovery cannot explain; run sluice repair")

// An unexplained record is one recovery cannot attach to a queue or a
// message and for which no crash or race of this version accounts:
//
//   - a message, delay or dedup record of a queue id that was never allocated (at
//     or above the next queue id): queue ids are allocated by the same
//     batch that writes the queue's record, so no write of Sluice makes one;
//   - a message state record without its content record: a message's
//     content is deleted in the same batch as its state, and a state is
//     only written for a message in memory, so this too is never written.
//
// Either means the data directory was damaged or edited, or a bug; Sluice
// does not guess which, and does not drop them on its own.
//
// Records of a queue id that was allocated but whose queue record is gone
// are different: they are the leftovers of a queue delete. The delete
// removes the queue's record and DeleteRanges its records in one batch,
// but an operation already holding the queue (a receive's lease, an
// expiry, a dead-letter move into it from another queue) can write after
// that batch and before the queue is marked deleted in memory. Recovery
// drops those, with a log line per queue and a count (RecoveryDropped).

// recoveryAudit collects the records recovery does not load.
type recoveryAudit struct {
	nextQID     uint32
	leftovers   store.Batch       // records of deleted queues
	perQueue    map[uint32]int    // leftovers by queue id
	unexplained []unexplainedItem // see ErrNeedsRepair
	sessions    int               // connections' leases ended (restoredState)
}

type unexplainedItem struct {
	key []byte
	why string
}

func newRecoveryAudit(nextQID uint32) *recoveryAudit {
	return &recoveryAudit{nextQID: nextQID, perQueue: make(map[uint32]int)}
}

// unknownQueue classifies a record of queue qid, which has no queue record.
func (a *recoveryAudit) unknownQueue(k []byte, qid uint32) {
	k = append([]byte(nil), k...)
	if qid != 0 && qid < a.nextQID {
		a.leftovers.Delete(k)
		a.perQueue[qid]++
		return
	}
	a.unexplained = append(a.unexplained, unexplainedItem{k,
		fmt.Sprintf("record of queue id %d, which was never allocated (next queue id %d)", qid, a.nextQID)})
}

// stateWithoutContent records a message state record with no content.
func (a *recoveryAudit) stateWithoutContent(k []byte, queue string, seq uint64) {
	a.unexplained = append(a.unexplained, unexplainedItem{append([]byte(nil), k...),
		fmt.Sprintf("state of message %d of queue %q without its content record", seq, queue)})
}

// leftoverCount is the number of leftover records.
func (a *recoveryAudit) leftoverCount() int { return a.leftovers.Len() }

// describe summarizes the unexplained records, listing at most max.
func (a *recoveryAudit) describe(max int) string {
	var sb strings.Builder
	for i, u := range a.unexplained {
		if i == max {
			fmt.Fprintf(&sb, "; and %d more", len(a.unexplained)-max)
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "%s (key %x)", u.why, u.key)
	}
	return sb.String()
}

// RepairReport is what Repair found (and, unless it was a dry run, dropped).
type RepairReport struct {
	// Unexplained lists records no crash or race accounts for (see
	// ErrNeedsRepair), one line each.
	Unexplained []string
	// Leftovers counts records of deleted queues by queue id; recovery
	// drops these by itself.
	Leftovers map[uint32]int
	// Dropped reports whether the records were deleted.
	Dropped bool
}

// Repair audits a store the way Open's recovery does, without loading it,
// and unless dryRun deletes every record recovery would not load: the
// unexplained ones that make Open refuse to start, and the leftovers of
// deleted queues. It writes nothing else. The store must not be in use by
// an engine.
func Repair(st store.Store, log *slog.Logger, dryRun bool) (RepairReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var next uint32 = 1
	err := st.Scan([]byte{prefixNextID}, func(k, v []byte) error {
		if len(v) != 4 {
			return fmt.Errorf("%w: next queue id", errCorrupt)
		}
		next = binary.BigEndian.Uint32(v)
		return nil
	})
	if err != nil {
		return RepairReport{}, fmt.Errorf("engine: repair: %w", err)
	}
	names := make(map[uint32]string)
	err = st.Scan([]byte{prefixQueue}, func(k, v []byte) error {
		r, err := decodeQueue(v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", k[1:], err)
		}
		names[r.ID] = r.Name
		next = max(next, r.ID+1)
		return nil
	})
	if err != nil {
		return RepairReport{}, fmt.Errorf("engine: repair: %w", err)
	}
	a := newRecoveryAudit(next)
	var lastContent []byte // qid+seq of the last content record
	err = st.Scan([]byte{prefixMessage}, func(k, v []byte) error {
		if len(k) != 14 {
			return fmt.Errorf("%w: message key %x", errCorrupt, k)
		}
		qid := binary.BigEndian.Uint32(k[1:])
		name, ok := names[qid]
		if !ok {
			a.unknownQueue(k, qid)
			return nil
		}
		switch k[13] {
		case kindContent:
			lastContent = append(lastContent[:0], k[1:13]...)
		case kindState:
			if string(lastContent) != string(k[1:13]) {
				a.stateWithoutContent(k, name, binary.BigEndian.Uint64(k[5:]))
			}
		}
		return nil
	})
	if err != nil {
		return RepairReport{}, fmt.Errorf("engine: repair: %w", err)
	}
	for _, p := range []byte{prefixDedup, prefixDedupExpiry} {
		err = st.Scan([]byte{p}, func(k, v []byte) error {
			if len(k) < 6 {
				return fmt.Errorf("%w: dedup key %x", errCorrupt, k)
			}
			if qid := binary.BigEndian.Uint32(k[1:]); names[qid] == "" {
				a.unknownQueue(k, qid)
			}
			return nil
		})
		if err != nil {
			return RepairReport{}, fmt.Errorf("engine: repair: %w", err)
		}
	}
	// Repair counts nothing: with now at the end of time no delay is
	// pending, and only the audit remains.
	if _, err := scanDelays(st, func(qid uint32) bool { return names[qid] != "" }, math.MaxInt64, a); err != nil {
		return RepairReport{}, fmt.Errorf("engine: repair: %w", err)
	}
	rep := RepairReport{Leftovers: a.perQueue}
	var b store.Batch
	for _, u := range a.unexplained {
		rep.Unexplained = append(rep.Unexplained, fmt.Sprintf("%s (key %x)", u.why, u.key))
		b.Delete(u.key)
	}
	sort.Strings(rep.Unexplained)
	for _, op := range a.leftovers.Ops {
		b.Delete(op.Key)
	}
	if dryRun || b.Len() == 0 {
		return rep, nil
	}
	p, err := st.Write(&b, true)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		return rep, fmt.Errorf("engine: repair: %w", err)
	}
	rep.Dropped = true
	log.Warn("repair dropped records recovery could not load", "unexplained", len(a.unexplained), "leftovers", a.leftoverCount())
	return rep, nil
}
