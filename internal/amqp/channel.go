package amqp

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// command is a complete method (with its content, for publish) handed
// from the reader to a channel's goroutine, or a failure the reader
// detected (fail).
type command struct {
	m        wire.Method
	props    wire.Properties
	rawProps []byte // property flag word and properties, as received
	body     []byte
	fail     *amqpError
	// stop asks the channel goroutine to end once every command queued
	// before it has run (see channel.finish).
	stop bool
}

// unacked is a delivery awaiting ack, nack or reject.
type unacked struct {
	tag       uint64
	queue     string // engine queue
	handle    string
	consumer  *consumer // nil for basic.get
	delivered time.Time // on the server clock
	// deadline is when the consumer timeout fires: delivered plus the
	// queue's timeout, moved later when the consumer extends the lease
	// (see conn.checkConsumerTimeouts).
	deadline time.Time
}

// channel is one AMQP channel. The reader goroutine owns the content
// assembly fields; the channel goroutine (run) owns the mode fields and
// executes commands in order; mu guards delivery state shared with
// consumer goroutines.
type channel struct {
	c     *conn
	id    uint16
	inbox chan *command
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup // the channel goroutine
	ended chan struct{}  // closed when the channel goroutine has returned

	// closing: channel.close was sent or received; further frames are
	// discarded until close-ok.
	closing atomic.Bool

	// Reader-owned.
	pending      *command
	expectHeader bool
	remaining    uint64

	// Owned by the channel goroutine.
	confirm    bool
	confirmSeq uint64
	tx         bool
	txPublish  []*command
	txSettle   []settleOp
	txBytes    int64      // this channel's share of conn.txHeld (limits.go)
	batch      []*command // validated publishes not yet routed
	acks       []settleOp // basic.ack/nack/rejects not yet applied (see flushAcks)
	unsynced   int        // acks written without a sync since the last syncAcks

	mu               sync.Mutex
	nextTag          uint64
	unacked          map[uint64]*unacked
	consumers        map[string]*consumer
	prefetchConsumer int // for consumers created from now on; 0: unlimited
	prefetchGlobal   int // shared by the channel's consumers; 0: unlimited
	globalUsed       int // unacked consumer deliveries plus reservations
	credit           chan struct{}
	stopped          bool
	replyTag         string // the direct reply-to consumer, if any
	replyToken       string
}

func (c *conn) openChannel(id uint16) {
	ch := &channel{
		c: c, id: id,
		inbox:     make(chan *command, inboxSize),
		quit:      make(chan struct{}),
		unacked:   make(map[uint64]*unacked),
		consumers: make(map[string]*consumer),
		credit:    make(chan struct{}),
		ended:     make(chan struct{}),
	}
	c.chMu.Lock()
	c.channels[id] = ch
	c.chMu.Unlock()
	ch.wg.Add(1)
	go ch.run()
	// Fails only once the writer has failed, and the connection is closing then.
	_ = c.send(id, &wire.ChannelOpenOK{})
}

// freeChannel forgets a closed channel so its number can be reused.
func (c *conn) freeChannel(ch *channel) {
	c.chMu.Lock()
	if c.channels[ch.id] == ch {
		delete(c.channels, ch.id)
	}
	c.chMu.Unlock()
	ch.once.Do(func() { close(ch.quit) })
}

// maxPublishBatch bounds how many publishes are routed together, and
// maxAckBatch how many basic.ack, nack and rejects are applied together.
// maxUnsyncedAcks bounds how many acks a channel writes without a sync
// before it waits for one (flushAcks).
const (
	maxPublishBatch = 256
	maxAckBatch     = 256
	maxUnsyncedAcks = 1024
)

// isSettleMethod: m is basic.ack, basic.nack or basic.reject, which
// queue up in ch.acks (see flushAcks).
func isSettleMethod(m wire.Method) bool {
	switch m.(type) {
	case *wire.BasicAck, *wire.BasicNack, *wire.BasicReject:
		return true
	}
	return false
}

func (ch *channel) run() {
	defer ch.wg.Done()
	defer close(ch.ended)
	defer ch.c.containPanic("channel")
	defer ch.releaseTx()
	for {
		select {
		case <-ch.quit:
			return
		case cmd := <-ch.inbox:
			if cmd.stop {
				return
			}
			ch.exec(cmd)
			// Publishes queue up in ch.batch, and acks in ch.acks, while
			// more of the same kind are waiting; anything else, an empty
			// inbox or a full batch applies them first, so commands still
			// take effect in the order they arrived.
			for len(ch.batch) > 0 || len(ch.acks) > 0 {
				select {
				case next := <-ch.inbox:
					_, isPub := next.m.(*wire.BasicPublish)
					isSettle := isSettleMethod(next.m)
					if !isPub || next.fail != nil || next.stop || len(ch.batch) >= maxPublishBatch {
						ch.flushPublishes()
					}
					if !isSettle || next.fail != nil || next.stop || len(ch.acks) >= maxAckBatch {
						ch.flushAcks()
					}
					if next.stop {
						return
					}
					ch.exec(next)
				default:
					ch.flushPublishes()
					ch.flushAcks()
				}
			}
		}
	}
}

// exec runs one command, raising its error on the channel.
func (ch *channel) exec(cmd *command) {
	ch.c.s.fail("channel", cmd.m)
	if cmd.fail != nil {
		ch.flushPublishes()
		ch.flushAcks()
		ch.raise(cmd.fail)
		return
	}
	if ch.closing.Load() || ch.c.closing.Load() {
		// A closing channel answers nothing but close-ok (handled by the
		// connection); nor does any channel of a connection the server
		// is closing (hardClose): a reply written after connection.close
		// — a basic.qos-ok after an ack whose delete failed — can still
		// reach a client library that reads it before the close, which
		// would then take the failed ack for applied.
		return
	}
	err := ch.syncBefore(cmd.m)
	if err == nil {
		err = ch.handle(cmd)
	}
	if err != nil {
		ch.flushPublishes() // the publishes before the failing method
		ch.flushAcks()
		if ch.c.writesEnded() {
			// The connection is gone and the channel is finishing the
			// commands received before it went: a reply that cannot be
			// written is no error to raise.
			return
		}
		var ae *amqpError
		if !errors.As(err, &ae) {
			ae = errorf(wire.InternalError, "%v", err)
			ae.hard = true
		}
		if ae.classID == 0 {
			ae.classID, ae.methodID = cmd.m.IDs()
		}
		ch.raise(ae)
	}
}

// syncBefore makes the channel's unsynced acks durable before a method
// whose reply could prove them applied: every method but basic.publish
// (whose confirm is about the publish), and basic.ack, nack and reject
// (which have no reply).
func (ch *channel) syncBefore(m wire.Method) error {
	if ch.unsynced == 0 || isSettleMethod(m) {
		return nil
	}
	if _, ok := m.(*wire.BasicPublish); ok {
		return nil
	}
	return ch.syncAcks()
}

// flushPublishes routes the batched publishes.
func (ch *channel) flushPublishes() {
	if len(ch.batch) == 0 {
		return
	}
	b := ch.batch
	ch.batch = nil
	if ch.closing.Load() {
		return
	}
	if _, err := ch.route(b...); err != nil {
		var ae *amqpError
		if !errors.As(err, &ae) {
			ae = errorf(wire.InternalError, "%v", err)
			ae.hard = true
		}
		ae.classID, ae.methodID = wire.ClassBasic, wire.MethodBasicPublish
		ch.raise(ae)
	}
}

// raise handles an exception on this channel: a hard one closes the
// connection; a soft one closes the channel (RabbitMQ's texts), after
// stopping its consumers and returning its unacknowledged messages.
func (ch *channel) raise(e *amqpError) {
	if e.isHard() {
		ch.c.hardClose(e)
		return
	}
	ch.closing.Store(true)
	ch.c.s.log.Debug("amqp: channel error", "conn", ch.c.name, "channel", ch.id, "code", e.code, "text", e.text)
	ch.release()
	// Fails only once the writer has failed, and the connection is closing then.
	_ = ch.c.send(ch.id, &wire.ChannelClose{ReplyCode: e.code, ReplyText: replyText(e.text), ClassID: e.classID, MethodID: e.methodID})
}

// failAsync raises e from outside the channel goroutine (consumer
// timeout): it is queued behind the commands already received.
func (ch *channel) failAsync(e *amqpError) {
	if ch.closing.Load() {
		return
	}
	select {
	case ch.inbox <- &command{fail: e}:
	case <-ch.quit:
	default:
		// Inbox full: the channel is busy; the next tick retries.
	}
}

// release stops the channel's consumers and returns its unacknowledged
// deliveries without a verdict (engine Abandon: a crash for crash-loop
// quarantine; then where the queue's requeue policy says, by default
// their original positions, as RabbitMQ's classic queues do). The receive
// already counted as an attempt.
func (ch *channel) release() {
	ch.mu.Lock()
	ch.stopped = true
	cs := make([]*consumer, 0, len(ch.consumers))
	for _, cs1 := range ch.consumers {
		cs = append(cs, cs1)
	}
	ch.consumers = map[string]*consumer{}
	all := ch.takeAllLocked()
	replyTag := ch.replyTag
	ch.mu.Unlock()
	if replyTag != "" {
		ch.cancelReplyTo(replyTag)
	}
	for _, cons := range cs {
		cons.stop()
	}
	for _, cons := range cs {
		<-cons.done
		ch.c.s.removeConsumer(cons)
	}
	// Deliveries made while the consumers were stopping.
	ch.mu.Lock()
	all = append(all, ch.takeAllLocked()...)
	ch.mu.Unlock()
	ch.abandon(all)
}

// takeAllLocked removes and returns every unacked delivery in tag order.
func (ch *channel) takeAllLocked() []*unacked {
	all := make([]*unacked, 0, len(ch.unacked))
	for _, u := range ch.unacked {
		all = append(all, u)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].tag < all[j].tag })
	clear(ch.unacked)
	ch.globalUsed = 0
	for _, u := range all {
		if u.consumer != nil {
			u.consumer.used = 0
		}
	}
	return all
}

// requeue returns deliveries to their queues after a verdict asking for
// another try (nack/reject with requeue, basic.recover): the engine's Nack
// puts them where the queue's x-sluice-requeue policy says.
func (ch *channel) requeue(us []*unacked) { ch.giveBack(us, false) }

// abandon returns deliveries that ended without a verdict (the channel or
// connection closed or was lost, or the consumer timeout fired). Only the
// oldest unacknowledged delivery of each consumer (and of basic.get) is
// taken as the one its consumer was working on and goes to the engine's
// Abandon, which counts it as a crash for crash-loop quarantine; the
// others were waiting in the prefetch buffer and go back to their places
// without a crash (their delivery still counts towards the limit), so
// one poison message does not drag the messages queued behind it into
// quarantine.
func (ch *channel) abandon(us []*unacked) {
	sort.Slice(us, func(i, j int) bool { return us[i].tag < us[j].tag })
	seen := make(map[*consumer]bool)
	var crashed, waiting []*unacked
	for _, u := range us {
		if seen[u.consumer] {
			waiting = append(waiting, u)
			continue
		}
		seen[u.consumer] = true
		crashed = append(crashed, u)
	}
	ch.giveBack(crashed, true)
	for q, hs := range groupHandles(waiting) {
		if _, err := ch.c.s.eng.Requeue(q, hs, true); err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
			ch.c.s.log.Warn("amqp: cannot requeue", "queue", q, "err", err)
		}
	}
}

func (ch *channel) giveBack(us []*unacked, crashed bool) {
	byQueue := make(map[string][]string)
	var order []string
	for _, u := range us {
		if _, ok := byQueue[u.queue]; !ok {
			order = append(order, u.queue)
		}
		byQueue[u.queue] = append(byQueue[u.queue], u.handle)
	}
	for _, q := range order {
		ret := ch.c.s.eng.Nack
		if crashed {
			ret = ch.c.s.eng.Abandon
		}
		if _, err := ret(q, byQueue[q]); err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
			ch.c.s.log.Warn("amqp: cannot requeue", "queue", q, "err", err)
		}
	}
}

// requestStop queues a stop command behind the commands already received,
// so that the channel goroutine runs them all (acks, publishes) before it
// ends. It gives up at deadline (an inbox that stays full).
func (ch *channel) requestStop(deadline <-chan struct{}) {
	select {
	case ch.inbox <- &command{stop: true}:
	case <-ch.quit:
	case <-ch.ended:
	case <-deadline:
	}
}

// stop ends the channel when its connection ends.
func (ch *channel) stop() {
	ch.closing.Store(true)
	ch.once.Do(func() { close(ch.quit) })
	ch.wg.Wait()
	ch.release()
}

// overdue returns the consumer deliveries whose consumer timeout has
// passed at now (copies: the caller checks them without the lock).
func (ch *channel) overdue(now time.Time) []unacked {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var out []unacked
	for _, u := range ch.unacked {
		if u.consumer != nil && now.After(u.deadline) {
			out = append(out, *u)
		}
	}
	return out
}

// extend moves the consumer timeout of delivery tag to at (when it is
// still unacknowledged).
func (ch *channel) extend(tag uint64, at time.Time) {
	ch.mu.Lock()
	if u := ch.unacked[tag]; u != nil && at.After(u.deadline) {
		u.deadline = at
	}
	ch.mu.Unlock()
}

// signalLocked wakes consumers waiting for prefetch credit.
func (ch *channel) signalLocked() {
	close(ch.credit)
	ch.credit = make(chan struct{})
}

// handle executes one command; an error is raised on the channel.
func (ch *channel) handle(cmd *command) error {
	s := ch.c.s
	c := ch.c
	switch m := cmd.m.(type) {
	case *wire.ChannelClose:
		ch.closing.Store(true)
		ch.release()
		c.freeChannel(ch)
		// Fails only once the writer has failed, and the connection is closing then.
		_ = c.send(ch.id, &wire.ChannelCloseOK{})
		return nil
	case *wire.ChannelCloseOK:
		return nil
	case *wire.ChannelFlow:
		if !m.Active {
			return errorf(wire.NotImplemented, "active=false")
		}
		return c.send(ch.id, &wire.ChannelFlowOK{Active: true})
	case *wire.ChannelFlowOK:
		return nil

	case *wire.ExchangeDeclare:
		if err := s.declareExchange(c, m); err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.ExchangeDeclareOK{})
	case *wire.ExchangeDelete:
		if err := s.deleteExchange(c, m); err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.ExchangeDeleteOK{})
	case *wire.ExchangeBind:
		if err := s.bind(c, m.Source, m.Destination, false, m.RoutingKey, m.Arguments); err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.ExchangeBindOK{})
	case *wire.ExchangeUnbind:
		if err := s.unbind(c, m.Source, m.Destination, false, m.RoutingKey, m.Arguments); err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.ExchangeUnbindOK{})

	case *wire.QueueDeclare:
		name, n, cs, err := s.declareQueue(c, m)
		if err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.QueueDeclareOK{Queue: name, MessageCount: uint32(n), ConsumerCount: uint32(cs)})
	case *wire.QueueBind:
		if err := s.bind(c, m.Exchange, m.Queue, true, m.RoutingKey, m.Arguments); err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.QueueBindOK{})
	case *wire.QueueUnbind:
		if err := s.unbind(c, m.Exchange, m.Queue, true, m.RoutingKey, m.Arguments); err != nil {
			return err
		}
		return ch.reply(false, &wire.QueueUnbindOK{})
	case *wire.QueuePurge:
		n, err := s.purgeQueue(c, m.Queue)
		if err != nil {
			return err
		}
		return ch.reply(m.NoWait, &wire.QueuePurgeOK{MessageCount: uint32(n)})
	case *wire.QueueDelete:
		c.holdFrames()
		n, err := s.deleteQueue(c, m)
		held := c.releaseFrames()
		if err == nil && !m.NoWait {
			held, err = appendMethod(held, ch.id, &wire.QueueDeleteOK{MessageCount: uint32(n)})
		}
		if len(held) > 0 {
			// The consumers' basic.cancel and the delete-ok in one write.
			if werr := c.write(held); err == nil {
				err = werr
			}
		}
		return err

	case *wire.BasicQos:
		return ch.qos(m)
	case *wire.BasicConsume:
		return ch.consume(m)
	case *wire.BasicCancel:
		return ch.cancel(m)
	case *wire.BasicPublish:
		return ch.publish(cmd)
	case *wire.BasicGet:
		return ch.get(m)
	case *wire.BasicAck:
		op := settleOp{kind: settleAck, tag: m.DeliveryTag, multiple: m.Multiple}
		if !ch.tx {
			ch.acks = append(ch.acks, op) // applied by flushAcks, with those behind it
			return nil
		}
		return ch.settle(op)
	case *wire.BasicNack:
		op := settleOp{kind: settleNack, tag: m.DeliveryTag, multiple: m.Multiple, requeue: m.Requeue}
		if !ch.tx {
			ch.acks = append(ch.acks, op) // as basic.ack
			return nil
		}
		return ch.settle(op)
	case *wire.BasicReject:
		op := settleOp{kind: settleReject, tag: m.DeliveryTag, requeue: m.Requeue}
		if !ch.tx {
			ch.acks = append(ch.acks, op) // as basic.ack
			return nil
		}
		return ch.settle(op)
	case *wire.BasicRecover:
		if !m.Requeue {
			return errorf(wire.NotImplemented, "requeue=false")
		}
		ch.recover()
		return c.send(ch.id, &wire.BasicRecoverOK{})
	case *wire.BasicRecoverAsync:
		return errorf(wire.NotImplemented, "basic.recover-async is not supported")

	case *wire.ConfirmSelect:
		if ch.tx {
			return errorf(wire.PreconditionFailed, "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		return ch.reply(m.NoWait, &wire.ConfirmSelectOK{})
	case *wire.TxSelect:
		if ch.confirm {
			return errorf(wire.PreconditionFailed, "cannot switch from confirm to tx mode")
		}
		ch.tx = true
		return c.send(ch.id, &wire.TxSelectOK{})
	case *wire.TxCommit:
		if !ch.tx {
			return errorf(wire.PreconditionFailed, "channel is not transactional")
		}
		ch.releaseTx()
		if err := ch.commit(); err != nil {
			return err
		}
		return c.send(ch.id, &wire.TxCommitOK{})
	case *wire.TxRollback:
		if !ch.tx {
			return errorf(wire.PreconditionFailed, "channel is not transactional")
		}
		ch.txPublish, ch.txSettle = nil, nil
		ch.releaseTx()
		return c.send(ch.id, &wire.TxRollbackOK{})
	}
	e := hardErrorf(wire.CommandInvalid, "unexpected method %s", cmd.m.Name())
	return e
}

// reply sends a synchronous reply unless the request had no-wait.
func (ch *channel) reply(noWait bool, m wire.Method) error {
	if noWait {
		return nil
	}
	return ch.c.send(ch.id, m)
}
