package raftstore

import (
	"errors"
	"syscall"

	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Failure returns the error that stopped this node's loop (a write of its
// Raft log or state store that failed, an entry it could not apply),
// wrapping store.ErrFailed, or nil while the loop runs. A stopped node
// neither votes nor acknowledges again; only closing it and opening its
// directory again (a restart) brings it back.
func (n *Node) Failure() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// FailedOnFullDisk reports whether the node stopped because a write of
// its Raft log or its state store found the disk full (ENOSPC), and
// nothing else failed: neither store failed otherwise, and no sync of
// either failed (pebblestore.Store.FailedOnFullDisk). Such a stop has
// lost nothing: every entry this node acknowledged, and every vote it
// cast, was synced before the message that said so left, and a failed
// write(2) leaves the page cache as it was; the state store's unsynced
// tail is applied again from the log. So once space is back, a node
// opened on the same directory (after this one is closed) is a node
// restarted after a crash, and catches up from the leader. Any other stop
// is fail-stop.
func (n *Node) FailedOnFullDisk() bool {
	err := n.Failure()
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return false
	}
	full := false
	check := func(st *pebblestore.Store) bool {
		if st.Failure() == nil {
			return true
		}
		if !st.FailedOnFullDisk() {
			return false
		}
		full = true
		return true
	}
	if !check(n.rl.db) {
		return false
	}
	ok := true
	_ = n.withState(func(st *pebblestore.Store) error {
		ok = check(st)
		return nil
	})
	return ok && full
}
