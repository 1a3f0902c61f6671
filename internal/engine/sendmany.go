package engine

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/sluicemq/sluice/internal/store"
)

// QueueSend is one queue's share of a SendMany: the messages for Queue.
type QueueSend struct {
	Queue string
	Msgs  []Message
}

// QueueSendResult is what SendMany did with one QueueSend: Err is
// ErrQueueNotFound when the queue does not exist (nothing was stored for
// it); otherwise Results has one entry per message, as Send's.
type QueueSendResult struct {
	Results []SendResult
	Err     error
}

// SendMany stores messages into several queues in one atomic, durable
// write: one batch and one fsync, whatever the number of queues (an AMQP
// publish that an exchange routes to k queues). After a crash either every
// stored message of the call is in its queue or none is. When SendMany
// returns without error, every entry stored is durable, exactly as with
// Send; a queue that does not exist gets ErrQueueNotFound in its result and
// does not stop the others. Each queue appears at most once in sends (the
// caller groups messages by queue). The bodies and attributes of the
// messages are retained: callers must not modify them afterwards.
//
// SendMany holds the queues' locks together, taken in ascending queue id
// (the only place the engine holds more than one queue lock; see the lock
// order in docs/architecture.md), writes the batch, releases them all, and
// then waits for the sync.
func (e *Engine) SendMany(sends []QueueSend) ([]QueueSendResult, error) {
	out := make([]QueueSendResult, len(sends))
	if len(sends) == 0 {
		return out, nil
	}
	if err := e.admit(); err != nil {
		return nil, err
	}
	// Random inputs are drawn before the change is applied.
	ids := make([][][16]byte, len(sends))
	for i, s := range sends {
		ids[i] = make([][16]byte, len(s.Msgs))
		for j := range ids[i] {
			ids[i][j] = newID()
		}
	}
	qs := make([]*queue, len(sends))
	var locked []*queue
	for i, s := range sends {
		q, err := e.lookup(s.Queue)
		if err != nil {
			out[i].Err = err
			continue
		}
		if slices.Contains(locked, q) {
			return nil, fmt.Errorf("engine: SendMany: queue %q appears twice", s.Queue)
		}
		qs[i] = q
		locked = append(locked, q)
	}
	if len(locked) == 0 {
		return out, nil
	}
	slices.SortFunc(locked, func(a, b *queue) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	for _, q := range locked {
		q.mu.Lock()
	}
	now := e.now()
	var b store.Batch
	for _, q := range locked {
		if !q.deleted {
			q.advanceLocked(now, &b)
		}
	}
	for i, s := range sends {
		q := qs[i]
		if q == nil {
			continue
		}
		if q.deleted {
			out[i].Err = ErrQueueNotFound
			continue
		}
		res := make([]SendResult, len(s.Msgs))
		added := 0
		for j := range s.Msgs {
			var stored bool
			res[j], stored = q.sendOneLocked(&s.Msgs[j], ids[i][j], now, &b)
			if stored {
				added++
			}
		}
		if added > 0 {
			b.Set(qidPrefix(prefixSeq, q.id), binary.BigEndian.AppendUint64(nil, q.nextSeq.Load()-1))
			q.stats.sent.Add(uint64(added))
			e.obs.Sent(q.name, added)
		}
		out[i].Results = res
	}
	ords := make([]uint64, len(locked))
	for i, q := range locked {
		ords[i] = q.dedupWrittenLocked()
	}
	p, err := e.write(&b, true)
	if err == nil {
		for _, q := range locked {
			if !q.deleted {
				e.scheduleLocked(q)
			}
		}
	}
	e.unlockAllAfter(locked, p)
	if err != nil {
		return nil, err
	}
	if err := e.wait(p); err != nil {
		return nil, err
	}
	for i, q := range locked {
		q.dedupSettled(ords[i])
	}
	return out, nil
}

// unlockAllAfter is unlockAndInsertCopiesAfter for several queues locked
// together: every lock is released before any copy they decided is
// inserted (inserting takes the target's lock, which may be one of them).
func (e *Engine) unlockAllAfter(qs []*queue, p store.Pending) {
	var copies []pendingCopy
	for _, q := range qs {
		copies = append(copies, q.outbox...)
		q.outbox = nil
		e.pokeTransfersLocked(q)
		q.publishRoomLocked()
		q.mu.Unlock()
	}
	e.insertCopiesAfter(copies, p)
}
