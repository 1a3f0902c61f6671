package engine

import (
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// The engine's own durability machinery: the background syncer that bounds
// how long a write without a sync stays unsynced, and the store's receipt
// key that authenticates receipt handles.

// noteUnsynced records that a write is waiting for a sync and wakes the
// syncer if it was idle.
func (e *Engine) noteUnsynced() {
	if e.unsynced.CompareAndSwap(false, true) {
		select {
		case e.syncPoke <- struct{}{}:
		default:
		}
	}
}

// runSyncer is the goroutine that bounds how long an unsynced write stays
// unsynced: SyncInterval after the first write without a sync it syncs the
// store (sharing the fsync with any concurrent durable writer). It sleeps
// while nothing is unsynced. The interval is wall time, not the engine's
// clock: it paces I/O, it is not a message timer.
func (e *Engine) runSyncer() {
	defer e.wg.Done()
	t := time.NewTimer(e.syncInterval)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-e.syncPoke:
		}
		t.Reset(e.syncInterval)
		select {
		case <-e.done:
			return
		case <-t.C:
		}
		// Cleared before the sync: a write after this point sets it
		// again and is covered by the next round.
		e.unsynced.Store(false)
		if e.failed.Load() != nil {
			continue
		}
		if err := e.st.Sync(); err != nil && !errors.Is(err, store.ErrClosed) {
			_ = e.fail(err) // records and logs the failure; no caller waits on this sync
		}
	}
}

// loadReceiptKey reads the store's receipt key, creating it (durably,
// before any handle is issued under it) in a store that has none. A lost
// key would only turn lost-lease deletes into no-ops, never accept a
// forged handle.
func (e *Engine) loadReceiptKey() error {
	err := e.st.Scan([]byte{prefixKey}, func(k, v []byte) error {
		if len(k) == 1 {
			if len(v) != 32 {
				return fmt.Errorf("%w: receipt key", errCorrupt)
			}
			e.receiptKey = newReceiptSigner(append([]byte(nil), v...))
		}
		return nil
	})
	if err != nil || e.receiptKey != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := cryptorand.Read(key); err != nil {
		return fmt.Errorf("engine: receipt key: %w", err)
	}
	var b store.Batch
	b.Set([]byte{prefixKey}, key)
	p, err := e.write(&b, true)
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		return fmt.Errorf("engine: writing the receipt key: %w", err)
	}
	e.receiptKey = newReceiptSigner(key)
	return nil
}
