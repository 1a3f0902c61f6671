package raftstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Low truncation thresholds for tests: a compaction every 20 entries past
// the 5 kept, and snapshots in small chunks so that one takes several.
const (
	testCompactEntries = 20
	testKeepEntries    = 5
	testChunkSize      = 4 << 10
)

func lowThresholds(_ int, cfg *Config) {
	cfg.CompactEntries = testCompactEntries
	cfg.KeepEntries = testKeepEntries
	cfg.SnapshotChunkSize = testChunkSize
}

// value is a test value of about 1 KiB, so a few writes fill a chunk.
func value(i int) string {
	return fmt.Sprint(i, strings.Repeat("v", 1000))
}

// writeMany writes keys prefix0..prefix(n-1) on s.
func writeMany(t *testing.T, s store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := writeKV(s, fmt.Sprint(prefix, i), value(i)); err != nil {
			t.Fatalf("write %s%d: %v", prefix, i, err)
		}
	}
}

// dump returns every raw record of nd's state store: data and meta
// records.
func dump(nd *Node) (map[string]string, error) {
	out := map[string]string{}
	err := nd.withState(func(st *pebblestore.Store) error {
		sn, err := st.NewSnapshot()
		if err != nil {
			return err
		}
		defer func() { _ = sn.Close() }()
		return sn.Export(nil, func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	return out, err
}

// sameState fails unless a's and b's state stores hold the same records.
func sameState(a, b *Node) error {
	da, err := dump(a)
	if err != nil {
		return err
	}
	db, err := dump(b)
	if err != nil {
		return err
	}
	if len(da) != len(db) {
		return fmt.Errorf("node %d has %d records, node %d %d", a.cfg.ID, len(da), b.cfg.ID, len(db))
	}
	for k, v := range da {
		if w, ok := db[k]; !ok || w != v {
			return fmt.Errorf("record %q differs between node %d and node %d", k, a.cfg.ID, b.cfg.ID)
		}
	}
	return nil
}

// openLogOf opens the raft log of a stopped node.
func (c *cluster) openLogOf(i int) *raftLog {
	c.t.Helper()
	var fs vfs.FS
	if c.fss[i].MemFS != nil {
		fs = c.fss[i]
	}
	l, err := openRaftLog(filepath.Join(c.dirs[i], "raft"), []uint64{1, 2, 3}, fs, quietLogger())
	if err != nil {
		c.t.Fatalf("node %d raft log: %v", i+1, err)
	}
	c.t.Cleanup(func() { _ = l.close() })
	return l
}

// installed returns how many snapshots nd installed since it opened.
func installed(nd *Node) int {
	nd.snaps.mu.Lock()
	defer nd.snaps.mu.Unlock()
	return nd.snaps.installed
}

// TestCompactionTruncatesLog checks that every node truncates its log as
// it applies, that a restart reads only the short log (no entry key at or
// below the compaction point is left), and that the data is intact.
func TestCompactionTruncatesLog(t *testing.T) {
	c := newTunedCluster(t, 3, false, lowThresholds)
	li := c.leader(-1)
	const n = 120
	writeMany(t, c.nodes[li].Store(), "k", n)
	for _, nd := range c.nodes {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(nd, fmt.Sprint("k", n-1), value(n-1)) })
	}
	for i := range c.nodes {
		c.stop(i)
	}
	for i := range c.nodes {
		l := c.openLogOf(i)
		if l.compacted <= n/2 {
			t.Fatalf("node %d: compaction point %d after %d writes", i+1, l.compacted, n)
		}
		if held := l.last - l.compacted; held > testCompactEntries+testKeepEntries+10 {
			t.Fatalf("node %d holds %d entries (%d..%d)", i+1, held, l.compacted+1, l.last)
		}
		var below int
		err := l.db.ScanLengths([]byte(entryKeyPrefix), entryKey(l.compacted+1), func([]byte, int) error {
			below++
			return nil
		})
		if err != nil || below != 0 {
			t.Fatalf("node %d: %d entries at or below the compaction point %d (%v)", i+1, below, l.compacted, err)
		}
		if tm, err := l.Term(l.compacted); err != nil || tm == 0 {
			t.Fatalf("node %d: Term(%d) = %d, %v", i+1, l.compacted, tm, err)
		}
		if _, err := l.Term(l.compacted - 1); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("node %d: Term below the compaction point: %v", i+1, err)
		}
		if _, err := l.Entries(l.compacted, l.last+1, 1<<20); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("node %d: Entries from the compaction point: %v", i+1, err)
		}
		if fi, _ := l.FirstIndex(); fi != l.compacted+1 {
			t.Fatalf("node %d: FirstIndex %d, compaction point %d", i+1, fi, l.compacted)
		}
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.nodes {
		c.restart(i)
	}
	li = c.leader(-1)
	s := c.nodes[li].Store()
	for i := range n {
		if v, err := s.Get([]byte(fmt.Sprint("k", i))); err != nil || string(v) != value(i) {
			t.Fatalf("after restart: k%d = %.10q, %v", i, v, err)
		}
	}
	if err := writeKV(s, "after", "1"); err != nil {
		t.Fatal(err)
	}
}

// newTunedCluster is startCluster with tune applied to every node's
// configuration.
func newTunedCluster(t *testing.T, n int, crashable bool, tune func(int, *Config)) *cluster {
	t.Helper()
	return startClusterTuned(t, n, crashable, tune)
}

// TestLaggingFollowerCatchesUpBySnapshot stops a follower while the others
// write past several compactions: the entries it lacks are gone from every
// log, so it must install a snapshot, after which its state store (data and
// meta records) equals the leader's.
func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) { laggingFollowerCatchesUp(t, encrypt) })
	}
}

// laggingFollowerCatchesUp is TestLaggingFollowerCatchesUpBySnapshot,
// with every link in TLS when encrypt is set ([cluster] encrypt; a node
// makes a new certificate at every open, as a restarted process does).
func laggingFollowerCatchesUp(t *testing.T, encrypt bool) {
	tune := lowThresholds
	if encrypt {
		tune = func(i int, cfg *Config) {
			lowThresholds(i, cfg)
			e, err := nodeauth.NewEncryption()
			if err != nil {
				t.Fatal(err)
			}
			cfg.Secret, cfg.Encryption = []byte(strings.Repeat("s", nodeauth.MinSecretSize)), e
		}
	}
	c := newTunedCluster(t, 3, false, tune)
	li := c.leader(-1)
	fi := (li + 1) % 3
	writeMany(t, c.nodes[li].Store(), "a", 10)
	poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[fi], "a9", value(9)) })
	c.stop(fi)
	writeMany(t, c.nodes[li].Store(), "b", 150)
	if err := c.nodes[li].Advertise([]byte("leader info")); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	c.restart(fi)
	// Readers of the follower's store keep going through the install's
	// swap of its state store.
	readers := readWhile(t, c.nodes[fi].Store())
	poll.CheckFor(t, 20*time.Second, func() error {
		if installed(c.nodes[fi]) == 0 {
			return errors.New("no snapshot installed yet")
		}
		return sameState(c.nodes[li], c.nodes[fi])
	})
	if reads := readers(); reads == 0 {
		t.Fatal("no reads ran during the catch-up")
	}
	if got := c.nodes[fi].Advertised(c.peers[li].ID); string(got) != "leader info" {
		t.Fatalf("follower's advertised info of the leader: %q", got)
	}
	// Taken from the copy, it counts as applied at the install: after it
	// was written, and after the restart.
	if a := c.nodes[fi].AdvertisedSince()[c.peers[li].ID]; a.AppliedAt.Before(restarted) {
		t.Fatalf("follower's advertised info of the leader applied at %v, want after the restart at %v", a.AppliedAt, restarted)
	}
	// The follower goes on from the snapshot: new writes reach it.
	writeMany(t, c.nodes[li].Store(), "c", 30)
	poll.CheckFor(t, 10*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
	// And it restarts on the installed state.
	c.stop(fi)
	c.restart(fi)
	if err := stateHas(c.nodes[fi], "b149", value(149)); err != nil {
		t.Fatal(err)
	}
}

// readWhile reads s (a follower's store holding a0..a9) in a loop until
// the returned function is called, which returns how many reads
// succeeded. Every read must succeed with the right value.
func readWhile(t *testing.T, s store.Store) func() int {
	t.Helper()
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		reads := 0
		defer func() { done <- reads }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v, err := s.Get([]byte("a5")); err != nil || string(v) != value(5) {
				t.Errorf("read during catch-up: a5 = %.10q, %v", v, err)
				return
			}
			n := 0
			err := s.Scan([]byte("a"), func(k, v []byte) error { n++; return nil })
			if err != nil || n != 10 {
				t.Errorf("scan during catch-up: %d keys, %v", n, err)
				return
			}
			reads++
		}
	}()
	return func() int {
		close(stop)
		return <-done
	}
}

// TestCrashDuringCompaction cuts the power of a follower again and again
// while the cluster writes past compactions, so the cut lands at arbitrary
// points of the apply/sync/compact sequence; every time the node must
// reopen with a consistent log and state and catch up.
func TestCrashDuringCompaction(t *testing.T) {
	c := newTunedCluster(t, 3, true, lowThresholds)
	li := c.leader(-1)
	fi := (li + 1) % 3
	for round := range 5 {
		prefix := fmt.Sprint("r", round, "-")
		s := c.nodes[li].Store()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				if err := writeKV(s, fmt.Sprint(prefix, i), value(i)); err != nil {
					t.Errorf("write %s%d: %v", prefix, i, err)
					return
				}
			}
		}()
		// Cut the follower's power while the writes are going on.
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[fi], fmt.Sprint(prefix, 10+round*5), value(10+round*5)) })
		c.crash(fi)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		c.restart(fi)
		poll.CheckFor(t, 20*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
	}
	// The whole cluster loses power, and comes back with every write.
	for i := range c.nodes {
		c.crash(i)
	}
	for i := range c.nodes {
		c.restart(i)
	}
	li = c.leader(-1)
	s := c.nodes[li].Store()
	for round := range 5 {
		for i := range 40 {
			k := fmt.Sprint("r", round, "-", i)
			if v, err := s.Get([]byte(k)); err != nil || string(v) != value(i) {
				t.Fatalf("after power cut: %s = %.10q, %v", k, v, err)
			}
		}
	}
}

// powerCutCluster is a three-node cluster with low compaction thresholds
// whose armed node loses power the first time it reaches crash point step:
// its MemFS is crash-cloned (only what it synced survives) and the step
// fails.
type powerCutCluster struct {
	*cluster
	step   string
	mu     sync.Mutex
	target int // the armed node, -1 for none
	clone  crashfs.FS
}

func newPowerCutCluster(t *testing.T, step string) *powerCutCluster {
	pc := &powerCutCluster{step: step, target: -1}
	pc.cluster = newTunedCluster(t, 3, true, func(i int, cfg *Config) {
		lowThresholds(i, cfg)
		cfg.crashPoint = func(s string) error {
			pc.mu.Lock()
			defer pc.mu.Unlock()
			if i == pc.target && s == pc.step && pc.clone.MemFS == nil {
				pc.clone = pc.fss[i].CrashClone(vfs.CrashCloneCfg{})
				return errors.New("power cut")
			}
			return nil
		}
	})
	return pc
}

// arm makes node i the one whose power is cut.
func (pc *powerCutCluster) arm(i int) {
	pc.mu.Lock()
	pc.target = i
	pc.mu.Unlock()
}

// awaitCut waits until the armed node reached the step; what names the
// operation for the failure message.
func (pc *powerCutCluster) awaitCut(t *testing.T, timeout time.Duration, what string) {
	t.Helper()
	poll.CheckFor(t, timeout, func() error {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		if pc.clone.MemFS == nil {
			return fmt.Errorf("no %s reached step %s", what, pc.step)
		}
		return nil
	})
}

// reopen closes node i and starts it again from what it had synced when
// its power was cut, disarmed.
func (pc *powerCutCluster) reopen(i int) {
	_ = pc.nodes[i].Close()
	pc.nodes[i] = nil
	pc.mu.Lock()
	pc.target = -1
	pc.fss[i] = pc.clone
	pc.mu.Unlock()
	pc.restart(i)
}

// TestCrashAtCompactionSteps cuts a follower's power right after it
// synced its state store for a compaction, and right after it cut its
// log: either way it reopens with every entry its state store lacks, and
// goes on.
func TestCrashAtCompactionSteps(t *testing.T) {
	for _, step := range []string{compactSynced, compactDone} {
		t.Run(step, func(t *testing.T) {
			pc := newPowerCutCluster(t, step)
			c := pc.cluster
			li := c.leader(-1)
			fi := (li + 1) % 3
			pc.arm(fi)
			writeMany(t, c.nodes[li].Store(), "a", 3*(testCompactEntries+testKeepEntries))
			pc.awaitCut(t, 10*time.Second, "compaction")
			pc.reopen(fi)
			poll.CheckFor(t, 20*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
			writeMany(t, c.nodes[li].Store(), "b", 5)
			poll.CheckFor(t, 10*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
		})
	}
}

// TestCrashDuringSnapshotInstall cuts a lagging follower's power at each
// step of a snapshot install: the node must reopen (finishing the install
// or starting over from its old state) and end with the leader's state.
func TestCrashDuringSnapshotInstall(t *testing.T) {
	for _, step := range []string{installReceived, installLogged, installMoved, installSwapped} {
		t.Run(step, func(t *testing.T) {
			pc := newPowerCutCluster(t, step)
			c := pc.cluster
			li := c.leader(-1)
			fi := (li + 1) % 3
			writeMany(t, c.nodes[li].Store(), "a", 10)
			poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[fi], "a9", value(9)) })
			c.stop(fi)
			writeMany(t, c.nodes[li].Store(), "b", 100)
			pc.arm(fi)
			c.restart(fi)
			pc.awaitCut(t, 20*time.Second, "install")
			// The power was cut at that step: reopen from what was synced.
			pc.reopen(fi)
			// Once the raft log has recorded the snapshot, Open finishes
			// the install itself; before that, the leader sends it again.
			again := step == installReceived
			poll.CheckFor(t, 20*time.Second, func() error {
				if again && installed(c.nodes[fi]) == 0 {
					return errors.New("no snapshot installed after reopening")
				}
				return sameState(c.nodes[li], c.nodes[fi])
			})
			if n := installed(c.nodes[fi]); !again && n > 0 {
				t.Fatalf("after a cut at %s the node installed %d snapshots after reopening", step, n)
			}
			writeMany(t, c.nodes[li].Store(), "c", 5)
			poll.CheckFor(t, 10*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
		})
	}
}

// TestSnapshotReceiveRefusesBadStream feeds a receiving node chunks out of
// order and with a wrong checksum: each stream is dropped, its directory
// removed, and nothing reaches Raft.
func TestSnapshotReceiveRefusesBadStream(t *testing.T) {
	c := newCluster(t, 1)
	nd := c.nodes[0]
	md := &pb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1}}}
	msg := func(data []byte) *pb.Message {
		return &pb.Message{Type: new(pb.MessageType_MsgSnap), From: new(uint64(7)), To: new(uint64(1)),
			Snapshot: &pb.Snapshot{Metadata: md, Data: data}}
	}
	data := appendRecord(appendChunkHeader(nil, 0, chunkData), []byte("k"), []byte("v"))
	end := func(seq uint32, count, size uint64, crc uint32) []byte {
		b := appendChunkHeader(nil, seq, chunkEnd)
		b = appendU64(b, count)
		b = appendU64(b, size)
		return append(b, byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc))
	}
	recvDir := nd.snapDir(100, 2) + ".7" + recvSuffix
	// Out of order: chunk 2 after chunk 0.
	if out, ack := nd.receiveSnapshot(msg(data)); out != nil || ack != nil {
		t.Fatalf("a data chunk reached Raft or was acknowledged (%v)", ack)
	}
	if !exists(nd.fs(), recvDir) {
		t.Fatal("no receive directory after the first chunk")
	}
	if out, ack := nd.receiveSnapshot(msg(end(2, 1, 0, 0))); out != nil || !bytes.Equal(ack, []byte{ackRefused}) {
		t.Fatalf("an out-of-order end reached Raft or was not refused (%v)", ack)
	}
	if exists(nd.fs(), recvDir) {
		t.Fatal("receive directory left after a dropped stream")
	}
	// A wrong checksum.
	if out, _ := nd.receiveSnapshot(msg(data)); out != nil {
		t.Fatal("a data chunk reached Raft")
	}
	if out, ack := nd.receiveSnapshot(msg(end(1, 1, uint64(len(data)-chunkHeaderLen), 12345))); out != nil || !bytes.Equal(ack, []byte{ackRefused}) {
		t.Fatalf("a stream with a bad checksum reached Raft or was not refused (%v)", ack)
	}
	if exists(nd.fs(), recvDir) || exists(nd.fs(), nd.snapDir(100, 2)) {
		t.Fatal("directory left after a bad checksum")
	}
	// Garbage.
	if out, _ := nd.receiveSnapshot(msg([]byte("junk"))); out != nil {
		t.Fatal("garbage reached Raft")
	}
	// A good stream is acknowledged, and reaches Raft without its data.
	crc := crc32.Update(0, crcTable, data[chunkHeaderLen:])
	if out, _ := nd.receiveSnapshot(msg(data)); out != nil {
		t.Fatal("a data chunk reached Raft")
	}
	out, ack := nd.receiveSnapshot(msg(end(1, 1, uint64(len(data)-chunkHeaderLen), crc)))
	if out == nil || len(out.GetSnapshot().GetData()) != 0 || out.GetSnapshot().GetMetadata().GetIndex() != 100 || !bytes.Equal(ack, []byte{ackTaken}) {
		t.Fatalf("a good stream: %v, ack %v", out, ack)
	}
	if !exists(nd.fs(), nd.snapDir(100, 2)) || exists(nd.fs(), recvDir) {
		t.Fatal("a good stream is not under its final name")
	}
}

func appendU64(b []byte, v uint64) []byte {
	for s := 56; s >= 0; s -= 8 {
		b = append(b, byte(v>>s))
	}
	return b
}

// FuzzSnapshotChunk checks that the chunk decoder never panics and that
// whatever it accepts encodes back to the same bytes.
func FuzzSnapshotChunk(f *testing.F) {
	data := appendChunkHeader(nil, 3, chunkData)
	data = appendRecord(data, []byte("key"), []byte("value"))
	data = appendRecord(data, []byte("\x00sluice/meta/applied"), make([]byte, 8))
	f.Add(data)
	f.Add(appendChunkHeader(nil, 0, chunkData))
	end := appendChunkHeader(nil, 4, chunkEnd)
	f.Add(append(end, make([]byte, chunkEndLen)...))
	f.Add(data[:len(data)-3])
	f.Add([]byte("SNP\x02\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeChunk(b)
		if err != nil {
			if !errors.Is(err, errBadChunk) {
				t.Fatalf("error %v does not wrap errBadChunk", err)
			}
			return
		}
		out := appendChunkHeader(nil, c.seq, c.kind)
		switch c.kind {
		case chunkData:
			n := 0
			for k, v := range records(c.records) {
				out = appendRecord(out, k, v)
				n++
			}
			if n != c.n {
				t.Fatalf("%d records iterated, %d decoded", n, c.n)
			}
		case chunkEnd:
			out = appendU64(out, c.count)
			out = appendU64(out, c.size)
			out = append(out, byte(c.crc>>24), byte(c.crc>>16), byte(c.crc>>8), byte(c.crc))
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoded %x, decoded from %x", out, b)
		}
	})
}

// TestCompactionByBytes checks the byte threshold: with the entry count
// threshold out of reach, 1 KiB writes past CompactBytes still cut the log.
func TestCompactionByBytes(t *testing.T) {
	c := newTunedCluster(t, 1, false, func(_ int, cfg *Config) {
		cfg.CompactEntries = 1 << 40
		cfg.CompactBytes = 16 << 10
		cfg.KeepEntries = testKeepEntries
	})
	writeMany(t, c.nodes[c.leader(-1)].Store(), "k", 40)
	c.stop(0)
	l := c.openLogOf(0)
	if l.compacted <= bootIndex || l.last-l.compacted > 30 {
		t.Fatalf("40 writes of 1 KiB with a 16 KiB threshold: compaction point %d, last %d", l.compacted, l.last)
	}
}

// TestSnapshotChunkSizeLimit checks that a chunk size that would not fit
// in a frame is refused at Open.
func TestSnapshotChunkSizeLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{ID: 1, Peers: []Peer{{ID: 1}}, Dir: t.TempDir(), Listener: ln,
		SnapshotChunkSize: MaxSnapshotChunkSize + 1, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "snapshot chunk size") {
		t.Fatalf("Open with a chunk size over the limit: %v", err)
	}
}

// TestJoinAfterCompaction adds a node to a group whose logs no longer
// start at index 2: the joiner gets the leader's state as a snapshot, with
// the membership in it, goes on from there, and restarts as a member.
func TestJoinAfterCompaction(t *testing.T) {
	c := newTunedCluster(t, 3, false, lowThresholds)
	li := c.leader(-1)
	writeMany(t, c.nodes[li].Store(), "k", 100)
	ji := c.addJoiner()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.nodes[li].AddMember(ctx, c.peers[ji].ID, c.peers[ji].RaftAddr); err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		if installed(c.nodes[ji]) == 0 {
			return errors.New("the joiner has installed no snapshot")
		}
		if err := sameState(c.nodes[li], c.nodes[ji]); err != nil {
			return err
		}
		// Status is refreshed at the end of the Ready cycle that
		// installed the snapshot, a moment after the state store (CI
		// under load once read it in between).
		if st := c.nodes[ji].Status(); st.Joining || len(st.Members) != 4 {
			return fmt.Errorf("joined node status %+v", st)
		}
		return nil
	})
	writeMany(t, c.nodes[li].Store(), "m", 10)
	poll.CheckFor(t, 10*time.Second, func() error { return sameState(c.nodes[li], c.nodes[ji]) })
	c.stop(ji)
	c.restart(ji)
	if st := c.nodes[ji].Status(); st.Joining || len(st.Members) != 4 {
		t.Fatalf("restarted joined node status %+v", st)
	}
	writeMany(t, c.nodes[li].Store(), "n", 10)
	poll.CheckFor(t, 10*time.Second, func() error { return sameState(c.nodes[li], c.nodes[ji]) })
}

// TestOpenRefusesKeepNotBelowCompact: keeping as many entries as a
// compaction waits for would compact (and sync the state store) on every
// Ready; Open refuses it.
func TestOpenRefusesKeepNotBelowCompact(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{ID: 1, Peers: []Peer{{ID: 1, RaftAddr: ln.Addr().String()}}, Dir: t.TempDir(), Listener: ln,
		CompactEntries: 100, KeepEntries: 100, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "KeepEntries 100 must be below CompactEntries 100") {
		t.Fatalf("Open: %v", err)
	}
}
