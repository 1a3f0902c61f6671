package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// One Raft log store per node (ADR 0015 step 2's shared append).
//
// With several shards, every shard's Raft log lives in one pebble store,
// shard 0's (Config.Dir/raft of shard 0, the data directory's raft/):
// shard 0's keys are the bare keys of logstore.go, as on a one-group
// node, and shard k's (k ≥ 1) the same keys behind the prefix "s" + k
// (4 bytes big-endian). Each group's loop still writes its Ready with a
// synced batch of its own, but the batches of groups whose loops write at
// the same moment go through one write-ahead log, whose commit pipeline
// joins them into one fsync (only those: batches that arrive while no
// sync is pending still take one each; docs/benchmarks.md measured 13 %
// fewer per message under load), and a node runs one log store
// (memtables, caches, compactions) instead of one per shard.
//
// Upgrade: a node of an earlier release kept shard k's log in
// shard-<k>/raft/, a store of its own. Open of such a shard copies that
// store's keys (the compaction point, the HardState, every entry) into
// the shared store under the shard's prefix in one synced batch (which
// first deletes whatever an interrupted copy left there), renames the
// old directory to raft.moved/ (syncing the directory), writes the marker
// file shard-<k>/raft in its place (synced), and removes raft.moved/. A
// crash before the rename copies again at the next start; after it, the
// start finds raft.moved/ and finishes. The marker is a regular file, so
// a release from before this layout, which would open shard-<k>/raft/ as
// an empty log beside a state store that is not, cannot open it and
// refuses to start instead. Every shard k ≥ 1 gets the marker, a new
// node's too.

// sharedLogPrefix starts every key of a shard above 0 in the shared log
// store ("s" sorts after shard 0's "c", "e…" and "h").
const sharedLogPrefix = "s"

// movedLogDirName is where a shard's own log store waits for removal once
// copied; logMarker is the marker file's text.
const (
	movedLogDirName = "raft.moved"
	logMarker       = "sluice: this shard's Raft log lives in the node's shared Raft log store (the data directory's raft/, keys behind \"s\" and the shard number); see docs/storage-format.md\n"
)

// shardLogKeys are shard k's keys in the shared log store.
func shardLogKeys(k int) logKeys {
	if k == 0 {
		return logKeys{}
	}
	return logKeys{prefix: binary.BigEndian.AppendUint32([]byte(sharedLogPrefix), uint32(k))}
}

// deleteShardLog deletes every key of shard k (k ≥ 1) from the shared log
// store db, in one synced batch (Shards.Leave).
func deleteShardLog(db *pebblestore.Store, k int) error {
	if db == nil || k < 1 {
		return nil
	}
	start := shardLogKeys(k).prefix
	end := binary.BigEndian.AppendUint32([]byte(sharedLogPrefix), uint32(k+1))
	var b store.Batch
	b.DeleteRange(start, end)
	p, err := db.Write(&b, true)
	if err != nil {
		return err
	}
	return p.Wait()
}

// openSharedLog opens the node's shared log store in dir (shard 0's
// directory).
func openSharedLog(dir string, fs vfs.FS, log *slog.Logger) (*pebblestore.Store, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftstore: %w", err)
	}
	return openLogStore(filepath.Join(dir, "raft"), fs, log)
}

// openShardLog opens this node's log in the shared store db: for a shard
// above 0, it first moves in the log store an earlier release kept in the
// shard's own directory and writes the marker (see the top of this file).
func (n *Node) openShardLog(db *pebblestore.Store, voters []uint64) (*raftLog, error) {
	keys := shardLogKeys(n.cfg.Shard)
	if n.cfg.Shard > 0 {
		if err := n.moveOwnLog(db, keys); err != nil {
			return nil, fmt.Errorf("raftstore: moving shard %d's raft log into the shared store: %w", n.cfg.Shard, err)
		}
	}
	l, err := loadRaftLog(db, keys, voters, true)
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft log of shard %d: %w", n.cfg.Shard, err)
	}
	return l, nil
}

// moveOwnLog moves the shard's own log store (an earlier release's
// layout), if there is one, into db under keys, and leaves the marker.
func (n *Node) moveOwnLog(db *pebblestore.Store, keys logKeys) error {
	fs := n.fs()
	if err := fs.MkdirAll(n.cfg.Dir, 0o755); err != nil {
		return err
	}
	own := filepath.Join(n.cfg.Dir, "raft")
	moved := filepath.Join(n.cfg.Dir, movedLogDirName)
	fi, err := fs.Stat(own)
	switch {
	case err == nil && fi.IsDir():
		if err := n.copyOwnLog(own, db, keys); err != nil {
			return err
		}
		if err := fs.RemoveAll(moved); err != nil {
			return err
		}
		if err := renameSynced(fs, own, moved, n.cfg.Dir); err != nil {
			return err
		}
		n.log.Info("raftstore: moved this shard's raft log into the node's shared raft log store", "from", own)
	case err == nil:
		// The marker: moved before.
		return fs.RemoveAll(moved) // a removal a crash cut short
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := writeMarker(fs, own); err != nil {
		return err
	}
	if err := syncDir(fs, n.cfg.Dir); err != nil {
		return err
	}
	return fs.RemoveAll(moved)
}

// copyOwnLog writes every key of the log store in dir into db under keys,
// in one synced batch that first deletes the shard's keys there.
func (n *Node) copyOwnLog(dir string, db *pebblestore.Store, keys logKeys) error {
	own, err := openLogStore(dir, n.cfg.FS, n.log)
	if err != nil {
		return err
	}
	var b store.Batch
	b.DeleteRange(keys.entriesStart(), keys.entriesEnd())
	b.Delete(keys.compaction())
	b.Delete(keys.hardState())
	// "c" up to "i": the compaction point, the entries and the HardState
	// (the store's own records, under its reserved prefix, stay).
	err = own.ScanRange([]byte(compactKey), []byte("i"), func(k, v []byte) error {
		switch {
		case string(k) == compactKey:
			b.Set(keys.compaction(), append([]byte(nil), v...))
		case string(k) == hardStateKey:
			b.Set(keys.hardState(), append([]byte(nil), v...))
		default:
			i, ok := logKeys{}.index(k)
			if !ok {
				return fmt.Errorf("unexpected key %x in %s", k, dir)
			}
			b.Set(keys.entry(i), append([]byte(nil), v...))
		}
		return nil
	})
	if cerr := own.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	p, err := db.Write(&b, true)
	if err == nil {
		err = p.Wait()
	}
	return err
}

// writeMarker writes the marker file at name (replacing one cut short),
// synced.
func writeMarker(fs vfs.FS, name string) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, logMarker)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
