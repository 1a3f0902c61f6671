package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/sluicemq/sluice/internal/store"
)

// Priority queues (QueueConfig.MaxPriority, AMQP x-max-priority).
//
// In memory a priority queue keeps each group's ready messages ordered by
// band, highest first (list.insertBand, pushBand). On disk its messages
// are in sequence order like any queue's, so a refill alone would load a
// deep backlog's messages by arrival and deliver a low priority ahead of
// a higher one still on disk. What keeps the order across the cold part:
//
//   - A send of band above 0 stays in memory while the waiting messages
//     fit in two windows, even when the queue is cold (goesColdLocked).
//   - Such a send also writes a priority record, P qid (255-band) seq
//     (prioKey), in its batch, whether it stays in memory or goes cold:
//     a restart loads only the first window, and the record is how a
//     receive finds the message past it.
//   - A receive on a cold priority queue first loads the cold messages
//     those records name, highest band first (promotePrioritiesLocked),
//     while the waiting messages fit in three windows, reading them in
//     sequence order, nearby ones in one store scan
//     (promoteColdSeqsLocked); then it refills
//     in sequence order as any queue does. A message loaded from the
//     store takes its place by sequence number within its band
//     (list.insertBand), so an older one loaded after newer ones of its
//     band still comes first. Only bands that may hold cold records are
//     scanned, each from where its last scan stopped (coldPart.prioFrom;
//     every band from the start after a restart).
//
// Dead-letter, redrive and imported copies write their record as a send
// does (writeCopy), in the batch that moves them; a scan passes over the
// record of a copy not yet inserted (coldPart.pending), which registers
// its band when it is inserted cold (insertMovedLocked).
//
// A record is deleted with its message; a scan deletes the ones it finds
// stale (message gone) and passes over those of messages in memory, ready,
// in flight or delayed, kept for a restart. So a higher priority waits
// behind a lower one only while three windows of messages wait in memory
// (TestPriorityModel checks the order against a model within that bound;
// TestPriorityCopiesAheadOfColdBacklog and
// TestPriorityInFlightAcrossRestarts the cases a model of sends and
// receives does not reach).

// prioKey is the priority record of message seq of band band of queue
// qid. The band is stored inverted so that a scan from the
// queue's prefix meets the highest band first, then sequence order.
func prioKey(qid uint32, band uint8, seq uint64) []byte {
	k := append(qidPrefix(prefixPriority, qid), 255-band)
	return binary.BigEndian.AppendUint64(k, seq)
}

// indexLocked writes in b the priority record of m, a send of q, when q
// orders by priority and m's band is above 0, and reports whether it
// wrote one. A send kept in memory needs it too: a restart loads only
// the first window and may find m past it, in the cold part, where only
// its record lets a receive find it ahead of the backlog. For a send
// going cold (cold), the band's scan is told where to start.
func (q *queue) indexLocked(m *message, cold bool, b *store.Batch) bool {
	band := q.band(m)
	if band == 0 {
		return false
	}
	b.Set(prioKey(q.id, band, m.seq), nil)
	if cold {
		q.notePrioColdLocked(band, m.seq)
	}
	return true
}

// notePrioColdLocked tells band's scan that the cold message seq has a
// priority record: the next scan starts at seq at the latest.
func (q *queue) notePrioColdLocked(band uint8, seq uint64) {
	if q.cold.prioFrom == nil {
		q.cold.prioFrom = make(map[uint8]uint64)
	}
	if from, ok := q.cold.prioFrom[band]; !ok || seq < from {
		q.cold.prioFrom[band] = seq
	}
}

// writeCopy writes in b the content record of m, a copy into q (a dead
// letter, a redrive, an import), and its priority record when q orders by
// priority and m's band is above 0, and returns the content record's
// length. It reads only what never changes after q's creation, so a
// caller may hold another queue's lock instead of q's. m's sequence
// number must be pending in q (coldPart.addPending) until m is inserted,
// or inserted under the same hold of q's lock, so that no scan takes
// the record for a stale one; insertMovedLocked then registers it when m
// goes cold.
func (q *queue) writeCopy(m *message, b *store.Batch) int {
	rec := encodeContent(m)
	b.Set(messageKey(q.id, m.seq, kindContent), rec)
	if band := q.band(m); band > 0 {
		b.Set(prioKey(q.id, band, m.seq), nil)
	}
	return len(rec)
}

// dropPrioRecordLocked deletes m's priority record in b when it may have
// one.
func (q *queue) dropPrioRecordLocked(m *message, b *store.Batch) {
	if q.band(m) == 0 || m.noPrioRec {
		return
	}
	b.Delete(prioKey(q.id, q.band(m), m.seq))
	m.noPrioRec = true
}

// promotePrioritiesLocked loads into memory, highest band first, the cold
// messages that priority records name, while the waiting messages fit in
// three windows, so that none is delivered while a higher priority, or an
// older message of its own, waits on disk. It deletes the stale records
// it reads and returns how many messages it loaded. Each band's scan
// starts where the last one stopped (coldPart.prioFrom), so it does not
// pass again over the records of ready messages in memory. A read
// failure fails the engine.
func (q *queue) promotePrioritiesLocked(b *store.Batch) int {
	if q.maxPrio == 0 || !q.cold.on || len(q.cold.prioFrom) == 0 {
		return 0
	}
	e := q.eng
	w, wb := max(e.window, 1), e.windowB
	n, bytes := q.waitingLocked()
	room := 3*w - n
	if wb > 0 && bytes >= 3*wb {
		room = 0
	}
	var (
		cold  [][]byte // records of cold messages to load, in order
		stale [][]byte
	)
	for band := q.maxPrio; band > 0 && len(cold) < room; band-- {
		from, ok := q.cold.prioFrom[band]
		if !ok {
			continue
		}
		next, ended := uint64(0), true
		lo, hi := prioKey(q.id, band, from), prioKey(q.id, band, math.MaxUint64)
		err := e.st.ScanRange(lo, hi, func(k, _ []byte) error {
			if len(k) != 14 {
				return fmt.Errorf("%w: priority key %x", errCorrupt, k)
			}
			seq := binary.BigEndian.Uint64(k[6:])
			if len(cold) >= room || len(stale) >= 4*w {
				next, ended = seq, false
				return store.ErrStopScan
			}
			key := append([]byte(nil), k...)
			switch m := q.msgs[seq]; {
			case m != nil && !m.noPrioRec:
				// In memory, ready or not: the record stays for a
				// restart, and the next scan starts past it (a
				// message in memory never goes cold again).
			case m == nil && q.cold.isPending(seq):
				// A copy whose write is not yet durable: it is
				// inserted later, and registers its band then if
				// it goes cold (insertMovedLocked).
			case seq < q.cold.from || q.notColdLocked(seq):
				stale = append(stale, key) // gone, or in memory with its record deleted
			default:
				cold = append(cold, key)
			}
			return nil
		})
		if err != nil {
			_ = e.fail(fmt.Errorf("reading the priority records of queue %q: %w", q.name, err))
			return 0
		}
		if ended {
			delete(q.cold.prioFrom, band)
		} else {
			q.cold.prioFrom[band] = next
		}
	}
	for _, k := range stale {
		b.Delete(k)
	}
	// A message loaded keeps its record: it is ready in memory, and a
	// restart may leave it past the first window again.
	// They are read in sequence order, nearby ones in one scan
	// (promoteColdSeqsLocked); each takes its place in its band by
	// sequence number whatever the order of loading.
	seqs := make([]uint64, len(cold))
	for i, k := range cold {
		seqs[i] = binary.BigEndian.Uint64(k[6:])
	}
	slices.Sort(seqs)
	found := make(map[uint64]bool, len(cold))
	q.promoteColdSeqsLocked(seqs, func(m *message) { found[m.seq] = true })
	if e.failed.Load() != nil {
		return len(found)
	}
	for _, k := range cold {
		if !found[binary.BigEndian.Uint64(k[6:])] {
			b.Delete(k) // its message is gone
		}
	}
	return len(found)
}
