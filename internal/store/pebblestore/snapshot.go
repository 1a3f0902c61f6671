package pebblestore

import (
	"errors"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicemq/sluice/internal/store"
)

// Snapshot is a consistent, read-only view of the whole store at the moment
// NewSnapshot returned, meta records included: the replicated store copies
// its state to a lagging node from one (Export on the sender, Import on the
// receiver). It keeps the files it needs alive until Close, so hold one only
// as long as a copy runs.
//
// A Snapshot is used by one goroutine at a time. Every method takes the
// store's shared lock and fails with store.ErrClosed once the store is
// closed: Store.Close closes every open Snapshot first, so a copy still
// running when its store closes ends with an error rather than reading a
// closed database.
type Snapshot struct {
	s    *Store
	snap *pebble.Snapshot // nil once closed; guarded by s.snapMu
}

// NewSnapshot returns a Snapshot of the store as it is now. It takes only
// the store's shared lock, so it does not wait for readers.
func (s *Store) NewSnapshot() (*Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	sn := &Snapshot{s: s, snap: s.db.NewSnapshot()}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snaps == nil {
		s.snaps = map[*Snapshot]struct{}{}
	}
	s.snaps[sn] = struct{}{}
	return sn, nil
}

// pebbleSnap returns the open pebble snapshot, or nil.
func (sn *Snapshot) pebbleSnap() *pebble.Snapshot {
	sn.s.snapMu.Lock()
	defer sn.s.snapMu.Unlock()
	return sn.snap
}

// GetMeta returns a copy of meta record name as of the snapshot, or
// store.ErrNotFound.
func (sn *Snapshot) GetMeta(name string) ([]byte, error) {
	sn.s.mu.RLock()
	defer sn.s.mu.RUnlock()
	snap := sn.pebbleSnap()
	if snap == nil {
		return nil, store.ErrClosed
	}
	v, closer, err := snap.Get([]byte(metaPrefix + name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: snapshot get meta: %w", err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("pebblestore: snapshot get meta: %w", err)
	}
	return out, nil
}

// Export calls fn for every raw key at or after start, in ascending order,
// with its value: the data keys and the owner's meta records (under their
// reserved names, as Import expects them), but not the store's format
// record, which every store writes for itself. key and value are valid only
// during the call. fn returns store.ErrStopScan to stop early (Export then
// returns nil); a caller copying in pieces resumes from the successor of
// the last key it saw.
func (sn *Snapshot) Export(start []byte, fn func(key, value []byte) error) (err error) {
	sn.s.mu.RLock()
	defer sn.s.mu.RUnlock()
	snap := sn.pebbleSnap()
	if snap == nil {
		return store.ErrClosed
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: nilIfEmpty(start)})
	if err != nil {
		return fmt.Errorf("pebblestore: export: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pebblestore: export: %w", cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		if string(it.Key()) == formatKey {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("pebblestore: export: %w", err)
		}
		if err := fn(it.Key(), v); err != nil {
			if errors.Is(err, store.ErrStopScan) {
				return nil
			}
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("pebblestore: export: %w", err)
	}
	return nil
}

// Close releases the snapshot. A second Close, or one after the store
// closed, returns nil.
func (sn *Snapshot) Close() error {
	sn.s.mu.RLock()
	defer sn.s.mu.RUnlock()
	sn.s.snapMu.Lock()
	defer sn.s.snapMu.Unlock()
	return sn.closeLocked()
}

// closeLocked closes the snapshot; the store's snapMu is held, and its mu
// (shared, or exclusively by Close).
func (sn *Snapshot) closeLocked() error {
	if sn.snap == nil {
		return nil
	}
	err := sn.snap.Close()
	sn.snap = nil
	delete(sn.s.snaps, sn)
	if err != nil {
		return fmt.Errorf("pebblestore: close snapshot: %w", err)
	}
	return nil
}

// Import writes raw key/value pairs, as another store's Snapshot.Export
// produced them (meta records included, the format record refused), in one
// atomic batch; durable waits for its WAL sync, which also covers every
// earlier write. It is meant for a store being filled as a copy of another,
// which nothing else reads yet. Any error except store.ErrClosed fails the
// store.
func (s *Store) Import(kvs iter.Seq2[[]byte, []byte], durable bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	pb := s.db.NewBatch()
	for k, v := range kvs {
		if string(k) == formatKey {
			_ = pb.Close()
			return s.fail(fmt.Errorf("%w: import of %q", ErrReservedKey, k))
		}
		if err := pb.Set(k, v, nil); err != nil {
			_ = pb.Close()
			return s.fail(err)
		}
	}
	if pb.Empty() && !durable {
		_ = pb.Close()
		return nil
	}
	if pb.Empty() {
		_ = pb.LogData(nil, nil)
	}
	if err := s.apply(pb, durable, false); err != nil { // sets only
		return err
	}
	if durable {
		p := &pending{s: s, b: pb}
		return p.Wait()
	}
	_ = pb.Close()
	return nil
}
