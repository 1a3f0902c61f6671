package amqp

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

func (ch *channel) qos(m *wire.BasicQos) error {
	if m.PrefetchSize != 0 {
		return errorf(wire.NotImplemented, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	ch.mu.Lock()
	if m.Global {
		ch.prefetchGlobal = int(m.PrefetchCount)
	} else {
		ch.prefetchConsumer = int(m.PrefetchCount)
	}
	ch.signalLocked()
	ch.mu.Unlock()
	return ch.c.send(ch.id, &wire.BasicQosOK{})
}

func (ch *channel) consume(m *wire.BasicConsume) error {
	c, s := ch.c, ch.c.s
	if m.Queue == replyQueue {
		return ch.consumeReplyTo(m)
	}
	if err := c.user.check(c.vhost, permRead, "queue", m.Queue); err != nil {
		return err
	}
	q, err := s.findQueue(c, m.Queue)
	if err != nil {
		return err
	}
	if _, err := s.eng.GetQueue(q.engine); errors.Is(err, engine.ErrQueueNotFound) {
		// Deleted outside AMQP (over SQS) and still in the topology:
		// 404, as RabbitMQ answers a consume of a queue that does not
		// exist (until 2026-12-07 a consume-ok, then basic.cancel).
		return errNoQueue(q.vhost, q.name)
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = newConsumerTag()
	}
	ctx, stop := context.WithCancel(context.Background())
	cs := &consumer{ch: ch, tag: tag, q: q, engine: q.engine, noAck: m.NoAck, exclusive: m.Exclusive,
		failureHeaders: flagIn(m.Arguments, optFailureHeaders), priority: consumerPriority(m.Arguments),
		ctx: ctx, stop: stop, done: make(chan struct{})}
	ch.mu.Lock()
	if _, dup := ch.consumers[tag]; dup {
		ch.mu.Unlock()
		stop()
		return hardErrorf(wire.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
	}
	if lim := s.opts.MaxConsumersPerChannel; lim > 0 && len(ch.consumers) >= lim {
		ch.mu.Unlock()
		stop()
		return hardErrorf(wire.NotAllowed, "reached maximum (%d) of consumers per channel", lim)
	}
	cs.prefetch = ch.prefetchConsumer
	ch.consumers[tag] = cs
	ch.mu.Unlock()
	t := s.topo
	t.mu.Lock()
	var refuse error
	switch {
	case q.deleted:
		refuse = errNoQueue(q.vhost, q.name)
	case q.exclusiveBy != nil || (m.Exclusive && len(q.consumers) > 0):
		refuse = errorf(wire.AccessRefused, "%s in exclusive use", rs("queue", q.name, q.vhost))
	default:
		q.consumers[cs] = struct{}{}
		q.sacJoinLocked(cs)
		q.prio.join(cs)
		q.hadConsumer = true
		if m.Exclusive {
			q.exclusiveBy = cs
		}
	}
	t.mu.Unlock()
	if refuse != nil {
		ch.mu.Lock()
		delete(ch.consumers, tag)
		ch.mu.Unlock()
		stop()
		return refuse
	}
	if err := ch.reply(m.NoWait, &wire.BasicConsumeOK{ConsumerTag: tag}); err != nil {
		// The connection can no longer write (it is closing): the
		// consumer never runs, but it is registered, and the channel's
		// release waits for it to end.
		cs.abort()
		return err
	}
	go cs.run()
	return nil
}

func (ch *channel) cancel(m *wire.BasicCancel) error {
	if ch.cancelReplyTo(m.ConsumerTag) {
		return ch.reply(m.NoWait, &wire.BasicCancelOK{ConsumerTag: m.ConsumerTag})
	}
	ch.mu.Lock()
	cs := ch.consumers[m.ConsumerTag]
	if cs != nil {
		cs.cancelled = true
		delete(ch.consumers, m.ConsumerTag)
		ch.signalLocked()
	}
	ch.mu.Unlock()
	if cs != nil {
		cs.stop()
		<-cs.done
		ch.c.s.removeConsumer(cs)
	}
	return ch.reply(m.NoWait, &wire.BasicCancelOK{ConsumerTag: m.ConsumerTag})
}

// publish validates a basic.publish and routes it now, or at commit in a
// transaction.
func (ch *channel) publish(cmd *command) error {
	m := cmd.m.(*wire.BasicPublish)
	c := ch.c
	if m.Immediate {
		return errorf(wire.NotImplemented, "immediate=true")
	}
	resName := m.Exchange
	if resName == "" {
		resName = "amq.default"
	}
	if err := c.user.check(c.vhost, permWrite, "exchange", resName); err != nil {
		return err
	}
	t := c.s.topo
	t.mu.RLock()
	x := t.vhosts[c.vhost].exchanges[m.Exchange]
	t.mu.RUnlock()
	if x == nil {
		return errNoExchange(c.vhost, m.Exchange)
	}
	if x.internal {
		return errorf(wire.AccessRefused, "cannot publish to internal %s", rs("exchange", m.Exchange, c.vhost))
	}
	p := &cmd.props
	if p.Flags&wire.FlagExpiration != 0 || p.Expiration != "" {
		if _, ok := parseExpiration(p.Expiration); !ok {
			return errorf(wire.PreconditionFailed, "invalid expiration '%s': {error,{not_an_integer,\"%s\"}}", p.Expiration, p.Expiration)
		}
	}
	if p.UserID != "" && p.UserID != c.user.name {
		return errorf(wire.PreconditionFailed, "user_id property set to '%s' but authenticated user was '%s'", p.UserID, c.user.name)
	}
	if maxBody := c.s.opts.MaxMessageSize; len(cmd.body)+len(cmd.rawProps)+len(m.Exchange)+len(m.RoutingKey)+16 > maxBody {
		return errorf(wire.PreconditionFailed, "message size %d is larger than configured max size %d", len(cmd.body), maxBody)
	}
	if err := ch.rewriteReplyTo(cmd); err != nil {
		return err
	}
	if ch.tx {
		if err := ch.holdTx(cmd); err != nil {
			return err
		}
		ch.txPublish = append(ch.txPublish, cmd)
		return nil
	}
	// Routed by the channel loop with the publishes that follow it
	// (flushPublishes).
	ch.batch = append(ch.batch, cmd)
	return nil
}

// parseExpiration reads the expiration property: a non-negative integer
// number of milliseconds, as a decimal string.
func parseExpiration(s string) (time.Duration, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// route delivers publishes (in order) to every queue each reaches (each
// queue at most once per message), returns a mandatory message that
// reaches none, and in confirm mode confirms each once every queue has it
// durably (engine.Send or SendMany returned), strictly in publish order.
// Messages for the same queue go to the engine together, and a burst
// routed to several queues goes as one SendMany: one batch, one fsync. A
// queue at its limit with reject-publish overflow, a nearly full disk or a
// failed store refuses a publish: in confirm mode it earns a basic.nack;
// otherwise it is counted (Server.RefusedPublishes) and logged, and refused
// reports how many publishes were, so that tx.commit can fail.
func (ch *channel) route(cmds ...*command) (refused int, err error) {
	c, s := ch.c, ch.c.s
	type pending struct {
		seq uint64
		ok  bool
	}
	results := make([]pending, len(cmds))
	// reach is, for each mandatory message routed to queues, whether one
	// of them took it or refused it (reached) or the engine found every
	// one deleted (gone: a queue deleted over SQS, or on another shard,
	// whose binding is still in the topology). A gone one went nowhere
	// and is returned, as RabbitMQ, which drops a deleted queue's
	// bindings, returns it as unroutable. Nil without a mandatory message.
	const (
		_ = iota // not a mandatory message routed to a queue
		gone
		reached
	)
	var reach []int8
	type slot struct {
		q    *queue
		msgs []engine.Message
		idx  []int
	}
	byQueue := make(map[string]*slot)
	var order []string
	for i, cmd := range cmds {
		m := cmd.m.(*wire.BasicPublish)
		if ch.confirm {
			ch.confirmSeq++
			results[i].seq = ch.confirmSeq
		}
		results[i].ok = true
		props := cmd.props
		raw := cmd.rawProps
		if m.Exchange == "" && strings.HasPrefix(m.RoutingKey, replyQueue+".") {
			if !s.deliverReply(ch.c.vhost, m.RoutingKey, m, cmd) && m.Mandatory {
				if err := ch.returnMessage(m, cmd); err != nil {
					return 0, err
				}
			}
			continue
		}
		keys := []string{m.RoutingKey}
		keys = append(keys, stringList(props.Headers, "CC")...)
		routeKeys := append(append([]string(nil), keys...), stringList(props.Headers, "BCC")...)
		if _, has := props.Headers.Get("BCC"); has {
			props.Headers = append(wire.Table(nil), props.Headers...).Delete("BCC")
			if enc, err := encodeProps(&props); err == nil {
				raw = enc
			}
		}
		t := s.topo
		t.mu.RLock()
		v := t.vhosts[c.vhost]
		x := v.exchanges[m.Exchange]
		var targets []*queue
		if x != nil {
			targets = v.routeLocked(x, routeKeys, props.Headers)
		}
		t.mu.RUnlock()
		if x != nil && x.name == "" && len(targets) == 0 && c.vhost == "/" {
			q, err := s.adopt("/", m.RoutingKey)
			if err == nil {
				targets = append(targets, q)
			} else if e, ok := err.(*amqpError); ok && e.code == wire.ResourceError {
				// Where the queue is could not be told: nacked, not
				// dropped as unroutable.
				s.log.Warn("amqp: publish refused", "queue", m.RoutingKey, "err", err)
				results[i].ok = false
				continue
			}
		}
		if len(targets) == 0 {
			if m.Mandatory {
				if err := ch.returnMessage(m, cmd); err != nil {
					return 0, err
				}
			}
			continue
		}
		if m.Mandatory && reach == nil {
			reach = make([]int8, len(cmds))
		}
		env := envelope{exchange: m.Exchange, keys: keys, props: raw}
		msg := engine.Message{Body: cmd.body, Envelope: env.encode(), Attributes: attributesFromHeaders(props.Headers), Priority: props.Priority}
		if props.Flags&wire.FlagExpiration != 0 || props.Expiration != "" {
			// Checked by publish; most messages carry none, and parsing
			// the empty string would allocate an error per message.
			if d, ok := parseExpiration(props.Expiration); ok {
				msg.TTL, msg.TTLSet = d, true
			}
		}
		for _, q := range targets {
			sl := byQueue[q.engine]
			if sl == nil {
				sl = &slot{q: q}
				if len(order) == 0 {
					// Most bursts go to one queue: room for the
					// rest of the burst at once, not grown by append.
					sl.msgs = make([]engine.Message, 0, len(cmds)-i)
					sl.idx = make([]int, 0, len(cmds)-i)
				}
				byQueue[q.engine] = sl
				order = append(order, q.engine)
			}
			sl.msgs = append(sl.msgs, msg)
			sl.idx = append(sl.idx, i)
		}
	}
	// One queue: Send. Several (a fan-out, CC/BCC, a burst to many
	// queues): one SendMany, so the publish is one batch and one fsync,
	// and a crash keeps it in every queue or in none.
	var many []engine.QueueSendResult
	var manyErr error
	if len(order) > 1 {
		sends := make([]engine.QueueSend, len(order))
		for k, name := range order {
			sends[k] = engine.QueueSend{Queue: name, Msgs: byQueue[name].msgs}
		}
		many, manyErr = s.eng.SendMany(sends)
	}
	for k, name := range order {
		sl := byQueue[name]
		var res []engine.SendResult
		var err error
		switch {
		case len(order) == 1:
			res, err = s.eng.Send(name, sl.msgs)
		case manyErr != nil:
			err = manyErr
		default:
			res, err = many[k].Results, many[k].Err
		}
		if err == nil {
			c.noteRouted(sl.q) // flow control: over its high-water mark, the reader pauses
		}
		for j, i := range sl.idx {
			e := err
			if e == nil {
				e = res[j].Err
			}
			results[i].ok = s.published(name, e)
			if reach != nil && cmds[i].m.(*wire.BasicPublish).Mandatory {
				if errors.Is(e, engine.ErrQueueNotFound) {
					reach[i] = max(reach[i], gone)
				} else {
					reach[i] = reached
				}
			}
		}
	}
	for i, r := range reach {
		if r == gone {
			if err := ch.returnMessage(cmds[i].m.(*wire.BasicPublish), cmds[i]); err != nil {
				return 0, err
			}
		}
	}
	for _, r := range results {
		if !r.ok {
			refused++
		}
	}
	if !ch.confirm {
		if refused > 0 && !ch.tx {
			s.refused.Add(uint64(refused))
			s.log.Warn("amqp: publishes refused without confirms; the publisher cannot know",
				"channel", ch.id, "refused", refused, "refused_total", s.refused.Load())
		}
		return refused, nil
	}
	// Confirms in order; a run of acks goes out as one multiple ack.
	for i := 0; i < len(results); {
		j := i
		for j+1 < len(results) && results[i].ok && results[j+1].ok {
			j++
		}
		if !results[i].ok {
			if err := ch.c.send(ch.id, &wire.BasicNack{DeliveryTag: results[i].seq}); err != nil {
				return refused, err
			}
		} else if err := ch.c.send(ch.id, &wire.BasicAck{DeliveryTag: results[j].seq, Multiple: j > i}); err != nil {
			return refused, err
		}
		i = j + 1
	}
	return refused, nil
}

// published reports whether a publish to queue name that the engine
// answered with e stands (confirmed with an ack): yes when stored, and when
// the queue was deleted meanwhile (unroutable, as RabbitMQ drops it); no
// (a nack) when the queue is full or the send failed.
func (s *Server) published(name string, e error) bool {
	switch {
	case e == nil, errors.Is(e, engine.ErrQueueNotFound):
		return true
	case errors.Is(e, engine.ErrQueueFull):
		return false
	default:
		s.log.Warn("amqp: publish failed", "queue", name, "err", e)
		return false
	}
}

// returnMessage sends basic.return 312 NO_ROUTE for a mandatory publish.
func (ch *channel) returnMessage(m *wire.BasicPublish, cmd *command) error {
	c := ch.c
	ret := &wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE", Exchange: m.Exchange, RoutingKey: m.RoutingKey}
	return c.writeContent(ch.id, ret, len(ret.ReplyText)+len(ret.Exchange)+len(ret.RoutingKey), cmd.rawProps, cmd.body)
}

// stringList reads a CC or BCC header: an array of strings (or one).
func stringList(h wire.Table, key string) []string {
	v, ok := h.Get(key)
	if !ok {
		return nil
	}
	if s, ok := asString(v); ok {
		return []string{s}
	}
	arr, _ := v.([]any)
	var out []string
	for _, e := range arr {
		if s, ok := asString(e); ok {
			out = append(out, s)
		}
	}
	return out
}

func (ch *channel) get(m *wire.BasicGet) error {
	c, s := ch.c, ch.c.s
	if err := c.user.check(c.vhost, permRead, "queue", m.Queue); err != nil {
		return err
	}
	q, err := s.findQueue(c, m.Queue)
	if err != nil {
		return err
	}
	s.topo.mu.Lock()
	q.lastUsed = s.clk.Now()
	s.topo.mu.Unlock()
	if !m.NoAck && s.opts.MaxUnackedPerChannel > 0 {
		ch.mu.Lock()
		full := len(ch.unacked) >= s.opts.MaxUnackedPerChannel
		ch.mu.Unlock()
		if full {
			// Sluice's bound on unacknowledged deliveries (RabbitMQ has
			// none): the client must ack before it gets more.
			return c.send(ch.id, &wire.BasicGetEmpty{})
		}
	}
	ds, err := s.eng.Receive(context.Background(), q.engine, engine.ReceiveRequest{
		Max: 1, Visibility: leaseFor(q.settings.timeout(s.opts.ConsumerTimeout)), VisibilitySet: true, Wait: 0, WaitSet: true,
		Session: true})
	if errors.Is(err, engine.ErrQueueNotFound) {
		s.topo.mu.RLock()
		mine := q.deleted
		s.topo.mu.RUnlock()
		if !mine {
			// Deleted outside AMQP (over SQS): no such queue, as
			// RabbitMQ answers a get of one (until 2026-12-07 an
			// endless get-empty). One AMQP is deleting is empty.
			return errNoQueue(q.vhost, q.name)
		}
	} else if err != nil {
		return storageError(err)
	}
	if len(ds) == 0 {
		return c.send(ch.id, &wire.BasicGetEmpty{})
	}
	d := ds[0]
	left := 0
	if info, err := s.eng.GetQueue(q.engine); err == nil {
		left = info.Visible
	}
	exchange, key, props := deliveryContent(&d, q.name, q.engine, c.failureHeaders)
	// Room in the outgoing queue first: the channel's lock is never held
	// while waiting for the socket.
	size := c.contentSize(props, d.Body, len(exchange)+len(key))
	if err := c.reserve(context.Background(), size); err != nil {
		errs, rerr := s.eng.Requeue(q.engine, []string{d.ReceiptHandle}, true)
		s.settleQuietly("requeue of an unwritten basic.get", q.engine, errs, rerr)
		return err
	}
	ch.mu.Lock()
	ch.nextTag++
	tag := ch.nextTag
	if !m.NoAck {
		now := s.clk.Now()
		ch.unacked[tag] = &unacked{tag: tag, queue: q.engine, handle: d.ReceiptHandle, delivered: now,
			deadline: now.Add(q.settings.timeout(s.opts.ConsumerTimeout))}
	}
	ok := &wire.BasicGetOK{DeliveryTag: tag, Redelivered: d.Redelivered, Exchange: exchange, RoutingKey: key, MessageCount: uint32(left)}
	b, err := c.appendContent(make([]byte, 0, size), ch.id, ok, props, d.Body)
	if err == nil {
		err = c.enqueue(b, size)
	} else {
		c.unreserve(size)
	}
	ch.mu.Unlock()
	if m.NoAck {
		errs, derr := s.eng.Delete(q.engine, []string{d.ReceiptHandle})
		s.settleQuietly("delete of a no-ack basic.get", q.engine, errs, derr)
	}
	return err
}

// Settlement kinds.
const (
	settleAck = iota
	settleNack
	settleReject
)

type settleOp struct {
	kind     int
	tag      uint64
	multiple bool
	requeue  bool
}

// settle acks, nacks or rejects; in a transaction it is checked now and
// applied at commit.
func (ch *channel) settle(op settleOp) error {
	if ch.tx {
		ch.mu.Lock()
		_, known := ch.unacked[op.tag]
		ch.mu.Unlock()
		if !known && !(op.multiple && op.tag == 0) {
			return errUnknownTag(op.tag)
		}
		ch.txSettle = append(ch.txSettle, op)
		return nil
	}
	return ch.apply(op)
}

// apply settles deliveries: multiple covers every outstanding tag up to
// and including op.tag (all of them for tag 0). An unknown tag is 406.
func (ch *channel) apply(op settleOp) error {
	us, err := ch.take(op)
	if err != nil {
		return err
	}
	return ch.settleTaken(op, us, false)
}

// take removes the deliveries op settles from the channel's unacked set
// and gives back their prefetch credit.
func (ch *channel) take(op settleOp) ([]*unacked, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var us []*unacked
	if op.multiple {
		if _, ok := ch.unacked[op.tag]; !ok && op.tag != 0 {
			return nil, errUnknownTag(op.tag)
		}
		for tag, u := range ch.unacked {
			if op.tag == 0 || tag <= op.tag {
				us = append(us, u)
			}
		}
	} else {
		u := ch.unacked[op.tag]
		if u == nil {
			return nil, errUnknownTag(op.tag)
		}
		us = append(us, u)
	}
	for _, u := range us {
		delete(ch.unacked, u.tag)
		if u.consumer != nil {
			u.consumer.used = max(u.consumer.used-1, 0)
			ch.globalUsed = max(ch.globalUsed-1, 0)
		}
	}
	ch.signalLocked()
	return us, nil
}

// settleTaken applies op to deliveries take removed. unsynced lets acks
// be written without waiting for their sync (see syncAcks); everything
// else is durable when it returns.
func (ch *channel) settleTaken(op settleOp, us []*unacked, unsynced bool) error {
	sort.Slice(us, func(i, j int) bool { return us[i].tag < us[j].tag })
	eng := ch.c.s.eng
	switch {
	case op.kind == settleAck:
		for q, hs := range groupHandles(us) {
			var err error
			if unsynced {
				var lazy bool
				if _, lazy, err = ch.c.s.ackUnsynced(q, hs); lazy {
					ch.unsynced += len(hs)
					ch.c.unsyncedAcks.Store(true)
				}
			} else {
				_, err = ch.c.s.ack(q, hs)
			}
			if err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
				return storageError(err)
			}
		}
	case op.requeue:
		ch.requeue(us)
	default:
		// Dead-lettered (rejected) with the failure context, or, with no
		// dead-letter target, dropped — which the engine counts (and
		// logs) as a drop, not a delete: one engine write per queue.
		for q, hs := range groupHandles(us) {
			_, err := eng.Reject(q, hs, engine.Failure{Terminal: true, ErrorClass: "amqp.rejected"})
			if err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
				return storageError(err)
			}
		}
	}
	return nil
}

// flushAcks applies the basic.ack, nack and rejects that arrived together
// (one read burst) with one engine call per queue and kind of settlement
// (delete, return, reject) instead of one durable write per method. The
// acks are written without waiting for their sync where the engine allows
// it: the channel syncs before it answers anything (syncAcks). They
// are taken in order up to the first unknown tag, which then raises 406
// as it would alone; those before it take effect. Each settles different
// deliveries, so applying the kinds one after the other changes nothing
// a client can tell from applying the methods one by one.
func (ch *channel) flushAcks() {
	if len(ch.acks) == 0 {
		return
	}
	ops := ch.acks
	ch.acks = ch.acks[:0]
	if ch.closing.Load() {
		return
	}
	var acks, requeues, rejects []*unacked
	var ferr error
	var failedMethod uint16 = wire.MethodBasicAck
	for _, op := range ops {
		us, err := ch.take(op)
		if err != nil {
			ferr, failedMethod = err, settleMethod(op.kind)
			break
		}
		switch {
		case op.kind == settleAck:
			acks = append(acks, us...)
		case op.requeue:
			requeues = append(requeues, us...)
		default:
			rejects = append(rejects, us...)
		}
	}
	for _, g := range []struct {
		op settleOp
		us []*unacked
	}{{settleOp{kind: settleAck}, acks}, {settleOp{kind: settleNack, requeue: true}, requeues}, {settleOp{kind: settleReject}, rejects}} {
		if len(g.us) == 0 {
			continue
		}
		if err := ch.settleTaken(g.op, g.us, true); err != nil && ferr == nil {
			ferr, failedMethod = err, settleMethod(g.op.kind)
		}
	}
	if ferr == nil && ch.unsynced >= maxUnsyncedAcks {
		// Flow control: a consumer acking faster than the store syncs
		// (in a cluster, than Raft commits) waits here, so what is
		// applied in memory stays within this many acks of what is
		// durable, per channel.
		ferr, failedMethod = ch.syncAcks(), wire.MethodBasicAck
	}
	if ferr == nil {
		return
	}
	var ae *amqpError
	if !errors.As(ferr, &ae) {
		ae = errorf(wire.InternalError, "%v", ferr)
		ae.hard = true
	}
	ae.classID, ae.methodID = wire.ClassBasic, failedMethod
	ch.raise(ae)
}

// settleMethod is the basic method id of a settlement kind.
func settleMethod(kind int) uint16 {
	switch kind {
	case settleNack:
		return wire.MethodBasicNack
	case settleReject:
		return wire.MethodBasicReject
	}
	return wire.MethodBasicAck
}

// leasedDeleter is an engine that can delete only messages still in
// flight under the given lease (see Server.ack).
type leasedDeleter interface {
	DeleteLeased(queue string, handles []string) ([]error, error)
}

// ack deletes acknowledged deliveries. Every per-handle outcome counts as
// settled: a message a failure report (POST /sluice/v1/failures)
// dead-lettered is already gone, and deleting it again succeeds. A
// message whose lease a report ended (a retry is scheduled) must survive
// the ack that follows the report; engine.Delete honours the current
// handle even then (SQS semantics), so the engine's DeleteLeased, which
// deletes only messages still in flight under that lease, is used when the
// engine has it.
func (s *Server) ack(queue string, handles []string) ([]error, error) {
	if d, ok := any(s.eng).(leasedDeleter); ok {
		return d.DeleteLeased(queue, handles)
	}
	return s.eng.Delete(queue, handles)
}

// unsyncedAcker is an engine that can apply acks without waiting for
// their sync, and sync on demand (engine.Engine's DeleteLeasedUnsynced and
// Sync). An engine without it applies every ack durably.
type unsyncedAcker interface {
	DeleteLeasedUnsynced(queue string, handles []string) ([]error, error)
	Sync() error
}

// ackUnsynced is ack without waiting for the deletes' sync where the
// engine allows it; lazy reports whether it did, and a later syncAcks must
// then come before anything that proves the acks applied.
func (s *Server) ackUnsynced(queue string, handles []string) (errs []error, lazy bool, err error) {
	if a, ok := s.eng.(unsyncedAcker); ok {
		errs, err = a.DeleteLeasedUnsynced(queue, handles)
		return errs, true, err
	}
	errs, err = s.ack(queue, handles)
	return errs, false, err
}

// syncAcks is the sync barrier behind acks written by ackUnsynced: it
// returns once they are durable (in a cluster, committed).
func (s *Server) syncAcks() error {
	if a, ok := s.eng.(unsyncedAcker); ok {
		return a.Sync()
	}
	return nil
}

// syncAcks makes the acks this channel wrote without a sync durable
// before it answers anything: basic.ack has no reply, and the reply to a
// later method of the channel is what proves them applied
// (docs/guarantees.md). A failure is a hard error: the connection closes
// and that reply is never sent.
func (ch *channel) syncAcks() error {
	if ch.unsynced == 0 {
		return nil
	}
	ch.unsynced = 0
	if err := ch.c.s.syncAcks(); err != nil {
		e := storageError(err)
		e.classID, e.methodID = wire.ClassBasic, wire.MethodBasicAck
		return e
	}
	return nil
}

func groupHandles(us []*unacked) map[string][]string {
	out := make(map[string][]string)
	for _, u := range us {
		out[u.queue] = append(out[u.queue], u.handle)
	}
	return out
}

// recover requeues every unacknowledged delivery of the channel.
func (ch *channel) recover() {
	ch.mu.Lock()
	all := ch.takeAllLocked()
	ch.signalLocked()
	ch.mu.Unlock()
	ch.requeue(all)
}

// commit applies a transaction's publishes, then its settlements. If the
// engine refused any publish (a full reject-publish queue, a nearly full
// disk, a failed store), the commit fails as RabbitMQ's does: 406
// PRECONDITION_FAILED "partial tx completion", a channel error, so
// tx.commit-ok never covers a publish that was not stored. The
// transaction's settlements are then not applied: closing the channel
// returns those deliveries to their queues, and the client, told the
// commit failed, sees them again.
func (ch *channel) commit() error {
	pubs, ops := ch.txPublish, ch.txSettle
	ch.txPublish, ch.txSettle = nil, nil
	if len(pubs) > 0 {
		refused, err := ch.route(pubs...)
		if err != nil {
			return err
		}
		if refused > 0 {
			ch.c.s.log.Warn("amqp: tx.commit failed: the engine refused publishes", "channel", ch.id, "refused", refused, "published", len(pubs))
			return errorf(wire.PreconditionFailed, "partial tx completion")
		}
	}
	for _, op := range ops {
		if err := ch.apply(op); err != nil {
			return err
		}
	}
	return nil
}
