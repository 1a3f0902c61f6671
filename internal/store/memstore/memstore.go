// Package memstore is an in-memory store.Store for fast tests.
//
// It has the semantics of the durable store without the disk: batches apply
// atomically and in call order, Scan returns keys in ascending byte order,
// and DeleteRange removes every key in [start, end). A durable write is
// "durable" as soon as Write returns, so its Pending is already complete.
// Nothing survives the process.
//
// Keys live in a hash map and are sorted only when scanned, because the
// engine writes constantly and scans rarely: when it opens, and a ready
// window at a time for a standard queue's cold backlog. Each scan sorts the
// matching keys, so a deep cold backlog is slow here; the server runs the
// memory store without a ready window.
package memstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/internal/store"
)

// Store is an in-memory store.Store. It is safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	data   map[string][]byte // values are private copies, never mutated
	closed bool
	failed error // non-nil once the store is failed; wraps store.ErrFailed
}

var _ store.Store = (*Store)(nil)

// New returns an empty, open store.
func New() *Store {
	return &Store{data: make(map[string][]byte)}
}

// Write applies b atomically, after every earlier Write. It copies the keys
// and values, so b may be reused as soon as Write returns. The returned
// Pending is already complete: memory is as durable as this store gets.
//
// A batch holding an operation of unknown kind is rejected whole, and, as the
// store contract demands for any write error, the store becomes failed.
func (s *Store) Write(b *store.Batch, durable bool) (store.Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	for _, op := range b.Ops {
		switch op.Kind {
		case store.OpSet, store.OpDelete, store.OpSingleDelete, store.OpDeleteRange:
		default:
			s.failed = fmt.Errorf("%w: memstore: unknown operation kind %d", store.ErrFailed, op.Kind)
			return nil, s.failed
		}
	}
	for _, op := range b.Ops {
		switch op.Kind {
		case store.OpSet:
			s.data[string(op.Key)] = append([]byte{}, op.Value...)
		case store.OpDelete, store.OpSingleDelete:
			delete(s.data, string(op.Key))
		case store.OpDeleteRange:
			if bytes.Compare(op.Key, op.Value) >= 0 {
				continue
			}
			start, end := string(op.Key), string(op.Value)
			for k := range s.data {
				if k >= start && k < end {
					delete(s.data, k)
				}
			}
		}
	}
	return store.Done{}, nil
}

// Scan calls fn for every key with the given prefix in ascending order. It
// works on a snapshot taken when it starts, so fn may call Write (later
// writes are not seen by this scan). key and value must not be modified.
// Get returns a copy of key's value, or store.ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	v, ok := s.data[string(key)]
	if !ok {
		return nil, store.ErrNotFound
	}
	return append([]byte(nil), v...), nil
}

func (s *Store) Scan(prefix []byte, fn func(key, value []byte) error) error {
	p := string(prefix)
	return s.scan(func(k string) bool { return strings.HasPrefix(k, p) }, fn)
}

// ScanRange calls fn for every key in [start, end) (nil end: no bound) in
// ascending order, on a snapshot like Scan. ErrStopScan from fn stops it
// and is not returned. It filters every key of the store (the memory
// store keeps no order), which is fine for tests.
func (s *Store) ScanRange(start, end []byte, fn func(key, value []byte) error) error {
	err := s.scan(inRange(start, end), fn)
	if errors.Is(err, store.ErrStopScan) {
		return nil
	}
	return err
}

// ScanLengths is ScanRange with each value's length only.
func (s *Store) ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error {
	err := s.scan(inRange(start, end), func(k, v []byte) error { return fn(k, len(v)) })
	if errors.Is(err, store.ErrStopScan) {
		return nil
	}
	return err
}

func inRange(start, end []byte) func(string) bool {
	lo, hi := string(start), string(end)
	return func(k string) bool { return k >= lo && (end == nil || k < hi) }
}

func (s *Store) scan(keep func(string) bool, fn func(key, value []byte) error) error {
	type kv struct {
		k string
		v []byte
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	var snap []kv
	for k, v := range s.data {
		if keep(k) {
			snap = append(snap, kv{k, v})
		}
	}
	s.mu.Unlock()

	slices.SortFunc(snap, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	for _, e := range snap {
		if err := fn([]byte(e.k), e.v); err != nil {
			return err
		}
	}
	return nil
}

// Sync returns nil on an open, healthy store: every write is already as
// durable as it will be.
func (s *Store) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usableLocked()
}

// Close releases the data. Later operations, including a second Close,
// return store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	s.data = nil
	return nil
}

// Fail makes the store behave as if an I/O error had occurred: every later
// Write and Sync returns an error wrapping store.ErrFailed and err. It lets
// tests of the engine exercise its fail-stop path. Only the first failure is
// kept.
func (s *Store) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", store.ErrFailed, err)
	}
}

func (s *Store) usableLocked() error {
	if s.closed {
		return store.ErrClosed
	}
	return s.failed
}
