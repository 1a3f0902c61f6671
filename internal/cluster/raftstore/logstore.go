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
//	"e" + index (8 bytes big-endian)  one entry, protobuf-marshalled
//	"h"                               the HardState, protobuf-marshalled
//
// There are no snapshots and no truncation in this slice: the log grows for
// the life of the cluster. Every node starts from the same synthetic
// snapshot at index 1, term 1, whose ConfState is Config.Peers (membership
// is static), so the first real entry has index 2; the snapshot is not
// stored because every Open builds it again from the configuration.
//
// raftLog is the raft.Storage the RawNode reads. Only the newest entries
// are kept in memory (a tail bounded by tailMaxEntries and tailMaxBytes,
// never dropping an entry not yet applied); older ones, which only a
// lagging follower needs, are read back from pebble. So memory does not
// grow with the log.
const (
	entryKeyPrefix = "e" // "f" is the first key after every entry
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

// raftLog is the durable Raft log and the raft.Storage over it. It is used
// by the Raft loop only (RawNode calls it from the loop's goroutine).
type raftLog struct {
	db   *pebblestore.Store
	hs   *pb.HardState
	cs   *pb.ConfState // the node's ConfState (the loop updates it as conf changes apply)
	last uint64        // index of the last stored entry (bootIndex if none)
	// joining: a node joining a group has no boot position yet (last is
	// 0) until the leader's boot snapshot arrives (acceptBoot).
	joining bool

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
	db, err := pebblestore.Open(dir, pebblestore.Options{Logger: log, FS: fs, MemTableSize: pebblestore.MinMemTableSize})
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft log: %w", err)
	}
	l := &raftLog{db: db, hs: &pb.HardState{}, cs: &pb.ConfState{Voters: voters}, last: bootIndex,
		maxEntries: tailMaxEntries, maxBytes: tailMaxBytes}
	// Key lengths only: values of separated entries are not read.
	err = db.ScanLengths([]byte(entryKeyPrefix), []byte("f"), func(k []byte, _ int) error {
		if len(k) != len(entryKeyPrefix)+8 {
			return fmt.Errorf("raftstore: raft log key %x", k)
		}
		i := binary.BigEndian.Uint64(k[len(entryKeyPrefix):])
		if want := l.last + 1; i != want {
			return fmt.Errorf("raftstore: raft log has entry %d where %d belongs", i, want)
		}
		l.last = i
		return nil
	})
	if err == nil {
		var hsb []byte
		hsb, err = db.Get([]byte(hardStateKey))
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = nil
		case err == nil:
			err = proto.Unmarshal(hsb, l.hs)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: raft log %s: %w", dir, err)
	}
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
		if first <= bootIndex || first > l.last+1 {
			return fmt.Errorf("raftstore: raft log: appending entry %d after %d", first, l.last)
		}
		if first <= l.last {
			b.DeleteRange(entryKey(first), entryKey(l.last+1))
		}
		for _, e := range ents {
			v, err := proto.Marshal(e)
			if err != nil {
				return fmt.Errorf("raftstore: marshal entry: %w", err)
			}
			b.Set(entryKey(e.GetIndex()), v)
		}
	}
	if !raft.IsEmptyHardState(hs) {
		v, err := proto.Marshal(hs)
		if err != nil {
			return fmt.Errorf("raftstore: marshal hard state: %w", err)
		}
		b.Set([]byte(hardStateKey), v)
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
	v, err := l.db.Get(entryKey(i))
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
// must receive the boot snapshot (with the membership) from the leader.
func (l *raftLog) startJoining() {
	l.joining, l.last, l.tailFirst = true, 0, 1
}

// acceptBoot records the leader's boot snapshot: the log now starts after
// index 1, with cs as membership.
func (l *raftLog) acceptBoot(cs *pb.ConfState) {
	l.joining, l.cs = false, cs
	l.last, l.tailFirst = bootIndex, bootIndex+1
	l.tail, l.tailBytes = nil, 0
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
	if lo <= bootIndex {
		return nil, raft.ErrCompacted
	}
	if hi > l.last+1 || lo > hi {
		return nil, fmt.Errorf("raftstore: raft log: entries [%d, %d) beyond last %d", lo, hi, l.last)
	}
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; i++ {
		e, err := l.entry(i)
		if err != nil {
			return nil, err
		}
		size += uint64(proto.Size(e))
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
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
	case i == bootIndex:
		return bootTerm, nil
	case i < bootIndex:
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
	return bootIndex + 1, nil
}

// Snapshot implements raft.Storage: the synthetic boot snapshot, which
// every node has; Raft never needs another while the log is not
// truncated.
//
// Its ConfState is the node's current one, not the boot membership: a
// joining node must find itself in it to accept it (membership.go).
func (l *raftLog) Snapshot() (*pb.Snapshot, error) {
	if l.joining {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(bootIndex)), Term: new(uint64(bootTerm)), ConfState: l.cs,
	}}, nil
}

// close closes the durable log.
func (l *raftLog) close() error { return l.db.Close() }
