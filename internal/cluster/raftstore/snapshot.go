package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"maps"
	"math/bits"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Snapshots: log truncation (logstore.go) deletes entries a follower that
// was down may still need, and a node that joins (membership.go) has no
// log at all. Raft then asks for a snapshot (raftLog.Snapshot, a MsgSnap in
// Ready.Messages) and this file moves one:
//
//   - The leader takes a pebble snapshot of its state store (data and meta
//     records: "applied", "conf", "adv/") at its applied index, which is at
//     least its compaction point, and streams it on a connection of its own
//     to the follower as MsgSnap frames, each carrying one chunk of the
//     encoding below in Snapshot.Data (at most Config.SnapshotChunkSize,
//     itself at most MaxSnapshotChunkSize, plus one record of at most
//     MaxEntrySize, so frames stay under MaxFrameSize). Only one chunk
//     is in memory on either side.
//   - The follower writes the chunks into a new pebble store in
//     Config.Dir/snap-<index>-<term>.<sender>.recv, checks the count,
//     length and CRC of the whole stream against the end chunk, syncs and
//     closes the store, renames the directory to snap-<index>-<term>
//     (synced), and only then hands the MsgSnap (without data) to Raft.
//   - When Raft hands the snapshot back in Ready.Snapshot, the follower
//     installs it (installSnapshot): first the raft log store records the
//     snapshot as its compaction point and drops every entry (one synced
//     batch), then the state store directory is swapped for the received
//     one (swapState), and applied, adv/ and the membership (conf,
//     member/: adoptMembership) are loaded from it.
//   - The follower answers the end chunk with one byte on the stream's
//     connection: taken (received, verified, durable) or refused. The
//     leader reports SnapshotFinish to Raft on "taken", SnapshotFailure on
//     a refusal, a failed write (or none read for 10 s) or no answer
//     within 20 s. The follower's append response at the snapshot's
//     index, once it has installed it, moves the leader on to replication.
//
// Crash cases of an install (Open finishes what a crash cut short,
// openState):
//
//   - before the raft log records the snapshot: the node restarts on its
//     old log and state; the received directory is removed, and the leader
//     sends a snapshot again.
//   - after the raft log records it (its compaction point is then beyond
//     the old state store's applied index, which never happens otherwise):
//     Open finds snap-<index>-<term> complete, as it was synced before Raft
//     saw the snapshot, and swaps it in.
//   - between the two renames of the swap (state -> state.old,
//     snap-<index>-<term> -> state, each followed by a sync of Config.Dir):
//     there is no state directory; Open renames the snapshot in.
//   - after the swap: state.old is removed at Open.
//
// Chunk encoding (Snapshot.Data of a MsgSnap frame):
//
//	magic   4 bytes "SNP\x01" (format version 1)
//	seq     4 bytes big-endian: the chunk's number, from 0
//	kind    1 byte: 0 data, 1 end
//	data:   records, each uvarint key length, key, uvarint value length, value
//	end:    count (8 bytes), total record bytes (8 bytes) and the CRC-32C
//	        (Castagnoli, 4 bytes) of every data chunk's record bytes in order
//
// Records are raw state store keys (pebblestore.Snapshot.Export) in
// ascending order.
const (
	chunkMagic     = "SNP\x01"
	chunkHeaderLen = len(chunkMagic) + 4 + 1
	chunkData      = 0
	chunkEnd       = 1
	chunkEndLen    = 8 + 8 + 4
)

// Directories under Config.Dir.
const (
	stateDirName    = "state"
	stateOldDirName = "state.old"
	snapDirPrefix   = "snap-"
	recvSuffix      = ".recv"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// The receiver's answer to a stream's end chunk.
const (
	ackTaken   byte = 0 // received, verified and durable
	ackRefused byte = 1
)

// errBadChunk is wrapped by every chunk decoding error.
var errBadChunk = errors.New("raftstore: bad snapshot chunk")

// chunk is one decoded snapshot chunk.
type chunk struct {
	seq     uint32
	kind    byte
	records []byte // data: the records, validated
	n       int    // data: how many
	// end: the totals of the whole stream.
	count, size uint64
	crc         uint32
}

// appendChunkHeader starts a chunk.
func appendChunkHeader(dst []byte, seq uint32, kind byte) []byte {
	dst = append(dst, chunkMagic...)
	dst = binary.BigEndian.AppendUint32(dst, seq)
	return append(dst, kind)
}

// appendRecord appends one key/value record.
func appendRecord(dst, k, v []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// decodeChunk decodes and validates one chunk. records of the result
// aliases b.
func decodeChunk(b []byte) (chunk, error) {
	var c chunk
	if len(b) < chunkHeaderLen || string(b[:len(chunkMagic)]) != chunkMagic {
		return c, fmt.Errorf("%w: no header", errBadChunk)
	}
	c.seq = binary.BigEndian.Uint32(b[len(chunkMagic):])
	c.kind = b[chunkHeaderLen-1]
	body := b[chunkHeaderLen:]
	switch c.kind {
	case chunkData:
		n := 0
		for rest := body; len(rest) > 0; n++ {
			var err error
			if _, _, rest, err = nextRecord(rest); err != nil {
				return c, err
			}
		}
		c.records, c.n = body, n
	case chunkEnd:
		if len(body) != chunkEndLen {
			return c, fmt.Errorf("%w: end of %d bytes", errBadChunk, len(body))
		}
		c.count = binary.BigEndian.Uint64(body)
		c.size = binary.BigEndian.Uint64(body[8:])
		c.crc = binary.BigEndian.Uint32(body[16:])
	default:
		return c, fmt.Errorf("%w: kind %d", errBadChunk, c.kind)
	}
	return c, nil
}

// uvarintLen is the length of x's canonical uvarint.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// nextRecord splits the first record off b. Lengths must be canonical
// uvarints, so that a chunk has one encoding.
func nextRecord(b []byte) (k, v, rest []byte, err error) {
	kl, n := binary.Uvarint(b)
	if n <= 0 || n != uvarintLen(kl) || kl > uint64(len(b)-n) {
		return nil, nil, nil, fmt.Errorf("%w: bad key length", errBadChunk)
	}
	k, b = b[n:n+int(kl)], b[n+int(kl):]
	vl, n := binary.Uvarint(b)
	if n <= 0 || n != uvarintLen(vl) || vl > uint64(len(b)-n) {
		return nil, nil, nil, fmt.Errorf("%w: bad value length", errBadChunk)
	}
	return k, b[n : n+int(vl)], b[n+int(vl):], nil
}

// records iterates validated records.
func records(b []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for len(b) > 0 {
			k, v, rest, err := nextRecord(b)
			if err != nil || !yield(k, v) {
				return
			}
			b = rest
		}
	}
}

// snapshots is a node's snapshot traffic: reports of finished outgoing
// streams for the loop, and the incoming ones being received.
type snapshots struct {
	mu      sync.Mutex
	reports map[uint64]raft.SnapshotStatus // by peer, for the loop
	// installed counts the snapshots installed since Open; sent, the
	// streams to members that ended with the whole copy written (Status).
	installed, sent int

	// recvMu guards recv. It is held while a chunk is written, so it is
	// not mu: the loop never waits for a receiver's disk.
	recvMu sync.Mutex
	recv   map[uint64]*snapRecv // by sending peer
}

// Steps of a compaction and of a snapshot install, passed to
// Config.crashPoint (tests cut the power there).
const (
	compactSynced = "compact-synced" // the state store is synced, the log not yet cut
	compactDone   = "compacted"      // the log is cut

	installReceived = "received" // the received copy is durable, Raft not told yet
	installLogged   = "logged"   // the raft log has recorded the snapshot
	installMoved    = "moved"    // state renamed to state.old
	installSwapped  = "swapped"  // the copy renamed to state, state.old not yet removed
)

// crashPoint reports a step to the test hook, if any. An error from it is
// a test's power cut: the step fails (which stops the node) and the
// transport drops everything from then on, since a node without power
// sends nothing.
func (n *Node) crashPoint(name string) error {
	if n.cfg.crashPoint == nil {
		return nil
	}
	err := n.cfg.crashPoint(name)
	if err != nil && n.tr != nil {
		n.tr.setBlocked(true)
	}
	return err
}

// snapRecv is one snapshot being received.
type snapRecv struct {
	index, term uint64
	next        uint32 // the next chunk's seq
	dir         string
	st          *pebblestore.Store
	count, size uint64
	crc         uint32
}

// fs is the node's filesystem.
func (n *Node) fs() vfs.FS {
	if n.cfg.FS != nil {
		return n.cfg.FS
	}
	return vfs.Default
}

// snapDir is where a complete received snapshot waits for its install.
func (n *Node) snapDir(index, term uint64) string {
	return filepath.Join(n.cfg.Dir, fmt.Sprintf("%s%d-%d", snapDirPrefix, index, term))
}

// withState runs fn on the state store, which no snapshot install replaces
// meanwhile. fn must not call withState again.
func (n *Node) withState(fn func(st *pebblestore.Store) error) error {
	n.stateMu.RLock()
	defer n.stateMu.RUnlock()
	return fn(n.state)
}

// stateSync is a sync of the state store that a compaction waits for:
// every entry up to index was applied before the sync was written, so once
// done reports nil they are durable in the state store.
type stateSync struct {
	index uint64
	done  chan error // buffered 1: the sync's outcome
}

// maybeCompact truncates the log when the applied index has moved far
// enough past its start (logstore.go describes the order and why it is
// safe). Loop only.
//
// The state store is written without fsync, so the entries a cut removes
// must first be durable there. That sync runs off the loop: the loop
// writes a sync barrier (a durable empty batch, which covers every apply
// before it), a goroutine waits for it, and a later call cuts the log up to
// the index applied when the barrier was written. Until then the loop goes
// on saving, sending and applying: a sync of seconds' worth of applied
// state took the loop (and with it every commit) for as long as the
// fdatasync lasted.
func (n *Node) maybeCompact() error {
	if cs := n.compactSync; cs != nil {
		select {
		case err := <-cs.done:
			n.compactSync = nil
			if err != nil {
				return fmt.Errorf("raftstore: syncing the state store before compaction: %w", err)
			}
			return n.compactTo(cs.index)
		default:
			return nil // still syncing
		}
	}
	l, keep := n.rl, n.cfg.KeepEntries
	if l.applied <= l.compacted+keep || l.applied > l.last {
		return nil
	}
	if l.applied-l.compacted < n.cfg.CompactEntries+keep && n.appliedBytes < n.cfg.CompactBytes {
		return nil
	}
	if limit, held := n.compactLimit(time.Now()); held && limit <= l.compacted {
		return nil // a snapshot in flight needs every entry left (snaphold.go)
	}
	p, err := n.state.Write(&store.Batch{}, true)
	if err != nil {
		return fmt.Errorf("raftstore: syncing the state store before compaction: %w", err)
	}
	cs := &stateSync{index: l.applied, done: make(chan error, 1)}
	n.compactSync = cs
	go func() { cs.done <- p.Wait() }()
	return nil
}

// compactTo cuts the log up to index, less the entries kept, once the
// state store is durable up to index (maybeCompact), and never past the
// index of a snapshot being sent (compactLimit).
func (n *Node) compactTo(index uint64) error {
	l, keep := n.rl, n.cfg.KeepEntries
	if index > l.applied || index <= l.compacted+keep || index > l.last {
		return nil // a snapshot installed meanwhile moved the log past it
	}
	cut := index - keep
	if limit, held := n.compactLimit(time.Now()); held && limit < cut {
		cut = limit // a snapshot in flight goes on from the entries after it
	}
	if cut <= l.compacted {
		return nil
	}
	if err := n.crashPoint(compactSynced); err != nil {
		return err
	}
	if err := l.compact(cut); err != nil {
		return err
	}
	if err := n.crashPoint(compactDone); err != nil {
		return err
	}
	n.appliedBytes = 0
	// A received snapshot Raft did not take (it was not ahead of the
	// commit index) can never be installed now.
	n.removeSnapDirs(l.applied)
	n.log.Debug("raftstore: raft log compacted", "index", l.compacted, "last", l.last)
	return nil
}

// sendSnapshot streams the state store to m's recipient (loop only, in
// place of sending the MsgSnap Raft built).
//
// It takes one of the node's send slots for the stream (snaplimit.go):
// Raft asked for the snapshot only with a slot free (raftLog.Snapshot),
// but another shard's group may have taken it since; the snapshot then
// fails at once, and Raft asks again later.
func (n *Node) sendSnapshot(m *pb.Message) {
	to := m.GetTo()
	lim := n.cfg.snapLimits
	if !lim.trySend() {
		n.log.Debug("raftstore: no free slot to send a snapshot; later", "to", to)
		n.reportSnapshot(to, raft.SnapshotFailure)
		return
	}
	sn, md, err := n.snapshotState()
	if err != nil {
		lim.releaseSend()
		n.log.Warn("raftstore: cannot take a snapshot for a follower", "to", to, "err", err)
		n.reportSnapshot(to, raft.SnapshotFailure)
		return
	}
	// The follower goes on from the log after the copy; Raft, which
	// built m at its own (perhaps lower) index, may probe from there.
	n.holdForSnapshot(to, min(md.GetIndex(), m.GetSnapshot().GetMetadata().GetIndex()))
	m = proto.CloneOf(m)
	m.Snapshot = &pb.Snapshot{Metadata: md}
	n.log.Info("raftstore: sending a snapshot", "to", to, "index", md.GetIndex(), "term", md.GetTerm())
	size := n.cfg.SnapshotChunkSize
	n.tr.stream(to, func(write func(*pb.Message) error) error {
		return streamChunks(sn, size, func(data []byte) error {
			c := proto.CloneOf(m)
			c.Snapshot.Data = data
			return write(c)
		})
	}, func(err error) {
		_ = sn.Close()
		lim.releaseSend()
		st := raft.SnapshotFinish
		if err != nil {
			st = raft.SnapshotFailure
			n.log.Warn("raftstore: sending a snapshot failed", "to", to, "err", err)
		} else {
			n.snaps.mu.Lock()
			n.snaps.sent++
			n.snaps.mu.Unlock()
		}
		n.reportSnapshot(to, st)
	})
}

// reportSnapshot records how a snapshot to a peer ended, for the loop to
// tell Raft (reportSnapshots).
func (n *Node) reportSnapshot(to uint64, st raft.SnapshotStatus) {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	if n.snaps.reports == nil {
		n.snaps.reports = map[uint64]raft.SnapshotStatus{}
	}
	n.snaps.reports[to] = st
}

// snapshotState takes a pebble snapshot of the state store and describes
// it: its applied index, that entry's term and the ConfState at it.
func (n *Node) snapshotState() (*pebblestore.Snapshot, *pb.SnapshotMetadata, error) {
	sn, err := n.state.NewSnapshot()
	if err != nil {
		return nil, nil, err
	}
	md, err := n.describe(sn)
	if err != nil {
		_ = sn.Close()
		return nil, nil, err
	}
	return sn, md, nil
}

func (n *Node) describe(sn *pebblestore.Snapshot) (*pb.SnapshotMetadata, error) {
	applied := uint64(bootIndex)
	switch v, err := sn.GetMeta(metaApplied); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	case len(v) != 8:
		return nil, fmt.Errorf("raftstore: state store: applied index of %d bytes", len(v))
	default:
		applied = binary.BigEndian.Uint64(v)
	}
	term, err := n.rl.Term(applied)
	if err != nil {
		return nil, fmt.Errorf("raftstore: term of applied index %d: %w", applied, err)
	}
	cs := n.rl.cs
	switch v, err := sn.GetMeta(metaConf); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		cs = &pb.ConfState{}
		if err := proto.Unmarshal(v, cs); err != nil {
			return nil, fmt.Errorf("raftstore: state store: conf: %w", err)
		}
	}
	return &pb.SnapshotMetadata{Index: new(applied), Term: new(term), ConfState: cs}, nil
}

// streamChunks encodes sn's records into chunks of about size bytes and
// an end chunk, handing each to write.
func streamChunks(sn *pebblestore.Snapshot, size int, write func([]byte) error) error {
	var (
		start        []byte
		seq          uint32
		count, total uint64
		crc          uint32
	)
	for {
		buf := appendChunkHeader(make([]byte, 0, size+size/8), seq, chunkData)
		var resume []byte
		err := sn.Export(start, func(k, v []byte) error {
			at := len(buf)
			buf = appendRecord(buf, k, v)
			crc = crc32.Update(crc, crcTable, buf[at:])
			count++
			total += uint64(len(buf) - at)
			if len(buf) >= size {
				resume = append(bytes.Clone(k), 0) // the successor of k
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(buf) > chunkHeaderLen {
			if err := write(buf); err != nil {
				return err
			}
			seq++
		}
		if resume == nil {
			break
		}
		start = resume
	}
	end := appendChunkHeader(nil, seq, chunkEnd)
	end = binary.BigEndian.AppendUint64(end, count)
	end = binary.BigEndian.AppendUint64(end, total)
	end = binary.BigEndian.AppendUint32(end, crc)
	return write(end)
}

// reportSnapshots tells Raft how the finished outgoing streams went (loop
// only).
func (n *Node) reportSnapshots() {
	n.snaps.mu.Lock()
	reports := n.snaps.reports
	n.snaps.reports = nil
	n.snaps.mu.Unlock()
	now := time.Now()
	for id, st := range reports {
		n.snapshotEnded(id, st, now)
		n.rn.ReportSnapshot(id, st)
	}
}

// receiveSnapshot takes one MsgSnap frame from the transport (on the
// reading goroutine of its connection, so chunks arrive in order and a slow
// disk slows the sender). It returns the message for Raft once the whole
// snapshot is received, verified and durable, else nil; and for the last
// chunk the acknowledgement the sender waits for (ackTaken or ackRefused).
func (n *Node) receiveSnapshot(m *pb.Message) (*pb.Message, []byte) {
	from, md := m.GetFrom(), m.GetSnapshot().GetMetadata()
	c, err := decodeChunk(m.GetSnapshot().GetData())
	n.snaps.recvMu.Lock()
	defer n.snaps.recvMu.Unlock()
	if n.snaps.recv == nil {
		n.snaps.recv = map[uint64]*snapRecv{}
	}
	r := n.snaps.recv[from]
	fail := func(err error) (*pb.Message, []byte) {
		n.log.Warn("raftstore: dropping a snapshot being received", "from", from, "index", md.GetIndex(), "err", err)
		if r != nil {
			n.abortLocked(from, r)
		}
		if c.kind == chunkEnd {
			return nil, []byte{ackRefused}
		}
		return nil, nil
	}
	if err != nil {
		return fail(err)
	}
	if c.seq == 0 {
		if r != nil {
			n.abortLocked(from, r)
		}
		if r, err = n.startReceive(from, md); err != nil {
			return fail(err)
		}
		n.snaps.recv[from] = r
	}
	if r == nil || r.index != md.GetIndex() || r.term != md.GetTerm() || c.seq != r.next {
		return fail(fmt.Errorf("%w: chunk %d out of order", errBadChunk, c.seq))
	}
	r.next++
	if c.kind == chunkData {
		r.count += uint64(c.n)
		r.size += uint64(len(c.records))
		r.crc = crc32.Update(r.crc, crcTable, c.records)
		if err := r.st.Import(records(c.records), false); err != nil {
			return fail(err)
		}
		return nil, nil
	}
	if c.count != r.count || c.size != r.size || c.crc != r.crc {
		return fail(fmt.Errorf("%w: received %d records, %d bytes, crc %08x; sender sent %d, %d, %08x",
			errBadChunk, r.count, r.size, r.crc, c.count, c.size, c.crc))
	}
	if err := n.finishReceive(r); err != nil {
		return fail(err)
	}
	delete(n.snaps.recv, from)
	n.log.Info("raftstore: received a snapshot", "from", from, "index", r.index, "records", r.count, "bytes", r.size)
	out := proto.CloneOf(m)
	out.Snapshot.Data = nil
	return out, []byte{ackTaken}
}

// startReceive creates the store a snapshot is received into.
// Each sender has a directory of its own: two leaders, one after the
// other, may both be sending the same snapshot.
func (n *Node) startReceive(from uint64, md *pb.SnapshotMetadata) (*snapRecv, error) {
	r := &snapRecv{index: md.GetIndex(), term: md.GetTerm()}
	r.dir = fmt.Sprintf("%s.%d%s", n.snapDir(r.index, r.term), from, recvSuffix)
	if err := n.fs().RemoveAll(r.dir); err != nil {
		return nil, err
	}
	st, err := pebblestore.Open(r.dir, pebblestore.Options{Logger: n.log, FS: n.cfg.FS})
	if err != nil {
		return nil, err
	}
	r.st = st
	return r, nil
}

// finishReceive makes a received snapshot durable under its final name.
// If a copy of the same snapshot (same index and term, so the same
// committed state) is already there, from another sender, that one is
// kept: it may be being installed.
func (n *Node) finishReceive(r *snapRecv) error {
	err := r.st.Import(records(nil), true) // syncs every chunk's writes
	if cerr := r.st.Close(); err == nil {
		err = cerr
	}
	r.st = nil
	if err != nil {
		return err
	}
	final := n.snapDir(r.index, r.term)
	if exists(n.fs(), final) {
		if err := n.fs().RemoveAll(r.dir); err != nil {
			return err
		}
		return n.crashPoint(installReceived)
	}
	if err := renameSynced(n.fs(), r.dir, final, n.cfg.Dir); err != nil {
		return err
	}
	return n.crashPoint(installReceived)
}

// abortLocked drops a snapshot being received; n.snaps.recvMu is held.
func (n *Node) abortLocked(from uint64, r *snapRecv) {
	if r.st != nil {
		_ = r.st.Close()
		r.st = nil
	}
	_ = n.fs().RemoveAll(r.dir)
	if n.snaps.recv[from] == r {
		delete(n.snaps.recv, from)
	}
}

// abortReceives drops every snapshot being received (Close, after the
// transport stopped).
func (n *Node) abortReceives() {
	n.snaps.recvMu.Lock()
	defer n.snaps.recvMu.Unlock()
	for from, r := range n.snaps.recv {
		n.abortLocked(from, r)
	}
}

// installSnapshot installs the snapshot Raft handed over in a Ready (loop
// only; the package doc of this file gives the order and its crash cases).
func (n *Node) installSnapshot(s *pb.Snapshot) error {
	md := s.GetMetadata()
	dir := n.snapDir(md.GetIndex(), md.GetTerm())
	if _, err := n.fs().Stat(dir); err != nil {
		return fmt.Errorf("raftstore: snapshot at %d (term %d) to install: %w", md.GetIndex(), md.GetTerm(), err)
	}
	if err := n.rl.installSnapshot(md); err != nil {
		return err
	}
	if err := n.crashPoint(installLogged); err != nil {
		return err
	}
	n.stateMu.Lock()
	err := n.state.Close()
	if err == nil {
		err = n.swapState(dir)
	}
	if err == nil {
		n.state, err = n.openStateStore()
	}
	n.stateMu.Unlock()
	if err != nil {
		return fmt.Errorf("raftstore: installing the snapshot at %d: %w", md.GetIndex(), err)
	}
	applied, adv, err := n.readMeta()
	if err != nil {
		return err
	}
	if applied != md.GetIndex() {
		return fmt.Errorf("raftstore: installed snapshot's applied index is %d, not %d", applied, md.GetIndex())
	}
	if err := n.adoptMembership(md.GetConfState()); err != nil {
		return err
	}
	n.removeSnapDirs(applied)
	n.appliedBytes = 0
	n.compactSync = nil // a sync of the replaced state store; the log starts past it now
	n.snaps.mu.Lock()
	n.snaps.installed++
	n.snaps.mu.Unlock()
	n.mu.Lock()
	n.applied = applied
	n.appliedLocked()
	n.advertised = adv
	// Every advertisement in the copy was encoded before it was taken,
	// so before now (AdvertisedSince).
	now := n.cfg.Now()
	n.advertisedAt = make(map[uint64]time.Time, len(adv))
	for id := range adv {
		n.advertisedAt[id] = now
	}
	n.mu.Unlock()
	n.log.Info("raftstore: installed a snapshot", "index", applied, "term", md.GetTerm())
	return nil
}

// adoptMembership takes the membership of a snapshot just installed
// (loop only): cs, and the member addresses the copy records over the
// configured ones; the transport's peers follow, and a joining node has
// joined. The copy is left exactly the leader's: a copy sent to a joining
// node always has a "conf" record, since the leader starts replicating to
// a new member only once it has applied (and recorded) its addition.
func (n *Node) adoptMembership(cs *pb.ConfState) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := maps.Clone(n.mem.addrs)
	if err := n.loadMembership(); err != nil {
		return err
	}
	n.mem.conf, n.mem.joining = cs, false
	for id, addr := range n.mem.addrs {
		switch prev, known := old[id]; {
		case id == n.cfg.ID, known && prev == addr:
		case addr == "":
			n.tr.removePeer(id)
		default:
			n.tr.addPeer(Peer{ID: id, RaftAddr: addr})
		}
	}
	return nil
}

// openStateStore opens Config.Dir/state.
func (n *Node) openStateStore() (*pebblestore.Store, error) {
	st, err := pebblestore.Open(filepath.Join(n.cfg.Dir, stateDirName), pebblestore.Options{Logger: n.log, FS: n.cfg.FS})
	if err != nil {
		return nil, fmt.Errorf("raftstore: state store: %w", err)
	}
	return st, nil
}

// openState opens the state store at Open, first finishing a snapshot
// install a crash cut short (see the crash cases above). n.rl is open.
func (n *Node) openState() error {
	fs := n.fs()
	if err := fs.MkdirAll(n.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	state := filepath.Join(n.cfg.Dir, stateDirName)
	old := filepath.Join(n.cfg.Dir, stateOldDirName)
	snap := n.snapDir(n.rl.compacted, n.rl.compactedTerm)
	if !exists(fs, state) {
		// Cut between the swap's two renames: the snapshot goes in; or,
		// with no snapshot to install, whatever state.old holds, which the
		// applied index check below judges.
		from := snap
		if !exists(fs, snap) {
			from = old
		}
		if exists(fs, from) {
			if err := renameSynced(fs, from, state, n.cfg.Dir); err != nil {
				return fmt.Errorf("raftstore: finishing a snapshot install: %w", err)
			}
		}
	}
	if err := fs.RemoveAll(old); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	st, err := n.openStateStore()
	if err != nil {
		return err
	}
	n.state = st
	applied, _, err := n.readMeta()
	if err == nil && applied < n.rl.compacted && exists(fs, snap) {
		// The raft log recorded an install the state store did not get.
		n.log.Info("raftstore: finishing a snapshot install cut short", "index", n.rl.compacted)
		err = st.Close()
		if err == nil {
			err = n.swapState(snap)
		}
		if err == nil {
			n.state, err = n.openStateStore()
		}
		if err != nil {
			return fmt.Errorf("raftstore: finishing a snapshot install: %w", err)
		}
	} else if err != nil {
		_ = st.Close()
		return err
	}
	n.removeSnapDirs(^uint64(0))
	return nil
}

// swapState replaces the (closed) state store directory with dir.
func (n *Node) swapState(dir string) error {
	fs := n.fs()
	state := filepath.Join(n.cfg.Dir, stateDirName)
	old := filepath.Join(n.cfg.Dir, stateOldDirName)
	if err := fs.RemoveAll(old); err != nil {
		return err
	}
	if exists(fs, state) {
		if err := renameSynced(fs, state, old, n.cfg.Dir); err != nil {
			return err
		}
		if err := n.crashPoint(installMoved); err != nil {
			return err
		}
	}
	if err := renameSynced(fs, dir, state, n.cfg.Dir); err != nil {
		return err
	}
	if err := n.crashPoint(installSwapped); err != nil {
		return err
	}
	return fs.RemoveAll(old)
}

// readMeta reads the state store's applied index and advertised infos.
func (n *Node) readMeta() (uint64, map[uint64][]byte, error) {
	applied := uint64(bootIndex)
	switch v, err := n.state.GetMeta(metaApplied); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return 0, nil, fmt.Errorf("raftstore: state store: %w", err)
	case len(v) != 8:
		return 0, nil, fmt.Errorf("raftstore: state store: applied index of %d bytes", len(v))
	default:
		applied = binary.BigEndian.Uint64(v)
	}
	adv := map[uint64][]byte{}
	err := n.state.ScanMeta(metaAdvPrefix, func(name string, v []byte) error {
		id, err := strconv.ParseUint(name[len(metaAdvPrefix):], 10, 64)
		if err != nil {
			return fmt.Errorf("raftstore: state store: bad record %q", name)
		}
		adv[id] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return applied, adv, nil
}

// removeSnapDirs removes complete received snapshots at or below index
// (every one, and every partial one, at Open: nothing receives then).
func (n *Node) removeSnapDirs(index uint64) {
	fs := n.fs()
	names, err := fs.List(n.cfg.Dir)
	if err != nil {
		return
	}
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, snapDirPrefix)
		if !ok {
			continue
		}
		if index != ^uint64(0) {
			i, _, _ := strings.Cut(rest, "-")
			at, err := strconv.ParseUint(i, 10, 64)
			if err != nil || strings.HasSuffix(rest, recvSuffix) || at > index {
				continue
			}
		}
		_ = fs.RemoveAll(filepath.Join(n.cfg.Dir, name))
	}
}

// exists reports whether name exists.
func exists(fs vfs.FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil
}

// renameSynced renames from to to, both in dir, and syncs dir: the
// rename survives a crash once it returns.
func renameSynced(fs vfs.FS, from, to, dir string) error {
	if err := fs.Rename(from, to); err != nil {
		return err
	}
	return syncDir(fs, dir)
}

// syncDir makes renames in dir durable.
func syncDir(fs vfs.FS, dir string) error {
	f, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
