package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// The Raft log lives in its own pebble store under Config.Dir/raft:
//
//	"c"                               the compaction point: a protobuf-marshalled
//	                                  raftpb.SnapshotMetadata (index, term,
//	                                  ConfState); absent until the first one
//	"e" + index (8 bytes big-endian)  one entry, protobuf-marshalled
//	"h"                               the HardState, protobuf-marshalled
//
// Every node starts from the same synthetic snapshot at index 1, term 1,
// whose ConfState is Config.Peers, so the first real entry has index 2;
// that boot point is not stored because every Open builds it again from the
// configuration. Later compaction points are stored in "c": the log holds
// exactly the entries after it, up to the last one.
//
// # Truncation
//
// The log is cut (compact) once the applied index has moved
// Config.CompactEntries entries, or Config.CompactBytes bytes of entries,
// past the log's start, keeping Config.KeepEntries applied entries so that
// a briefly lagging follower still catches up from the log. The order is
// the whole safety argument:
//
//  1. The state store, written without fsync, is synced: everything up to
//     the applied index when the sync was asked for is durable there (the
//     loop writes a sync barrier and goes on; the cut waits for the
//     barrier: Node.maybeCompact).
//  2. One atomic, synced batch of the raft log store sets "c" to the new
//     point (ci, at most that index less the entries kept, its term, the
//     ConfState) and range-deletes every entry at or below ci.
//
// A crash before 2 leaves the old point and every entry; a crash after it
// leaves a log starting after ci, and a state store whose applied index is
// at least ci (step 1), so no entry the state store lacks was deleted. The
// node installs a leader's snapshot instead when it lags past a leader's
// compaction point (snapshot.go); that also moves "c" (to the snapshot's
// index) and deletes every entry in the same batch.
//
// raftLog is the raft.Storage the RawNode reads. Only the newest entries
// are kept in memory (a tail bounded by tailMaxEntries and tailMaxBytes,
// never dropping an entry not yet applied); older ones, which only a
// lagging follower needs, are read back from pebble. So memory does not
// grow with the log, and Open reads only the keys after the compaction
// point (a range deletion's tombstone covers the rest).
const (
	compactKey     = "c"
	entryKeyPrefix = "e" // "f" is the first key after every entry
	entryKeyEnd    = "f"
	hardStateKey   = "h"
)

// bootIndex and bootTerm are the synthetic snapshot's position.
const (
	bootIndex = 1
	bootTerm  = 1
)

// Bounds of the in-memory tail of the log.
const (
	tailMaxEntries = 4096
	tailMaxBytes   = 64 << 20
)

func entryKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(entryKeyPrefix), i)
}

// logKeys are one group's keys in a log store: the keys above behind
// prefix, which is empty for shard 0 (and a one-group node) and, with
// several shards, shard k's own in the node's shared log store
// (sharedlog.go).
type logKeys struct{ prefix []byte }

// key is prefix + s, in a slice of its own.
func (k logKeys) key(s string) []byte {
	return append(append(make([]byte, 0, len(k.prefix)+len(s)+8), k.prefix...), s...)
}

func (k logKeys) entry(i uint64) []byte {
	return binary.BigEndian.AppendUint64(k.key(entryKeyPrefix), i)
}
func (k logKeys) entriesStart() []byte { return k.key(entryKeyPrefix) }
func (k logKeys) entriesEnd() []byte   { return k.key(entryKeyEnd) }
func (k logKeys) compaction() []byte   { return k.key(compactKey) }
func (k logKeys) hardState() []byte    { return k.key(hardStateKey) }

// index is the index of entry key e (false: not one of this group's
// entry keys).
func (k logKeys) index(e []byte) (uint64, bool) {
	n := len(k.prefix) + len(entryKeyPrefix)
	if len(e) != n+8 || string(e[:n]) != string(k.prefix)+entryKeyPrefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(e[n:]), true
}

// raftLog is the durable Raft log and the raft.Storage over it. It is used
// by the Raft loop only (RawNode calls it from the loop's goroutine).
type raftLog struct {
	db *pebblestore.Store
	// keys are this group's keys in db; shared: db is the node's shared
	// log store (sharedlog.go), which close leaves open.
	keys   logKeys
	shared bool
	hs     *pb.HardState
	cs     *pb.ConfState // the node's ConfState (the loop updates it as conf changes apply)
	last   uint64        // index of the last stored entry (compacted if none)
	// The compaction point: entries at or below compacted are gone;
	// compactedTerm is the term of entry compacted.
	compacted, compactedTerm uint64
	// applied is the state store's applied index, set by the loop after
	// each apply: Snapshot describes the state store at it.
	applied uint64
	// joining: a node joining a group has no position yet (last is 0)
	// until the leader's snapshot arrives (installSnapshot).
	joining bool
	// sendFree, when set, reports whether the node may start one more
	// outgoing snapshot stream now (snapLimits.sendFree): when it may not,
	// Snapshot answers raft.ErrSnapshotTemporarilyUnavailable and Raft
	// asks again at the follower's next answer.
	sendFree func() bool

	tail      []*pb.Entry // entries tailFirst..last, also on disk
	tailFirst uint64
	tailBytes int
	// The tail's bounds: tailMaxEntries and tailMaxBytes (tests lower
	// them to read from disk).
	maxEntries, maxBytes int
}

var _ raft.Storage = (*raftLog)(nil)

// openRaftLog opens the log in dir and finds its last entry; voters is the
// membership.
func openRaftLog(dir string, voters []uint64, fs vfs.FS, log *slog.Logger) (*raftLog, error) {
	db, err := openLogStore(dir, fs, log)
	if err != nil {
		return nil, err
	}
	l, err := loadRaftLog(db, logKeys{}, voters, false)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: raft log %s: %w", dir, err)
	}
	return l, nil
}

// openLogStore opens the pebble store of a Raft log (one group's, or the
// node's shared one).
func openLogStore(dir string, fs vfs.FS, log *slog.Logger) (*pebblestore.Store, error) {
	db, err := pebblestore.Open(dir, pebblestore.Options{Logger: log, FS: fs, MemTableSize: pebblestore.MinMemTableSize})
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft log: %w", err)
	}
	return db, nil
}

// loadRaftLog reads the log of the group whose keys in db are keys: its
// compaction point, its last entry and its HardState. It does not close db.
func loadRaftLog(db *pebblestore.Store, keys logKeys, voters []uint64, shared bool) (*raftLog, error) {
	l := &raftLog{db: db, keys: keys, shared: shared, hs: &pb.HardState{}, cs: &pb.ConfState{Voters: voters},
		compacted: bootIndex, compactedTerm: bootTerm,
		maxEntries: tailMaxEntries, maxBytes: tailMaxBytes}
	err := l.loadCompaction()
	if err == nil {
		l.last = l.compacted
		// Key lengths only: values of separated entries are not read. The
		// scan starts after the compaction point, so it reads the short
		// log only.
		err = db.ScanLengths(keys.entry(l.compacted+1), keys.entriesEnd(), func(k []byte, _ int) error {
			i, ok := keys.index(k)
			if !ok {
				return fmt.Errorf("raftstore: raft log key %x", k)
			}
			if want := l.last + 1; i != want {
				return fmt.Errorf("raftstore: raft log has entry %d where %d belongs", i, want)
			}
			l.last = i
			return nil
		})
	}
	if err == nil {
		var hsb []byte
		hsb, err = db.Get(keys.hardState())
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = nil
		case err == nil:
			err = proto.Unmarshal(hsb, l.hs)
		}
	}
	if err != nil {
		return nil, err
	}
	l.applied = l.compacted
	l.tailFirst = l.last + 1
	return l, nil
}

// save persists entries (replacing any stored entries at or after the
// first one's index) and the HardState, waiting for the fsync when sync is
// set. Raft's Ready contract needs this done before the Ready's messages
// are sent.
func (l *raftLog) save(ents []*pb.Entry, hs *pb.HardState, sync bool) error {
	var b store.Batch
	if len(ents) > 0 {
		first := ents[0].GetIndex()
		if first <= l.compacted || first > l.last+1 {
			return fmt.Errorf("raftstore: raft log: appending entry %d after %d", first, l.last)
		}
		if first <= l.last {
			b.DeleteRange(l.keys.entry(first), l.keys.entry(l.last+1))
		}
		for _, e := range ents {
			v, err := proto.Marshal(e)
			if err != nil {
				return fmt.Errorf("raftstore: marshal entry: %w", err)
			}
			b.Set(l.keys.entry(e.GetIndex()), v)
		}
	}
	if !raft.IsEmptyHardState(hs) {
		v, err := proto.Marshal(hs)
		if err != nil {
			return fmt.Errorf("raftstore: marshal hard state: %w", err)
		}
		b.Set(l.keys.hardState(), v)
	}
	if b.Len() == 0 {
		return nil
	}
	p, err := l.db.Write(&b, sync)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		return fmt.Errorf("raftstore: raft log: %w", err)
	}
	if len(ents) > 0 {
		l.appendTail(ents)
	}
	if !raft.IsEmptyHardState(hs) {
		l.hs = hs
	}
	return nil
}

// appendTail adds saved entries to the in-memory tail, cutting off any
// entries they replace.
func (l *raftLog) appendTail(ents []*pb.Entry) {
	first := ents[0].GetIndex()
	if first < l.tailFirst {
		l.tail, l.tailFirst, l.tailBytes = nil, first, 0
	} else if cut := int(first - l.tailFirst); cut < len(l.tail) {
		for _, e := range l.tail[cut:] {
			l.tailBytes -= len(e.GetData())
		}
		clear(l.tail[cut:])
		l.tail = l.tail[:cut]
	}
	for _, e := range ents {
		l.tail = append(l.tail, e)
		l.tailBytes += len(e.GetData())
	}
	l.last = ents[len(ents)-1].GetIndex()
}

// trim drops entries at or below applied from the front of the tail while
// it is over its bounds.
func (l *raftLog) trim(applied uint64) {
	n := 0
	for n < len(l.tail) && l.tailFirst+uint64(n) <= applied &&
		(len(l.tail)-n > l.maxEntries || l.tailBytes > l.maxBytes) {
		l.tailBytes -= len(l.tail[n].GetData())
		n++
	}
	if n == 0 {
		return
	}
	clear(l.tail[:n])
	l.tail = l.tail[n:]
	l.tailFirst += uint64(n)
	if len(l.tail) == 0 {
		l.tail = nil
	}
}

// entry returns entry i (bootIndex < i <= last).
func (l *raftLog) entry(i uint64) (*pb.Entry, error) {
	if i >= l.tailFirst {
		return l.tail[i-l.tailFirst], nil
	}
	v, err := l.db.Get(l.keys.entry(i))
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft log entry %d: %w", i, err)
	}
	e := &pb.Entry{}
	if err := proto.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("raftstore: raft log entry %d: %w", i, err)
	}
	return e, nil
}

// startJoining empties the log's boot position: the node is joining and
// must receive a snapshot (with the membership) from the leader.
func (l *raftLog) startJoining() {
	l.joining, l.last, l.tailFirst = true, 0, 1
}

// InitialState implements raft.Storage.
func (l *raftLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	return l.hs, l.cs, nil
}

// Entries implements raft.Storage: entries [lo, hi), at least one, at
// most maxSize bytes beyond the first.
func (l *raftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if l.joining {
		return nil, raft.ErrUnavailable
	}
	if lo <= l.compacted {
		return nil, raft.ErrCompacted
	}
	if hi > l.last+1 || lo > hi {
		return nil, fmt.Errorf("raftstore: raft log: entries [%d, %d) beyond last %d", lo, hi, l.last)
	}
	var out []*pb.Entry
	var size uint64
	// take appends e unless it is past maxSize, and reports whether the
	// answer is complete.
	take := func(e *pb.Entry) bool {
		size += uint64(proto.Size(e))
		if len(out) > 0 && size > maxSize {
			return true
		}
		out = append(out, e)
		return false
	}
	if lo < l.tailFirst {
		// The entries below the in-memory tail, in one scan of the log
		// store: a lookup each cost a follower catching up tens of
		// thousands of entries (after a snapshot) hundreds of
		// milliseconds of the Raft loop, every write waiting.
		end, next, done := min(hi, l.tailFirst), lo, false
		err := l.db.ScanRange(l.keys.entry(lo), l.keys.entry(end), func(k, v []byte) error {
			if i, ok := l.keys.index(k); !ok || i != next {
				return fmt.Errorf("raftstore: raft log entry %d: missing", next)
			}
			e := &pb.Entry{}
			if err := proto.Unmarshal(v, e); err != nil { // copies v
				return fmt.Errorf("raftstore: raft log entry %d: %w", next, err)
			}
			next++
			if done = take(e); done {
				return store.ErrStopScan
			}
			return nil
		})
		switch {
		case err != nil:
			return nil, err
		case done:
			return out, nil
		case next != end:
			return nil, fmt.Errorf("raftstore: raft log entry %d: missing", next)
		}
		lo = end
	}
	for i := lo; i < hi; i++ {
		if take(l.tail[i-l.tailFirst]) {
			break
		}
	}
	return out, nil
}

// Term implements raft.Storage.
func (l *raftLog) Term(i uint64) (uint64, error) {
	switch {
	case l.joining && i == 0:
		return 0, nil
	case l.joining:
		return 0, raft.ErrUnavailable
	case i == l.compacted:
		return l.compactedTerm, nil
	case i < l.compacted:
		return 0, raft.ErrCompacted
	case i > l.last:
		return 0, raft.ErrUnavailable
	}
	e, err := l.entry(i)
	if err != nil {
		return 0, err
	}
	return e.GetTerm(), nil
}

// LastIndex implements raft.Storage.
func (l *raftLog) LastIndex() (uint64, error) { return l.last, nil }

// FirstIndex implements raft.Storage.
func (l *raftLog) FirstIndex() (uint64, error) {
	if l.joining {
		return 1, nil
	}
	return l.compacted + 1, nil
}

// Snapshot implements raft.Storage: Raft asks for it when a follower needs
// entries at or below the compaction point (or, joining, has none at all).
// It describes the state store at its applied index (at least the
// compaction point): the data itself is not in it but streamed to the
// follower by the node (snapshot.go), which checks that the state store's
// copy is at exactly this index, and takes its ConfState from the copy.
// It is temporarily unavailable while the node is joining (it has no
// state to give) and while the node's outgoing snapshot streams are at
// their bound (sendFree).
func (l *raftLog) Snapshot() (*pb.Snapshot, error) {
	if l.joining || (l.sendFree != nil && !l.sendFree()) {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	term, err := l.Term(l.applied)
	if err != nil {
		return nil, err
	}
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: new(l.applied), Term: new(term), ConfState: l.cs,
	}}, nil
}

// loadCompaction reads the compaction point, if one is stored.
func (l *raftLog) loadCompaction() error {
	v, err := l.db.Get(l.keys.compaction())
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	md := &pb.SnapshotMetadata{}
	if err := proto.Unmarshal(v, md); err != nil {
		return fmt.Errorf("compaction point: %w", err)
	}
	if md.GetIndex() < bootIndex {
		return fmt.Errorf("compaction point at index %d", md.GetIndex())
	}
	l.compacted, l.compactedTerm = md.GetIndex(), md.GetTerm()
	return nil
}

// setCompaction writes the compaction point md and deletes every entry at
// or below it (every entry, when all is set), in one synced batch; then it
// updates the in-memory view.
func (l *raftLog) setCompaction(md *pb.SnapshotMetadata, all bool) error {
	v, err := proto.Marshal(md)
	if err != nil {
		return fmt.Errorf("raftstore: marshal compaction point: %w", err)
	}
	var b store.Batch
	b.Set(l.keys.compaction(), v)
	end := l.keys.entry(md.GetIndex() + 1)
	if all {
		end = l.keys.entriesEnd()
	}
	b.DeleteRange(l.keys.entriesStart(), end)
	p, err := l.db.Write(&b, true)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		return fmt.Errorf("raftstore: raft log: compaction to %d: %w", md.GetIndex(), err)
	}
	l.compacted, l.compactedTerm = md.GetIndex(), md.GetTerm()
	if all || l.last < l.compacted {
		l.last = l.compacted
		clear(l.tail)
		l.tail, l.tailFirst, l.tailBytes = nil, l.compacted+1, 0
		return nil
	}
	l.dropTail(l.compacted)
	return nil
}

// compact moves the compaction point to ci (compacted < ci <= applied,
// and the state store durable up to applied: the caller synced it).
func (l *raftLog) compact(ci uint64) error {
	if ci <= l.compacted || ci > l.applied || ci > l.last {
		return fmt.Errorf("raftstore: raft log: compaction to %d outside (%d, %d]", ci, l.compacted, min(l.applied, l.last))
	}
	term, err := l.Term(ci)
	if err != nil {
		return err
	}
	return l.setCompaction(&pb.SnapshotMetadata{Index: new(ci), Term: new(term), ConfState: l.cs}, false)
}

// installSnapshot makes the log start after md's index: every entry is
// deleted (Raft hands a snapshot over only when the log does not already
// hold its index with its term), the point and the ConfState are md's.
func (l *raftLog) installSnapshot(md *pb.SnapshotMetadata) error {
	if err := l.setCompaction(md, true); err != nil {
		return err
	}
	l.joining = false
	l.cs = md.GetConfState()
	l.applied = md.GetIndex()
	return nil
}

// dropTail drops the in-memory entries at or below i.
func (l *raftLog) dropTail(i uint64) {
	if i < l.tailFirst {
		return
	}
	n := min(int(i-l.tailFirst+1), len(l.tail))
	for _, e := range l.tail[:n] {
		l.tailBytes -= len(e.GetData())
	}
	clear(l.tail[:n])
	l.tail = l.tail[n:]
	l.tailFirst += uint64(n)
	if len(l.tail) == 0 {
		l.tail = nil
		l.tailFirst = l.last + 1
	}
}

// close closes the durable log (a shared log store is closed by its
// Shards, after every group).
func (l *raftLog) close() error {
	if l.shared {
		return nil
	}
	return l.db.Close()
}
