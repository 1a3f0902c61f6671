package engine

import (
	"container/heap"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// scheduler wakes queues when their earliest timer is due.
type scheduler struct {
	mu   sync.Mutex
	h    schedHeap
	poke chan struct{}
}

type schedEntry struct {
	at int64
	q  *queue
}

type schedHeap []schedEntry

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h schedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *schedHeap) Push(x any)        { *h = append(*h, x.(schedEntry)) }
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// scheduleLocked asks the scheduler to tick q at its next deadline.
func (e *Engine) scheduleLocked(q *queue) {
	t := q.nextWakeLocked()
	if t == 0 || (q.schedAt != 0 && q.schedAt <= t) {
		return
	}
	q.schedAt = t
	e.sched.mu.Lock()
	heap.Push(&e.sched.h, schedEntry{at: t, q: q})
	first := e.sched.h[0].at == t
	e.sched.mu.Unlock()
	if first {
		select {
		case e.sched.poke <- struct{}{}:
		default:
		}
	}
}

// runScheduler is the one goroutine that fires queue timers: delays and
// leases ending (waking long polls), retention expiry, dedup window expiry.
func (e *Engine) runScheduler() {
	defer e.wg.Done()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := e.now()
		var due []*queue
		e.sched.mu.Lock()
		for len(e.sched.h) > 0 && e.sched.h[0].at <= now {
			due = append(due, heap.Pop(&e.sched.h).(schedEntry).q)
		}
		var next int64 // the earliest deadline not yet due; 0: none
		if len(e.sched.h) > 0 {
			next = e.sched.h[0].at
		}
		e.sched.mu.Unlock()
		for _, q := range due {
			e.tick(q, now)
		}
		if len(due) > 0 {
			continue
		}
		var fire <-chan time.Time
		if next != 0 {
			// Armed at the deadline itself, not after next-now: the
			// clock may have moved since now was read (see ResetAt).
			if timer == nil {
				timer = e.clock.NewTimerAt(time.Unix(0, next))
			} else {
				timer.Stop()
				timer.ResetAt(time.Unix(0, next))
			}
			fire = timer.C()
		}
		select {
		case <-e.done:
			return
		case <-e.sched.poke:
		case <-fire:
		}
	}
}

// tick runs q's due timers.
func (e *Engine) tick(q *queue, now int64) {
	q.mu.Lock()
	defer e.unlockAndInsertCopies(q)
	if q.schedAt != 0 && q.schedAt <= now {
		q.schedAt = 0
	}
	if q.deleted {
		return
	}
	var b store.Batch
	q.advanceLocked(now, &b)
	if q.cold.on && len(q.cold.delayed) != 0 {
		// A cold message's delay may have ended (coldPart.nextDelayEnd):
		// long polls look again (a spurious wake costs one receive pass).
		q.wakeLocked()
	}
	if b.Len() > 0 {
		// Expiry deletes need not be synced: if lost in a crash, the
		// messages expire again on recovery.
		if _, err := e.write(&b, false); err != nil {
			return
		}
	}
	e.scheduleLocked(q)
}

// noteExpiredLocked counts one message expired (byTTL: its TTL ran out
// and the queue has no dead-letter target; otherwise retention) for the
// queue's stats and for reportExpiredLocked.
func (q *queue) noteExpiredLocked(byTTL bool) {
	q.stats.expired.Add(1)
	if byTTL {
		q.ttlExpiredUnreported++
	} else {
		q.retainExpiredUnreported++
	}
}

// reportExpiredLocked tells the observer (sluice_expired_total) and the log
// of the messages expired since the last report, whichever path expired
// them: the scheduler's tick, or a receive, a stats read or a settlement
// that advanced the queue first. (Only the tick reported them before, so
// an expiry another path reached first was counted in the queue's stats
// but never in the metric or the log.)
func (q *queue) reportExpiredLocked() {
	byRetention, byTTL := q.retainExpiredUnreported, q.ttlExpiredUnreported
	if byRetention+byTTL == 0 {
		return
	}
	q.retainExpiredUnreported, q.ttlExpiredUnreported = 0, 0
	// Dropping is deliberate, never silent; the log says which rule did it.
	if byRetention > 0 {
		q.eng.log.Info("messages expired by retention", "queue", q.name, "count", byRetention, "retention", q.cfg.Retention)
	}
	if byTTL > 0 {
		q.eng.log.Info("messages expired by their TTL, with no dead-letter target", "queue", q.name, "count", byTTL)
	}
	q.eng.obs.Expired(q.name, byRetention+byTTL)
}

// advanceLocked brings q to time now: delays and leases that have ended make
// messages visible, messages past retention are removed (and counted), and
// dedup entries past their window are forgotten.
func (q *queue) advanceLocked(now int64, b *store.Batch) {
	for len(q.timers) > 0 && q.timers[0].visibleAt <= now {
		m := q.timers[0]
		if m.ttlDue(now) {
			// A message whose TTL ran out while it was leased or
			// delayed expires as soon as the lease or delay ends.
			q.expireLocked(m, now, b)
			continue
		}
		if m.state == stateInFlight && q.leaseEndedLocked(m, now, b) {
			continue // quarantined as a crash loop
		}
		if m.state == stateInFlight {
			if d := q.admitRetryLocked(m, now); d > 0 {
				// Over the retry budget: the lease's end waits too.
				m.visibleAt = now + int64(d)
				m.parked = true
				q.setStateLocked(m, stateDelayed)
				continue
			}
		}
		if m.state == stateInFlight && q.cfg.Retry != nil {
			// The lease ended without a delete: with a retry policy the
			// message waits out a backoff before it is visible again.
			// The backoff is a function of the message and its attempt,
			// so recomputing it after a crash gives the same answer.
			m.visibleAt += int64(q.cfg.Retry.Backoff(m.id, int(m.recvCount)))
			m.parked = true
			q.setStateLocked(m, stateDelayed)
			continue
		}
		q.setStateLocked(m, stateVisible)
	}
	for len(q.ttl) > 0 && q.ttl[0].ttlAt <= now {
		m := heap.Pop(&q.ttl).(*message)
		if m.state == stateVisible {
			q.expireLocked(m, now, b)
		}
		// Leased or delayed: expires when that ends (above).
	}
	ret := int64(q.cfg.Retention)
	for m := q.expiry.oldest(); m != nil && m.enqueuedAt+ret <= now; m = q.expiry.oldest() {
		q.dropLocked(m, b)
		q.noteExpiredLocked(false)
	}
	q.reportExpiredLocked()
	q.trimYoungLocked(now)
	q.sweepDedupLocked(now, b)
	if len(q.attempts) > 0 {
		for id, a := range q.attempts {
			if a.expiresAt <= now {
				delete(q.attempts, id)
			}
		}
	}
}
