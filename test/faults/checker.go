// Package faults injects faults into a running Sluice (SIGKILL, SIGSTOP,
// power loss, failing and full disks, corrupted logs) under a load of
// producers and consumers, and checks what clients were told against what
// the broker delivered, with the Checker in this file. See
// docs/reliability.md for the method and the figures of a long run.
//
// The Checker is deliberately independent of how the history was produced:
// the fault tests feed it from real SQS clients or from the engine API, and
// checker_test.go feeds it synthetic histories that must be flagged.
package faults

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultSlack is how much earlier than its earliest legal moment a delivery
// may complete before the Checker calls it early. Clients and broker share
// one machine and one clock, and every bound the Checker uses is already on
// the safe side (a lease is assumed to start when the receive request began,
// a delay when the send request began), so the slack only absorbs timer
// granularity.
const DefaultSlack = 50 * time.Millisecond

// Send describes a message at the moment its send is attempted.
type Send struct {
	ID     string        // the body id, unique per test run
	Body   string        // the exact body; deliveries must match it
	Group  string        // FIFO message group ("" on standard queues)
	Seq    int           // position in the group's send order (FIFO)
	Delay  time.Duration // DelaySeconds of the message (0: none)
	Poison bool          // consumers never delete it: it must reach the DLQ
}

// Receipt is one delivery of a message, as a consumer saw it.
type Receipt struct {
	ID         string // body id parsed from the body
	Body       string
	MessageID  string
	Queue      string
	DLQ        bool          // received from the dead-letter queue
	Begin, End time.Time     // the receive request's start and response
	Count      int           // ApproximateReceiveCount, this receive included
	Visibility time.Duration // the lease the receive asked for
	// Epoch is the broker incarnation that served the receive: 0 until
	// the first crash, then one more after each crash (kill -9, power
	// loss). Receives may be forgotten across a crash, never within one.
	Epoch int
	// Sent is the message's SentTimestamp as the broker reported it (zero:
	// not asked for). With Checker.ClockSlack it must lie within the
	// message's send attempts, give or take the slack.
	Sent time.Time
	// Via says, for a violation's report only, what served the delivery
	// (a node, a connection, a term); the checker does not read it.
	Via string
}

// Lease names one delivery of a message: its receive count and the broker
// incarnation (Receipt.Epoch) that served it. The count alone is ambiguous:
// after a crash that lost a lease, the next receive repeats its count, and
// a late answer about the old lease (a retried delete refused because the
// message is leased again) must not be pinned on the new one.
type Lease struct{ Count, Epoch int }

// delivery is a Receipt plus what happened to its lease.
type delivery struct {
	Receipt
	// released is the start of a ChangeVisibility(0) with this lease's
	// handle; zero: none. On a standard queue it may end a later lease
	// of the message too (SQS applies any handle to the current lease),
	// so checks consult every lease's release (releasedBefore).
	released time.Time
	deleted  bool // a delete of this lease was attempted
	// deleteOK: a delete of this lease was acknowledged (DeleteAcked or
	// DeleteRetryAcked); only that settles the message.
	deleteOK bool
	// deleteFailed: a live broker answered the delete with an error, so
	// it settles nothing (see DeleteFailed).
	deleteFailed bool
	// consumed: the consumer acknowledged this delivery in a protocol
	// whose acknowledgement the broker never answers (AMQP basic.ack):
	// it settles the message, never certainly (see Consumed).
	consumed bool
	// afterCut: the receive returned at or after a power cut of the
	// incarnation that served it (see PowerCut), so the crash image may
	// have been taken before the broker chose this delivery: what it
	// delivered need not be in the image (see DeleteRetryAcked).
	afterCut bool
}

type message struct {
	Send
	attemptAt time.Time
	acked     bool
	ackAt     time.Time
	messageID string
	dels      []*delivery
	// deleteAckAt is the first delete acknowledgement that certainly
	// deleted the message (see DeleteAcked); zero if none.
	deleteAckAt time.Time
	// copyDeleteAt: MessageId → the first delete acknowledgement that
	// certainly deleted that copy of the message, and only that copy
	// (see DeleteRetryAcked); nil if none.
	copyDeleteAt map[string]time.Time
	touched      bool      // a delete was attempted
	delTriedAt   time.Time // the first delete attempt (see PowerCut)
	retried      bool      // sent again by a client retry (see Retried)
}

// Checker records a history of operations and judges it against the
// guarantees in docs/guarantees.md. It is safe for concurrent use.
type Checker struct {
	// MaxReceiveCount of the source queue's redrive policy (0: no DLQ).
	MaxReceiveCount int
	// Slack: see DefaultSlack.
	Slack time.Duration
	// FIFO: check first deliveries against send order per group.
	FIFO bool
	// UnorderedFrom, when positive, marks the epochs at or above it as
	// carrying no server order (deliveries whose broker incarnation is not
	// known: an AMQP delivery in a cluster has no term). A message with
	// such a delivery is put in server order by receive count, then by
	// the receive's end: an epoch numbered after every term would put an
	// AMQP delivery after an SQS receive that came later, and a message
	// deleted by that receive would look lost.
	UnorderedFrom int
	// ClockSlack, when positive, checks every delivery's SentTimestamp
	// (Receipt.Sent) against the time the message was sent, as this
	// process saw it: a broker stamping messages on a clock more than
	// ClockSlack off the true time is a violation (clock). Only for a
	// broker whose clock should be the true one (a cluster whose
	// majority of clocks is right).
	ClockSlack time.Duration

	mu         sync.Mutex
	msgs       map[string]*message
	unexpected []string
	corrupt    []string
	deliveries int
	faults     int
	acked      int // acknowledged messages
	touched    int // acknowledged messages with a delete attempted
	// undrained: the drain ran out of time (DrainIncomplete), so the
	// messages not settled may still be in their queue.
	undrained bool
}

// DrainIncomplete records that the drain ran out of time before the queues
// were empty. The report then names the messages not settled "lost or
// undrained": the Checker cannot tell one still queued from one the
// broker lost. They remain violations (a run whose drain does not finish
// proves nothing about them), but the name no longer claims a loss.
func (c *Checker) DrainIncomplete() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.undrained = true
}

// NewChecker returns an empty Checker.
func NewChecker(fifo bool, maxReceiveCount int) *Checker {
	return &Checker{FIFO: fifo, MaxReceiveCount: maxReceiveCount, Slack: DefaultSlack, msgs: map[string]*message{}}
}

// Attempt records that a send of m is about to be made.
func (c *Checker) Attempt(m Send, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.msgs[m.ID]; old != nil {
		c.corrupt = append(c.corrupt, m.ID+": sent twice by the test itself")
		return
	}
	c.msgs[m.ID] = &message{Send: m, attemptAt: at}
}

// Acked records that the broker acknowledged the send of id with messageID
// ("" when the protocol names no id, as AMQP publisher confirms). A message
// may be acknowledged more than once (a client retry, a FIFO send repeated
// with its deduplication id): the earliest acknowledgement is the one that
// binds, and every acknowledgement must name the same MessageId.
func (c *Checker) Acked(id, messageID string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs[id]
	if m == nil {
		c.corrupt = append(c.corrupt, id+": acknowledged but never attempted")
		return
	}
	if m.acked {
		if messageID != "" && m.messageID != "" && messageID != m.messageID {
			c.corrupt = append(c.corrupt, fmt.Sprintf("%s: acknowledged as MessageId %s and again as %s", id, m.messageID, messageID))
		}
		if at.Before(m.ackAt) {
			m.ackAt = at
		}
		return
	}
	c.acked++
	if m.touched {
		c.touched++
	}
	m.acked, m.ackAt, m.messageID = true, at, messageID
}

// Retried records that a client sent id again (the same body, and on a
// FIFO queue the same deduplication id) because it did not learn whether
// the first send was stored. On a standard queue both copies may then be
// stored; on a FIFO queue deduplication must keep it to one.
func (c *Checker) Retried(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.msgs[id]; m != nil {
		m.retried = true
	}
}

// touch marks m as having had a delete attempted at at. Callers hold c.mu.
func (c *Checker) touch(m *message, at time.Time) {
	if m.delTriedAt.IsZero() || at.Before(m.delTriedAt) {
		m.delTriedAt = at
	}
	if !m.touched {
		m.touched = true
		if m.acked {
			c.touched++
		}
	}
}

// Backlog is the number of acknowledged messages no consumer has tried to
// delete yet: producers use it to keep the load within what consumers
// drain.
func (c *Checker) Backlog() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked - c.touched
}

// Received records a delivery.
func (c *Checker) Received(r Receipt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deliveries++
	m := c.msgs[r.ID]
	if m == nil {
		c.unexpected = append(c.unexpected, r.ID)
		return
	}
	if r.Body != m.Body {
		c.corrupt = append(c.corrupt, fmt.Sprintf("%s: body of %d bytes differs from the %d sent", r.ID, len(r.Body), len(m.Body)))
	}
	// (A retried standard send may be stored twice, each copy with its
	// own MessageId.)
	if m.acked && m.messageID != "" && r.MessageID != m.messageID && (c.FIFO || !m.retried) {
		c.corrupt = append(c.corrupt, fmt.Sprintf("%s: delivered as MessageId %s, acknowledged as %s", r.ID, r.MessageID, m.messageID))
	}
	m.dels = append(m.dels, &delivery{Receipt: r})
}

// find returns the delivery of id that lease names, preferring the most
// recent (two deliveries with one lease are already flagged as corrupt).
// Callers hold c.mu.
func (c *Checker) find(id string, l Lease) (*message, *delivery) {
	m := c.msgs[id]
	if m == nil {
		return nil, nil
	}
	for i := len(m.dels) - 1; i >= 0; i-- {
		if d := m.dels[i]; d.Count == l.Count && d.Epoch == l.Epoch {
			return m, d
		}
	}
	return m, nil
}

// releasedBefore is the earliest start of a ChangeVisibility(0) of any
// lease of m that began before t (zero: none). A release sent with an
// earlier lease's handle still ends the current lease on a standard queue,
// so any release begun before t may have ended, from its start (or the
// lease's, if later), a lease that was current at t.
func (m *message) releasedBefore(t time.Time) time.Time {
	var first time.Time
	for _, d := range m.dels {
		if r := d.released; !r.IsZero() && r.Before(t) && (first.IsZero() || r.Before(first)) {
			first = r
		}
	}
	return first
}

// Released records a ChangeMessageVisibility(0) of lease l of id,
// attempted at at (whether or not it was acknowledged): the lease may have
// ended from then on.
func (c *Checker) Released(id string, l Lease, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, d := c.find(id, l); d != nil && (d.released.IsZero() || at.Before(d.released)) {
		d.released = at
	}
}

// DeleteAttempted records that a delete of lease l of id is about to be
// sent at at.
func (c *Checker) DeleteAttempted(id string, l Lease, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, d := c.find(id, l); d != nil {
		d.deleted = true
		c.touch(m, at)
	}
}

// DeleteAcked records an acknowledged delete of lease l of id, answered by
// broker incarnation epoch. It counts as
// a certain delete, which no later receive may contradict, only when the
// lease was certainly still valid when the broker applied it: no crash
// since the receive (same epoch), no
// ChangeVisibility(0) with any of the message's handles begun before the
// ack (see releasedBefore), and acknowledged before the lease could have
// ended. (A standard queue acknowledges a delete with a stale handle without
// deleting, so an ack alone proves nothing.)
func (c *Checker) DeleteAcked(id string, l Lease, epoch int, at time.Time) {
	c.settled(id, l, at, func(m *message, d *delivery) bool {
		return d.Epoch == epoch && m.releasedBefore(at).IsZero() && at.Before(d.Begin.Add(d.Visibility-c.Slack))
	})
}

// settled records an acknowledged delete of lease l of id at at, certain
// when certain says so (see certainFrom).
func (c *Checker) settled(id string, l Lease, at time.Time, certain func(*message, *delivery) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, d := c.find(id, l)
	if d == nil {
		return
	}
	d.deleted, d.deleteOK = true, true
	c.touch(m, at)
	if certain(m, d) {
		m.certainFrom(at)
	}
}

// certainFrom records a certain delete of m acknowledged at at: no
// delivery begun after the earliest such may follow.
func (m *message) certainFrom(at time.Time) {
	if m.deleteAckAt.IsZero() || at.Before(m.deleteAckAt) {
		m.deleteAckAt = at
	}
}

// DeleteRetryAcked records an acknowledged delete, sent again after a crash
// by broker incarnation epoch, of lease l of id, which an earlier
// incarnation granted (the first try got no answer). The
// caller promises that no receive of the message could have run in this
// incarnation before the delete was acknowledged. Then, by
// docs/guarantees.md, the delete is certain if the lease had not ended: a
// handle whose lease the crash lost still deletes its message, and no later
// receive is known to have taken the message over.
//
// What the handle names is the message as that receive delivered it: one
// copy, with its MessageId. When the receive returned after a power cut
// (PowerCut: the test took the crash image, then let the dying broker
// answer until it closed), that copy need not be in the image at all.
// A copy a move task made is receivable once its move is synced
// (docs/guarantees.md), but that sync may have come after the image was
// taken: the restarted broker then has the message back in the dead-letter
// queue, the retried delete rightly finds nothing to delete, and a later
// move delivers a new copy, with a new MessageId. (A real power cut stops
// the broker, so no client sees such a delivery; a receive that returned
// before the cut proves its copy's move was in the image.) So such a
// delete is certain only for the copy it names: a later delivery of that
// MessageId is a resurrection, one of another MessageId is not. This
// gives up nothing the image can show: had the image held the named copy
// and the dead-letter original both, CheckSnapshot would report the
// message as duplicated; and a message sent by a producer keeps its
// MessageId in every copy the broker may deliver (a client retry's second
// copy is exempt anyway, see Retried).
func (c *Checker) DeleteRetryAcked(id string, l Lease, epoch int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, d := c.find(id, l)
	if d == nil {
		return
	}
	d.deleted, d.deleteOK = true, true
	c.touch(m, at)
	unordered := c.unordered(m)
	for _, o := range m.dels {
		if o != d && later(o, d, unordered) {
			return // received again since: the old handle may rightly do nothing
		}
	}
	if d.Epoch >= epoch || !m.releasedBefore(at).IsZero() || !at.Before(d.Begin.Add(d.Visibility-c.Slack)) {
		return
	}
	if d.afterCut {
		if m.copyDeleteAt == nil {
			m.copyDeleteAt = map[string]time.Time{}
		}
		if old, ok := m.copyDeleteAt[d.MessageID]; !ok || at.Before(old) {
			m.copyDeleteAt[d.MessageID] = at
		}
		return
	}
	m.certainFrom(at)
}

// certainDelete returns the first certain delete of m that a delivery of
// the copy messageID begun at begin contradicts (zero: none), and whether
// there is one. A zero begin asks about any time (a stored copy).
func (m *message) certainDelete(messageID string, begin time.Time) (time.Time, bool) {
	if !m.deleteAckAt.IsZero() && (begin.IsZero() || begin.After(m.deleteAckAt)) {
		return m.deleteAckAt, true
	}
	if at, ok := m.copyDeleteAt[messageID]; ok && (begin.IsZero() || begin.After(at)) {
		return at, true
	}
	return time.Time{}, false
}

// Consumed records that a consumer acknowledged lease l of id at at in a
// protocol whose acknowledgement the broker does not answer (AMQP
// basic.ack, written to a live connection). It settles the message, as the
// delivery it acknowledges shows the message reached a consumer, unless the
// message is delivered again (a lost ack makes the broker redeliver it,
// and that delivery must then be settled in turn). It is not a certain
// delete on its own: nothing tells the client the ack was applied, so no
// later delivery is called a resurrection because of it (see AckConfirmed
// for what does).
func (c *Checker) Consumed(id string, l Lease, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, d := c.find(id, l); d != nil {
		d.deleted, d.consumed = true, true
		c.touch(m, at)
	}
}

// AckConfirmed records that a basic.ack of lease l of id, written to a
// channel before a synchronous method whose reply came back at at (the
// cluster harness sends basic.qos), was applied: a channel answers a
// method only after the acks before it are durable (on a majority in a
// cluster, docs/guarantees.md). It is a certain delete, like an SQS delete
// answered in its receive's term, provided the ack found its lease current
// (the caller's to ensure: an AMQP delivery's lease ends with its
// connection, which carried the reply, or at the consumer timeout, which
// the run must stay below). Call it after Consumed.
func (c *Checker) AckConfirmed(id string, l Lease, at time.Time) {
	c.settled(id, l, at, func(*message, *delivery) bool { return true })
}

// DeleteFailed records that a live broker answered the delete of lease l of
// id with an error (a FIFO handle whose lease
// ended, a refused request). Such a delete settles nothing: the message must
// be delivered again, and a drain waits for that delivery's delete.
func (c *Checker) DeleteFailed(id string, l Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, d := c.find(id, l); d != nil {
		d.deleteFailed = true
	}
}

// Fault counts one injected fault (for the report).
func (c *Checker) Fault() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults++
}

// Report is the Checker's verdict. The lists hold descriptions of the
// offending messages, sorted.
type Report struct {
	Attempted, Acked, Deliveries, Faults int
	Delivered                            int // distinct messages delivered at least once
	Duplicates                           int // deliveries of deletable messages beyond their first (allowed)
	DeadLettered                         int // distinct messages seen in the DLQ
	// DeadLetteredHealthy counts messages consumers would have deleted
	// that reached the DLQ anyway (their deletes were lost to faults).
	DeadLetteredHealthy int

	Lost []string // acknowledged, and not settled by the end (see Report)
	// Undrained: the drain ran out of time (Checker.DrainIncomplete): the
	// messages in Lost may still be queued, not lost.
	Undrained   bool
	Unexpected  []string // delivered, never sent
	Corrupt     []string // wrong body or MessageId, or an inconsistent history
	Resurrected []string // delivered by a receive begun after a certain delete
	Order       []string // FIFO first deliveries out of send order within a group
	Early       []string // delivered before its delay or a live lease ended
	DLQ         []string // DLQ invariant broken (receive count, poison never dead-lettered)
	Clock       []string // SentTimestamp off the true send time (Checker.ClockSlack)
}

// Violations is the number of entries in every list that must be empty.
func (r Report) Violations() int {
	return len(r.Lost) + len(r.Unexpected) + len(r.Corrupt) + len(r.Resurrected) + len(r.Order) + len(r.Early) + len(r.DLQ) + len(r.Clock)
}

// String is a one-line summary for t.Logf.
func (r Report) String() string {
	return fmt.Sprintf("ops: sends attempted %d, acked %d; deliveries %d (distinct %d, duplicates %d); dead-lettered %d (%d not poison); faults %d | %s %d, unexpected %d, corrupt %d, resurrected %d, order %d, early %d, dlq %d, clock %d",
		r.Attempted, r.Acked, r.Deliveries, r.Delivered, r.Duplicates, r.DeadLettered, r.DeadLetteredHealthy, r.Faults,
		r.lostLabel(), len(r.Lost), len(r.Unexpected), len(r.Corrupt), len(r.Resurrected), len(r.Order), len(r.Early), len(r.DLQ), len(r.Clock))
}

// lostLabel names the Lost list: "lost", or "lost or undrained" when the
// drain did not finish.
func (r Report) lostLabel() string {
	if r.Undrained {
		return "lost or undrained (the drain ran out of time)"
	}
	return "lost"
}

// Details lists up to n entries of every non-empty violation list.
func (r Report) Details(n int) string {
	var b strings.Builder
	for _, l := range []struct {
		name string
		v    []string
	}{{r.lostLabel(), r.Lost}, {"unexpected", r.Unexpected}, {"corrupt", r.Corrupt}, {"resurrected", r.Resurrected},
		{"order", r.Order}, {"early", r.Early}, {"dlq", r.DLQ}, {"clock", r.Clock}} {
		if len(l.v) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s (%d):\n", l.name, len(l.v))
		for _, s := range l.v[:min(n, len(l.v))] {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	return b.String()
}

// Report judges the history. Call it after a drain that left every queue
// empty: a message is then lost when it was acknowledged and either never
// delivered (from its queue or the DLQ), or its last delivery was not
// followed by an acknowledged delete or a consumer ack (Consumed): it
// vanished while leased or visible.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Deliveries: c.deliveries, Faults: c.faults, Attempted: len(c.msgs), Undrained: c.undrained,
		Unexpected: append([]string(nil), c.unexpected...), Corrupt: append([]string(nil), c.corrupt...)}
	groups := map[string][]*message{}
	for _, m := range c.msgs {
		if m.acked {
			r.Acked++
		}
		if len(m.dels) > 0 {
			r.Delivered++
		}
		// Server order of the deliveries: by incarnation, then receive
		// count (strictly increasing within one incarnation).
		dels := append([]*delivery(nil), m.dels...)
		unordered := c.unordered(m)
		sort.SliceStable(dels, func(i, j int) bool { return later(dels[j], dels[i], unordered) })
		c.judge(m, dels, &r)
		if c.FIFO && len(dels) > 0 && !dels[0].DLQ {
			groups[m.Group] = append(groups[m.Group], m)
		}
	}
	for g, ms := range groups {
		r.Order = append(r.Order, checkGroupOrder(g, ms)...)
	}
	for _, l := range [][]string{r.Lost, r.Unexpected, r.Corrupt, r.Resurrected, r.Order, r.Early, r.DLQ} {
		sort.Strings(l)
	}
	return r
}

// judge checks one message's deliveries, in server order.
func (c *Checker) judge(m *message, dels []*delivery, r *Report) {
	if m.acked && (len(dels) == 0 || !settles(dels[len(dels)-1])) {
		what := "never delivered nor dead-lettered"
		if len(dels) > 0 {
			what = fmt.Sprintf("delivered %d times, then gone without an acknowledged delete or consumer ack", len(dels))
		}
		if c.undrained {
			what = fmt.Sprintf("delivered %d times, not settled when the drain ran out of time (still queued, or lost)", len(dels))
		}
		r.Lost = append(r.Lost, fmt.Sprintf("%s (MessageId %s, acked %s): %s", m.ID, m.messageID, m.ackAt.Format(time.StampMicro), what))
	}
	inDLQ, mainDeliveries := false, 0
	for i, d := range dels {
		if d.DLQ {
			if !inDLQ {
				r.DeadLettered++
				if !m.Poison {
					r.DeadLetteredHealthy++
				}
			}
			inDLQ = true
			if c.MaxReceiveCount > 0 && d.Count < c.MaxReceiveCount {
				r.DLQ = append(r.DLQ, fmt.Sprintf("%s: in the DLQ with ApproximateReceiveCount %d < maxReceiveCount %d", m.ID, d.Count, c.MaxReceiveCount))
			}
		} else {
			if inDLQ {
				r.Corrupt = append(r.Corrupt, m.ID+": delivered from its source queue after the DLQ")
			}
			mainDeliveries++
			if mainDeliveries > 1 && !m.Poison {
				r.Duplicates++
			}
		}
		if del, ok := m.certainDelete(d.MessageID, d.Begin); ok && (c.FIFO || !m.retried) {
			r.Resurrected = append(r.Resurrected, fmt.Sprintf("%s: receive begun %s (epoch %d, count %d), delete acknowledged %s; deliveries %s",
				m.ID, d.Begin.Format(time.StampMicro), d.Epoch, d.Count, del.Format(time.StampMicro), describeDeliveries(m.dels)))
		}
		if c.ClockSlack > 0 && !d.Sent.IsZero() && (d.Sent.Before(m.attemptAt.Add(-c.ClockSlack)) || d.Sent.After(d.End.Add(c.ClockSlack))) {
			r.Clock = append(r.Clock, fmt.Sprintf("%s: SentTimestamp %s, sent from %s, received by %s",
				m.ID, d.Sent.Format(time.StampMilli), m.attemptAt.Format(time.StampMilli), d.End.Format(time.StampMilli)))
		}
		if m.Delay > 0 && d.End.Before(m.attemptAt.Add(m.Delay-c.Slack)) {
			r.Early = append(r.Early, fmt.Sprintf("%s: delivered %v after its send began, delay %v",
				m.ID, d.End.Sub(m.attemptAt).Round(time.Millisecond), m.Delay))
		}
		if i == 0 {
			continue
		}
		prev := dels[i-1]
		if !c.FIFO && m.retried && prev.MessageID != d.MessageID {
			continue // the other copy of a retried standard send
		}
		// A lease binds the next delivery only if it was durable: within
		// one incarnation always; across a crash only if the later
		// receive count shows the earlier receive survived.
		if prev.Epoch != d.Epoch && d.Count <= prev.Count {
			continue
		}
		if prev.Epoch == d.Epoch && d.Count <= prev.Count {
			r.Corrupt = append(r.Corrupt, fmt.Sprintf("%s: receive count went from %d to %d without a crash", m.ID, prev.Count, d.Count))
		}
		end := prev.Begin.Add(prev.Visibility)
		if r := m.releasedBefore(end); !r.IsZero() {
			end = r
			if end.Before(prev.Begin) {
				end = prev.Begin
			}
		}
		// A receive that returned before prev's began cannot have
		// broken prev's lease: the two are in server order by their
		// labels only (an AMQP delivery's epoch, which has no term, sorts
		// after every term's; its receive count, kept in memory, can
		// be above that of a later receive after a failover).
		if d.End.Before(end.Add(-c.Slack)) && !d.End.Before(prev.Begin) {
			r.Early = append(r.Early, fmt.Sprintf("%s: receive %d returned %v before receive %d's lease (%v) could end (receive %d: %s–%s, epoch %d, %s; receive %d: %s–%s, epoch %d, %s)",
				m.ID, d.Count, end.Sub(d.End).Round(time.Millisecond), prev.Count, prev.Visibility,
				prev.Count, prev.Begin.Format("15:04:05.000"), prev.End.Format("15:04:05.000"), prev.Epoch, prev.Via,
				d.Count, d.Begin.Format("15:04:05.000"), d.End.Format("15:04:05.000"), d.Epoch, d.Via))
		}
	}
	if m.Poison && m.acked && c.MaxReceiveCount > 0 && !inDLQ {
		what := "never reached the DLQ"
		if c.undrained {
			what = "had not reached the DLQ when the drain ran out of time"
		}
		r.DLQ = append(r.DLQ, fmt.Sprintf("%s: poison message %s (%d deliveries)", m.ID, what, len(dels)))
	}
}

// checkGroupOrder flags a message whose first delivery certainly came after
// the first delivery of a message sent later in its group: the later one's
// receive returned before the earlier one's receive began.
//
// Only first deliveries are compared, which is what SQS promises: an
// earlier message may be delivered again while a later one of its group
// is leased (its visibility ended first), but a message is first delivered
// only from the visible front of its group, after or together with every
// message sent before it (docs/guarantees.md, "Ordering").
//
// The earlier message must have been acknowledged: a send whose outcome the
// producer never learned (it timed out while the broker was frozen, and the
// producer went on to the next send) may still be in flight inside the
// broker and be stored after the later one. SQS promises order only
// between sends that were acknowledged in turn. Such a message still
// counts as a later one: it was attempted after every earlier send of its
// group had been acknowledged.
func checkGroupOrder(group string, ms []*message) []string {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Seq < ms[j].Seq })
	var out []string
	var minEnd time.Time
	var minSeq int
	for i := len(ms) - 1; i >= 0; i-- {
		var first *delivery
		for _, d := range ms[i].dels {
			if !d.DLQ && (first == nil || d.Begin.Before(first.Begin)) {
				first = d
			}
		}
		if first == nil {
			continue
		}
		if ms[i].acked && !minEnd.IsZero() && minEnd.Before(first.Begin) {
			out = append(out, fmt.Sprintf("group %s: seq %d first delivered after seq %d", group, ms[i].Seq, minSeq))
		}
		if minEnd.IsZero() || first.End.Before(minEnd) {
			minEnd, minSeq = first.End, ms[i].Seq
		}
	}
	return out
}

// Snapshot is the result of checking the broker's stored state against the
// history (power-loss test): the broker is reopened and every message it
// holds is listed, without receiving.
type Snapshot struct {
	Present     int
	Lost        []string // acknowledged, not certainly deleted, absent
	Duplicated  []string // present more than once
	Resurrected []string // certainly deleted, present again
	Unexpected  []string // present, never sent
	Corrupt     []string // present with a wrong body or MessageId
	// Order: FIFO, a message stored after a later message of its group
	// (stored lists the queue's messages in queue order).
	Order []string
}

// Violations counts the entries of every list.
func (s Snapshot) Violations() int {
	return len(s.Lost) + len(s.Duplicated) + len(s.Resurrected) + len(s.Unexpected) + len(s.Corrupt) + len(s.Order)
}

// Stored is one message found in the store after a restart.
type Stored struct {
	ID, Body, MessageID string
}

// PowerCut records a power loss at cut: sends and deletes acknowledged at
// or after it may or may not have survived, so from now on they count as
// never acknowledged (an acknowledgement recorded a little after the call
// returned only makes this more lenient), and deliveries whose receive
// returned at or after it are marked as possibly unknown to the image
// (see DeleteRetryAcked). Call it before CheckSnapshot, once the broker
// that was cut has answered its last request.
func (c *Checker) PowerCut(cut time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		for _, d := range m.dels {
			if !d.End.Before(cut) {
				d.afterCut = true
			}
		}
		for mid, at := range m.copyDeleteAt {
			if !at.Before(cut) {
				delete(m.copyDeleteAt, mid)
			}
		}
		if m.acked && !m.ackAt.Before(cut) {
			m.acked = false
			c.acked--
			if m.touched {
				c.touched--
			}
		}
		if !m.deleteAckAt.IsZero() && !m.deleteAckAt.Before(cut) {
			m.deleteAckAt = time.Time{}
		}
		if !m.delTriedAt.IsZero() && !m.delTriedAt.Before(cut) {
			m.delTriedAt = time.Time{} // began after the cut: cannot be in the image
		}
	}
}

// CheckSnapshot compares the stored messages with the history: every
// acknowledged message that nobody tried to delete must be there exactly
// once, with its body and MessageId, no certainly deleted one (see
// DeleteAcked) may be there, and none may be there twice (except, on a
// standard queue, a message a client sent again: see Retried). On a FIFO
// queue stored must list each queue in queue order, and a group's messages
// must be stored in the order they were sent (Send.Seq). (A delete that
// was tried but not certainly applied may or may not have removed its
// message.)
func (c *Checker) CheckSnapshot(stored []Stored) Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Present: len(stored)}
	seen := map[string]int{}
	lastSeq := map[string]*message{} // FIFO group → last stored message
	resurrected := map[string]bool{}
	for _, st := range stored {
		seen[st.ID]++
		m := c.msgs[st.ID]
		switch {
		case m == nil:
			s.Unexpected = append(s.Unexpected, st.ID)
			continue
		case st.Body != m.Body:
			s.Corrupt = append(s.Corrupt, st.ID+": body differs")
		case m.acked && m.messageID != "" && st.MessageID != m.messageID && (c.FIFO || !m.retried):
			// (A standard queue may hold a retried message twice, each
			// copy with its own MessageId.)
			s.Corrupt = append(s.Corrupt, fmt.Sprintf("%s: MessageId %s, acknowledged %s", st.ID, st.MessageID, m.messageID))
		}
		if c.FIFO && m.Group != "" {
			if prev := lastSeq[m.Group]; prev != nil && prev.Seq > m.Seq {
				s.Order = append(s.Order, fmt.Sprintf("group %s: seq %d (%s) stored after seq %d (%s)", m.Group, m.Seq, m.ID, prev.Seq, prev.ID))
			}
			lastSeq[m.Group] = m
		}
		if seen[st.ID] == 2 && (c.FIFO || !m.retried) {
			s.Duplicated = append(s.Duplicated, st.ID)
		}
		// (A retried standard send may be stored twice: deleting one
		// copy leaves the other.)
		if _, ok := m.certainDelete(st.MessageID, time.Time{}); ok && !resurrected[st.ID] && (c.FIFO || !m.retried) {
			resurrected[st.ID] = true
			s.Resurrected = append(s.Resurrected, st.ID)
		}
	}
	for id, m := range c.msgs {
		if m.acked && m.delTriedAt.IsZero() && seen[id] == 0 {
			s.Lost = append(s.Lost, id)
		}
	}
	for _, l := range [][]string{s.Lost, s.Duplicated, s.Resurrected, s.Unexpected, s.Corrupt, s.Order} {
		sort.Strings(l)
	}
	return s
}

// Unsettled counts acknowledged messages that are not yet settled (never
// delivered, or their last delivery not followed by a delete): what a drain
// waits for.
func (c *Checker) Unsettled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m.acked && !c.settledMsg(m) {
			n++
		}
	}
	return n
}

// UnsettledDetails describes up to n unsettled messages with their
// deliveries, for a drain that ends with some (sorted by id).
func (c *Checker) UnsettledDetails(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if !m.acked || c.settledMsg(m) {
			continue
		}
		out = append(out, fmt.Sprintf("%s group %q seq %d: %s", m.ID, m.Group, m.Seq, describeDeliveries(m.dels)))
	}
	sort.Strings(out)
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// describeDeliveries lists deliveries for a failure report: each one's
// epoch (the term that served it, in a cluster), receive count, queue and
// the receive's begin and end, and what followed it.
func describeDeliveries(dels []*delivery) string {
	ds := make([]string, 0, len(dels))
	for _, d := range dels {
		via := ""
		if d.Via != "" {
			via = " via " + d.Via
		}
		ds = append(ds, fmt.Sprintf("{epoch %d count %d dlq %v %s–%s deleted %v ok %v failed %v consumed %v%s}", d.Epoch, d.Count, d.DLQ,
			d.Begin.Format(time.StampMilli), d.End.Format(time.StampMilli), d.deleted, d.deleteOK, d.deleteFailed, d.consumed, via))
	}
	return strings.Join(ds, " ")
}

// settles reports whether what followed delivery d settles its message:
// an acknowledged delete that no answer refused, or a consumer ack (see
// Consumed).
func settles(d *delivery) bool {
	return (d.deleteOK || d.consumed) && !d.deleteFailed
}

// settled: the latest delivery (in server order) was followed by an
// acknowledged delete or a consumer ack (a delete whose answer never came
// settles nothing).
func (c *Checker) settledMsg(m *message) bool {
	if len(m.dels) == 0 {
		return false
	}
	unordered := c.unordered(m)
	last := m.dels[0]
	for _, d := range m.dels[1:] {
		if later(d, last, unordered) {
			last = d
		}
	}
	return settles(last)
}

// unordered reports whether one of m's deliveries has an epoch without
// server order (Checker.UnorderedFrom).
func (c *Checker) unordered(m *message) bool {
	if c.UnorderedFrom <= 0 {
		return false
	}
	for _, d := range m.dels {
		if d.Epoch >= c.UnorderedFrom {
			return true
		}
	}
	return false
}

// later reports whether a comes after b in server order: by epoch, then
// receive count; for a message with a delivery of no known epoch
// (unordered), by receive count, then the receive's end.
func later(a, b *delivery, unordered bool) bool {
	if unordered {
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.End.After(b.End)
	}
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	return a.Count > b.Count
}

// AckedAttemptedAfter lists acknowledged messages whose send began after t:
// after a store failure at t, there must be none.
func (c *Checker) AckedAttemptedAfter(t time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, m := range c.msgs {
		if m.acked && m.attemptAt.After(t) {
			out = append(out, fmt.Sprintf("%s (send began %s, acked %s)", id, m.attemptAt.Format(time.StampMicro), m.ackAt.Format(time.StampMicro)))
		}
	}
	sort.Strings(out)
	return out
}
