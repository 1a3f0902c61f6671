package engine

import (
	"encoding/binary"
	"time"
)

// Retry budget (DLQ-40): redeliveries caused by failures are limited to a
// percentage of first deliveries, so that when most messages fail,
// retries cannot multiply the load on consumers and their downstreams —
// whatever the client (boto3, pika, a bare AMQP consumer). Retries over
// the budget are delayed, never dropped.
const (
	// RetryBudgetWindow is the span the budget is measured over; the
	// window slides (the previous window's counts weigh in for the part
	// of it still covered).
	RetryBudgetWindow = 10 * time.Second
	// RetryBudgetFloor is how many retries a window always allows, so a
	// queue with little traffic can still retry.
	RetryBudgetFloor = 10
)

// retryBudget counts first deliveries and admitted retries in the current
// and previous window.
type retryBudget struct {
	start               int64 // start of the current window (Unix ns)
	first, retries      int
	prevFirst, prevRetr int
}

// rollLocked moves the windows up to now.
func (b *retryBudget) roll(now int64) {
	w := int64(RetryBudgetWindow)
	switch {
	case b.start == 0 || now-b.start >= 2*w:
		*b = retryBudget{start: now}
	case now-b.start >= w:
		b.prevFirst, b.prevRetr = b.first, b.retries
		b.first, b.retries = 0, 0
		b.start += w
	}
}

// noteFirstDeliveryLocked counts a message's first delivery.
func (q *queue) noteFirstDeliveryLocked(now int64) {
	if q.cfg.RetryBudgetPercent <= 0 {
		return
	}
	q.budget.roll(now)
	q.budget.first++
}

// admitRetryLocked decides whether m's retry fits the queue's budget: 0
// when it does (and counts it), else the delay to hold it for, spread
// over one to two windows (drawn from the message id and attempt, so a
// replay computes the same). Queues without a budget always admit.
func (q *queue) admitRetryLocked(m *message, now int64) time.Duration {
	p := q.cfg.RetryBudgetPercent
	if p <= 0 {
		return 0
	}
	b := &q.budget
	b.roll(now)
	prevWeight := 1 - float64(now-b.start)/float64(RetryBudgetWindow)
	first := float64(b.first) + float64(b.prevFirst)*prevWeight
	retries := float64(b.retries) + float64(b.prevRetr)*prevWeight
	allowed := max(float64(RetryBudgetFloor), first*float64(p)/100)
	if retries+1 <= allowed {
		b.retries++
		return 0
	}
	spread := binary.BigEndian.Uint64(m.id[8:]) ^ uint64(m.recvCount)
	return RetryBudgetWindow + time.Duration(spread%uint64(RetryBudgetWindow))
}
