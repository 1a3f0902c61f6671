package amqp

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// Topology operations. Each takes Server.adminMu for its whole length, so
// the in-memory change, the metadata write and the engine call happen in
// one order for all connections; Topology.mu is held only around memory.

func errDefaultExchange() *amqpError {
	return errorf(wire.AccessRefused, "operation not permitted on the default exchange")
}

// storageError turns an engine failure into 541 INTERNAL_ERROR.
func storageError(err error) *amqpError {
	return hardErrorf(wire.InternalError, "%v", err)
}

// persist writes or deletes metadata records after a topology change.
type metaOp struct {
	ns, key string
	val     []byte // nil: delete
}

func (s *Server) applyMeta(ops []metaOp) error {
	for _, op := range ops {
		var err error
		if op.val == nil {
			err = s.eng.DeleteMeta(op.ns, op.key)
		} else {
			err = s.eng.PutMeta(op.ns, op.key, op.val)
		}
		if err != nil {
			return storageError(err)
		}
	}
	return nil
}

func (s *Server) declareExchange(c *conn, m *wire.ExchangeDeclare) error {
	vh := c.vhost
	if m.Exchange == "" {
		return errDefaultExchange()
	}
	if err := c.user.check(vh, permConfigure, "exchange", m.Exchange); err != nil {
		return err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	t := s.topo
	t.mu.RLock()
	x := t.vhosts[vh].exchanges[m.Exchange]
	t.mu.RUnlock()
	if m.Passive {
		if x == nil {
			return errNoExchange(vh, m.Exchange)
		}
		return nil
	}
	if !validKind(m.Type) {
		// RabbitMQ 4.x: a channel error (3.x closed the connection with
		// 503 COMMAND_INVALID).
		return errorf(wire.PreconditionFailed, "invalid exchange type '%s'", m.Type)
	}
	if x != nil {
		if err := checkExchangeEquivalent(vh, x, m); err != nil {
			return err
		}
		return nil
	}
	if strings.HasPrefix(m.Exchange, "amq.") {
		return errorf(wire.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
	}
	x = &exchange{name: m.Exchange, kind: m.Type, durable: m.Durable, autoDelete: m.AutoDelete, internal: m.Internal, args: m.Arguments}
	if x.durable {
		if err := s.applyMeta([]metaOp{{metaExchanges, metaKey(vh, x.name), exchangeRecord(vh, x)}}); err != nil {
			return err
		}
	}
	t.mu.Lock()
	t.vhosts[vh].exchanges[x.name] = x
	t.mu.Unlock()
	return nil
}

func isBuiltin(name string) bool {
	for _, b := range builtinExchanges {
		if b.name == name {
			return true
		}
	}
	return false
}

func (s *Server) deleteExchange(c *conn, m *wire.ExchangeDelete) error {
	vh := c.vhost
	if m.Exchange == "" {
		return errDefaultExchange()
	}
	if err := c.user.check(vh, permConfigure, "exchange", m.Exchange); err != nil {
		return err
	}
	if isBuiltin(m.Exchange) {
		return errorf(wire.AccessRefused, "operation not permitted on %s", rs("exchange", m.Exchange, vh))
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	t := s.topo
	t.mu.RLock()
	x := t.vhosts[vh].exchanges[m.Exchange]
	inUse := x != nil && len(x.bindings) > 0
	t.mu.RUnlock()
	if x == nil {
		return nil // RabbitMQ: deleting a missing exchange succeeds
	}
	if m.IfUnused && inUse {
		return errorf(wire.PreconditionFailed, "%s in use", rs("exchange", m.Exchange, vh))
	}
	return s.deleteExchangeLocked(vh, x)
}

// deleteExchangeLocked removes x and every binding from or to it; the
// caller holds adminMu.
func (s *Server) deleteExchangeLocked(vh string, x *exchange) error {
	t := s.topo
	var ops []metaOp
	t.mu.Lock()
	v := t.vhosts[vh]
	if v.exchanges[x.name] != x {
		t.mu.Unlock()
		return nil
	}
	delete(v.exchanges, x.name)
	gone := append([]*binding(nil), x.bindings...)
	gone = append(gone, v.bindingsToLocked(x.name, false)...)
	var emptied []*exchange
	for _, b := range gone {
		v.removeBindingLocked(b)
		ops = append(ops, metaOp{metaBindings, bindingKey(vh, b), nil})
		if src := v.exchanges[b.source]; src != nil && src.autoDelete && len(src.bindings) == 0 {
			emptied = append(emptied, src)
		}
	}
	x.bindings = nil
	t.mu.Unlock()
	if x.durable {
		ops = append(ops, metaOp{metaExchanges, metaKey(vh, x.name), nil})
	}
	if err := s.applyMeta(ops); err != nil {
		return err
	}
	for _, e := range emptied {
		if err := s.deleteExchangeLocked(vh, e); err != nil {
			return err
		}
	}
	return nil
}

// checkBindAccess is what bind and unbind check before the topology: the
// default exchange takes no bindings, the user may write the destination
// and read the source.
func checkBindAccess(c *conn, source, dest string, toQueue bool) error {
	destKind := "exchange"
	if toQueue {
		destKind = "queue"
	}
	if source == "" || (!toQueue && dest == "") {
		return errDefaultExchange()
	}
	if err := c.user.check(c.vhost, permWrite, destKind, dest); err != nil {
		return err
	}
	return c.user.check(c.vhost, permRead, "exchange", source)
}

// bind adds a binding from source to a queue or exchange.
func (s *Server) bind(c *conn, source, dest string, toQueue bool, key string, args wire.Table) error {
	vh := c.vhost
	if err := checkBindAccess(c, source, dest, toQueue); err != nil {
		return err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if toQueue {
		// A queue of another shard of a cluster (adopted, like an SQS
		// queue here) takes bindings too: publishes routed to it are sent
		// to its shard's leader, dead letters routed to it move there as
		// transfers (ADR 0015 step 5).
		if _, err := s.findQueue(c, dest); err != nil {
			return err
		}
	}
	t := s.topo
	t.mu.Lock()
	v := t.vhosts[vh]
	src := v.exchanges[source]
	if src == nil {
		t.mu.Unlock()
		return errNoExchange(vh, source)
	}
	var durable bool
	if toQueue {
		q := v.queues[dest]
		if q == nil {
			t.mu.Unlock()
			return errNoQueue(vh, dest)
		}
		durable = q.durable && !q.exclusive
	} else {
		d := v.exchanges[dest]
		if d == nil {
			t.mu.Unlock()
			return errNoExchange(vh, dest)
		}
		durable = d.durable
	}
	durable = durable && src.durable
	b := newBinding(source, dest, toQueue, key, args)
	for _, o := range src.bindings {
		if o.same(b) {
			t.mu.Unlock()
			return nil
		}
	}
	src.bindings = append(src.bindings, b)
	t.mu.Unlock()
	if durable {
		return s.applyMeta([]metaOp{{metaBindings, bindingKey(vh, b), bindingRecord(vh, b)}})
	}
	return nil
}

// unbind removes a binding; a missing binding is not an error (RabbitMQ),
// a missing queue or exchange is 404.
func (s *Server) unbind(c *conn, source, dest string, toQueue bool, key string, args wire.Table) error {
	vh := c.vhost
	if err := checkBindAccess(c, source, dest, toQueue); err != nil {
		return err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if toQueue {
		if _, err := s.findQueue(c, dest); err != nil {
			return err
		}
	}
	t := s.topo
	t.mu.Lock()
	v := t.vhosts[vh]
	src := v.exchanges[source]
	if src == nil {
		t.mu.Unlock()
		return errNoExchange(vh, source)
	}
	if !toQueue && v.exchanges[dest] == nil {
		t.mu.Unlock()
		return errNoExchange(vh, dest)
	}
	b := newBinding(source, dest, toQueue, key, args)
	found := false
	for _, o := range src.bindings {
		if o.same(b) {
			found = true
		}
	}
	v.removeBindingLocked(b)
	emptied := found && src.autoDelete && len(src.bindings) == 0
	t.mu.Unlock()
	if !found {
		return nil
	}
	if err := s.applyMeta([]metaOp{{metaBindings, bindingKey(vh, b), nil}}); err != nil {
		return err
	}
	if emptied {
		return s.deleteExchangeLocked(vh, src)
	}
	return nil
}

// findQueue returns the named queue of c's vhost, checking exclusive
// ownership (405). A queue of "/" that exists only in the engine (made
// over SQS) is adopted: AMQP and SQS share it.
func (s *Server) findQueue(c *conn, name string) (*queue, error) {
	vh := c.vhost
	t := s.topo
	t.mu.RLock()
	q := t.vhosts[vh].queues[name]
	t.mu.RUnlock()
	if q == nil {
		var err error
		if q, err = s.adopt(vh, name); err != nil {
			return nil, err
		}
	}
	if q.exclusive && q.owner != c {
		return nil, errLocked(vh, name)
	}
	return q, nil
}

// elsewhere reports whether queue name of vhost vh lives outside this
// server's engine (Options.Elsewhere; only vhost "/" shares its names with
// SQS).
func (s *Server) elsewhere(vh, name string) bool {
	return vh == "/" && s.opts.Elsewhere != nil && s.opts.Elsewhere.Holds(name)
}

// adopt registers an engine queue of vhost "/" that AMQP has not declared
// (an SQS queue) as a durable AMQP queue without arguments. It is kept in
// memory only: SQS owns it.
//
// Callers need not hold adminMu (publishes, consumes and gets adopt too),
// so adopt may race a delete of an AMQP queue of that name, which takes
// the queue out of the topology before it drops the engine queue. The
// engine's answer is trusted only when no delete of the name was under way
// and none started while the engine was asked; otherwise adopting a queue
// whose engine queue is about to go would leave a stale entry (durable,
// not auto-delete, no engine queue): a redeclare then failed with 406
// and a passive declare with 404.
func (s *Server) adopt(vh, name string) (*queue, error) {
	if vh != "/" || strings.HasPrefix(name, "amq.") {
		return nil, errNoQueue(vh, name)
	}
	t := s.topo
	for range 8 {
		t.mu.RLock()
		q, busy, gen := t.vhosts[vh].queues[name], t.dropping[name] > 0, t.dropGen
		t.mu.RUnlock()
		if q != nil {
			return q, nil
		}
		if busy {
			return nil, errNoQueue(vh, name)
		}
		cfg, err := s.eng.Config(name)
		if errors.Is(err, engine.ErrQueueNotFound) {
			return nil, errNoQueue(vh, name)
		}
		if err != nil {
			// Not known either way (a cluster's other shard could not be
			// asked): not "no such queue", which would drop a publish.
			return nil, errorf(wire.ResourceError, "cannot tell whether %s exists now: %v", rs("queue", name, vh), err)
		}
		if cfg.FIFO {
			return nil, errorf(wire.PreconditionFailed, "%s is an SQS FIFO queue, which AMQP cannot use", rs("queue", name, vh))
		}
		t.mu.Lock()
		v := t.vhostLocked(vh)
		if q := v.queues[name]; q != nil {
			t.mu.Unlock()
			return q, nil
		}
		if t.dropGen != gen || t.dropping[name] > 0 {
			t.mu.Unlock()
			continue // a delete started meanwhile: ask again
		}
		q = &queue{vhost: vh, name: name, engine: name, durable: true, adopted: true,
			consumers: make(map[*consumer]struct{}), lastUsed: s.clk.Now()}
		q.placed, q.args, q.settings = placedSettings(vh, name, cfg, s.log)
		v.queues[name] = q
		t.byEngine[name] = q
		t.mu.Unlock()
		return q, nil
	}
	return nil, errNoQueue(vh, name)
}

// AdoptSource makes queue name of vhost "/", when it lives elsewhere (a
// queue declared over AMQP and placed on another shard of a cluster), known
// to the topology with its declared settings (a queue it knows, of any
// vhost, is left as it is), so that the Topology routes
// its dead letters (RouteDeadLetter) through its dead-letter exchange: the
// engine imports them (engine.ImportRouted) after this. A queue that no
// longer exists is no error (its dead letters are routed nowhere); a
// queue that cannot be told is, and so is a topology whose bindings to
// queues of other shards are not all restored yet (after a start: see
// restoreBindings): its exchanges would route such a dead letter nowhere
// meanwhile, and it would be dropped, so the caller keeps it and asks
// again later (engine.ErrUnavailable: not a refusal to back off from).
func (s *Server) AdoptSource(name string) error {
	if !s.topo.RouteReady() {
		return fmt.Errorf("%w: amqp: %d bindings to queues of other shards are not restored yet; dead letters wait to be routed", engine.ErrUnavailable, s.topo.unrestored.Load())
	}
	if s.topo.knows(name) {
		// A queue of this server's own engine, or one adopted before:
		// its dead letters were routed later (engine.Options.RouteLater).
		return nil
	}
	_, err := s.adopt("/", name)
	var ae *amqpError
	if errors.As(err, &ae) && ae.code == wire.NotFound {
		return nil
	}
	return err
}

// DeadLetterRoutes is the topology's DeadLetterRoutes, and false instead
// while the topology is not whole (RouteReady: bindings to queues of other
// shards being restored after a start), when they could lack some.
func (s *Server) DeadLetterRoutes() (map[string][]string, bool) {
	if !s.topo.RouteReady() {
		return nil, false
	}
	return s.topo.DeadLetterRoutes(), true
}

// newQueueName returns a server-generated queue name.
func newQueueName() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "amq.gen-" + base64.RawURLEncoding.EncodeToString(b)
}

// createRefusal is the answer to a declare whose create of queue name
// was refused with err, here or on another shard (Placer); nil when err is
// no refusal.
func createRefusal(err error, vh, name string, maxQueues int) *amqpError {
	switch {
	case errors.Is(err, engine.ErrQueueDeletedRecently):
		// Only an SQS delete gets here (AMQP deletes drop the name at once).
		return errorf(wire.PreconditionFailed, "%s was deleted over SQS less than %v ago; declare it again later", rs("queue", name, vh), engine.NameReuseDelay)
	case errors.Is(err, engine.ErrQueueElsewhere):
		// Created on another shard since the look before the create.
		return errorf(wire.PreconditionFailed, "%s was just created as an SQS queue on another shard of this cluster; declare it again", rs("queue", name, vh))
	case errors.Is(err, engine.ErrTooManyQueues):
		// RabbitMQ's words for its max-queues limit.
		return errorf(wire.PreconditionFailed, "cannot declare queue '%s': queue limit (%d) is reached", name, maxQueues)
	}
	return nil
}

// declareQueue implements queue.declare and returns the queue's name and
// counts for declare-ok.
func (s *Server) declareQueue(c *conn, m *wire.QueueDeclare) (string, int, int, error) {
	vh := c.vhost
	name := m.Queue
	if name == "" && !m.Passive {
		name = newQueueName()
	} else if strings.HasPrefix(name, "amq.") && !m.Passive && !strings.HasPrefix(name, "amq.gen-") {
		return "", 0, 0, errorf(wire.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", name)
	}
	if err := c.user.check(vh, permConfigure, "queue", name); err != nil {
		return "", 0, 0, err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	t := s.topo
	if m.Passive {
		q, err := s.findQueue(c, name)
		if err != nil {
			return "", 0, 0, err
		}
		return s.queueCounts(q)
	}
	t.mu.RLock()
	q := t.vhosts[vh].queues[name]
	t.mu.RUnlock()
	var read *engine.QueueInfo // q's engine queue, as the check below read it: for the counts
	if q != nil && !q.exclusive {
		switch info, err := s.eng.GetQueue(q.engine); {
		case errors.Is(err, engine.ErrQueueNotFound):
			// Deleted outside AMQP (SQS DeleteQueue, the admin API):
			// a declare makes it again, as for a name never declared.
			// Until 2026-12-07 it answered 404 until the next start.
			s.forgetDeleted(q)
			q = nil
		case err == nil:
			read = &info
		}
	}
	if q == nil && s.elsewhere(vh, name) {
		// A queue on another shard: used as one of this shard's would
		// be, but not written here (its record lives there). One
		// declared over AMQP (placed there, below) is compared with its
		// declare as any queue; an SQS queue takes no arguments (they
		// could not be applied there).
		aq, err := s.adopt(vh, name)
		if err != nil {
			return "", 0, 0, err
		}
		if !aq.placed {
			if !m.Durable || m.Exclusive || m.AutoDelete || len(m.Arguments) > 0 {
				return "", 0, 0, errElsewhere("declare exclusive, auto-delete, non-durable or with arguments", vh, name)
			}
			return s.queueCounts(aq)
		}
		q = aq // compared below
	}
	if q == nil && vh == "/" {
		// An SQS queue of that name: adopt it, then compare as usual.
		cfg, err := s.eng.Config(name)
		switch {
		case err == nil:
			if cfg.FIFO {
				return "", 0, 0, errorf(wire.PreconditionFailed, "%s is an SQS FIFO queue, which AMQP cannot use", rs("queue", name, vh))
			}
			return s.adoptDeclared(c, m, name)
		case !errors.Is(err, engine.ErrQueueNotFound):
			// Not known either way (another shard could not be asked):
			// not created here, where it may already be elsewhere.
			return "", 0, 0, errorf(wire.ResourceError, "cannot tell whether %s exists now: %v", rs("queue", name, vh), err)
		}
		if p, ok := s.eng.(Placer); ok && m.Durable && !m.Exclusive && !m.AutoDelete {
			st, aerr := parseQueueArgs(vh, name, m.Arguments)
			if aerr != nil {
				return "", 0, 0, aerr
			}
			if placeable(st) {
				// A new queue that can live on another shard: where the
				// cluster places it, with what a declare here would give it.
				cfg := engineConfig(st, s.opts.ConsumerTimeout)
				cfg.Extra = placedExtra(m.Arguments)
				if st.hasDLX {
					// Routed by this server's topology: that shard's
					// engine sends its dead letters here (AdoptSource).
					cfg.DeadLetter.RoutedElsewhere = true
				}
				placed, err := p.CreateElsewhere(name, cfg)
				if err != nil {
					if e := createRefusal(err, vh, name, s.eng.MaxQueues()); e != nil {
						return "", 0, 0, e
					}
					// Its shard could not be reached, or did not answer:
					// a channel error, as for a queue that cannot be told.
					return "", 0, 0, errorf(wire.ResourceError, "cannot create %s on the shard of this cluster it is placed on now: %v", rs("queue", name, vh), err)
				}
				if placed {
					// Compared below with this declare, as a redeclare
					// is (another declare may have made it first).
					if q, err = s.adopt(vh, name); err != nil {
						return "", 0, 0, err
					}
				}
			}
		}
	}
	if q != nil {
		if q.exclusive && q.owner != c || m.Exclusive && !q.exclusive {
			return "", 0, 0, errLocked(vh, name)
		}
		if err := checkQueueEquivalent(q, m.Durable, m.AutoDelete, m.Arguments); err != nil {
			return "", 0, 0, err
		}
		t.mu.Lock()
		q.lastUsed = s.clk.Now()
		t.mu.Unlock()
		if read != nil {
			return s.countsFrom(q, *read) // not read again
		}
		return s.queueCounts(q)
	}
	st, aerr := parseQueueArgs(vh, name, m.Arguments)
	if aerr != nil {
		return "", 0, 0, aerr
	}
	q = &queue{vhost: vh, name: name, engine: engineName(vh, name), durable: m.Durable,
		exclusive: m.Exclusive, autoDelete: m.AutoDelete, args: m.Arguments, settings: st,
		consumers: make(map[*consumer]struct{}), lastUsed: s.clk.Now()}
	if q.exclusive {
		q.owner = c
	}
	// The engine queue and its topology record are one batch, one fsync:
	// after a crash both exist or neither does (a non-durable queue's
	// record is what lets the next start delete its engine queue).
	cfg := engineConfig(st, s.opts.ConsumerTimeout)
	rec := engine.MetaRecord{Namespace: metaQueues, Key: metaKey(vh, name), Value: queueRecord(q, false)}
	_, created, err := s.eng.CreateQueueWithMeta(q.engine, cfg, nil, []engine.MetaRecord{rec})
	switch {
	case err != nil:
		if e := createRefusal(err, vh, name, s.eng.MaxQueues()); e != nil {
			return "", 0, 0, e
		}
		return "", 0, 0, storageError(err)
	case !created:
		// An SQS client created the engine queue since the lookup
		// above: record the AMQP side on its own, as of an SQS queue.
		q.sqsQueue = true
		if err := s.applyMeta([]metaOp{{rec.Namespace, rec.Key, queueRecord(q, false)}}); err != nil {
			return "", 0, 0, err
		}
	}
	t.mu.Lock()
	t.vhosts[vh].queues[name] = q
	t.byEngine[q.engine] = q
	t.mu.Unlock()
	if q.exclusive {
		c.addExclusive(q)
	}
	for _, f := range advisor.CreationWarnings(s.eng, q.engine) {
		// DLQ-151: a warning for the operator; the declare succeeds.
		s.log.Warn("queue configuration warning", "queue", name, "vhost", vh, "check", f.Check, "verdict", string(f.Verdict), "reason", f.Reason)
	}
	if st.expires > 0 {
		s.wake()
	}
	return name, 0, 0, nil
}

// adoptDeclared is queue.declare of a name that exists only as an SQS
// queue: it becomes an AMQP queue too, its AMQP arguments applied to the
// engine configuration (TTL, length limits, dead-lettering) and recorded.
func (s *Server) adoptDeclared(c *conn, m *wire.QueueDeclare, name string) (string, int, int, error) {
	st, aerr := parseQueueArgs("/", name, m.Arguments)
	if aerr != nil {
		return "", 0, 0, aerr
	}
	q := &queue{vhost: "/", name: name, engine: name, durable: m.Durable, autoDelete: m.AutoDelete,
		args: m.Arguments, settings: st, sqsQueue: true, consumers: make(map[*consumer]struct{}), lastUsed: s.clk.Now()}
	if st.maxPriority > 0 {
		// The engine orders a queue's messages by priority from its
		// creation on; an SQS queue has none.
		return "", 0, 0, errorf(wire.PreconditionFailed, "invalid arg 'x-max-priority' for %s: the queue exists as an SQS queue, and priorities cannot be added to an existing queue", rs("queue", name, "/"))
	}
	if len(m.Arguments) > 0 {
		want := engineConfig(st, s.opts.ConsumerTimeout)
		err := s.eng.UpdateQueue(name, func(cfg *engine.QueueConfig) error {
			cfg.MessageTTL, cfg.HasMessageTTL = want.MessageTTL, want.HasMessageTTL
			cfg.MaxLength, cfg.MaxLengthBytes, cfg.Overflow = want.MaxLength, want.MaxLengthBytes, want.Overflow
			if want.DeadLetter != nil {
				cfg.DeadLetter = want.DeadLetter
			}
			cfg.Requeue, cfg.CrashLimit, cfg.CrashWindow = want.Requeue, want.CrashLimit, want.CrashWindow
			cfg.RetryBudgetPercent, cfg.UnknownFailure = want.RetryBudgetPercent, want.UnknownFailure
			return nil
		})
		if err != nil {
			return "", 0, 0, storageError(err)
		}
	}
	if err := s.applyMeta([]metaOp{{metaQueues, metaKey("/", name), queueRecord(q, false)}}); err != nil {
		return "", 0, 0, err
	}
	t := s.topo
	t.mu.Lock()
	v := t.vhostLocked("/")
	if old := v.queues[name]; old != nil {
		t.mu.Unlock()
		return s.queueCounts(old)
	}
	v.queues[name] = q
	t.byEngine[name] = q
	t.mu.Unlock()
	return s.queueCounts(q)
}

// forgetDeleted takes q, whose engine queue was deleted outside AMQP, out
// of the topology (the definitions and the topology view no longer list
// it, even when a declare cannot make it again yet), and cancels its
// consumers (basic.cancel, as for a deleted queue; each also cancels
// itself at its next receive). Its bindings stay, as for an SQS queue deleted over
// SQS: a queue of that name made again gets them. Its record, if any, is
// replaced by the next declare's, or removed at the next start. The
// caller holds adminMu.
func (s *Server) forgetDeleted(q *queue) {
	t := s.topo
	t.mu.Lock()
	consumers := t.detachLocked(q)
	t.mu.Unlock()
	for _, cs := range consumers {
		cs.ch.serverCancel(cs)
	}
}

// detachLocked takes q out of the topology's maps and returns its
// consumers, taken from it (and from its single-active and exclusive
// lines) for the caller to cancel once Topology.mu is released. Its
// bindings are the caller's business. t.mu is held.
func (t *Topology) detachLocked(q *queue) []*consumer {
	if v := t.vhosts[q.vhost]; v != nil && v.queues[q.name] == q {
		delete(v.queues, q.name)
	}
	if t.byEngine[q.engine] == q {
		delete(t.byEngine, q.engine)
	}
	consumers := make([]*consumer, 0, len(q.consumers))
	for cs := range q.consumers {
		consumers = append(consumers, cs)
	}
	q.consumers = map[*consumer]struct{}{}
	q.sacClearLocked()
	q.exclusiveBy = nil
	return consumers
}

// queueCounts returns a queue's name, ready messages and consumers.
func (s *Server) queueCounts(q *queue) (string, int, int, error) {
	info, err := s.eng.GetQueue(q.engine)
	if err != nil {
		return "", 0, 0, errNoQueue(q.vhost, q.name)
	}
	return s.countsFrom(q, info)
}

// countsFrom is queueCounts with q's engine queue as info, just read.
func (s *Server) countsFrom(q *queue, info engine.QueueInfo) (string, int, int, error) {
	s.topo.mu.RLock()
	n := len(q.consumers)
	s.topo.mu.RUnlock()
	// Read after GetQueue: a message taken before it is counted here
	// unless its delivery is already queued ahead of the caller's answer.
	return q.name, info.Visible + info.Delayed + int(max(q.undelivered.Load(), 0)), n, nil
}

// deleteQueue implements queue.delete.
func (s *Server) deleteQueue(c *conn, m *wire.QueueDelete) (int, error) {
	vh := c.vhost
	if err := c.user.check(vh, permConfigure, "queue", m.Queue); err != nil {
		return 0, err
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	q, err := s.findQueue(c, m.Queue)
	var ae *amqpError
	if errors.As(err, &ae) && ae.code == wire.NotFound {
		return 0, nil // RabbitMQ: deleting a missing queue succeeds
	} else if err != nil {
		return 0, err
	}
	_, ready, consumers, err := s.queueCounts(q)
	if err != nil {
		return 0, nil
	}
	if m.IfUnused && consumers > 0 {
		return 0, errorf(wire.PreconditionFailed, "%s in use", rs("queue", q.name, vh))
	}
	if m.IfEmpty && ready > 0 {
		return 0, errorf(wire.PreconditionFailed, "%s not empty", rs("queue", q.name, vh))
	}
	return s.deleteQueueLocked(q)
}

// deleteQueueLocked deletes q: its consumers get basic.cancel, its
// bindings go, and its engine queue is dropped (without SQS's name-reuse
// delay, so the name can be declared again at once, as RabbitMQ allows).
// It returns the number of ready messages deleted. The caller holds
// adminMu.
func (s *Server) deleteQueueLocked(q *queue) (int, error) {
	t := s.topo
	t.mu.Lock()
	if q.deleted {
		t.mu.Unlock()
		return 0, nil
	}
	q.deleted = true
	// Until the engine queue is dropped, adopt must not take the engine
	// queue for an SQS queue and register it again.
	t.dropping[q.engine]++
	t.dropGen++
	defer func() {
		t.mu.Lock()
		if t.dropping[q.engine]--; t.dropping[q.engine] <= 0 {
			delete(t.dropping, q.engine)
		}
		t.mu.Unlock()
	}()
	v := t.vhosts[q.vhost]
	consumers := t.detachLocked(q)
	var ops []metaOp
	var emptied []*exchange
	removed := v.bindingsToLocked(q.name, true)
	for _, b := range removed {
		v.removeBindingLocked(b)
		ops = append(ops, metaOp{metaBindings, bindingKey(q.vhost, b), nil})
		if src := v.exchanges[b.source]; src != nil && src.autoDelete && len(src.bindings) == 0 {
			emptied = append(emptied, src)
		}
	}
	t.mu.Unlock()
	for _, cs := range consumers {
		cs.ch.serverCancel(cs)
	}
	if q.owner != nil {
		q.owner.dropExclusive(q)
	}
	n := 0
	if info, err := s.eng.GetQueue(q.engine); err == nil {
		n = info.Visible + info.Delayed
	}
	ops = append(ops, metaOp{metaQueues, metaKey(q.vhost, q.name), nil})
	if err := s.eng.DropQueue(q.engine); errors.Is(err, engine.ErrUnavailable) {
		// An SQS queue on another shard whose name could not be held
		// (cluster mode): not deleted; the client may retry.
		s.undoDeleteLocked(q, removed)
		return 0, errorf(wire.ResourceError, "cannot delete %s now: %v; retry", rs("queue", q.name, q.vhost), err)
	} else if err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
		s.undoDeleteLocked(q, removed)
		return 0, storageError(err)
	}
	if err := s.applyMeta(ops); err != nil {
		return 0, err
	}
	for _, x := range emptied {
		if err := s.deleteExchangeLocked(q.vhost, x); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// undoDeleteLocked puts back in the topology a queue whose engine queue
// deleteQueueLocked could not drop, with the bindings it took from it
// (their durable records were never deleted): the queue is still there,
// and publishes routed to it must reach it, not be dropped as unroutable
// until the next start. Its consumers stay cancelled (they were told with
// basic.cancel). The caller holds adminMu, so no declare or bind ran
// meanwhile; an adopt of the name did not register it either (dropping).
func (s *Server) undoDeleteLocked(q *queue, removed []*binding) {
	t := s.topo
	t.mu.Lock()
	q.deleted = false
	v := t.vhostLocked(q.vhost)
	if v.queues[q.name] == nil {
		v.queues[q.name] = q
	}
	if t.byEngine[q.engine] == nil {
		t.byEngine[q.engine] = q
	}
	for _, b := range removed {
		src := v.exchanges[b.source]
		if src == nil || slices.ContainsFunc(src.bindings, b.same) {
			continue
		}
		src.bindings = append(src.bindings, b)
	}
	t.mu.Unlock()
	if q.owner != nil {
		q.owner.addExclusive(q)
	}
}

// purgeQueue removes a queue's ready messages (not those delivered and
// unacknowledged) and returns how many.
func (s *Server) purgeQueue(c *conn, name string) (int, error) {
	if err := c.user.check(c.vhost, permRead, "queue", name); err != nil {
		return 0, err
	}
	q, err := s.findQueue(c, name)
	if err != nil {
		return 0, err
	}
	// engine.PurgeQueue also drops in-flight messages and refuses a second
	// purge within a minute (SQS); AMQP purges ready messages, any time.
	n, err := s.eng.PurgeReady(q.engine)
	if errors.Is(err, engine.ErrQueueNotFound) {
		return 0, errNoQueue(q.vhost, q.name)
	}
	if err != nil {
		return 0, storageError(err)
	}
	return n, nil
}
