package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Server is the AMQP 0-9-1 front-end. Create it with New, then call Serve
// for each listener; Close stops everything.
type Server struct {
	eng   Engine
	topo  *Topology
	opts  Options
	log   *slog.Logger
	clk   clock.Clock
	users map[string]*user

	// adminMu serialises topology changes with their metadata writes and
	// engine calls (declare, delete, bind, purge), so records are written
	// in the order the changes happened. Lock order: adminMu, then a
	// channel's mu, then a connection's write lock; Topology.mu is a leaf.
	adminMu sync.Mutex

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	active    int                     // logged-in connections, counted against MaxConnections
	replies   map[string]*replyTarget // direct reply-to consumers by token
	slots     slotState               // handshakes and per-IP counts (slots.go)
	closed    bool

	alarm alarm // resource alarm: see SetAlarm

	bufs frameBufs // the buffers deliveries are encoded into (bufpool.go)

	nextConn atomic.Uint64
	// refused counts publishes the engine refused outside confirm and
	// tx mode (RabbitMQ drops those; Sluice drops them too, but never
	// without a log line and this count).
	refused atomic.Uint64
	panics  atomic.Uint64 // contained panics (panics.go)
	// Publisher flow control (flow.go): reader pauses, those that ended
	// at FlowMaxWait, the time paused, and the queues throttling now.
	flowWaits, flowTimeouts atomic.Uint64
	flowWaitNanos           atomic.Int64
	flowQueues              atomic.Int64
	flowPaused              atomic.Int64 // readers paused now
	// failpoint, set by tests before serving, runs before each channel
	// command (where "channel") and consumer receive ("consumer").
	failpoint func(where string, m wire.Method)
	poke      chan struct{} // wakes the expiry loop
	quit      chan struct{}
	wg        sync.WaitGroup
}

// RefusedPublishes returns how many publishes outside confirm and tx mode
// the engine refused (a full reject-publish queue, a nearly full disk, a
// failed store). Such publishers have no way to learn of it on the wire;
// this count and a log line per refusal are how an operator does.
func (s *Server) RefusedPublishes() uint64 { return s.refused.Load() }

// New loads the AMQP topology from the engine's metadata into topo (the
// router already given to engine.Open) and returns a server ready to
// Serve. Non-durable and exclusive queues left by an earlier run are
// deleted, with their messages, as RabbitMQ does at restart.
//
// Until New has loaded the topology, the engine's dead-lettering from AMQP
// queues waits (RouteDeadLetter blocks). If New fails, the topology is
// released so that the engine can still be closed; dead letters routed
// after that are dropped (and counted), so a failed New should end the
// process.
func New(eng Engine, topo *Topology, opts Options) (_ *Server, err error) {
	defer func() {
		if err != nil {
			topo.release()
		}
	}()
	o := opts.withDefaults()
	users, err := o.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{
		eng: eng, topo: topo, opts: o, log: o.Logger, clk: o.Clock, users: users,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		poke:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.runExpiry()
	return s, nil
}

// vhostExists reports whether vhost is configured: "/" and every vhost a
// user has permissions on.
func (s *Server) vhostExists(name string) bool {
	if name == "/" {
		return true
	}
	for _, u := range s.users {
		if _, ok := u.perms[name]; ok {
			return true
		}
	}
	return false
}

// load reads the durable topology. RouteDeadLetter waits until it is done.
func (s *Server) load() error {
	t := s.topo
	type doomed struct{ key, engine string }
	var drop []doomed
	var dropBindings []string
	var keep []*queue
	// Bindings to queues AMQP did not declare (SQS queues it adopted):
	// their queues are adopted once the topology is released (adopt asks
	// the engine, which may be waiting for the topology under a queue's
	// lock to route a dead letter).
	var adoptLater []bindingToAdopt
	t.mu.Lock()
	t.log = s.log
	t.vhostLocked("/")
	for _, u := range s.users {
		for vh := range u.perms {
			t.vhostLocked(vh)
		}
	}
	err := s.eng.ScanMeta(metaExchanges, func(_ string, val []byte) error {
		r, err := parseRecord(val)
		if err != nil {
			return err
		}
		v := t.vhostLocked(r.str("vhost"))
		x := &exchange{name: r.str("name"), kind: r.str("type"), durable: true,
			autoDelete: r.flag("auto-delete"), internal: r.flag("internal"), args: r.table("arguments")}
		if _, builtin := v.exchanges[x.name]; !builtin {
			v.exchanges[x.name] = x
		}
		return nil
	})
	if err == nil {
		err = s.eng.ScanMeta(metaQueues, func(key string, val []byte) error {
			r, err := parseRecord(val)
			if err != nil {
				return err
			}
			q := &queue{vhost: r.str("vhost"), name: r.str("name"), engine: r.str("engine"),
				durable: r.flag("durable"), exclusive: r.flag("exclusive"), autoDelete: r.flag("auto-delete"),
				args: r.table("arguments"), sqsQueue: r.flag("sqs-queue"),
				consumers: make(map[*consumer]struct{}), lastUsed: s.clk.Now()}
			if r.flag("retired") || !q.durable || q.exclusive {
				drop = append(drop, doomed{key, q.engine})
				return nil
			}
			st, aerr := parseQueueArgs(q.vhost, q.name, q.args)
			if aerr != nil {
				// Stored before x-single-active-consumer was read (any
				// value was accepted then): keep the rest of the
				// arguments, without it.
				st, aerr = parseQueueArgs(q.vhost, q.name, slices.Clone(q.args).Delete("x-single-active-consumer"))
			}
			if aerr != nil {
				s.log.Warn("amqp: stored queue arguments no longer valid; using defaults", "queue", q.name, "vhost", q.vhost, "err", aerr.text)
				st, _ = parseQueueArgs(q.vhost, q.name, nil)
			}
			q.settings = st
			t.vhostLocked(q.vhost).queues[q.name] = q
			t.byEngine[q.engine] = q
			keep = append(keep, q)
			return nil
		})
	}
	if err == nil {
		err = s.eng.ScanMeta(metaBindings, func(key string, val []byte) error {
			r, err := parseRecord(val)
			if err != nil {
				return err
			}
			v := t.vhostLocked(r.str("vhost"))
			b := newBinding(r.str("source"), r.str("destination"), r.flag("to-queue"), r.str("routing-key"), r.table("arguments"))
			src := v.exchanges[b.source]
			ok := src != nil
			if b.toQueue {
				if ok && v.queues[b.dest] == nil && r.str("vhost") == "/" {
					adoptLater = append(adoptLater, bindingToAdopt{key, r.str("vhost"), b})
					return nil
				}
				ok = ok && v.queues[b.dest] != nil
			} else {
				ok = ok && v.exchanges[b.dest] != nil
			}
			if !ok {
				dropBindings = append(dropBindings, key)
				return nil
			}
			src.bindings = append(src.bindings, b)
			return nil
		})
	}
	t.mu.Unlock()
	// Counted before the release, so that the router is not ready
	// (RouteReady) in between.
	t.unrestored.Store(int64(len(adoptLater)))
	t.release()
	if err != nil {
		return fmt.Errorf("amqp: loading topology: %w", err)
	}
	for _, d := range drop {
		if err := s.eng.DropQueue(d.engine); err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
			return fmt.Errorf("amqp: deleting queue %q left by an earlier run: %w", d.engine, err)
		}
		if err := s.eng.DeleteMeta(metaQueues, d.key); err != nil {
			return err
		}
	}
	if len(adoptLater) > 0 {
		// Most answer at once (an SQS queue of this engine); a queue of
		// another shard of a cluster is asked of its shard's leader,
		// which may take up to a call's timeout or fail during a
		// failover: the start waits for them at most restoreWait, and a
		// goroutine (not waited for by Close: it may be inside such a
		// call) goes on retrying those not restored, every second.
		first := make(chan struct{})
		go s.restoreBindings(adoptLater, first)
		wait := s.clk.NewTimer(restoreWait)
		select {
		case <-first:
			wait.Stop()
		case <-wait.C():
			s.log.Warn("amqp: bindings to queues AMQP did not declare are still being restored; publishes through them are unroutable until then", "bindings", len(adoptLater))
		}
	}
	for _, k := range dropBindings {
		if err := s.eng.DeleteMeta(metaBindings, k); err != nil {
			return err
		}
	}
	for _, q := range keep {
		if _, err := s.eng.GetQueue(q.engine); errors.Is(err, engine.ErrQueueNotFound) {
			// Deleted outside AMQP (SQS DeleteQueue, the admin API):
			// gone, with its bindings, as a queue.delete leaves it.
			// Until 2026-12-07 it was made again here — or, within the
			// 60 s its name is held after the delete, the start failed.
			s.adminMu.Lock()
			_, err := s.deleteQueueLocked(q)
			s.adminMu.Unlock()
			if err != nil {
				return fmt.Errorf("amqp: removing queue %q, deleted over SQS: %w", q.engine, err)
			}
			s.log.Info("amqp: queue deleted outside AMQP since the last start removed, with its bindings", "queue", q.name, "vhost", q.vhost)
			continue
		}
		info, created, err := s.eng.CreateQueue(q.engine, engineConfig(q.settings, s.opts.ConsumerTimeout), nil)
		if err != nil {
			return fmt.Errorf("amqp: restoring queue %q: %w", q.engine, err)
		}
		if !created && info.Config.MaxPriority != q.settings.maxPriority {
			// Declared with x-max-priority before Sluice acted on it
			// (2026-12-03): the engine queue has no priorities, and
			// they cannot be added to a queue holding messages.
			s.log.Warn("amqp: queue declared with x-max-priority before priorities were supported delivers in arrival order; delete it and declare it again to order by priority",
				"queue", q.name, "vhost", q.vhost, "x-max-priority", q.settings.maxPriority)
		}
		if !created && !q.sqsQueue && info.Config.MaxMessageSize < engine.MaxStoredMessageSize {
			// Declared when the engine capped AMQP queues at 1 MiB: the
			// front-end's MaxMessageSize is the limit now. Not an SQS
			// queue that AMQP declared: its MaximumMessageSize is its
			// SQS clients' limit (until 2026-12-07 it was raised to
			// 512 MiB here at every start).
			if err := s.eng.UpdateQueue(q.engine, func(cfg *engine.QueueConfig) error {
				cfg.MaxMessageSize = engine.MaxStoredMessageSize
				return nil
			}); err != nil {
				return fmt.Errorf("amqp: restoring queue %q: %w", q.engine, err)
			}
		}
		// Every AMQP connection died with the previous process. Their
		// unacknowledged deliveries were leased as a connection's
		// (ReceiveRequest.Session), so the engine made them visible
		// again when it opened, on every queue, as RabbitMQ requeues
		// them; SQS leases on the same queue run their course.
	}
	if len(drop)+len(keep) > 0 {
		s.log.Info("amqp topology loaded", "queues", len(keep), "removed", len(drop))
	}
	return nil
}

// Serve accepts connections on ln until Close; it returns nil after Close
// and the accept error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close() // closing: its error changes nothing
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.ServeConn(nc)
	}
}

// ServeConn serves one already accepted connection in a new goroutine
// (Serve calls it; tests may pass one end of a net.Pipe).
//
// A connection counts against Options.MaxConnections from its
// connection.open (until then it holds one of the few handshake slots,
// slots.go); over the limit connection.open is answered with RabbitMQ's
// 530 (clients report it as a refused connection, not a dropped socket).
func (s *Server) ServeConn(nc net.Conn) { s.ServeConnThen(nc, nil) }

// restoreWait bounds how long a start waits for the bindings to queues
// AMQP did not declare (restoreBindings).
const restoreWait = 2 * time.Second

// bindingToAdopt is a stored binding to a queue AMQP did not declare,
// restored by restoreBindings.
type bindingToAdopt struct {
	key, vhost string
	b          *binding
}

// restoreBindings restores each binding (restoreBinding), drops the
// records of those whose queue is certainly gone, closes first after one
// pass, and then retries the others every second until the server closes.
func (s *Server) restoreBindings(list []bindingToAdopt, first chan struct{}) {
	pass := func() []bindingToAdopt {
		var rest []bindingToAdopt
		for _, a := range list {
			gone, err := s.restoreBinding(a.vhost, a.b)
			switch {
			case gone:
				// Deleted (over SQS) while AMQP was not there to drop
				// its bindings.
				if err := s.eng.DeleteMeta(metaBindings, a.key); err != nil {
					s.log.Warn("amqp: cannot delete the record of a binding whose queue is gone", "queue", a.b.dest, "err", err)
				}
			case err != nil:
				rest = append(rest, a)
			}
		}
		return rest
	}
	list = pass()
	s.topo.unrestored.Store(int64(len(list)))
	close(first)
	if len(list) == 0 {
		return
	}
	s.log.Warn("amqp: bindings to queues AMQP did not declare wait for their queues to be looked up", "bindings", len(list))
	retry := s.clk.NewTimer(time.Second)
	defer retry.Stop()
	for len(list) > 0 {
		select {
		case <-s.quit:
			return
		case <-retry.C():
		}
		list = pass()
		s.topo.unrestored.Store(int64(len(list)))
		retry.Reset(time.Second)
	}
	s.log.Info("amqp: every binding to a queue AMQP did not declare is restored")
}

// restoreBinding adopts the queue of b, a binding of vhost vh to a queue
// AMQP did not declare (an SQS queue), and attaches b. gone reports that
// the engine certainly holds no such queue; err that it could not tell.
func (s *Server) restoreBinding(vh string, b *binding) (gone bool, err error) {
	_, err = s.adopt(vh, b.dest)
	var ae *amqpError
	if errors.As(err, &ae) && ae.code == wire.NotFound {
		return true, err
	}
	if err != nil {
		return false, err
	}
	t := s.topo
	t.mu.Lock()
	if src := t.vhosts[vh].exchanges[b.source]; src != nil && !slices.ContainsFunc(src.bindings, b.same) {
		src.bindings = append(src.bindings, b)
	}
	t.mu.Unlock()
	return false, nil
}

// ServeConnThen is ServeConn, and calls done (when not nil) once the
// server is finished with nc: its socket closed and its goroutine ending,
// or at once when nc is refused. A cluster node serving its public
// connections on its own leader's server releases its accounting there.
func (s *Server) ServeConnThen(nc net.Conn, done func()) {
	if done == nil {
		done = func() {}
	}
	if tc, ok := nc.(interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); ok { // a *net.TCPConn, or a cluster's encrypted link between nodes
		// Reaps half-open peers on connections without heartbeats.
		// Fails only on a closed socket, which the next read or write reports.
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: tcpKeepAliveIdle, Interval: 15 * time.Second, Count: 4})
	}
	c := newConn(s, nc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close() // closing: its error changes nothing
		done()
		return
	}
	admitted, evict := s.admitLocked(c)
	if !admitted {
		s.mu.Unlock()
		_ = nc.Close() // closing: its error changes nothing
		s.log.Warn("amqp: per-address connection limit reached; socket closed", "limit", s.opts.MaxConnectionsPerIP, "remote", nc.RemoteAddr())
		done()
		return
	}
	if evict != nil {
		// Still handshaking after every newer one: its socket is
		// closed, and its goroutine ends.
		_ = evict.nc.Close() // closing: its error changes nothing
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.releaseLocked(c)
		if c.counted {
			s.active--
		}
		s.mu.Unlock()
	}()
}

const (
	// tcpKeepAliveIdle is the idle time before TCP keepalive probes.
	tcpKeepAliveIdle = 60 * time.Second
)

// Close stops accepting, closes every connection with 320
// CONNECTION_FORCED (unacknowledged messages go back to their queues) and
// waits for the server's goroutines to end. It does not close the engine.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		_ = ln.Close() // closing: its error changes nothing
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	close(s.quit)
	var closing sync.WaitGroup
	for _, c := range conns {
		closing.Go(func() {
			c.forceClose(hardErrorf(wire.ConnectionForced, "broker forced connection closure with reason 'shutdown'"))
		})
	}
	closing.Wait()
	s.wg.Wait()
	return nil
}

// wake pokes the expiry loop after a change that may bring a queue's
// expiry closer.
func (s *Server) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// runExpiry deletes queues whose x-expires ran out (no consumers, no
// basic.get and no redeclare for that long). Their messages are not
// dead-lettered, as in RabbitMQ.
func (s *Server) runExpiry() {
	defer s.wg.Done()
	for {
		next := s.expireDue()
		var tc <-chan time.Time
		var timer clock.Timer
		if !next.IsZero() {
			timer = s.clk.NewTimerAt(next) // see clock.Timer.ResetAt
			tc = timer.C()
		}
		select {
		case <-tc:
		case <-s.poke:
		case <-s.quit:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// expireDue deletes the queues that are due and returns the next deadline
// (zero: none).
func (s *Server) expireDue() time.Time {
	now := s.clk.Now()
	var due []*queue
	var next time.Time
	s.topo.mu.RLock()
	for _, v := range s.topo.vhosts {
		for _, q := range v.queues {
			if q.settings.expires <= 0 || len(q.consumers) > 0 {
				continue
			}
			at := q.lastUsed.Add(q.settings.expires)
			if !at.After(now) {
				due = append(due, q)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	s.topo.mu.RUnlock()
	for _, q := range due {
		s.adminMu.Lock()
		s.topo.mu.RLock()
		still := !q.deleted && len(q.consumers) == 0 && !q.lastUsed.Add(q.settings.expires).After(s.clk.Now())
		s.topo.mu.RUnlock()
		if still {
			if _, err := s.deleteQueueLocked(q); err != nil {
				s.log.Warn("amqp: cannot delete expired queue", "queue", q.name, "vhost", q.vhost, "err", err)
			} else {
				s.log.Info("amqp: queue expired", "queue", q.name, "vhost", q.vhost)
			}
		}
		s.adminMu.Unlock()
	}
	return next
}

// settleQuietly reports the outcome of a requeue or delete that no client
// waits for: a no-ack delivery's delete, the requeue of a delivery that
// could not be written. If it fails, the message stays leased and is
// delivered again when its lease ends (at least once, never lost); the
// failure is logged so that it is not silent.
func (s *Server) settleQuietly(what, queue string, errs []error, err error) {
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		s.log.Warn("amqp: "+what+" failed; the message is delivered again when its lease ends", "queue", queue, "err", err)
	}
}
