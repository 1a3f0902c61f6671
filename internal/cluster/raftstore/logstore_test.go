package raftstore

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func ent(i, term uint64) *pb.Entry {
	return &pb.Entry{Index: new(i), Term: new(term), Data: fmt.Appendf(nil, "e%d.%d", i, term)}
}

func checkEntries(t *testing.T, l *raftLog, lo, hi uint64, want func(i uint64) string) {
	t.Helper()
	got, err := l.Entries(lo, hi, 1<<30)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", lo, hi, err)
	}
	if len(got) != int(hi-lo) {
		t.Fatalf("Entries(%d, %d): %d entries", lo, hi, len(got))
	}
	for k, e := range got {
		if i := lo + uint64(k); e.GetIndex() != i || string(e.GetData()) != want(i) {
			t.Fatalf("entry %d = %d %q, want %q", i, e.GetIndex(), e.GetData(), want(i))
		}
	}
}

// TestRaftLog covers the log as raft.Storage: entries served from the
// in-memory tail and, once trimmed, from disk; a conflicting append that
// replaces a suffix; maxSize; the HardState; and a reopen.
func TestRaftLog(t *testing.T) {
	dir := t.TempDir()
	l, err := openRaftLog(dir, []uint64{1, 2, 3}, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	l.maxEntries, l.maxBytes = 10, 1<<20
	var ents []*pb.Entry
	for i := uint64(2); i <= 50; i++ {
		ents = append(ents, ent(i, 1))
	}
	hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(2)), Commit: new(uint64(40))}
	if err := l.save(ents, hs, true); err != nil {
		t.Fatal(err)
	}
	l.trim(40)
	if l.tailFirst != 41 || len(l.tail) != 10 {
		t.Fatalf("tail after trim: first %d len %d", l.tailFirst, len(l.tail))
	}
	term1 := func(i uint64) string { return fmt.Sprintf("e%d.1", i) }
	checkEntries(t, l, 2, 51, term1) // disk then memory
	// maxSize ends an answer within the disk's part and within the tail's.
	size := func(i uint64) uint64 { return uint64(proto.Size(ent(i, 1))) } // the same for 2..9, and for 10..50
	for _, c := range []struct{ lo, max, want uint64 }{{2, 3 * size(2), 3}, {38, 5 * size(38), 5}, {2, 0, 1}, {40, 0, 1}} {
		got, err := l.Entries(c.lo, 51, c.max)
		if err != nil || uint64(len(got)) != c.want || got[0].GetIndex() != c.lo || got[len(got)-1].GetIndex() != c.lo+c.want-1 {
			t.Fatalf("Entries(%d, 51, %d): %d entries, %v; want %d from %d", c.lo, c.max, len(got), err, c.want, c.lo)
		}
	}
	// A new leader's entries replace 45..50 with 45..47 of term 2, and
	// also a range below the tail.
	if err := l.save([]*pb.Entry{ent(45, 2), ent(46, 2), ent(47, 2)}, nil, true); err != nil {
		t.Fatal(err)
	}
	mixed := func(i uint64) string {
		if i >= 45 {
			return fmt.Sprintf("e%d.2", i)
		}
		return term1(i)
	}
	checkEntries(t, l, 2, 48, mixed)
	if err := l.save([]*pb.Entry{ent(30, 3)}, nil, true); err != nil {
		t.Fatal(err)
	}
	if li, _ := l.LastIndex(); li != 30 {
		t.Fatalf("LastIndex = %d, want 30", li)
	}
	if tm, err := l.Term(30); err != nil || tm != 3 {
		t.Fatalf("Term(30) = %d, %v", tm, err)
	}
	if tm, err := l.Term(1); err != nil || tm != bootTerm {
		t.Fatalf("Term(1) = %d, %v", tm, err)
	}
	if _, err := l.Term(31); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("Term(31): %v", err)
	}
	if _, err := l.Entries(1, 3, 100); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries(1, 3): %v", err)
	}
	if got, err := l.Entries(2, 30, 1); err != nil || len(got) != 1 {
		t.Fatalf("Entries with maxSize 1: %d entries, %v (want exactly 1)", len(got), err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l, err = openRaftLog(dir, []uint64{1, 2, 3}, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.close() }()
	if l.last != 30 {
		t.Fatalf("reopened last = %d, want 30", l.last)
	}
	checkEntries(t, l, 2, 31, func(i uint64) string {
		if i == 30 {
			return "e30.3"
		}
		return term1(i)
	})
	gotHS, cs, _ := l.InitialState()
	if gotHS.GetCommit() != 40 || gotHS.GetVote() != 2 || len(cs.GetVoters()) != 3 {
		t.Fatalf("reopened state %v %v", gotHS, cs)
	}
}

// TestRaftLogCompaction covers the log's compaction point: entries at or
// below it are gone (ErrCompacted), its term is kept, a reopen starts after
// it, and installing a snapshot empties the log.
func TestRaftLogCompaction(t *testing.T) {
	dir := t.TempDir()
	l, err := openRaftLog(dir, []uint64{1, 2, 3}, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	l.maxEntries = 10
	var ents []*pb.Entry
	for i := uint64(2); i <= 50; i++ {
		ents = append(ents, ent(i, 1+i/20))
	}
	if err := l.save(ents, nil, true); err != nil {
		t.Fatal(err)
	}
	l.applied = 45
	l.trim(45)
	if err := l.compact(46); err == nil {
		t.Fatal("compaction beyond the applied index accepted")
	}
	if err := l.compact(30); err != nil {
		t.Fatal(err)
	}
	check := func(l *raftLog) {
		t.Helper()
		if fi, _ := l.FirstIndex(); fi != 31 {
			t.Fatalf("FirstIndex = %d, want 31", fi)
		}
		if tm, err := l.Term(30); err != nil || tm != 2 {
			t.Fatalf("Term(30) = %d, %v", tm, err)
		}
		if _, err := l.Term(29); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Term(29): %v", err)
		}
		if _, err := l.Entries(30, 40, 1<<20); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Entries(30, 40): %v", err)
		}
		checkEntries(t, l, 31, 51, func(i uint64) string { return fmt.Sprintf("e%d.%d", i, 1+i/20) })
	}
	check(l)
	if err := l.save([]*pb.Entry{ent(30, 9)}, nil, true); err == nil {
		t.Fatal("an append at the compaction point was accepted")
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l, err = openRaftLog(dir, []uint64{1, 2, 3}, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.close() }()
	if l.compacted != 30 || l.last != 50 {
		t.Fatalf("reopened: compaction point %d, last %d", l.compacted, l.last)
	}
	check(l)
	md := &pb.SnapshotMetadata{Index: new(uint64(80)), Term: new(uint64(7)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3, 4}}}
	if err := l.installSnapshot(md); err != nil {
		t.Fatal(err)
	}
	if fi, _ := l.FirstIndex(); fi != 81 {
		t.Fatalf("after a snapshot FirstIndex = %d", fi)
	}
	if li, _ := l.LastIndex(); li != 80 {
		t.Fatalf("after a snapshot LastIndex = %d", li)
	}
	if tm, err := l.Term(80); err != nil || tm != 7 {
		t.Fatalf("after a snapshot Term(80) = %d, %v", tm, err)
	}
	if s, err := l.Snapshot(); err != nil || s.GetMetadata().GetIndex() != 80 || len(s.GetMetadata().GetConfState().GetVoters()) != 4 {
		t.Fatalf("Snapshot() = %v, %v", s, err)
	}
	if err := l.save([]*pb.Entry{ent(81, 7)}, nil, true); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, l, 81, 82, func(i uint64) string { return fmt.Sprintf("e%d.7", i) })
}
