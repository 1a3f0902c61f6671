package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// Priority queues (QueueConfig.MaxPriority, AMQP x-max-priority).
//
// In memory a priority queue keeps each group's ready messages ordered by
// band, highest first (list.pushBand). On disk its messages are in
// sequence order like any queue's, so a refill alone would load a deep
// backlog's messages by arrival and deliver a low priority ahead of a
// higher one still on disk. What keeps the order across the cold part:
//
//   - A send of band above 0 stays in memory while the waiting messages
//     fit in two windows, even when the queue is cold (goesColdLocked).
//   - Such a send also writes a priority record, P qid (255-band) seq
//     (prioKey), in its batch, whether it stays in memory or goes cold:
//     a restart loads only the first window, and the record is how a
//     receive finds the message past it.
//   - A receive on a cold priority queue first loads the cold messages
//     those records name, highest band first (promotePrioritiesLocked),
//     while the waiting messages fit in two windows, and up to three for
//     a band above every ready message in memory; then it refills in
//     sequence order as any queue does.
//
// A record is deleted when its message is loaded through it or dropped; a
// scan deletes the ones it finds stale (message gone, or in memory and
// not ready: in flight or delayed, which a scan would otherwise pass over
// every time) and leaves those of ready messages in memory for a
// restart. A dead-letter or redrive copy gets none: in a cold priority
// queue it is ordered by arrival until a refill loads it. So a higher
// priority waits behind a lower one only while three windows of messages
// wait in memory, for copies, and, after a restart, for a message that
// was in flight or delayed when a scan passed its record.

// prioKey is the priority record of cold message seq of band band of
// queue qid. The band is stored inverted so that a scan from the
// queue's prefix meets the highest band first, then sequence order.
func prioKey(qid uint32, band uint8, seq uint64) []byte {
	k := append(qidPrefix(prefixPriority, qid), 255-band)
	return binary.BigEndian.AppendUint64(k, seq)
}

// indexColdLocked writes the priority record of m, a send of q going cold
// in b, when q orders by priority and m's band is above 0.
func (q *queue) indexColdLocked(m *message, b *store.Batch) {
	if q.maxPrio == 0 || q.band(m) == 0 {
		return
	}
	b.Set(prioKey(q.id, q.band(m), m.seq), nil)
	q.cold.prio++
}

// indexHotLocked writes the priority record of m, a send of q kept in
// memory, in b when q orders by priority and m's band is above 0: a
// restart loads only the first window, and may find m past it, in the
// cold part, where only its record lets a receive find it ahead of the
// backlog. It reports whether it wrote one.
func (q *queue) indexHotLocked(m *message, b *store.Batch) bool {
	if q.maxPrio == 0 || q.band(m) == 0 {
		return false
	}
	b.Set(prioKey(q.id, q.band(m), m.seq), nil)
	return true
}

// dropPrioRecordLocked deletes m's priority record in b when it may have
// one.
func (q *queue) dropPrioRecordLocked(m *message, b *store.Batch) {
	if q.maxPrio == 0 || q.band(m) == 0 || m.noPrioRec {
		return
	}
	b.Delete(prioKey(q.id, q.band(m), m.seq))
	m.noPrioRec = true
}

// promotePrioritiesLocked loads into memory, highest band first, the cold
// messages that priority records name, while the waiting messages fit in
// two windows, and past that, up to three windows, those of a band above
// every ready message in memory, so that none is delivered while a higher
// priority waits on disk. It deletes the records it read (of the messages
// loaded, and stale ones) and returns how many messages it loaded. A read
// failure fails the engine.
func (q *queue) promotePrioritiesLocked(b *store.Batch) int {
	if q.maxPrio == 0 || !q.cold.on || q.cold.prio <= 0 {
		return 0
	}
	e := q.eng
	w, wb := max(e.window, 1), e.windowB
	n, bytes := q.waitingLocked()
	room, over := 2*w-n, 3*w-n
	if wb > 0 && bytes >= 2*wb {
		room = 0
	}
	if wb > 0 && bytes >= 3*wb {
		over = 0
	}
	if over <= 0 {
		return 0
	}
	best := q.bestReadyBandLocked()
	type rec struct {
		key []byte
		seq uint64
	}
	var (
		cold  []rec
		stale [][]byte
		ended = true // the scan reached the end of the queue's records
	)
	lo, hi := qidPrefix(prefixPriority, q.id), qidPrefix(prefixPriority, q.id+1)
	err := e.st.ScanRange(lo, hi, func(k, _ []byte) error {
		if len(k) != 14 {
			return fmt.Errorf("%w: priority key %x", errCorrupt, k)
		}
		band := int(255 - k[5])
		if len(cold) >= over || len(cold) >= room && band <= best || len(stale) >= 4*w {
			ended = false
			return store.ErrStopScan
		}
		seq := binary.BigEndian.Uint64(k[6:])
		if m := q.msgs[seq]; m != nil && m.state == stateVisible && !m.noPrioRec {
			return nil // in memory and ready: the record stays for a restart
		}
		key := append([]byte(nil), k...)
		if seq < q.cold.from || q.notColdLocked(seq) {
			stale = append(stale, key) // gone, or in memory and delivered
		} else {
			cold = append(cold, rec{key, seq})
		}
		return nil
	})
	if err != nil {
		_ = e.fail(fmt.Errorf("reading the priority records of queue %q: %w", q.name, err))
		return 0
	}
	for _, k := range stale {
		b.Delete(k)
	}
	loaded := 0
	for _, r := range cold {
		b.Delete(r.key)
		if m := q.promoteColdLocked(r.seq); m != nil {
			m.noPrioRec = true
			loaded++
		} else if e.failed.Load() != nil {
			return loaded
		}
	}
	if ended {
		q.cold.prio = 0 // none left: no scan until a send writes one
	} else {
		q.cold.prio = max(q.cold.prio-loaded, 1)
	}
	return loaded
}

// bestReadyBandLocked returns the highest band among the ready messages
// at the heads of the first groups a receive would take from (-1: none).
// Each group's list is ordered by band, so its head is its best.
func (q *queue) bestReadyBandLocked() int {
	best := -1
	i := 0
	for g := q.available.head; g != nil && i < 64; g = g.next {
		if m := g.msgs.head; m != nil && m.state == stateVisible {
			best = max(best, int(q.band(m)))
		}
		i++
	}
	return best
}
