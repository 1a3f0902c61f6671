package raftstore

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// view is the store.Store of one leadership: Node.Store returns a new one
// each call, bound to the term this node leads at that moment (or to none,
// on a follower, where every write fails with ErrNotLeader). Once this
// node loses that leadership the view's writes fail for good, so an engine
// opened on it can never write into a later term; the next leadership
// needs a new view (and a new engine, opened by crash recovery).
type view struct {
	n    *Node
	term uint64

	mu     sync.Mutex
	closed bool
	err    error // the first write error, wrapping store.ErrFailed

	// Writes without durable, held back to be proposed with the next
	// write (Write): their operations encoded by appendOps and how many;
	// the slot their Pendings wait on (nil: nothing is held); the timer
	// that proposes them alone Config.unsyncedHold after the first write
	// of a hold (a later write of the same hold does not move it), made
	// once per view and reset when the next hold starts.
	held      []byte
	heldN     int
	heldSlot  *heldSlot
	heldTimer *time.Timer
}

// defaultUnsyncedHold is how long a write without durable is held back
// for a later write to carry it (view.Write); unsyncedHoldBytes how much
// is held at most before it is proposed at once.
const (
	defaultUnsyncedHold = 5 * time.Millisecond
	unsyncedHoldBytes   = 1 << 20
)

// heldSlot is what the Pendings of held writes wait on: closed once the
// writes are proposed (w their proposal's waiter) or failed (err).
type heldSlot struct {
	done chan struct{}
	w    *waiter
	err  error
}

var _ store.Store = (*view)(nil)

var _ store.Leaser = (*view)(nil)

// Leased reports whether this node still leads the view's term for
// certain (Node.leased): false on a follower's view, and once the
// leadership may have passed to another node.
func (v *view) Leased() bool { return v.term != 0 && v.n.leased(v.term) }

// Store returns a replicated store bound to this node's current leadership
// (see the package doc for its contract). Call it after WaitLeaderReady;
// on a follower the view reads the local state and refuses every write.
func (n *Node) Store() store.Store {
	n.mu.Lock()
	defer n.mu.Unlock()
	return &view{n: n, term: n.leaderTerm}
}

// LeaderTerm returns the leadership term a store from Node.Store is bound
// to: 0 for a follower's view (or a store of another kind). The engine
// opened on that store can only ever write in that term.
func LeaderTerm(s store.Store) uint64 {
	if v, ok := s.(*view); ok {
		return v.term
	}
	return 0
}

// unwritten marks err, the error of a write refused before anything of it
// was proposed, as certain to have taken no effect (store.ErrNotWritten).
func unwritten(err error) error {
	if errors.Is(err, store.ErrNotWritten) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, store.ErrNotWritten)
}

// failLocked records err as the view's failure and returns it.
func (v *view) failLocked(err error) error {
	if v.err == nil {
		v.err = fmt.Errorf("%w: %w", store.ErrFailed, err)
	}
	return v.err
}

// Write proposes b and returns without waiting; the Pending's Wait
// returns nil once b is committed and applied locally. Every write is
// committed by a majority's fsynced logs; durable decides only when it is
// proposed. A durable write is proposed at once. One without durable (a
// lease, an AMQP ack: the engine's writes that nothing waits for) is held
// back up to 5 ms and proposed with the next write, in one entry:
// under a light load every ack was a Raft round of its own (an append,
// an fsync and a message to each follower, on every node), as many again
// as the sends it acknowledged. Reads, Sync and Close propose what is
// held first, so the view still reads its own writes, and so does a
// leadership transfer (Node.flushHolders), so the next leader knows every
// lease this one gave. On a follower, or after this view's leadership
// ended, Write fails with an error wrapping ErrNotLeader and
// store.ErrFailed.
func (v *view) Write(b *store.Batch, durable bool) (store.Pending, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, store.ErrClosed
	}
	if v.err != nil {
		return nil, unwritten(v.err)
	}
	if v.term == 0 {
		return nil, unwritten(v.failLocked(ErrNotLeader))
	}
	if !durable {
		return v.holdLocked(b)
	}
	if v.heldSlot != nil && len(v.held)+opsSize(b) > MaxEntrySize/2 {
		// Too big to carry: the held writes go first, alone.
		if err := v.flushLocked(); err != nil {
			return nil, err
		}
	}
	held, n := v.held, v.heldN
	slot := v.takeHeldLocked()
	w, err := v.n.propose(entryBatch, v.term, func(dst []byte) ([]byte, error) { return appendJoined(dst, held, n, b) })
	slot.settle(w, err)
	if err != nil {
		return nil, v.failLocked(err)
	}
	return &pending{v: v, w: w}, nil
}

// holdLocked adds b to the held writes (see Write) and returns a Pending
// that proposes them when waited on.
func (v *view) holdLocked(b *store.Batch) (store.Pending, error) {
	if len(b.Ops) == 0 {
		return store.Done{}, nil
	}
	n := len(v.held)
	held, err := appendOps(v.held, b)
	if err != nil {
		v.held = held[:n]
		return nil, err
	}
	v.held, v.heldN = held, v.heldN+len(b.Ops)
	if v.heldSlot == nil {
		v.heldSlot = &heldSlot{done: make(chan struct{})}
		if v.heldTimer == nil {
			v.heldTimer = time.AfterFunc(v.n.cfg.unsyncedHold, v.flushHeld)
		} else {
			v.heldTimer.Reset(v.n.cfg.unsyncedHold)
		}
		v.n.hold(v)
	}
	slot := v.heldSlot
	if len(v.held) >= unsyncedHoldBytes {
		if err := v.flushLocked(); err != nil {
			return nil, err
		}
	}
	return &heldPending{v: v, slot: slot}, nil
}

// takeHeldLocked empties the held writes and returns their slot (nil when
// none were held), for the caller to settle with the proposal that
// carries them.
func (v *view) takeHeldLocked() *heldSlot {
	slot := v.heldSlot
	if slot != nil {
		v.heldTimer.Stop()
		v.n.unhold(v)
	}
	v.held, v.heldN, v.heldSlot = nil, 0, nil
	return slot
}

// flushLocked proposes the held writes, alone.
func (v *view) flushLocked() error {
	if v.heldSlot == nil {
		return nil
	}
	held, n := v.held, v.heldN
	slot := v.takeHeldLocked()
	w, err := v.n.propose(entryBatch, v.term, func(dst []byte) ([]byte, error) { return appendJoined(dst, held, n, &store.Batch{}) })
	slot.settle(w, err)
	if err != nil {
		return v.failLocked(err)
	}
	return nil
}

// flushHeld is the hold's timer: it proposes what is still held.
func (v *view) flushHeld() {
	v.mu.Lock()
	defer v.mu.Unlock()
	_ = v.flushLocked() // a failure fails the view: its next write reports it
}

// settle ends the hold of slot's writes: proposed as w, or failed with
// err. A nil slot (nothing was held) is ignored.
func (s *heldSlot) settle(w *waiter, err error) {
	if s == nil {
		return
	}
	s.w, s.err = w, err
	close(s.done)
}

// heldPending is the Pending of a held write: Wait proposes the held
// writes if they still are, then waits for their proposal.
type heldPending struct {
	v    *view
	slot *heldSlot
}

// Wait returns nil once the write is applied here (see pending.Wait).
func (p *heldPending) Wait() error {
	p.v.mu.Lock()
	if p.v.heldSlot == p.slot {
		_ = p.v.flushLocked() // its failure settles the slot with it
	}
	p.v.mu.Unlock()
	<-p.slot.done
	if p.slot.err != nil {
		return p.v.fail(p.slot.err)
	}
	return (&pending{v: p.v, w: p.slot.w}).Wait()
}

// fail records err as the view's failure and returns it.
func (v *view) fail(err error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failLocked(err)
}

// pending is a view's Pending: a failed wait fails the view.
type pending struct {
	v *view
	w *waiter
}

// Wait returns nil once the write is applied here, or an error wrapping
// store.ErrFailed (and ErrNotLeader or ErrNodeClosed) if it can no longer
// be acknowledged.
func (p *pending) Wait() error {
	err := p.w.Wait()
	if err == nil {
		return nil
	}
	return p.v.fail(err) // test/clusterfaults/mutation-check.sh patches this function
}

// readable waits for read-your-writes: until this node's last proposal is
// applied or has failed.
func (v *view) readable() error {
	if err := v.usable(); err != nil {
		return err
	}
	v.mu.Lock()
	err := v.flushLocked()
	v.mu.Unlock()
	if err != nil {
		return err
	}
	if w := v.n.lastProposal(); w != nil {
		_ = w.Wait()
	}
	return nil
}

// usable reports ErrClosed for a closed view.
func (v *view) usable() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return store.ErrClosed
	}
	return nil
}

// Scan reads the local state store after read-your-writes.
func (v *view) Scan(prefix []byte, fn func(key, value []byte) error) error {
	if err := v.readable(); err != nil {
		return err
	}
	return v.n.withState(func(st *pebblestore.Store) error { return st.Scan(prefix, fn) })
}

// Get reads the local state store after read-your-writes.
func (v *view) Get(key []byte) ([]byte, error) {
	if err := v.readable(); err != nil {
		return nil, err
	}
	return v.get(key)
}

// ScanRange reads a key range of the local state store after
// read-your-writes.
func (v *view) ScanRange(start, end []byte, fn func(key, value []byte) error) error {
	if err := v.readable(); err != nil {
		return err
	}
	return v.scanRange(start, end, fn)
}

var _ store.SettledReader = (*view)(nil)

// GetSettled is Get without read-your-writes: it sees every write whose
// Pending.Wait has returned (a write is applied locally before its Wait
// returns), and possibly later ones.
func (v *view) GetSettled(key []byte) ([]byte, error) {
	if err := v.usable(); err != nil {
		return nil, err
	}
	return v.get(key)
}

// ScanRangeSettled is ScanRange without read-your-writes (see
// GetSettled).
func (v *view) ScanRangeSettled(start, end []byte, fn func(key, value []byte) error) error {
	if err := v.usable(); err != nil {
		return err
	}
	return v.scanRange(start, end, fn)
}

// get and scanRange read the local state store as it is now.
func (v *view) get(key []byte) ([]byte, error) {
	var out []byte
	err := v.n.withState(func(st *pebblestore.Store) error {
		var err error
		out, err = st.Get(key)
		return err
	})
	return out, err
}

func (v *view) scanRange(start, end []byte, fn func(key, value []byte) error) error {
	return v.n.withState(func(st *pebblestore.Store) error { return st.ScanRange(start, end, fn) })
}

// ScanLengths reads a key range's value lengths from the local state store
// after read-your-writes.
func (v *view) ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error {
	if err := v.readable(); err != nil {
		return err
	}
	return v.n.withState(func(st *pebblestore.Store) error { return st.ScanLengths(start, end, fn) })
}

// Sync proposes an empty batch, a barrier, and waits for it to apply.
func (v *view) Sync() error {
	p, err := v.Write(&store.Batch{}, true)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Close closes this view, proposing any writes it still holds; the node
// keeps running. Pendings of earlier writes stay valid. A second Close
// returns store.ErrClosed.
func (v *view) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return store.ErrClosed
	}
	_ = v.flushLocked() // a failure is the held writes' Pendings' to report
	v.closed = true
	return nil
}
