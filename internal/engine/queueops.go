package engine

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Queue-level operations of the engine's API: look up, list, delete and purge
// queues, and the AMQP-style bulk operations on a queue's messages.

// PurgeQueue deletes every message (visible, in flight and delayed) and
// clears the FIFO deduplication cache. At most once per PurgeInterval:
// otherwise ErrPurgeInProgress.
func (e *Engine) PurgeQueue(name string) error {
	q, err := e.lockQueue(name)
	if err != nil {
		return err
	}
	now := e.now()
	if q.lastPurge != 0 && now-q.lastPurge < int64(PurgeInterval) {
		e.unlockAndInsertCopies(q)
		return ErrPurgeInProgress
	}
	var b store.Batch
	b.DeleteRange(messageKey(q.id, 0, 0), messageKey(q.id, q.nextSeq.Load(), 0))
	b.DeleteRange(delayKey(q.id, 0), delayKey(q.id, q.nextSeq.Load()))
	b.DeleteRange(qidPrefix(prefixPriority, q.id), qidPrefix(prefixPriority, q.id+1))
	b.DeleteRange(qidPrefix(prefixDedup, q.id), qidPrefix(prefixDedup, q.id+1))
	b.DeleteRange(qidPrefix(prefixDedupExpiry, q.id), qidPrefix(prefixDedupExpiry, q.id+1))
	q.lastPurge = now
	q.purges.Add(1)
	q.clearMessagesLocked()
	barrier := q.dedupPurgedLocked()
	if err := e.commitUnlock(q, &b); err != nil {
		return err
	}
	q.dedupSettled(barrier)
	return nil
}

// PurgeReady deletes the queue's ready messages (visible and delayed, not
// those in flight) with no rate limit, as AMQP's queue.purge does, and
// returns how many. The deletes are durable when it returns.
func (e *Engine) PurgeReady(name string) (n int, err error) {
	err = e.update(name, func(q *queue, now int64, b *store.Batch) error {
		for {
			for _, m := range q.msgs {
				if m.state == stateInFlight {
					continue
				}
				q.dropLocked(m, b)
				n++
			}
			if !q.cold.on || e.failed.Load() != nil {
				break
			}
			// The cold backlog, a window at a time, so that memory
			// holds at most a window (and what is in flight) while it
			// runs.
			q.refillLocked(now)
			q.advanceLocked(now, b)
		}
		q.stats.deleted.Add(uint64(n))
		return nil
	})
	return n, err
}

// GetQueue returns a snapshot of the queue's settings and counters.
func (e *Engine) GetQueue(name string) (QueueInfo, error) {
	q, err := e.lockQueue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	defer e.unlockAndInsertCopies(q)
	var b store.Batch
	q.advanceLocked(e.now(), &b)
	if b.Len() > 0 {
		if _, err := e.write(&b, false); err != nil {
			return QueueInfo{}, err
		}
	}
	return q.infoLocked(), nil
}

// QueueElsewhere reports whether queue name, which this engine does not
// hold, lives outside it (Options.NameTaken: in a cluster, on another
// shard). It may take a moment (NameTaken's catch-up); false without the
// hook or for a queue this engine holds.
func (e *Engine) QueueElsewhere(name string) bool {
	if e.taken == nil {
		return false
	}
	if q, _ := e.lookup(name); q != nil {
		return false
	}
	return e.taken(name)
}

// ListQueues returns the names of all queues starting with prefix, sorted.
func (e *Engine) ListQueues(prefix string) []string {
	e.mu.RLock()
	names := make([]string, 0, len(e.queues))
	for n := range e.queues {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	e.mu.RUnlock()
	sort.Strings(names)
	return names
}

// DeleteQueue removes the queue and all its messages. The name cannot be
// reused for NameReuseDelay (on every shard: Options.HoldDeleted, whose
// failure fails the delete with ErrUnavailable, nothing removed).
func (e *Engine) DeleteQueue(name string) error {
	if e.holdDeleted != nil {
		if _, err := e.lookup(name); err != nil {
			return err
		}
		if err := e.holdDeleted(name); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	at, err := e.removeQueue(name, true)
	if err == nil && e.onDeleted != nil {
		e.onDeleted(name, time.Unix(0, at))
	}
	return err
}

// removeQueue deletes a queue; block keeps its name from being reused for
// NameReuseDelay (SQS semantics), across a restart (a gone record, in the
// delete's batch). It returns the delete's time (Unix ns, this engine's
// clock).
func (e *Engine) removeQueue(name string, block bool) (int64, error) {
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	q, err := e.lookup(name)
	if err != nil {
		return 0, err
	}
	var b store.Batch
	b.Delete(queueKey(name))
	for _, p := range []byte{prefixMessage, prefixDelay, prefixDedup, prefixDedupExpiry, prefixSeq, prefixSessionMark, prefixPriority} {
		b.DeleteRange(qidPrefix(p, q.id), qidPrefix(p, q.id+1))
	}
	now := e.now()
	if block {
		// The name's NameReuseDelay outlives a restart (gone.go).
		if err := e.sweepGoneLocked(now, &b); err != nil {
			return 0, err
		}
		b.Set(goneKey(name), encodeGone(now))
	}
	p, err := e.write(&b, true)
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	delete(e.queues, name)
	if block {
		e.deleted[name] = now
	}
	e.mu.Unlock()
	q.mu.Lock()
	q.deleted = true
	q.unaccountAllLocked()
	q.wakeLocked()
	q.mu.Unlock()
	return now, nil
}

// Snapshot is every queue's QueueInfo read in one pass, for the surfaces
// that watch all queues (metrics, alerts, dashboard, advisor).
type Snapshot struct {
	// Infos are the queues that could be read, in name order.
	Infos []QueueInfo
	// Exists names every queue that existed when it was read, including
	// those that could not be read. A queue deleted between the listing
	// and its read is in neither.
	Exists map[string]bool
	// Unread names the queues that exist but could not be read: the store
	// has failed (Failed says why). Their state is unknown, not empty.
	Unread map[string]bool
}

// Snapshot reads every queue, one queue lock at a time (it is not an
// atomic cut across queues: a message moving between two queues may be
// counted in both or neither).
func (e *Engine) Snapshot() Snapshot {
	names := e.ListQueues("")
	s := Snapshot{
		Infos:  make([]QueueInfo, 0, len(names)),
		Exists: make(map[string]bool, len(names)),
		Unread: make(map[string]bool),
	}
	for _, name := range names {
		info, err := e.GetQueue(name)
		if errors.Is(err, ErrQueueNotFound) {
			continue // deleted since the listing
		}
		s.Exists[name] = true
		if err != nil {
			s.Unread[name] = true
			continue
		}
		s.Infos = append(s.Infos, info)
	}
	return s
}
