package amqp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// consumer is one basic.consume. Its goroutine (run) long-polls the engine
// for as many messages as the prefetch limits allow (at most
// engine.MaxBatch at a time) and writes them through the connection's
// writer; it never touches the reader.
type consumer struct {
	ch        *channel
	tag       string
	q         *queue
	noAck     bool
	exclusive bool
	prefetch  int // per-consumer limit; 0: unlimited
	priority  int // x-priority (priority.go)
	// failureHeaders: basic.consume asked for x-sluice-receipt and
	// x-sluice-queue (optFailureHeaders).
	failureHeaders bool

	// Guarded by ch.mu.
	used      int // unacked deliveries plus reserved credit
	cancelled bool

	ctx    context.Context
	stop   context.CancelFunc
	done   chan struct{}
	engine string
}

// noteTaken is the consumers' engine.ReceiveRequest.OnTake.
func (q *queue) noteTaken(n int) { q.undelivered.Add(int64(n)) }

func newConsumerTag() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "amq.ctag-" + base64.RawURLEncoding.EncodeToString(b)
}

// abort ends a registered consumer that never ran (its consume-ok could
// not be written) as run would have: out of its queue's lines, done
// closed, so that the channel's release does not wait for it forever and
// then unregisters it from its queue (an exclusive or single-active
// consumer left behind would hold the queue from every other consumer).
func (cs *consumer) abort() {
	cs.stop()
	cs.leaveLines()
	close(cs.done)
}

// leaveLines takes cs out of its queue's priority line, then out of its
// single-active line: the end of run, and of abort.
func (cs *consumer) leaveLines() {
	cs.q.prio.leave(cs)
	cs.leaveLine()
}

func (cs *consumer) run() {
	defer close(cs.done)
	defer cs.ch.c.containPanic("consumer")
	defer cs.leaveLines()
	s := cs.ch.c.s
	lease := leaseFor(cs.q.settings.timeout(s.opts.ConsumerTimeout))
	var reuse []engine.Delivery // the last batch's array, cleared, for the next
	var warned time.Time        // the last failed receive logged
	for {
		if !cs.awaitActive() {
			return
		}
		n, ok := cs.reserve()
		if !ok {
			return
		}
		rctx, release, ok := cs.q.prio.awaitTurn(cs)
		if !ok {
			cs.unreserve(n)
			return
		}
		s.fail("consumer", nil)
		ds, err := s.eng.Receive(rctx, cs.engine, engine.ReceiveRequest{
			Max: n, Visibility: lease, VisibilitySet: true, Wait: engine.MaxWait, WaitSet: true,
			OnTake: cs.q.noteTaken, Session: true, Reuse: reuse})
		// Read before release, which cancels rctx: after it every
		// failure looked like a preemption, and a consumer of a queue
		// deleted over SQS asked again at once, forever (until
		// 2026-12-07: a core spent, no basic.cancel).
		preempted := rctx.Err() != nil
		release()
		cs.unreserve(n - len(ds))
		s.checkFlow(cs.q) // taking messages may relieve publishers (flow.go)
		if err != nil && len(ds) == 0 {
			if cs.ctx.Err() != nil {
				return
			}
			if preempted {
				continue // preempted by a higher-priority consumer
			}
			if errors.Is(err, engine.ErrQueueNotFound) {
				// Deleted behind AMQP's back (over SQS): cancel.
				cs.ch.serverCancel(cs)
				return
			}
			if errors.Is(err, engine.ErrClosed) {
				<-cs.ctx.Done()
				return
			}
			// Retried every 100 ms (a failover of the queue's shard
			// lasts seconds): logged once every 10 s of failing.
			if now := time.Now(); now.Sub(warned) >= 10*time.Second {
				warned = now
				s.log.Warn("amqp: consumer receive failed; retrying", "queue", cs.q.name, "err", err)
			}
			select {
			case <-cs.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		// No-ack deliveries are settled once they are queued for
		// writing (RabbitMQ's automatic acknowledgement): with one
		// engine delete per batch, not one per delivery — and before
		// any wait for room, so nothing written stays in flight while
		// the client is slow to read.
		written, settled := 0, 0
		settle := func() {
			if cs.noAck && written > settled {
				s.settleNoAck(cs.engine, ds[settled:written])
				settled = written
			}
		}
		for i, d := range ds {
			// The writer is woken once per batch (and whenever a
			// delivery must wait for room), so a batch goes out in one
			// write instead of one per delivery.
			if !cs.ch.deliver(cs, d, i == len(ds)-1, settle) {
				break
			}
			written++
			cs.q.undelivered.Add(-1) // queued for writing
		}
		settle()
		if written == len(ds) {
			clear(ds) // written out: keep no bodies
			if cap(ds) > cap(reuse) {
				reuse = ds[:0]
			}
		}
		if written < len(ds) {
			cs.ch.c.kick()
			cs.unreserve(len(ds) - written)
			rest := make([]string, 0, len(ds)-written)
			for _, r := range ds[written:] {
				rest = append(rest, r.ReceiptHandle)
			}
			errs, err := s.eng.Requeue(cs.engine, rest, true)
			s.settleQuietly("requeue of unwritten deliveries", cs.engine, errs, err)
			cs.q.undelivered.Add(-int64(len(rest))) // visible again
			return
		}
	}
}

// settleNoAck deletes deliveries of a no-ack consumer that were queued
// for writing, in one engine call.
func (s *Server) settleNoAck(queue string, ds []engine.Delivery) {
	hs := make([]string, len(ds))
	for i := range ds {
		hs[i] = ds[i].ReceiptHandle
	}
	errs, err := s.eng.Delete(queue, hs)
	s.settleQuietly("delete of no-ack deliveries", queue, errs, err)
}

// reserve waits for prefetch credit and reserves up to MaxBatch of it.
func (cs *consumer) reserve() (int, bool) {
	ch := cs.ch
	blocked := false
	for {
		ch.mu.Lock()
		if cs.cancelled || ch.stopped {
			ch.mu.Unlock()
			return 0, false
		}
		n := engine.MaxBatch
		if !cs.noAck {
			if cs.prefetch > 0 {
				n = min(n, cs.prefetch-cs.used)
			}
			if ch.prefetchGlobal > 0 {
				n = min(n, ch.prefetchGlobal-ch.globalUsed)
			}
			if lim := cs.ch.c.s.opts.MaxUnackedPerChannel; lim > 0 {
				// Sluice's bound when prefetch allows more (RabbitMQ
				// has none): globalUsed counts every consumer's
				// unacknowledged deliveries and reservations.
				n = min(n, lim-ch.globalUsed)
			}
		}
		if n > 0 {
			if !cs.noAck {
				cs.used += n
				ch.globalUsed += n
			}
			ch.mu.Unlock()
			if blocked {
				cs.q.prio.setActive(cs, true)
			}
			return n, true
		}
		wait := ch.credit
		ch.mu.Unlock()
		if !blocked {
			blocked = true
			cs.q.prio.setActive(cs, false) // no credit: lower priorities may go
		}
		select {
		case <-wait:
		case <-cs.ctx.Done():
			return 0, false
		}
	}
}

// unreserve gives back credit that was reserved but not used.
func (cs *consumer) unreserve(k int) {
	if k <= 0 || cs.noAck {
		return
	}
	ch := cs.ch
	ch.mu.Lock()
	cs.used = max(cs.used-k, 0)
	ch.globalUsed = max(ch.globalUsed-k, 0)
	ch.signalLocked()
	ch.mu.Unlock()
}

// deliver queues basic.deliver for d; false if the consumer, its channel
// or the connection has stopped (the caller requeues). It first waits for
// room in the connection's outgoing queue, holding no lock; under the
// channel's lock it only numbers, records and queues the delivery, so a
// client that stops reading never holds up anything that takes that lock
// (a queue delete cancelling its consumers, acks on other goroutines).
//
// last false leaves the writer asleep (see enqueueQuiet); the caller
// wakes it after the batch. beforeWait runs before any wait for room.
func (ch *channel) deliver(cs *consumer, d engine.Delivery, last bool, beforeWait func()) bool {
	c := ch.c
	exchange, key, props := deliveryContent(&d, cs.q.name, cs.engine, cs.failureHeaders || c.failureHeaders)
	size := c.contentSize(props, d.Body, len(cs.tag)+len(exchange)+len(key))
	if !c.tryReserve(size) {
		c.kick() // what is queued must drain first
		beforeWait()
		if c.reserve(cs.ctx, size) != nil {
			return false
		}
	}
	ch.mu.Lock()
	if cs.cancelled || ch.stopped || ch.closing.Load() {
		ch.mu.Unlock()
		c.unreserve(size)
		return false
	}
	ch.nextTag++
	tag := ch.nextTag
	m := &wire.BasicDeliver{ConsumerTag: cs.tag, DeliveryTag: tag, Redelivered: d.Redelivered, Exchange: exchange, RoutingKey: key}
	buf, pooled := c.s.bufs.get(size)
	b, err := c.appendContent(*buf, ch.id, m, props, d.Body)
	if err == nil {
		if !pooled {
			buf = nil
		}
		err = c.enqueuePooled(b, size, buf)
	} else {
		if pooled {
			c.s.bufs.put(buf)
		}
		c.unreserve(size)
	}
	if err == nil && !cs.noAck {
		now := c.s.clk.Now()
		ch.unacked[tag] = &unacked{tag: tag, queue: cs.engine, handle: d.ReceiptHandle, consumer: cs, delivered: now,
			deadline: now.Add(cs.q.settings.timeout(c.s.opts.ConsumerTimeout))}
	}
	ch.mu.Unlock()
	if last {
		c.kick()
	}
	return err == nil
}

// deliveryContent returns the exchange, routing key and property bytes a
// delivery from engine queue eq goes out with. AMQP-published messages
// carry them in their envelope; the broker's headers are added to the
// stored header bytes (see brokerHeaders and addHeaders), the
// failure-report ones only when failure is set (the client opted in).
// Messages sent over SQS get properties from their attributes (see
// interop.go).
func deliveryContent(d *engine.Delivery, queueName, eq string, failure bool) (exchange, key string, props []byte) {
	env, err := decodeEnvelope(d.Envelope)
	if err != nil {
		p := propsFromSQS(d)
		for _, f := range brokerHeaders(d, eq, failure) {
			p.Headers = p.Headers.Set(f.Key, f.Value)
		}
		raw, _ := encodeProps(&p)
		return "", queueName, raw
	}
	return env.exchange, env.routingKey(), addHeaders(env.props, brokerHeaders(d, eq, failure))
}

// serverCancel cancels a consumer from the broker's side (its queue was
// deleted) and tells a client that supports consumer_cancel_notify.
func (ch *channel) serverCancel(cs *consumer) {
	ch.mu.Lock()
	if cs.cancelled {
		ch.mu.Unlock()
		return
	}
	cs.cancelled = true
	if ch.consumers[cs.tag] == cs {
		delete(ch.consumers, cs.tag)
	}
	ch.signalLocked()
	ch.mu.Unlock()
	cs.stop()
	if ch.c.capCancel && !ch.closing.Load() {
		// Without waiting: a queue delete (holding Server.adminMu) may be
		// the caller. During this connection's own queue.delete the
		// frame is held and goes out with the delete-ok (holdFrames).
		// Fails only once the writer has failed, and the connection is closing then.
		_ = ch.c.sendOrHold(ch.id, &wire.BasicCancel{ConsumerTag: cs.tag, NoWait: true})
	}
}

// removeConsumer unregisters a stopped consumer from its queue; an
// auto-delete queue whose last consumer went is deleted.
func (s *Server) removeConsumer(cs *consumer) {
	q := cs.q
	t := s.topo
	t.mu.Lock()
	delete(q.consumers, cs)
	q.sacLeaveLocked(cs)
	if q.exclusiveBy == cs {
		q.exclusiveBy = nil
	}
	q.lastUsed = s.clk.Now()
	doomed := q.autoDelete && q.hadConsumer && len(q.consumers) == 0 && !q.deleted
	t.mu.Unlock()
	if doomed {
		s.adminMu.Lock()
		t.mu.RLock()
		still := len(q.consumers) == 0 && !q.deleted
		t.mu.RUnlock()
		if still {
			if _, err := s.deleteQueueLocked(q); err != nil {
				s.log.Warn("amqp: cannot delete auto-delete queue", "queue", q.name, "err", err)
			}
		}
		s.adminMu.Unlock()
	}
	if q.settings.expires > 0 {
		s.wake()
	}
	s.checkFlow(q) // a queue without consumers holds no publisher back
}
