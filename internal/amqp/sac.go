package amqp

import "slices"

// Single active consumer (x-single-active-consumer: true, RabbitMQ 3.8+):
// of a queue's consumers only one at a time is handed messages, the
// earliest registered still there; the others wait, idle, and the next
// in line takes over when it goes (basic.cancel, its channel or
// connection closing, its queue deleted). Deliveries the previous one
// holds unacknowledged stay with it until acked, or are returned to
// their places at the queue's front when its channel closes, and then go
// to the new active consumer in order. basic.get is not affected.
//
// The line is q.sac, in registration order, guarded by Topology.mu;
// consumers waiting for their turn wait on q.sacWake, closed whenever the
// head of the line leaves.

// sacJoinLocked puts cs at the end of q's line (a no-op unless the queue
// has a single active consumer). t.mu held for writing.
func (q *queue) sacJoinLocked(cs *consumer) {
	if q.settings.singleActive {
		q.sac = append(q.sac, cs)
	}
}

// sacLeaveLocked takes cs out of q's line, waking the waiting consumers
// when it was the active one. t.mu held for writing.
func (q *queue) sacLeaveLocked(cs *consumer) {
	i := slices.Index(q.sac, cs)
	if i < 0 {
		return
	}
	q.sac = slices.Delete(q.sac, i, i+1)
	if i == 0 {
		q.sacWakeLocked()
	}
}

// sacClearLocked empties q's line (the queue is being deleted) and wakes
// the waiting consumers. t.mu held for writing.
func (q *queue) sacClearLocked() {
	q.sac = nil
	q.sacWakeLocked()
}

func (q *queue) sacWakeLocked() {
	if q.sacWake != nil {
		close(q.sacWake)
		q.sacWake = nil
	}
}

// awaitActive returns once cs may take messages: at once unless its queue
// has a single active consumer, otherwise when cs heads the line (or is
// no longer in it: the queue was deleted, and its next receive says so).
// False if the consumer stopped while it waited.
func (cs *consumer) awaitActive() bool {
	q := cs.q
	if !q.settings.singleActive {
		return true
	}
	t := cs.ch.c.s.topo
	for {
		t.mu.Lock()
		if len(q.sac) == 0 || q.sac[0] == cs || !slices.Contains(q.sac, cs) {
			t.mu.Unlock()
			return true
		}
		if q.sacWake == nil {
			q.sacWake = make(chan struct{})
		}
		wake := q.sacWake
		t.mu.Unlock()
		select {
		case <-wake:
		case <-cs.ctx.Done():
			return false
		}
	}
}

// leaveLine takes cs out of its queue's line, if it has one: called when
// its goroutine ends, however it ends, so that the next consumer is not
// held behind one that stopped taking messages.
func (cs *consumer) leaveLine() {
	q := cs.q
	if !q.settings.singleActive {
		return
	}
	t := cs.ch.c.s.topo
	t.mu.Lock()
	q.sacLeaveLocked(cs)
	t.mu.Unlock()
}
