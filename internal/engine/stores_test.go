package engine

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// Store doubles for durability tests. They wrap the in-memory store and
// model what a disk does between a write and its fsync, which memstore
// (durable at once) cannot show.

// powerStore is a store with a power switch: writes are applied at once
// (readers see them), but only a sync, or a durable write, makes them
// survive Crash. Durable writes can be held (their fsync does not return)
// and then released with a result, as a slow or failing disk would.
type powerStore struct {
	mu       sync.Mutex
	live     *memstore.Store
	disk     *memstore.Store // what survives a crash
	unsynced []store.Batch   // written to live, not yet to disk
	hold     bool            // durable writes wait for release
	waiters  []*heldSync
	syncs    int // syncs that reached the disk (durable writes, Sync)

	// beforeWrite, if set, is called at the start of every Write, before
	// anything is applied (and without the store's lock held).
	beforeWrite func(b *store.Batch)
	// afterWrite, if set, is called once a Write has applied b (without
	// the store's lock held).
	afterWrite func(b *store.Batch)
}

func newPowerStore() *powerStore {
	return &powerStore{live: memstore.New(), disk: memstore.New()}
}

type heldSync struct {
	done chan struct{}
	err  error
}

func (h *heldSync) Wait() error { <-h.done; return h.err }

func copyBatch(b *store.Batch) store.Batch {
	var c store.Batch
	for _, op := range b.Ops {
		k, v := bytes.Clone(op.Key), bytes.Clone(op.Value)
		switch op.Kind {
		case store.OpSet:
			c.Set(k, v)
		case store.OpDelete:
			c.Delete(k)
		case store.OpSingleDelete:
			c.SingleDelete(k)
		case store.OpDeleteRange:
			c.DeleteRange(k, v)
		default:
			panic(fmt.Sprintf("copyBatch: unknown operation kind %d", op.Kind))
		}
	}
	return c
}

// Write applies b; a durable write syncs everything written so far unless
// syncs are held, in which case its Pending waits for release.
func (s *powerStore) Write(b *store.Batch, durable bool) (store.Pending, error) {
	if s.beforeWrite != nil {
		s.beforeWrite(b)
	}
	if s.afterWrite != nil {
		defer s.afterWrite(b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.live.Write(b, false); err != nil {
		return nil, err
	}
	s.unsynced = append(s.unsynced, copyBatch(b))
	if !durable {
		return store.Done{}, nil
	}
	if s.hold {
		h := &heldSync{done: make(chan struct{})}
		s.waiters = append(s.waiters, h)
		return h, nil
	}
	return store.Done{}, s.syncLocked()
}

func (s *powerStore) syncLocked() error {
	for i := range s.unsynced {
		if _, err := s.disk.Write(&s.unsynced[i], true); err != nil {
			return err
		}
	}
	s.unsynced = nil
	s.syncs++
	return nil
}

func (s *powerStore) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return s.live.Scan(prefix, fn)
}

func (s *powerStore) ScanRange(start, end []byte, fn func(key, value []byte) error) error {
	return s.live.ScanRange(start, end, fn)
}

func (s *powerStore) ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error {
	return s.live.ScanLengths(start, end, fn)
}

func (s *powerStore) Get(key []byte) ([]byte, error) { return s.live.Get(key) }

func (s *powerStore) Sync() error {
	p, err := s.Write(&store.Batch{}, true)
	if err != nil {
		return err
	}
	return p.Wait()
}

func (s *powerStore) Close() error { return nil }

// holdSyncs makes later durable writes wait for releaseSyncs.
func (s *powerStore) holdSyncs() {
	s.mu.Lock()
	s.hold = true
	s.mu.Unlock()
}

// held returns how many durable writes are waiting.
func (s *powerStore) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// releaseSyncs ends the hold: with err == nil everything written so far
// reaches the disk and the waiters succeed; otherwise the fsync failed,
// nothing since the last good sync reaches the disk, and every waiter
// gets err.
func (s *powerStore) releaseSyncs(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = false
	if err == nil {
		err = s.syncLocked()
	} else {
		s.unsynced = nil // the kernel dropped the dirty pages
	}
	for _, h := range s.waiters {
		h.err = err
		close(h.done)
	}
	s.waiters = nil
}

// releaseOne lets the i-th held durable write (in the order they were
// held) succeed: everything written so far reaches the disk, but the other
// waiters stay held, as when one fsync returns and the callers of another
// have not been woken yet.
func (s *powerStore) releaseOne(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(); err != nil {
		panic(err)
	}
	h := s.waiters[i]
	s.waiters = append(s.waiters[:i:i], s.waiters[i+1:]...)
	close(h.done)
}

// pendingSync reports whether some write has not reached the disk.
func (s *powerStore) pendingSync() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unsynced) > 0
}

// crash cuts the power: the returned store holds only what was synced.
func (s *powerStore) crash() *powerStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := newPowerStore()
	err := s.disk.Scan(nil, func(k, v []byte) error {
		var b store.Batch
		b.Set(bytes.Clone(k), bytes.Clone(v))
		if _, err := n.live.Write(&b, true); err != nil {
			return err
		}
		_, err := n.disk.Write(&b, true)
		return err
	})
	if err != nil {
		panic(err)
	}
	return n
}
