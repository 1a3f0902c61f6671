package raftstore

import (
	"fmt"
	"sync"

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

// failLocked records err as the view's failure and returns it.
func (v *view) failLocked(err error) error {
	if v.err == nil {
		v.err = fmt.Errorf("%w: %w", store.ErrFailed, err)
	}
	return v.err
}

// Write proposes b and returns without waiting; the Pending's Wait
// returns nil once b is committed and applied locally. durable makes no
// difference: every write is committed by a majority's fsynced logs. On a
// follower, or after this view's leadership ended, Write fails with an
// error wrapping ErrNotLeader and store.ErrFailed.
func (v *view) Write(b *store.Batch, durable bool) (store.Pending, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, store.ErrClosed
	}
	if v.err != nil {
		return nil, v.err
	}
	if v.term == 0 {
		return nil, v.failLocked(ErrNotLeader)
	}
	w, err := v.n.propose(entryBatch, v.term, func(dst []byte) ([]byte, error) { return appendBatch(dst, b) })
	if err != nil {
		return nil, v.failLocked(err)
	}
	return &pending{v: v, w: w}, nil
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
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	return p.v.failLocked(err)
}

// readable waits for read-your-writes: until this node's last proposal is
// applied or has failed.
func (v *view) readable() error {
	if err := v.usable(); err != nil {
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

// Close closes this view; the node keeps running. Pendings of earlier
// writes stay valid. A second Close returns store.ErrClosed.
func (v *view) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return store.ErrClosed
	}
	v.closed = true
	return nil
}
