// Package engine is Sluice's protocol-neutral queue engine: standard and
// FIFO queues, delays, leases (visibility timeouts), long polling, receive
// counts, dead-letter moves, retention, deduplication and purge.
//
// The engine imports nothing of HTTP, SQS or AMQP. Front-ends translate their
// protocol to its methods and map the sentinel errors in errors.go back to
// protocol errors. Some operations exist because one protocol needs their
// semantics (DropQueue: delete without the name-reuse delay; PurgeReady:
// purge only what is not in flight; DeleteLeased: delete only under the
// current lease; ReceiveRequest.Session: leases that end with the engine;
// SendMany: one atomic write across queues); each is specified by what it does, not by
// who calls it. Two hooks reach back into a front-end: the DeadLetterRouter, which
// resolves an AMQP dead-letter exchange under the source queue's lock (it
// must only read its own topology and never call the engine), and the
// Observer, called with no lock held.
//
// # State and durability
//
// Indexes live in memory, except the cold part of a standard queue's backlog
// (cold.go), which is read from the store a window at a time as receives
// need it; the store (package store) holds a durable copy of everything,
// which Open reads back. Every change is applied to memory and written to
// the store under the queue's lock, so the store's log order is the order in
// which changes were applied. Methods that acknowledge a change to a client
// (Send, Delete, ChangeVisibility, queue administration) wait for the store's
// group-committed sync after releasing the lock.
//
// # Determinism
//
// Each change is computed from the state and its inputs alone: the current
// time is read once per operation and passed down as data, and random values
// (message ids, receipt numbers) are drawn before they are applied. Timers
// come from the injectable clock and a deadline index (a heap per queue and
// one scheduler goroutine), never from scans of all messages.
//
// # Locks
//
// Lock order: adminMu → queue.mu → Engine.mu → sched.mu. Engine.mu guards
// only the name → queue map and is never held while a queue lock is taken.
// No goroutine holds two queue locks: a dead-letter move writes the target's
// record in the source's store batch, then inserts it into the target's
// memory after the source's lock is released.
package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// Options configure an Engine.
type Options struct {
	Store  store.Store  // required
	Clock  clock.Clock  // nil: clock.Real
	Logger *slog.Logger // nil: discard
	// Observer receives events for metrics and alerts; nil: none.
	Observer Observer
	// NameTaken, when set, reports whether a queue of this name lives
	// outside this engine (in a cluster, on another shard): CreateQueue
	// of a name this engine does not hold then fails with
	// ErrQueueElsewhere instead of making a second queue of that name.
	// It is called with the engine's admin lock held, for creates (and
	// to explain a RedrivePolicy whose target is not here): it may take
	// a moment (a catch-up with other groups), and must not
	// call the engine.
	NameTaken func(name string) bool
	// QueueHeldElsewhere, when set, reports whether a queue that this
	// engine does not hold lives outside it (in a cluster, on another
	// shard) from local state alone: it is called with a queue's lock
	// held, when a message is dead-lettered into a queue this engine does
	// not hold, and must not wait for the network or call the engine.
	// Such a dead letter becomes a transfer (transfer.go), and a
	// RedrivePolicy may name such a queue.
	QueueHeldElsewhere func(name string) bool
	// SourcesElsewhere, when set, returns, for every queue named by the
	// RedrivePolicy of a queue outside this engine (a cluster's other
	// shards), those queues: they count as the sources of this engine's
	// queues they name (DeadLetterQueues, ListDeadLetterSourceQueues, a
	// redrive out of such a dead-letter queue, whose messages go back to
	// them as transfers). fresh asks for an answer that reflects every
	// change acknowledged before the call (an API call's: the sources
	// of one dead-letter queue, a redrive's check); without it a recent
	// answer may do (the periodic readers: metrics, alerts, the
	// dashboard). It must not call the engine.
	SourcesElsewhere func(fresh bool) (map[string][]string, error)
	// HoldDeleted, when set, is called by DeleteQueue for a queue that
	// exists, before anything of it is removed, outside every engine lock
	// (not by DropQueue, which does not hold the name): a cluster with
	// shards holds the name for NameReuseDelay on the shard it hashes to
	// (HoldDeletedName there), so that a create placed on any shard is
	// refused as deleted recently. An error fails the delete with
	// ErrUnavailable and nothing removed: a delete whose name could be
	// made again elsewhere at once is not done. A hold made for a delete
	// that then fails only sends that name's creates to this shard for
	// NameReuseDelay, where the queue still exists.
	HoldDeleted func(name string) error
	// Deleted, when set, is called by DeleteQueue once a delete is
	// committed, with the delete's time by this engine's clock, outside
	// every engine lock and before DeleteQueue returns (not by DropQueue):
	// a cluster with shards marks the queue's placement gone in shard 0
	// (MarkPlacementDeleted there), so that nodes without a copy of this
	// shard stop listing it. The delete is done whatever it does; it
	// bounds its own time.
	Deleted func(name string, at time.Time)
	// DeadLetterRouter routes dead letters of queues whose
	// DeadLetterPolicy is Routed (AMQP); nil: such messages are dropped
	// and counted.
	DeadLetterRouter DeadLetterRouter
	// RouteElsewhere says that dead letters of Routed queues are routed
	// outside this engine (in a cluster with shards, by shard 0, which
	// holds the AMQP topology): such a dead letter is written as a route
	// transfer (Transfer.Route, routed.go) instead of being given to
	// DeadLetterRouter, and the routing engine imports it with
	// ImportRouted.
	RouteElsewhere bool
	// RouteLater says that this engine routes its own route transfers
	// (ImportRouted, by its server's mover): while its DeadLetterRouter
	// is a RouteWaiter that is not ready, dead letters of Routed queues
	// are written as route transfers instead of being routed through an
	// incomplete topology (in a cluster with shards, shard 0 while its
	// AMQP server restores bindings to queues of other shards).
	RouteLater bool
	// BodyMemoryBudget caps the bytes of message bodies kept in memory
	// (0: DefaultBodyMemoryBudget; negative: no cap). Bodies beyond it
	// stay only in the store and are read back when a message is
	// received, browsed or moved, so a deep backlog costs memory for its
	// index (a few hundred bytes a message), not its bodies.
	BodyMemoryBudget int64
	// SyncInterval bounds how long a change written without a sync (a
	// receive's lease, a timer's expiry) can stay only in the OS's
	// buffers: after such a write the engine syncs the store within this
	// interval, even when nothing else is written (0:
	// DefaultSyncInterval). Nothing is synced while nothing is unsynced.
	SyncInterval time.Duration
	// MaxQueues caps the number of queues (0: DefaultMaxQueues; negative:
	// no cap); CreateQueue over it fails with ErrTooManyQueues.
	// MaxQueueMessages and MaxQueueBytes cap every queue's messages
	// (0: DefaultMaxQueueMessages) and body bytes (0: no cap), counting
	// those in flight; negative: no cap. A send over them fails with
	// ErrQueueFull. See limits.go.
	MaxQueues        int
	MaxQueueMessages int
	MaxQueueBytes    int64
	// ReadyWindow is how many visible messages a standard queue keeps in
	// memory before the rest of its backlog stays only in the store
	// ("cold", see cold.go): 0: DefaultReadyWindow; negative: no limit
	// (every message in memory, as before Engine v2). FIFO queues and
	// delayed sends are always held in memory. ReadyWindowBytes bounds
	// the same window by the body bytes of its visible messages (0:
	// DefaultReadyWindowBytes; negative: no bound), so a queue of large
	// messages keeps fewer of them.
	ReadyWindow      int
	ReadyWindowBytes int64
	// ReadyMemoryBudget bounds the ready windows of all queues together
	// by the index memory the engine holds (MemoryHeld without bodies):
	// while that is at or above it, every standard and FIFO queue's
	// window shrinks to SqueezedReadyWindow messages (and
	// SqueezedReadyWindowBytes), so that a backlog spread over many
	// queues costs memory for a few messages of each, not a window of
	// each (0: DefaultReadyMemoryBudget; negative: none). In-flight,
	// delayed and FIFO messages count toward it as they do toward
	// MemoryHeld.
	ReadyMemoryBudget int64
	// LogDrops logs every message dropped for want of a dead-letter
	// target (a reject without requeue and without a DLQ, an overflow or
	// expiry with nowhere to go) at Info with its id, instead of Debug.
	// Drops are counted either way (QueueInfo.Dropped).
	LogDrops bool
}

// DefaultSyncInterval is the default Options.SyncInterval.
const DefaultSyncInterval = 100 * time.Millisecond

// Defaults of Options.ReadyWindow and Options.ReadyWindowBytes.
const (
	DefaultReadyWindow      = 2048
	DefaultReadyWindowBytes = 4 << 20
)

// DefaultReadyMemoryBudget is the default Options.ReadyMemoryBudget, and
// SqueezedReadyWindow and SqueezedReadyWindowBytes the window each queue
// keeps while the engine is over it: enough for a few receives of ten
// between refills.
const (
	DefaultReadyMemoryBudget       = 32 << 20
	SqueezedReadyWindow            = 64
	SqueezedReadyWindowBytes int64 = 256 << 10
)

// DefaultBodyMemoryBudget is the default Options.BodyMemoryBudget.
const DefaultBodyMemoryBudget = 64 << 20

// Engine is the queue engine. Create it with Open.
type Engine struct {
	st     store.Store
	leaser store.Leaser          // st's lease, nil when it has none (store.Leaser)
	failer store.FailureReporter // st's own failures, nil when it reports none
	clock  clock.Clock
	log    *slog.Logger
	obs    Observer
	router DeadLetterRouter
	taken  func(name string) bool // Options.NameTaken

	routeElsewhere bool // Options.RouteElsewhere
	routeLater     bool // Options.RouteLater

	// Transfers (transfer.go).
	elsewhere        func(name string) bool                        // Options.QueueHeldElsewhere
	sourcesElsewhere func(fresh bool) (map[string][]string, error) // Options.SourcesElsewhere
	holdDeleted      func(name string) error                       // Options.HoldDeleted
	onDeleted        func(name string, at time.Time)               // Options.Deleted
	transfers        atomic.Int64                                  // transfer records written and not yet ended
	transferPoke     chan struct{}
	transferMu       sync.Mutex // serializes EndTransfers (its count)
	importMu         sync.Mutex // serializes ImportTransfers (its dedup check and write)
	importSwept      int64      // when import records were last swept (under importMu)
	reserveSwept     int64      // when name reservations were last swept (under adminMu)
	goneSwept        int64      // when deleted names' records were last swept (under adminMu)
	placementSwept   int64      // when placements marked gone were last swept (under adminMu)

	adminMu sync.Mutex // serializes queue creation and deletion

	mu      sync.RWMutex
	queues  map[string]*queue
	deleted map[string]int64 // name → time of delete, for NameReuseDelay
	nextQID uint32

	sched scheduler
	tasks taskTable

	logDrops   bool         // see Options.LogDrops
	bodyBudget int64        // see Options.BodyMemoryBudget; <0: none
	window     int          // see Options.ReadyWindow; 0: none
	windowB    int64        // see Options.ReadyWindowBytes; 0: none
	readyMem   int64        // see Options.ReadyMemoryBudget; <=0: none
	limits     limits       // queue count and size caps (limits.go)
	memBodies  atomic.Int64 // bytes of bodies held in memory
	memHeld    atomic.Int64 // bytes of index, attributes, envelopes and dedup entries (memory.go)

	admission atomic.Pointer[error] // non-nil: new messages are refused with it

	failed atomic.Pointer[error] // first storage error; engine is read-only after it

	recoveryDropped atomic.Int64 // leftovers of deleted queues dropped by Open

	// receiptKey authenticates version 2 receipt handles (see
	// encodeReceipt). It is created once per store and kept in it.
	receiptKey *receiptSigner

	// unsynced is set by a write without sync and cleared by the syncer
	// just before it syncs; syncPoke wakes the syncer.
	unsynced     atomic.Bool
	syncPoke     chan struct{}
	syncInterval time.Duration

	done chan struct{}
	wg   sync.WaitGroup
}

// Open recovers the engine's state from the store and starts its
// scheduler. The store must not be used by anything else.
func Open(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("engine: Options.Store is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = NopObserver{}
	}
	leaser, _ := opts.Store.(store.Leaser)
	failer, _ := opts.Store.(store.FailureReporter)
	e := &Engine{
		st:               opts.Store,
		leaser:           leaser,
		failer:           failer,
		clock:            opts.Clock,
		log:              opts.Logger,
		obs:              opts.Observer,
		router:           opts.DeadLetterRouter,
		routeElsewhere:   opts.RouteElsewhere,
		routeLater:       opts.RouteLater,
		taken:            opts.NameTaken,
		elsewhere:        opts.QueueHeldElsewhere,
		sourcesElsewhere: opts.SourcesElsewhere,
		holdDeleted:      opts.HoldDeleted,
		onDeleted:        opts.Deleted,
		transferPoke:     make(chan struct{}, 1),
		queues:           make(map[string]*queue),
		deleted:          make(map[string]int64),
		nextQID:          1,
		done:             make(chan struct{}),
	}
	e.sched.poke = make(chan struct{}, 1)
	e.syncPoke = make(chan struct{}, 1)
	e.syncInterval = opts.SyncInterval
	if e.syncInterval <= 0 {
		e.syncInterval = DefaultSyncInterval
	}
	e.limits = resolveLimits(&opts)
	e.bodyBudget = opts.BodyMemoryBudget
	e.logDrops = opts.LogDrops
	if e.bodyBudget == 0 {
		e.bodyBudget = DefaultBodyMemoryBudget
	}
	e.window, e.windowB = resolveWindow(&opts)
	switch e.readyMem = opts.ReadyMemoryBudget; {
	case e.readyMem == 0:
		e.readyMem = DefaultReadyMemoryBudget
	case e.readyMem < 0:
		e.readyMem = 0
	}
	e.tasks.init()
	start := time.Now()
	n, err := e.recover()
	if err != nil {
		return nil, err
	}
	e.log.Info("engine recovered", "queues", len(e.queues), "messages", n, "elapsed", time.Since(start))
	if err := e.recoverMoveTasks(); err != nil {
		return nil, err
	}
	if err := e.countTransfers(); err != nil {
		return nil, fmt.Errorf("engine: recover transfers: %w", err)
	}
	if err := e.loadReceiptKey(); err != nil {
		return nil, err
	}
	e.wg.Add(2)
	go e.runScheduler()
	go e.runSyncer()
	e.startRecoveredMoveTasks()
	return e, nil
}

// Close stops the scheduler and wakes every long poll, which then return
// ErrClosed. It does not close the store.
func (e *Engine) Close() error {
	select {
	case <-e.done:
		return nil
	default:
	}
	e.lowerSessionMarks()
	close(e.done)
	e.wg.Wait()
	return nil
}

func (e *Engine) now() int64 { return e.clock.Now().UnixNano() }

// write hands a batch to the store. A store error fails the engine: from
// then on every change is refused with ErrStorage, because a store that has
// failed an fsync cannot promise anything written after it.
//
// An empty durable batch is still written: it is the store's sync barrier,
// whose Wait returns once everything written before it is durable. A no-op
// that answers OK (a deduplicated send, a retried delete, a change that
// finds nothing to change) depends on state an earlier write put in memory
// (the original send, the first delete), and that write may still be
// waiting for its fsync; the barrier makes the no-op's OK wait for the same
// durability point, and fail if that fsync fails.
func (e *Engine) write(b *store.Batch, durable bool) (store.Pending, error) {
	if err := e.failed.Load(); err != nil {
		// Refused before anything was written: certain to take no
		// effect, whatever the first failure was (ErrNotWritten).
		return nil, fmt.Errorf("%w: %w (%w)", ErrStorage, *err, ErrNotWritten)
	}
	if b.Len() == 0 && !durable {
		return store.Done{}, nil
	}
	p, err := e.st.Write(b, durable)
	if err != nil {
		return nil, e.fail(err)
	}
	if !durable {
		e.noteUnsynced()
	}
	return p, nil
}

// commitUnlock writes b durably, reschedules q's timers and releases q's
// lock (whatever happens), then waits for the group-committed sync. It is
// the tail of every acknowledged change: the batch enters the store's order
// under the lock; the fsync is waited for outside it, so producers share it.
func (e *Engine) commitUnlock(q *queue, b *store.Batch) error {
	p, err := e.write(b, true)
	if err == nil {
		q.cold.settled()
		e.scheduleLocked(q)
	}
	e.unlockAndInsertCopiesAfter(q, p) // dead-letter copies in b are published once p is durable
	if err != nil {
		return err
	}
	return e.wait(p)
}

// update is the path every operation that changes one queue's messages
// takes: lock the queue, bring it to now (advanceLocked: due timers,
// expiries, refills), let fn change it into b, then write b durably,
// release the lock (inserting any dead-letter copy the change decided,
// once b is on disk: unlockAndInsertCopiesAfter) and wait for the sync. When fn fails,
// what the advance wrote is still written (without a sync) and fn's error
// is returned; fn must not have changed memory it did not also write.
func (e *Engine) update(name string, fn func(q *queue, now int64, b *store.Batch) error) error {
	return e.updateAs(name, true, fn)
}

// updateAs is update; with durable false the batch is written without a
// sync and not waited for (DeleteLeasedUnsynced): it becomes durable with
// the next synced write, and any dead-letter copy the advance decided
// waits for a sync barrier of its own (unlockAndInsertCopies).
func (e *Engine) updateAs(name string, durable bool, fn func(q *queue, now int64, b *store.Batch) error) error {
	q, err := e.lockQueue(name)
	if err != nil {
		return err
	}
	now := e.now()
	var b store.Batch
	q.advanceLocked(now, &b)
	if err := fn(q, now, &b); err != nil {
		e.writeUnlock(q, &b)
		return err
	}
	if !durable {
		_, err := e.write(&b, false)
		if err == nil {
			q.cold.settled()
			e.scheduleLocked(q)
		}
		e.unlockAndInsertCopies(q)
		return err
	}
	return e.commitUnlock(q, &b)
}

// wait waits for a pending write, failing the engine on error.
func (e *Engine) wait(p store.Pending) error {
	if err := p.Wait(); err != nil {
		return e.fail(err)
	}
	return nil
}

func (e *Engine) fail(err error) error {
	if e.failed.CompareAndSwap(nil, &err) {
		if errors.Is(err, ErrNotLeading) {
			// A leader change, not a fault: this engine's term is over.
			e.log.Warn("leadership lost: refusing further changes", "err", err)
		} else {
			e.log.Error("storage failed: refusing further changes", "err", err)
		}
	}
	return fmt.Errorf("%w: %w", ErrStorage, err)
}

// admitBody reserves n bytes of the body budget, reporting whether the
// body may stay in memory.
func (e *Engine) admitBody(n int) bool {
	if e.bodyBudget < 0 {
		e.memBodies.Add(int64(n))
		return true
	}
	for {
		cur := e.memBodies.Load()
		if cur+int64(n) > e.bodyBudget {
			return false
		}
		if e.memBodies.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// bodyLocked returns m's body, reading it from the store when it is kept
// on disk. A read failure fails the engine (the store lost data it
// acknowledged) and is returned.
func (q *queue) bodyLocked(m *message) ([]byte, error) {
	if m.body != nil || m.bodyLen == 0 {
		return m.body, nil
	}
	v, err := q.eng.st.Get(messageKey(q.id, m.seq, kindContent))
	if err == nil {
		var tmp message
		if _, err = decodeContent(&tmp, v); err == nil {
			return tmp.body, nil
		}
	}
	return nil, q.eng.fail(fmt.Errorf("reading the body of message %d of queue %q: %w", m.seq, q.name, err))
}

// SetAdmission refuses new data with err while it is not nil, and accepts
// it again when called with nil. The server uses it for back-pressure when
// the disk is nearly full (ErrDiskFull), so the store never hits ENOSPC
// (which it cannot survive without a restart). At the watermark:
//
//   - refused with err: Send (SQS sends, AMQP publishes), Import, and
//     starting a move task (redrive), which all add messages;
//   - held: running move tasks move nothing until admission returns, then
//     go on by themselves (their status stays RUNNING);
//   - allowed: receives, deletes, visibility changes, requeues, failure
//     reports and the dead-letter moves they trigger, purges and queue
//     administration. They write small records or free space (a
//     dead-letter move rewrites one existing message, never more than the
//     backlog that is already stored), and refusing them would stop
//     consumers from draining the very backlog that fills the disk.
//
// Pebble's compactions always run: they are what gives deleted space back.
func (e *Engine) SetAdmission(err error) {
	if err == nil {
		e.admission.Store(nil)
		e.wakeTasks()
		return
	}
	e.admission.Store(&err)
}

func (e *Engine) admit() error {
	if p := e.admission.Load(); p != nil {
		return *p
	}
	return nil
}

// RecoveryDropped returns how many records Open dropped as leftovers of
// deleted queues (writes that raced a queue delete; see Repair). Every
// other record recovery cannot load stops Open with ErrNeedsRepair.
func (e *Engine) RecoveryDropped() int64 { return e.recoveryDropped.Load() }

// Failed returns the storage error that stopped the engine, or nil: the
// first that one of its writes met, or its store's own (a flush that
// found the disk full, store.FailureReporter) before any write met it.
func (e *Engine) Failed() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	if e.failer != nil {
		return e.failer.Failure()
	}
	return nil
}

// lookup returns the live queue of that name.
func (e *Engine) lookup(name string) (*queue, error) {
	e.mu.RLock()
	q := e.queues[name]
	e.mu.RUnlock()
	if q == nil {
		return nil, ErrQueueNotFound
	}
	return q, nil
}

// lockQueue returns the named queue locked, or ErrQueueNotFound.
func (e *Engine) lockQueue(name string) (*queue, error) {
	q, err := e.lookup(name)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, ErrQueueNotFound
	}
	return q, nil
}

// validateConfig checks ranges that hold whatever the protocol.
func validateConfig(c *QueueConfig) error {
	check := func(name string, v, lo, hi time.Duration) error {
		if v < lo || v > hi {
			return &ConfigError{Setting: name, Reason: fmt.Sprintf("must be between %v and %v", lo, hi)}
		}
		return nil
	}
	if err := check("DelaySeconds", c.Delay, 0, MaxDelay); err != nil {
		return err
	}
	if err := check("MessageRetentionPeriod", c.Retention, MinRetention, MaxExtendedRetention); err != nil {
		return err
	}
	if err := check("ReceiveMessageWaitTimeSeconds", c.ReceiveWait, 0, MaxWait); err != nil {
		return err
	}
	if err := check("VisibilityTimeout", c.Visibility, 0, MaxVisibility); err != nil {
		return err
	}
	if c.MaxMessageSize < MinMaxMessageSize || c.MaxMessageSize > MaxStoredMessageSize {
		return &ConfigError{Setting: "MaximumMessageSize", Reason: fmt.Sprintf("must be between %d and %d", MinMaxMessageSize, MaxStoredMessageSize)}
	}
	if d := c.DeadLetter; d != nil {
		if d.Target == "" && !d.Routed {
			return &ConfigError{Setting: "RedrivePolicy", Reason: "dead-letter target is required"}
		}
		if d.MaxReceiveCount < 0 || d.MaxReceiveCount > 1000 {
			return &ConfigError{Setting: "RedrivePolicy", Reason: "maxReceiveCount must be between 1 and 1000"}
		}
	}
	switch c.Overflow {
	case "", OverflowDropHead, OverflowRejectPublish, OverflowRejectPublishDLX:
	default:
		return &ConfigError{Setting: "Overflow", Reason: "unknown overflow behaviour " + c.Overflow}
	}
	switch c.Requeue {
	case "", RequeueHead, RequeueTail, RequeueDelayed:
	default:
		return &ConfigError{Setting: "Requeue", Reason: "must be head, tail or delayed, not " + c.Requeue}
	}
	switch c.UnknownFailure {
	case "", UnknownRetry, UnknownDeadLetter:
	default:
		return &ConfigError{Setting: "UnknownFailure", Reason: "must be retry or deadletter, not " + c.UnknownFailure}
	}
	if c.RetryBudgetPercent < 0 || c.RetryBudgetPercent > 100 {
		return &ConfigError{Setting: "RetryBudget", Reason: "must be a percentage from 0 (off) to 100"}
	}
	if c.CrashLimit < 0 || c.CrashLimit > 1000 {
		return &ConfigError{Setting: "CrashLimit", Reason: "must be between 0 (off) and 1000"}
	}
	if c.CrashWindow < 0 || c.CrashWindow > MaxVisibility {
		return &ConfigError{Setting: "CrashWindow", Reason: "must be between 0 (default 60s) and 12h"}
	}
	if c.MaxLength < 0 || c.MaxLengthBytes < 0 {
		return &ConfigError{Setting: "MaxLength", Reason: "must not be negative"}
	}
	if c.MaxPriority < 0 || c.MaxPriority > MaxPriority {
		return &ConfigError{Setting: "MaxPriority", Reason: fmt.Sprintf("must be between 0 (none) and %d", MaxPriority)}
	}
	if c.HasMessageTTL && c.MessageTTL < 0 {
		return &ConfigError{Setting: "MessageTTL", Reason: "must not be negative"}
	}
	if r := c.RedriveAllow; r != nil {
		switch r.Permission {
		case "allowAll", "denyAll":
		case "byQueue":
			if len(r.SourceQueues) == 0 || len(r.SourceQueues) > 10 {
				return &ConfigError{Setting: "RedriveAllowPolicy", Reason: "byQueue needs 1 to 10 source queues"}
			}
		default:
			return &ConfigError{Setting: "RedriveAllowPolicy", Reason: "unknown redrivePermission " + r.Permission}
		}
	}
	if r := c.Retry; r != nil {
		switch r.Strategy {
		case RetryFullJitter, RetryDecorrelated, RetryExponential, RetryFixed:
		default:
			return &ConfigError{Setting: "RetryPolicy", Reason: "unknown strategy " + r.Strategy}
		}
		if r.Base <= 0 {
			return &ConfigError{Setting: "RetryPolicy", Reason: "base must be positive"}
		}
		if r.Cap <= 0 {
			return &ConfigError{Setting: "RetryPolicy", Reason: "a cap is required: an uncapped backoff keeps consumers waiting long after an outage"}
		}
		if r.Cap < r.Base || r.Cap > MaxVisibility {
			return &ConfigError{Setting: "RetryPolicy", Reason: "cap must be between base and 12h"}
		}
	}
	if !c.FIFO && (c.ContentBasedDedup || c.DedupScope != DedupScopeQueue) {
		return &ConfigError{Setting: "FifoQueue", Reason: "deduplication settings need a FIFO queue"}
	}
	return nil
}

// checkDeadLetter verifies that q's dead-letter target exists, has
// the same type, and accepts q as a source.
func (e *Engine) checkDeadLetter(source string, fifo bool, d *DeadLetterPolicy) error {
	if d == nil || d.Routed {
		return nil
	}
	t, err := e.lookup(d.Target)
	if err != nil {
		if e.elsewhere != nil && e.elsewhere(d.Target) {
			// On another shard: its dead letters are transfers
			// (transfer.go); the target's engine checks its type and
			// RedriveAllowPolicy when it imports them, the SQS front-end
			// (which asks that engine) before.
			return nil
		}
		return &ConfigError{Setting: "RedrivePolicy", Reason: "dead-letter target queue does not exist"}
	}
	if t.isFIFO != fifo {
		return &ConfigError{Setting: "RedrivePolicy", Reason: "dead-letter queue must be the same type as the source queue"}
	}
	if !t.accepts(source) {
		return &ConfigError{Setting: "RedrivePolicy", Reason: "the dead-letter queue's RedriveAllowPolicy does not allow this source queue"}
	}
	return nil
}

func (e *Engine) createQueue(name string, cfg QueueConfig, tags map[string]string, meta []MetaRecord) (QueueInfo, bool, error) {
	if name == "" || len(name) > 255 {
		return QueueInfo{}, false, &ConfigError{Setting: "QueueName", Reason: "must be 1 to 255 bytes"}
	}
	if err := validateConfig(&cfg); err != nil {
		return QueueInfo{}, false, err
	}
	if len(tags) > MaxTags {
		return QueueInfo{}, false, ErrTooManyTags
	}
	e.adminMu.Lock()
	if q, _ := e.lookup(name); q != nil {
		e.adminMu.Unlock()
		q.mu.Lock()
		defer e.unlockAndInsertCopies(q)
		return q.infoLocked(), false, nil
	}
	defer e.adminMu.Unlock()
	if err := e.Failed(); err != nil {
		return QueueInfo{}, false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	now := e.now()
	e.mu.RLock()
	at, recently := e.deleted[name]
	e.mu.RUnlock()
	if recently && now-at < int64(NameReuseDelay) {
		return QueueInfo{}, false, ErrQueueDeletedRecently
	}
	if err := e.checkQueueCount(); err != nil {
		return QueueInfo{}, false, err
	}
	if err := e.nameElsewhereLocked(name, now); err != nil {
		return QueueInfo{}, false, err
	}
	if err := e.checkDeadLetter(name, cfg.FIFO, cfg.DeadLetter); err != nil {
		return QueueInfo{}, false, err
	}
	cfg = cloneConfig(cfg)
	rec := &queueRecord{ID: e.nextQID, Name: name, Config: cfg, Tags: cloneMap(tags), CreatedAt: now, ModifiedAt: now}
	var b store.Batch
	b.Set(queueKey(name), encodeQueue(rec))
	if recently {
		b.Delete(goneKey(name)) // the name's delete is over (gone.go)
	}
	b.Set([]byte{prefixNextID}, binary.BigEndian.AppendUint32(nil, rec.ID+1))
	for _, m := range meta {
		b.Set(metaKey(m.Namespace, m.Key), m.Value)
	}
	p, err := e.write(&b, true)
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		return QueueInfo{}, false, err
	}
	q := newQueue(e, rec.ID, name, cfg)
	q.isFIFO = cfg.FIFO
	q.tags = rec.Tags
	q.createdAt, q.modifiedAt = now, now
	q.nextSeq.Store(1)
	e.mu.Lock()
	e.nextQID++
	e.queues[name] = q
	delete(e.deleted, name)
	e.mu.Unlock()
	q.mu.Lock()
	defer e.unlockAndInsertCopies(q)
	return q.infoLocked(), true, nil
}

// persistQueueLocked writes q's record durably and waits.
func (e *Engine) persistQueueLocked(q *queue) error {
	rec := &queueRecord{ID: q.id, Name: q.name, Config: q.cfg, Tags: q.tags, CreatedAt: q.createdAt, ModifiedAt: q.modifiedAt}
	var b store.Batch
	b.Set(queueKey(q.name), encodeQueue(rec))
	p, err := e.write(&b, true)
	if err != nil {
		return err
	}
	return e.wait(p)
}

func (e *Engine) updateQueue(name string, fn func(*QueueConfig) error) error {
	q, err := e.lockQueue(name)
	if err != nil {
		return err
	}
	defer e.unlockAndInsertCopies(q)
	cfg := cloneConfig(q.cfg)
	if err := fn(&cfg); err != nil {
		return err
	}
	if cfg.FIFO != q.isFIFO {
		return &ConfigError{Setting: "FifoQueue", Reason: "Modifying queue type is not supported."}
	}
	if cfg.MaxPriority != q.cfg.MaxPriority {
		// The messages in memory are ordered by it (queue.band).
		return &ConfigError{Setting: "MaxPriority", Reason: "a queue's priorities cannot change"}
	}
	if err := validateConfig(&cfg); err != nil {
		return err
	}
	if err := e.checkDeadLetter(name, cfg.FIFO, cfg.DeadLetter); err != nil {
		return err
	}
	old := q.cfg
	q.setConfigLocked(cfg)
	q.modifiedAt = e.now()
	if err := e.persistQueueLocked(q); err != nil {
		q.setConfigLocked(old)
		return err
	}
	// Retention or delay changes move deadlines; a lower length limit
	// takes effect at once.
	var b store.Batch
	q.advanceLocked(e.now(), &b)
	q.enforceLimitsLocked(e.now(), &b)
	if b.Len() > 0 {
		if _, err := e.write(&b, false); err != nil {
			return err
		}
	}
	e.scheduleLocked(q)
	return nil
}

func (e *Engine) tagQueue(name string, add map[string]string, remove []string) error {
	q, err := e.lockQueue(name)
	if err != nil {
		return err
	}
	defer e.unlockAndInsertCopies(q)
	tags := cloneMap(q.tags)
	if tags == nil {
		tags = make(map[string]string)
	}
	for k, v := range add {
		tags[k] = v
	}
	for _, k := range remove {
		delete(tags, k)
	}
	if len(tags) > MaxTags {
		return ErrTooManyTags
	}
	old := q.tags
	q.tags = tags
	if err := e.persistQueueLocked(q); err != nil {
		q.tags = old
		return err
	}
	return nil
}

func (e *Engine) allQueues() []*queue {
	e.mu.RLock()
	qs := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		qs = append(qs, q)
	}
	e.mu.RUnlock()
	sort.Slice(qs, func(i, j int) bool { return qs[i].name < qs[j].name })
	return qs
}

func (e *Engine) deadLetterSources(dlq string) ([]string, error) {
	if _, err := e.lookup(dlq); err != nil {
		return nil, err
	}
	all, err := e.deadLetterQueues(true)
	if err != nil {
		return nil, err
	}
	return all[dlq], nil
}

// clearMessagesLocked forgets every message and dedup entry.
func (q *queue) clearMessagesLocked() {
	q.unaccountAllLocked()
	q.msgs = make(map[uint64]*message)
	q.groups = make(map[string]*group)
	q.available = groupList{}
	q.timers = nil
	q.expiry = expiryOrder{}
	q.ttl = nil
	q.nState = [3]int{}
	q.nBytes = [3]int64{}
	q.clearDedupLocked()
	q.attempts = nil
	q.forgetColdLocked()
}

// sortedKeys returns m's keys in order (for deterministic encodings).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ctxDone is a nil-safe ctx.Done.
func ctxDone(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}
