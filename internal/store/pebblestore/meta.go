package pebblestore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicemq/sluice/internal/store"
)

// metaPrefix holds the store owner's own records (see WriteMeta). It lies
// under the reserved prefix, so Scan never returns them, batches cannot
// set or delete them, and DeleteRange leaves them alone.
const metaPrefix = reservedPrefix + "meta/"

// IsReserved reports whether key is reserved for the store itself, so that
// a layer in front of the store (the replicated store) can refuse a batch
// that Write would refuse, before the batch goes anywhere.
func IsReserved(key []byte) bool { return reserved(key) }

// Meta is one record of the store's owner, written beside a batch.
type Meta struct {
	Name  string
	Value []byte
}

// WriteMeta is Write with meta records set in the same atomic batch. A
// layer that keeps its own bookkeeping in the store (the replicated store's
// applied Raft index) uses it so that its records and the data they
// describe can never disagree after a crash. Meta records are invisible to
// Scan and Get and unreachable by batch operations; GetMeta reads them.
func (s *Store) WriteMeta(b *store.Batch, meta []Meta, durable bool) (store.Pending, error) {
	return s.write(b, meta, durable)
}

// GetMeta returns a copy of the meta record name, or store.ErrNotFound.
func (s *Store) GetMeta(name string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	v, closer, err := s.db.Get([]byte(metaPrefix + name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get meta: %w", err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("pebblestore: get meta: %w", err)
	}
	return out, nil
}

// ScanMeta calls fn for every meta record whose name starts with prefix,
// in ascending name order. value is valid only during the call.
func (s *Store) ScanMeta(prefix string, fn func(name string, value []byte) error) (err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	lo := []byte(metaPrefix + prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return fmt.Errorf("pebblestore: scan meta: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pebblestore: scan meta: %w", cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("pebblestore: scan meta: %w", err)
		}
		if err := fn(string(it.Key()[len(metaPrefix):]), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("pebblestore: scan meta: %w", err)
	}
	return nil
}
