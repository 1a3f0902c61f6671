package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

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
// the life of the cluster and is loaded whole into a raft.MemoryStorage at
// Open. Every node starts from the same synthetic snapshot at index 1, term
// 1, whose ConfState is Config.Peers (membership is static), so the first
// real entry has index 2; the snapshot is not stored because every Open
// builds it again from the configuration.
const (
	entryKeyPrefix = "e"
	hardStateKey   = "h"
)

// bootIndex and bootTerm are the synthetic snapshot's position.
const (
	bootIndex = 1
	bootTerm  = 1
)

func entryKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(entryKeyPrefix), i)
}

// raftLog is the durable Raft log and its in-memory copy.
type raftLog struct {
	db   *pebblestore.Store
	mem  *raft.MemoryStorage
	last uint64 // index of the last stored entry
}

// openRaftLog opens the log in dir and loads it, with the HardState, into a
// MemoryStorage whose ConfState lists voters.
func openRaftLog(dir string, voters []uint64, log *slog.Logger) (*raftLog, error) {
	db, err := pebblestore.Open(dir, pebblestore.Options{Logger: log, MemTableSize: pebblestore.MinMemTableSize})
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft log: %w", err)
	}
	l := &raftLog{db: db, mem: raft.NewMemoryStorage(), last: bootIndex}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index:     new(uint64(bootIndex)),
		Term:      new(uint64(bootTerm)),
		ConfState: &pb.ConfState{Voters: voters},
	}}
	if err := l.mem.ApplySnapshot(snap); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: raft log: %w", err)
	}
	var ents []*pb.Entry
	err = db.Scan([]byte(entryKeyPrefix), func(k, v []byte) error {
		e := &pb.Entry{}
		if err := proto.Unmarshal(v, e); err != nil {
			return fmt.Errorf("raftstore: raft log entry %x: %w", k, err)
		}
		if want := l.last + 1; e.GetIndex() != want {
			return fmt.Errorf("raftstore: raft log has entry %d where %d belongs", e.GetIndex(), want)
		}
		l.last = e.GetIndex()
		ents = append(ents, e)
		return nil
	})
	if err == nil && len(ents) > 0 {
		err = l.mem.Append(ents)
	}
	if err == nil {
		var hsb []byte
		hsb, err = db.Get([]byte(hardStateKey))
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = nil
		case err == nil:
			hs := &pb.HardState{}
			if err = proto.Unmarshal(hsb, hs); err == nil {
				err = l.mem.SetHardState(hs)
			}
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: raft log %s: %w", dir, err)
	}
	return l, nil
}

// save persists entries (replacing any stored entries at or after the
// first one's index) and the HardState, waiting for the fsync when sync is
// set, then adds them to the in-memory log. Raft's Ready contract needs
// this done before the Ready's messages are sent.
func (l *raftLog) save(ents []*pb.Entry, hs *pb.HardState, sync bool) error {
	var b store.Batch
	if len(ents) > 0 {
		first := ents[0].GetIndex()
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
		if err := l.mem.Append(ents); err != nil {
			return fmt.Errorf("raftstore: raft log: %w", err)
		}
		l.last = ents[len(ents)-1].GetIndex()
	}
	if !raft.IsEmptyHardState(hs) {
		if err := l.mem.SetHardState(hs); err != nil {
			return fmt.Errorf("raftstore: raft log: %w", err)
		}
	}
	return nil
}

// close closes the durable log.
func (l *raftLog) close() error { return l.db.Close() }
