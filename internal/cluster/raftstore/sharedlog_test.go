package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestSharedLogKeepsGroupsApart: the logs of shard 0 and shard 1 in one
// store: appends, a conflicting append, a compaction of one and a
// snapshot install (every entry deleted) of the other each touch only
// their own group's keys, and both read back the same after a reopen.
func TestSharedLogKeepsGroupsApart(t *testing.T) {
	dir := t.TempDir()
	db, err := openSharedLog(dir, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	open := func(db *pebblestore.Store, k int) *raftLog {
		t.Helper()
		l, err := loadRaftLog(db, shardLogKeys(k), []uint64{1, 2, 3}, true)
		if err != nil {
			t.Fatal(err)
		}
		l.maxEntries, l.maxBytes = 5, 1<<20 // older entries are read from disk
		return l
	}
	l0, l1 := open(db, 0), open(db, 1)
	var ents0, ents1 []*pb.Entry
	for i := uint64(2); i <= 40; i++ {
		ents0 = append(ents0, ent(i, 1))
		ents1 = append(ents1, ent(i, 2))
	}
	hs := func(term, commit uint64) *pb.HardState {
		return &pb.HardState{Term: new(term), Vote: new(uint64(1)), Commit: new(commit)}
	}
	if err := l0.save(ents0, hs(1, 30), true); err != nil {
		t.Fatal(err)
	}
	if err := l1.save(ents1, hs(2, 35), true); err != nil {
		t.Fatal(err)
	}
	// Shard 1's entries from 38 are replaced; shard 0's stay.
	if err := l1.save([]*pb.Entry{ent(38, 3)}, nil, true); err != nil {
		t.Fatal(err)
	}
	l0.trim(40)
	l1.trim(38)
	l0.applied = 30
	if err := l0.compact(20); err != nil {
		t.Fatal(err)
	}
	term := func(tm uint64) func(uint64) string {
		return func(i uint64) string { return fmt.Sprintf("e%d.%d", i, tm) }
	}
	checkEntries(t, l0, 21, 41, term(1))
	checkEntries(t, l1, 2, 38, term(2))
	if err := l0.close(); err != nil { // shared: leaves db open
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("h")); err != nil {
		t.Fatalf("closing a shared log closed the store: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = openSharedLog(dir, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	l0, l1 = open(db, 0), open(db, 1)
	if l0.compacted != 20 || l0.last != 40 || l1.compacted != bootIndex || l1.last != 38 {
		t.Fatalf("reopened: shard 0 (%d, %d], shard 1 (%d, %d]; want (20, 40] and (1, 38]", l0.compacted, l0.last, l1.compacted, l1.last)
	}
	if l0.hs.GetCommit() != 30 || l1.hs.GetCommit() != 35 || l1.hs.GetTerm() != 2 {
		t.Fatalf("reopened HardStates %v and %v", l0.hs, l1.hs)
	}
	checkEntries(t, l0, 21, 41, term(1))
	checkEntries(t, l1, 2, 38, term(2))
	// A snapshot install on shard 1 deletes its entries only.
	if err := l1.installSnapshot(&pb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(4)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	l0 = open(db, 0)
	checkEntries(t, l0, 21, 41, term(1))
	var left int
	if err := db.ScanLengths(shardLogKeys(1).entriesStart(), shardLogKeys(1).entriesEnd(), func([]byte, int) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d entries of shard 1 left after its snapshot install", left)
	}
}

// TestMoveOwnLog: a shard's own log store (an earlier release's layout)
// is moved into the shared store with its compaction point, HardState and
// entries, leaving the marker file; a move a crash cut short — after the
// copy, after the rename, before the marker's removal of raft.moved — is
// finished at the next open with the same result.
func TestMoveOwnLog(t *testing.T) {
	for _, cut := range []string{"none", "after the copy", "after the rename", "before removing raft.moved"} {
		t.Run(cut, func(t *testing.T) {
			root := t.TempDir()
			shardDir := ShardDir(root, 1)
			own, err := openRaftLog(filepath.Join(shardDir, "raft"), []uint64{1, 2, 3}, nil, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			var ents []*pb.Entry
			for i := uint64(2); i <= 30; i++ {
				ents = append(ents, ent(i, 1+i/10))
			}
			if err := own.save(ents, &pb.HardState{Term: new(uint64(4)), Vote: new(uint64(2)), Commit: new(uint64(25))}, true); err != nil {
				t.Fatal(err)
			}
			own.applied = 25
			if err := own.compact(10); err != nil {
				t.Fatal(err)
			}
			if err := own.close(); err != nil {
				t.Fatal(err)
			}
			db, err := openSharedLog(root, nil, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			n := &Node{cfg: Config{Dir: shardDir, Shard: 1}, log: quietLogger()}
			keys := shardLogKeys(1)
			raftDir, moved := filepath.Join(shardDir, "raft"), filepath.Join(shardDir, movedLogDirName)
			switch cut {
			case "after the copy":
				if err := n.copyOwnLog(raftDir, db, keys); err != nil {
					t.Fatal(err)
				}
			case "after the rename", "before removing raft.moved":
				if err := n.copyOwnLog(raftDir, db, keys); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(raftDir, moved); err != nil {
					t.Fatal(err)
				}
				if cut == "before removing raft.moved" {
					if err := writeMarker(n.fs(), raftDir); err != nil {
						t.Fatal(err)
					}
				}
			}
			l, err := n.openShardLog(db, []uint64{1, 2, 3})
			if err != nil {
				t.Fatal(err)
			}
			if l.compacted != 10 || l.compactedTerm != 2 || l.last != 30 {
				t.Fatalf("moved log: (%d (term %d), %d], want (10 (term 2), 30]", l.compacted, l.compactedTerm, l.last)
			}
			if l.hs.GetTerm() != 4 || l.hs.GetVote() != 2 || l.hs.GetCommit() != 25 {
				t.Fatalf("moved HardState %v", l.hs)
			}
			checkEntries(t, l, 11, 31, func(i uint64) string { return fmt.Sprintf("e%d.%d", i, 1+i/10) })
			if b, err := os.ReadFile(raftDir); err != nil || string(b) != logMarker {
				t.Fatalf("the marker: %q, %v", b, err)
			}
			if _, err := os.Stat(moved); !os.IsNotExist(err) {
				t.Fatalf("raft.moved left: %v", err)
			}
			// Opening again changes nothing.
			if l, err = n.openShardLog(db, []uint64{1, 2, 3}); err != nil || l.last != 30 || l.compacted != 10 {
				t.Fatalf("opened again: %v, (%d, %d]", err, l.compacted, l.last)
			}
		})
	}
}

// TestShardsShareOneLogStore: three nodes with three shards keep every
// shard's Raft log in one store per node (a marker file where a shard's
// own store was); a node restarted on it catches up on every shard; and
// nodes whose shards had log stores of their own (the layout before)
// move them in at their next start, keeping every entry, and go on.
func TestShardsShareOneLogStore(t *testing.T) {
	c := newTunedShardCluster(t, 3, 3, func(_ int, cfg *Config) { cfg.ownLogs = true })
	leaders := c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	for k, l := range leaders {
		writeMany(t, c.nodes[l-1].Shard(k).Store(), fmt.Sprint("a", k, "-"), 20)
	}
	for i := range c.nodes {
		if fi, err := os.Stat(filepath.Join(ShardDir(c.dirs[i], 2), "raft")); err != nil || !fi.IsDir() {
			t.Fatalf("node %d: shard 2's own log store: %v", i+1, err)
		}
	}
	// Every node down, each shard's own log as it was.
	type pos struct{ compacted, last, term uint64 }
	before := map[[2]int]pos{}
	for i := range c.nodes {
		c.stop(i)
		for k := 1; k < 3; k++ {
			l, err := openRaftLog(filepath.Join(ShardDir(c.dirs[i], k), "raft"), nil, nil, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			before[[2]int{i, k}] = pos{l.compacted, l.last, l.hs.GetTerm()}
			if err := l.close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.tune = nil
	for i := range c.nodes {
		c.restart(i)
	}
	for i := range c.nodes {
		for k := 0; k < 3; k++ {
			if got := c.nodes[i].Shard(k).rl.db; got != c.nodes[i].logs {
				t.Fatalf("node %d: shard %d's log is not in the node's shared store", i+1, k)
			}
		}
	}
	leaders = c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	for k, l := range leaders {
		writeMany(t, c.nodes[l-1].Shard(k).Store(), fmt.Sprint("b", k, "-"), 20)
	}
	// A node restarted on the shared store catches up on every shard.
	fi := int(leaders[1] - 1) // shard 1's leader, not shard 0's (the leaders are spread)
	c.stop(fi)
	for k, l := range leaders {
		if int(l-1) != fi {
			writeMany(t, c.nodes[l-1].Shard(k).Store(), fmt.Sprint("c", k, "-"), 20)
		}
	}
	c.restart(fi)
	leaders = c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	for k, l := range leaders {
		for i := range c.nodes {
			poll.CheckFor(t, 20*time.Second, func() error { return sameState(c.nodes[l-1].Shard(k), c.nodes[i].Shard(k)) })
		}
	}
	for i := range c.nodes {
		c.stop(i)
		db, err := openSharedLog(c.dirs[i], nil, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < 3; k++ {
			dir := ShardDir(c.dirs[i], k)
			if b, err := os.ReadFile(filepath.Join(dir, "raft")); err != nil || string(b) != logMarker {
				t.Fatalf("node %d, shard %d: the marker: %q, %v", i+1, k, b, err)
			}
			l, err := loadRaftLog(db, shardLogKeys(k), nil, true)
			if err != nil {
				t.Fatal(err)
			}
			b := before[[2]int{i, k}]
			if l.last < b.last || l.hs.GetTerm() < b.term {
				t.Fatalf("node %d, shard %d: log (%d, %d] in term %d after the move, was (%d, %d] in term %d", i+1, k, l.compacted, l.last, l.hs.GetTerm(), b.compacted, b.last, b.term)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
