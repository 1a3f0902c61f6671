// Package raftstore is Sluice's replicated store: a store.Store whose write
// batches are replicated through one Raft group (go.etcd.io/raft/v3) and
// applied, in log order, to a pebble state store on every node.
//
// # Contract
//
// Only the leader writes. A Write on the leader encodes the batch, queues it
// for the Raft loop (a Write without durable is first held back, up to
// 5 ms, to ride in the next write's entry: view.Write) and returns without
// touching the network; its Pending's
// Wait returns nil only once the entry is committed (in the fsynced Raft
// logs of a majority) and applied to this node's state store. A Write on a
// follower fails with ErrNotLeader. When the leader loses leadership, every
// Pending still waiting fails (the entry may or may not commit later: the
// caller must treat it as not acknowledged), and every store view bound to
// that leadership fails all later writes: the engine above it must be torn
// down and opened again on the next leader, exactly as after a crash.
//
// Reads (Get, Scan, ScanRange, ScanLengths) serve this node's state store after waiting until
// every entry this node proposed has been applied or has failed
// (read-your-writes). On a follower they may lag the leader. A view's
// GetSettled and ScanRangeSettled (store.SettledReader) skip that wait:
// they see at least every write whose Wait has returned.
//
// # Durability
//
// The Raft log is the write-ahead log: entries and the HardState are
// fsynced in Config.Dir/raft before any message that depends on them is
// sent (etcd raft's Ready contract: persist, send, apply, advance). The
// state store in Config.Dir/state is written without fsync; each applied
// batch carries the applied index in the same pebble batch, so after a
// crash the node replays exactly the committed entries after the index it
// finds there, and applying an entry twice cannot happen.
//
// # Log truncation and snapshots
//
// Every node cuts its own log once its applied index is far enough past
// the log's start (Config.CompactEntries, CompactBytes), after syncing the
// state store, and keeps Config.KeepEntries applied entries (logstore.go).
// A follower that needs entries the leader has cut gets a copy of the
// leader's state store instead, streamed in chunks and installed by a
// directory swap that survives a crash (snapshot.go). While a follower
// installs one, reads of its store views wait for the swap.
//
// # Limits of this slice
//
// One Raft group for everything; membership from Config.Peers at first,
// changed at runtime by AddMember (a learner, promoted to voter once it has
// caught up while the voters are fewer than Config.ReplicationFactor) and
// RemoveMember, and by the leader keeping ReplicationFactor voters
// (membership.go); a
// snapshot is the whole state (no increments); nodes authenticate each
// other with a shared secret (Config.Secret, transport.go) but the traffic
// is not encrypted.
package raftstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// ErrEntryTooLarge is returned (wrapped) by a Write whose encoded batch
// exceeds MaxEntrySize; nothing is proposed.
var ErrEntryTooLarge = errors.New("raftstore: write batch exceeds the 32 MiB entry limit")

// ErrNotLeader is returned by writes on a node that is not the leader, and
// (wrapped) by the Wait of a write whose leader lost leadership first. It
// is also store.ErrNotLeading (errors.Is), which is what the engine and
// the front-ends see.
var ErrNotLeader error = notLeaderError{}

// notLeaderError is ErrNotLeader's type.
type notLeaderError struct{}

func (notLeaderError) Error() string { return "raftstore: not the leader" }

// Is makes ErrNotLeader match store.ErrNotLeading too.
func (notLeaderError) Is(target error) bool { return target == store.ErrNotLeading }

// ErrNodeClosed is returned by operations on a closed node, and by the Wait
// of a write still waiting when the node closed.
var ErrNodeClosed = errors.New("raftstore: node closed")

// Meta record names in the state store.
const (
	metaApplied   = "applied"
	metaAdvPrefix = "adv/"
)

// Node is one member of the Raft group. Its methods are safe for
// concurrent use. One goroutine (run) owns the RawNode; others reach it
// through the proposal queue and channels.
type Node struct {
	cfg   Config
	log   *slog.Logger
	epoch uint64 // random per Open: makes proposal ids unique across restarts
	rl    *raftLog
	// state is the state store. The loop uses it freely; install
	// (snapshot.go), on the loop, replaces it holding stateMu, so every
	// other goroutine reads it through withState.
	stateMu sync.RWMutex
	state   *pebblestore.Store
	rn      *raft.RawNode // run's only
	tr      *transport
	ownMux  *mux // the mux over Config.Listener when it is not a shard's (Close closes it)
	// heard is, while this node leads heardTerm, when Raft last showed
	// each member active (Status.Heard); run's only.
	heard     map[uint64]time.Time
	heardTerm uint64
	// answered is when a Raft message of each other member last arrived
	// (Status.Answered); run's only.
	answered  map[uint64]time.Time
	leadSince time.Time // when this node's leadership of heardTerm began
	// leaving are the members a placement controller moves out of the
	// group while this node leads it (Retire), each until its deadline:
	// reconcileVoters replaces and then removes them. Under mu.
	leaving map[uint64]retiring
	// leaseRounds are the lease rounds awaiting a majority, oldest first,
	// and leaseSeq the last round's number; run's only (lease.go).
	leaseRounds []leaseRound
	leaseSeq    uint64
	// barrierRounds are the read barrier rounds asked of Raft, by their
	// number, with the callers each answers; barrierSeq the last round's
	// number; run's only (barrier.go).
	barrierRounds map[uint64][]chan uint64
	barrierSeq    uint64
	// leaseTerm and leaseUntil (nanoseconds after leaseBase, on the
	// monotonic clock) are this node's leadership lease (lease.go):
	// written by run, read by anyone.
	leaseTerm  atomic.Uint64
	leaseUntil atomic.Int64
	leaseBase  time.Time // set once by NewNode

	appliedBytes uint64 // loop only: entry bytes applied since the last compaction
	// compactSync is the state store sync a compaction waits for, in
	// flight off the loop (nil: none); loop only (snapshot.go).
	compactSync *stateSync
	// snapHolds keep the log after the index of each snapshot being sent
	// (snaphold.go); loop only.
	snapHolds map[uint64]snapHold
	snaps     snapshots // snapshots streamed out and received (snapshot.go)

	recvc chan *pb.Message
	propc chan struct{} // a proposal is queued (buffered 1)
	// holders are the views holding writes back (view.Write), which a
	// leadership transfer proposes first (flushHolders). Under mu.
	holders   map[*view]struct{}
	transferc chan transferRequest // a transfer's target, for the loop
	barrierc  chan struct{}        // a read barrier is waiting (buffered 1)
	stopc     chan struct{}
	donec     chan struct{} // run has returned
	changes   chan Status   // latest wins, buffered 1

	unreachMu sync.Mutex
	unreach   map[uint64]bool

	// mu guards everything below. Lock order: a view's mu before n.mu.
	mu         sync.Mutex
	props      []proposal
	waiters    map[uint64]*waiter // own proposals (this epoch) by seq
	seq        uint64
	last       *waiter // the last proposal, for read-your-writes
	leaderTerm uint64  // the term this node leads, 0 when not leader
	ready      bool    // leader and applied every entry before its term
	changed    chan struct{}
	applied    uint64
	status     Status
	advertised map[uint64][]byte
	// advertisedAt is when (Config.Now) this process applied each node's
	// latest advertisement; absent for one only loaded from the state
	// store at start.
	advertisedAt map[uint64]time.Time
	// barrierWaiting are the read barriers for the next round, and
	// appliedWaits the ones waiting for their index to apply
	// (barrier.go).
	barrierWaiting []chan uint64
	appliedWaits   []appliedWait
	mem            membership // written by the loop only (see membership.go)
	err            error      // the loop stopped on this error
	closed         bool

	// Counters for Status (metrics).
	leaderChanges, failedProposals uint64
}

// proposal is a queued entry.
type proposal struct {
	data []byte
	cc   *pb.ConfChange // a membership change instead of data
	term uint64         // the leadership it was accepted in
	seq  uint64         // its waiter's key in Node.waiters
	w    *waiter
}

// waiter is the Pending of one proposal.
type waiter struct {
	done chan struct{}
	err  error
}

func newWaiter() *waiter { return &waiter{done: make(chan struct{})} }

// finishLocked completes w with err; n.mu must be held.
func (w *waiter) finishLocked(err error) {
	w.err = err
	close(w.done)
}

// Wait blocks until the entry is applied locally (nil) or can no longer be
// acknowledged (an error).
func (w *waiter) Wait() error {
	<-w.done
	return w.err
}

// Open starts a node: it loads the Raft log and the state store from
// cfg.Dir, replays nothing by itself (Raft hands the committed entries
// after the stored applied index to the loop, which applies them) and
// starts the transport and the Raft loop.
//
// Open takes the listener: Close closes it, and so does a failed Open.
func Open(cfg Config) (n *Node, err error) {
	if cfg.Listener != nil {
		defer func() {
			if err != nil {
				_ = cfg.Listener.Close()
			}
		}()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	cfg.CompactEntries = cmp.Or(cfg.CompactEntries, DefaultCompactEntries)
	cfg.CompactBytes = cmp.Or(cfg.CompactBytes, DefaultCompactBytes)
	cfg.KeepEntries = cmp.Or(cfg.KeepEntries, DefaultKeepEntries)
	cfg.SnapshotChunkSize = cmp.Or(cfg.SnapshotChunkSize, DefaultSnapshotChunkSize)
	cfg.PromoteLagEntries = min(cmp.Or(cfg.PromoteLagEntries, DefaultPromoteLagEntries), cfg.KeepEntries)
	cfg.ReplaceAfter = cmp.Or(cfg.ReplaceAfter, DefaultReplaceAfter)
	cfg.unsyncedHold = cmp.Or(cfg.unsyncedHold, defaultUnsyncedHold)
	if cfg.snapLimits == nil {
		cfg.snapLimits = newSnapLimits(&cfg)
	}
	if cfg.KeepEntries >= cfg.CompactEntries {
		// Every Ready would compact (and sync the state store) for nothing.
		return nil, fmt.Errorf("raftstore: KeepEntries %d must be below CompactEntries %d", cfg.KeepEntries, cfg.CompactEntries)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("node", cfg.ID)
	var eb [8]byte
	_, _ = rand.Read(eb[:])
	n = &Node{
		cfg: cfg, log: log, epoch: binary.BigEndian.Uint64(eb[:]),
		recvc:        make(chan *pb.Message, 1024),
		propc:        make(chan struct{}, 1),
		transferc:    make(chan transferRequest),
		barrierc:     make(chan struct{}, 1),
		stopc:        make(chan struct{}),
		donec:        make(chan struct{}),
		changes:      make(chan Status, 1),
		unreach:      map[uint64]bool{},
		waiters:      map[uint64]*waiter{},
		changed:      make(chan struct{}),
		advertised:   map[uint64][]byte{},
		leaseBase:    time.Now(),
		advertisedAt: map[uint64]time.Time{},
	}
	if cfg.Now == nil {
		n.cfg.Now = time.Now
	}
	if cfg.FS == nil {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("raftstore: %w", err)
		}
	}
	voters := make([]uint64, 0, len(cfg.Peers))
	for _, p := range cfg.Peers {
		voters = append(voters, p.ID)
	}
	if cfg.sharedLog != nil {
		n.rl, err = n.openShardLog(cfg.sharedLog, voters)
	} else {
		n.rl, err = openRaftLog(filepath.Join(cfg.Dir, "raft"), voters, cfg.FS, log)
	}
	if err != nil {
		return nil, err
	}
	n.rl.sendFree = cfg.snapLimits.sendFree
	// The state store is opened after the log: a snapshot install cut
	// short by a crash is finished first (snapshot.go).
	if err := n.openState(); err != nil {
		_ = n.rl.close()
		return nil, err
	}
	if err := n.load(); err != nil {
		_ = n.state.Close()
		_ = n.rl.close()
		return nil, err
	}
	return n, nil
}

// load reads the state store's meta records, builds the RawNode and starts
// the goroutines. On error the caller closes n.state and n.rl.
func (n *Node) load() error {
	n.applied = bootIndex
	switch v, err := n.state.GetMeta(metaApplied); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("raftstore: state store: %w", err)
	case len(v) != 8:
		return fmt.Errorf("raftstore: state store: applied index of %d bytes", len(v))
	default:
		n.applied = binary.BigEndian.Uint64(v)
	}
	err := n.state.ScanMeta(metaAdvPrefix, func(name string, v []byte) error {
		id, err := strconv.ParseUint(name[len(metaAdvPrefix):], 10, 64)
		if err != nil {
			return fmt.Errorf("raftstore: state store: bad record %q", name)
		}
		n.advertised[id] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return err
	}
	if err := n.loadMembership(); err != nil {
		return err
	}
	n.rl.cs = n.mem.conf
	if n.applied < n.rl.compacted {
		return fmt.Errorf("raftstore: state store applied index %d is behind the raft log's compaction point %d", n.applied, n.rl.compacted)
	}
	if n.mem.joining {
		if n.rl.last != bootIndex || n.rl.compacted != bootIndex {
			return fmt.Errorf("raftstore: join: the raft log has entries but the state store has no membership record")
		}
		n.rl.startJoining()
		n.applied = 0
	}
	n.rl.applied = n.applied
	if n.applied > n.rl.last {
		return fmt.Errorf("raftstore: state store applied index %d is beyond the raft log's last entry %d", n.applied, n.rl.last)
	}
	// The state store and the HardState are both written without fsync
	// when only the commit index moved, so the applied index may be ahead
	// of the stored commit index after a crash. Every applied entry was
	// committed and is in this node's fsynced log, so raising the commit
	// index to it is true.
	if n.applied > bootIndex && n.rl.hs.GetCommit() < n.applied {
		hs := proto.CloneOf(n.rl.hs)
		hs.Commit = new(n.applied)
		n.rl.hs = hs
	}
	n.rn, err = raft.NewRawNode(&raft.Config{
		ID:                        n.cfg.ID,
		ElectionTick:              electionTicks,
		HeartbeatTick:             heartbeatTicks,
		Storage:                   n.rl,
		Applied:                   n.applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 1 << 30,
		CheckQuorum:               true,
		PreVote:                   true,
		// Only the leader stamps proposal ids it waits for; a follower
		// refuses writes instead of forwarding them.
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{n.log},
	})
	if err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	if v := n.mem.conf.GetVoters(); len(v) == 1 && v[0] == n.cfg.ID {
		// A single node is its own majority: no reason to wait out an
		// election timeout.
		if err := n.rn.Campaign(); err != nil {
			return fmt.Errorf("raftstore: %w", err)
		}
		n.checkRole()
	}
	// Every incoming connection's handshake runs in a mux (mux.go): the
	// one of OpenShards, or this node's own over its listener.
	ln := n.cfg.Listener
	if _, ok := ln.(*shardListener); !ok {
		n.ownMux = newMux(ln, n.cfg.ID, 1, nodeauth.With(n.cfg.Secret, n.cfg.ExtraSecret), n.cfg.Encryption, n.cfg.OnAuthFailure, n.log)
		ln = n.ownMux.listener(0)
	}
	n.tr = newTransport(n.cfg.ID, ln, nodeauth.RaftSurface(n.cfg.Shard), n.transportPeers(), n.log, nodeauth.With(n.cfg.Secret, n.cfg.ExtraSecret), n.cfg.Encryption, n.cfg.OnAuthFailure, n.deliver, n.reportUnreachable)
	n.tr.limits = n.cfg.snapLimits
	n.status = Status{ID: n.cfg.ID, Role: "follower", Applied: n.applied, Members: n.membersLocked(), Joining: n.mem.joining, Removed: n.removedLocked()}
	n.tr.start()
	go n.run()
	return nil
}

// deliver hands a received message to the loop (transport goroutines). Its
// result is the acknowledgement of a snapshot stream's last chunk, or the
// answer to a probe (probe.go), else nil.
func (n *Node) deliver(m *pb.Message) []byte {
	var ack []byte
	if isProbe(m) {
		return n.answerProbe()
	}
	if m.GetType() == pb.MessageType_MsgSnap {
		// A chunk of a snapshot: Raft sees the message once all of it is
		// here (snapshot.go).
		if m, ack = n.receiveSnapshot(m); m == nil {
			return ack
		}
	}
	select {
	case n.recvc <- m:
	case <-n.stopc:
	case <-n.donec:
	}
	return ack
}

// reportUnreachable records that a message to id was lost (transport).
func (n *Node) reportUnreachable(id uint64) {
	n.unreachMu.Lock()
	n.unreach[id] = true
	n.unreachMu.Unlock()
}

// run is the Raft loop: the one goroutine that touches the RawNode.
func (n *Node) run() {
	defer close(n.donec)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stopc:
			return
		case <-ticker.C:
			n.rn.Tick()
			n.checkRole()
			n.startLeaseRound()
			n.reconcileVoters()
		case m := <-n.recvc:
			n.step(m)
			// Step what else has arrived before one Ready covers it all,
			// bounded so a busy link cannot starve ticks and proposals.
			for more := 255; more > 0; more-- {
				select {
				case m := <-n.recvc:
					n.step(m)
					continue
				default:
				}
				break
			}
			n.checkRole()
		case <-n.propc:
			n.proposeQueued()
		case r := <-n.transferc:
			if r.ifInSync && !n.canTakeOver(r.to) {
				n.log.Info("raftstore: not handing the leadership to a member that is not in sync; it may be asked again once it is", "to", r.to)
				break
			}
			n.flushHolders()
			n.proposeQueued() // in the log before the transfer: the target catches up on them
			n.rn.TransferLeader(r.to)
		case <-n.barrierc:
			n.startBarrierRound()
		}
		n.unreachMu.Lock()
		for id := range n.unreach {
			n.rn.ReportUnreachable(id)
		}
		clear(n.unreach)
		n.unreachMu.Unlock()
		n.reportSnapshots()
		if err := n.handleReadies(); err != nil {
			n.stopOnError(err)
			return
		}
	}
}

// canTakeOver reports whether this node may hand its leadership to id
// at a balancer's request, made on this node (transferRequest.ifInSync)
// or forwarded by the follower that made it (step: MsgTransferLeader
// names the target as its sender): true unless this node leads and id is
// not in sync (transferable, with PromoteLagEntries of lag). Raft would otherwise start the transfer
// at once, send the target what it lacks, and refuse every proposal until
// the target caught up or an election timeout passed: a member just
// restarted and catching up, or one killed a moment ago that shard 0's
// leader still counted, cost the group up to that timeout of failed
// writes (and its engine, whose unsynced leases went with it). A
// transfer this node starts itself (TransferLeadership, at a graceful
// stop) does not come here. Loop only.
func (n *Node) canTakeOver(id uint64) bool {
	bs := n.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return true // Raft forwards it to the leader, or drops it
	}
	commit := bs.GetCommit()
	ok := false
	n.rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pid == id {
			ok = transferable(&pr, commit, n.cfg.PromoteLagEntries, n.answered[id], time.Now(), n.takeOverWindow())
		}
	})
	return ok
}

// takeOverWindow is how recently a member must have sent a Raft message
// for canTakeOver: half an election timeout, five heartbeats of a live
// member's.
func (n *Node) takeOverWindow() time.Duration {
	return n.cfg.TickInterval * electionTicks / 2
}

// transferable reports whether the leader may hand its leadership to a
// member whose progress pr is and whose last Raft message arrived at
// lastAnswer: Raft replicates to it normally, its log holds every entry
// up to commit − lag, and it answered within window of now.
// Progress.RecentActive is not the test: with CheckQuorum the leader
// clears it at every election timeout and sets it again at the next
// answer, so a request that came just after that tick (the balancer's
// ticker, started with the Raft ticker and at a multiple of its period,
// came at the same phase round after round) found a live, caught-up member
// "not in sync" every time, and a shard's leadership never moved.
func transferable(pr *tracker.Progress, commit, lag uint64, lastAnswer, now time.Time, window time.Duration) bool {
	return pr.State == tracker.StateReplicate &&
		(pr.Match >= commit || commit-pr.Match <= lag) &&
		!lastAnswer.IsZero() && now.Sub(lastAnswer) <= window
}

// step feeds one received message to Raft. Errors (a local message type
// from the network, a message for another group) are dropped, as Raft
// tolerates lost messages.
func (n *Node) step(m *pb.Message) {
	if m.GetTo() != n.cfg.ID {
		n.log.Warn("raftstore: dropped a message for another node (peer lists differ?)", "to", m.GetTo(), "from", m.GetFrom())
		return
	}
	if n.removedPeer(m.GetFrom()) {
		return // a removed node that has not learnt it yet
	}
	if m.GetType() == pb.MessageType_MsgTransferLeader {
		// Forwarded unchanged: its From is the transfer's target, which
		// did not send it (and is no sign of life).
		if !n.canTakeOver(m.GetFrom()) {
			n.log.Info("raftstore: not handing the leadership to a member that is not in sync; it may be asked again once it is", "to", m.GetFrom())
			return
		}
		n.flushHolders()
		n.proposeQueued()
	} else {
		if n.answered == nil {
			n.answered = map[uint64]time.Time{}
		}
		n.answered[m.GetFrom()] = time.Now()
	}
	if err := n.rn.Step(m); err != nil {
		n.log.Debug("raftstore: dropped a received message", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
	}
}

// flushHolders proposes the writes every view of this node holds back
// (view.Write), so that a leadership handed over carries them: a lease
// still held when the leadership moved was unknown to the next leader,
// which delivered the message again at once.
func (n *Node) flushHolders() {
	n.mu.Lock()
	vs := make([]*view, 0, len(n.holders))
	for v := range n.holders {
		vs = append(vs, v)
	}
	n.mu.Unlock()
	for _, v := range vs {
		v.flushHeld()
	}
}

// hold and unhold add and remove v from the views holding writes back.
func (n *Node) hold(v *view) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.holders == nil {
		n.holders = map[*view]struct{}{}
	}
	n.holders[v] = struct{}{}
}

func (n *Node) unhold(v *view) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.holders, v)
}

// proposeQueued hands the queued proposals to Raft.
func (n *Node) proposeQueued() {
	n.mu.Lock()
	props := n.props
	n.props = nil
	n.mu.Unlock()
	for _, p := range props {
		n.mu.Lock()
		stale := p.term != n.leaderTerm
		n.mu.Unlock()
		if stale {
			// Accepted for a leadership that has ended since; failAll
			// has already failed its waiter.
			continue
		}
		var err error
		if p.cc != nil {
			err = n.rn.ProposeConfChange(p.cc)
		} else {
			err = n.rn.Propose(p.data)
		}
		if err != nil {
			n.mu.Lock()
			n.failedProposals++
			if p.cc != nil {
				n.mem.ccID = 0
			}
			n.failLocked(p.w, fmt.Errorf("%w: proposal dropped: %w (%w)", ErrNotLeader, err, store.ErrNotWritten))
			n.mu.Unlock()
		}
	}
}

// failLostLeadershipLocked fails every waiting write of the leadership
// that ended (n.leaderTerm): those still queued in n.props were never
// handed to Raft — only the loop goroutine proposes, and it is the one
// that noticed the loss (checkRole), before it proposes anything — so
// they are certainly not written (store.ErrNotWritten: a caller may make
// them again on the next leader); the others are in this node's log and
// may yet be committed by the next leader, or not: ambiguous. Before
// 2026-12-07 the queued ones were failed as ambiguous too, which cost a
// publish its retry on the next leader (a nack) during leadership moves.
func (n *Node) failLostLeadershipLocked() {
	n.failedProposals += uint64(len(n.waiters))
	queued := fmt.Errorf("%w: lost leadership of term %d before the write was proposed (%w)", ErrNotLeader, n.leaderTerm, store.ErrNotWritten)
	for _, p := range n.props {
		if w, ok := n.waiters[p.seq]; ok && w == p.w {
			delete(n.waiters, p.seq)
			w.finishLocked(queued)
		}
	}
	n.failAllLocked(fmt.Errorf("%w: lost leadership of term %d before the write was applied", ErrNotLeader, n.leaderTerm))
}

// failLocked fails one waiter if it still waits.
func (n *Node) failLocked(w *waiter, err error) {
	for seq, x := range n.waiters {
		if x == w {
			delete(n.waiters, seq)
			w.finishLocked(err)
			return
		}
	}
}

// failAllLocked fails every waiting proposal and drops queued ones.
func (n *Node) failAllLocked(err error) {
	for _, w := range n.waiters {
		w.finishLocked(err)
	}
	clear(n.waiters)
	n.props = nil
}

// broadcastLocked wakes everyone waiting for a state change.
func (n *Node) broadcastLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// checkRole notices a change of this node's leadership from Raft's own
// state, not from Ready.SoftState: a leader that loses its term and wins
// the next one between two Readies keeps the same SoftState, yet every
// proposal of the old term must fail. Raft's state changes in Step, Tick
// and Advance (which steps the node's own votes), so run calls checkRole
// after each of them, before it proposes anything and before it applies
// a Ready's committed entries.
func (n *Node) checkRole() {
	bs := n.rn.BasicStatus()
	isLeader := bs.RaftState == raft.StateLeader
	term := bs.GetTerm()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leaderTerm != 0 && (!isLeader || term != n.leaderTerm) {
		n.log.Info("raftstore: lost leadership", "term", n.leaderTerm)
		n.failLostLeadershipLocked()
		n.leaderTerm, n.ready = 0, false
		n.mem.ccID = 0 // a next leadership starts not ready: it applies that change first, if committed
		n.broadcastLocked()
	}
	if n.leaderTerm == 0 && isLeader && n.err == nil && !n.closed {
		n.leaderTerm = term
		n.ready = false
		n.log.Info("raftstore: became leader", "term", term)
		n.broadcastLocked()
	}
}

// apply applies committed entries to the state store in one batch, with
// the applied index, then completes this node's waiters.
func (n *Node) apply(ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	n.mu.Lock()
	leaderTerm := n.leaderTerm
	applied := n.applied
	n.mu.Unlock()
	var b store.Batch
	var meta []pebblestore.Meta
	var mine []uint64
	adv := map[uint64][]byte{}
	var ca confApply
	last, becameReady := uint64(0), false
	for _, e := range ents {
		if e.GetIndex() <= applied {
			continue // applied before a restart; Raft should not hand it out again
		}
		last = e.GetIndex()
		n.appliedBytes += uint64(len(e.GetData()))
		if leaderTerm != 0 && e.GetTerm() == leaderTerm {
			// The first entry of this leader's term: everything committed
			// before the term is now applied.
			becameReady = true
		}
		if t := e.GetType(); t == pb.EntryType_EntryConfChange || t == pb.EntryType_EntryConfChangeV2 {
			if err := n.applyConfEntry(&ca, e); err != nil {
				return err
			}
			continue
		}
		if e.GetType() != pb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		kind, id, body, err := decodeHeader(e.GetData())
		if err == nil && kind == entryBatch {
			err = decodeBatch(body, &b)
		}
		if err != nil {
			return fmt.Errorf("raftstore: committed entry %d cannot be applied: %w", e.GetIndex(), err)
		}
		if kind == entryAdvertise {
			adv[id.node] = body
			meta = append(meta, pebblestore.Meta{Name: metaAdvPrefix + strconv.FormatUint(id.node, 10), Value: body})
		}
		if id.node == n.cfg.ID && id.epoch == n.epoch {
			mine = append(mine, id.seq)
		}
	}
	if last == 0 {
		return nil
	}
	cm, err := ca.meta(n)
	if err != nil {
		return err
	}
	meta = append(meta, cm...)
	meta = append(meta, pebblestore.Meta{Name: metaApplied, Value: binary.BigEndian.AppendUint64(nil, last)})
	if _, err := n.state.WriteMeta(&b, meta, false); err != nil {
		return fmt.Errorf("raftstore: applying entries up to %d: %w", last, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applied = last
	n.appliedLocked()
	n.commitConfLocked(&ca)
	at := time.Time{}
	if len(adv) > 0 {
		at = n.cfg.Now()
	}
	for id, v := range adv {
		n.advertised[id] = append([]byte(nil), v...)
		n.advertisedAt[id] = at
	}
	for _, seq := range mine {
		if w := n.waiters[seq]; w != nil {
			delete(n.waiters, seq)
			w.finishLocked(nil)
		}
	}
	if becameReady && !n.ready && n.leaderTerm == leaderTerm {
		n.ready = true
		n.log.Info("raftstore: leader ready", "term", leaderTerm, "applied", last)
		n.broadcastLocked()
	}
	return nil
}

// stopOnError stops the node after an error the loop cannot continue
// past (a failed raft log write, an entry it cannot apply): it must not
// vote or acknowledge again with a log or state it cannot trust.
func (n *Node) stopOnError(err error) {
	n.log.Error("raftstore: node stopped", "err", err)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.err = fmt.Errorf("%w: %w", store.ErrFailed, err)
	n.failAllLocked(n.err)
	n.leaderTerm, n.ready = 0, false
	n.status.Role, n.status.Leader = "follower", 0
	n.broadcastLocked()
	// Tell Changes' reader (the cluster wiring tears its server down).
	select {
	case <-n.changes:
	default:
	}
	n.changes <- n.status
}

// WaitLeaderReady waits until this node is the leader and has applied
// every entry committed before its term: its state store is then the whole
// committed state, and an engine may open on it. It returns ctx's error, or
// an error if the node stops.
func (n *Node) WaitLeaderReady(ctx context.Context) error {
	for {
		n.mu.Lock()
		ready, ch, err, closed := n.ready, n.changed, n.err, n.closed
		n.mu.Unlock()
		switch {
		case closed:
			return ErrNodeClosed
		case err != nil:
			return err
		case ready:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// propose queues an entry of the given kind; encode appends its body. term,
// when not 0, is the leadership term the caller writes in: a proposal made
// for an earlier leadership of this node is refused.
func (n *Node) propose(kind byte, term uint64, encode func([]byte) ([]byte, error)) (*waiter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return nil, ErrNodeClosed
	case n.err != nil:
		return nil, n.err
	case n.leaderTerm == 0, term != 0 && term != n.leaderTerm:
		return nil, fmt.Errorf("%w (%w)", ErrNotLeader, store.ErrNotWritten)
	}
	id := proposalID{node: n.cfg.ID, epoch: n.epoch, seq: n.seq + 1}
	data, err := encode(appendHeader(nil, kind, id))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxEntrySize {
		return nil, fmt.Errorf("%w: %d bytes", ErrEntryTooLarge, len(data))
	}
	n.seq++
	w := newWaiter()
	n.waiters[id.seq] = w
	n.props = append(n.props, proposal{data: data, term: n.leaderTerm, seq: id.seq, w: w})
	n.last = w
	select {
	case n.propc <- struct{}{}:
	default:
	}
	return w, nil
}

// lastProposal returns the waiter of this node's last proposal, or nil.
func (n *Node) lastProposal() *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// Advertise replicates "node n serves clients at info" and waits until it
// is applied here. Only the leader may advertise.
func (n *Node) Advertise(info []byte) error {
	if len(info) > MaxAdvertiseSize {
		return fmt.Errorf("raftstore: advertised info of %d bytes exceeds %d", len(info), MaxAdvertiseSize)
	}
	w, err := n.propose(entryAdvertise, 0, func(dst []byte) ([]byte, error) { return append(dst, info...), nil })
	if err != nil {
		return err
	}
	return w.Wait()
}

// LeaderAdvertised returns this node's id, the leader it knows (0: none)
// and that leader's term, and the latest info the leader advertised (nil:
// none), without the copies Status and Advertised make: for a request
// path that asks on every request. The info is shared: read it, never
// change it (an advertisement applied later replaces it with a new slice).
func (n *Node) LeaderAdvertised() (self, leader, term uint64, info []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status.ID, n.status.Leader, n.status.Term, n.advertised[n.status.Leader]
}

// Advertised returns a copy of the latest info node id advertised, or nil.
// It survives restarts (it is kept in the state store).
func (n *Node) Advertised(id uint64) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.advertised[id]; ok {
		return append([]byte(nil), v...)
	}
	return nil
}

// AdvertisedSince returns every node's latest advertisement and, for
// each one this process applied (rather than loaded from the state store
// at start), when it applied it, on Config.Now. An advertisement is
// applied after its proposal, so that time is never before the
// advertiser encoded it: what the advertiser's clock read then, it reads
// at least as much (less its rate's error) by the time elapsed since.
func (n *Node) AdvertisedSince() map[uint64]Advertised {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint64]Advertised, len(n.advertised))
	for id, v := range n.advertised {
		out[id] = Advertised{Info: append([]byte(nil), v...), AppliedAt: n.advertisedAt[id]}
	}
	return out
}

// Advertised is one node's latest advertisement (AdvertisedSince).
type Advertised struct {
	Info []byte
	// AppliedAt is when this process applied it; zero when it was only
	// loaded from the state store at start.
	AppliedAt time.Time
}

// Close stops the node: every waiting Pending fails with ErrNodeClosed,
// the loop and transport stop, and the raft log and state store close. A
// second Close returns ErrNodeClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrNodeClosed
	}
	n.closed = true
	n.failAllLocked(ErrNodeClosed)
	n.leaderTerm, n.ready = 0, false
	n.broadcastLocked()
	n.mu.Unlock()
	close(n.stopc)
	<-n.donec
	n.tr.close()
	if n.ownMux != nil {
		n.ownMux.close()
	}
	n.abortReceives()
	return errors.Join(n.state.Close(), n.rl.close())
}

// raftLogger sends etcd raft's log lines to slog: its chatter at Debug.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { r.Panic(v...) }
func (r raftLogger) Fatalf(f string, v ...any)   { r.Panicf(f, v...) }
func (r raftLogger) Panic(v ...any)              { s := fmt.Sprint(v...); r.l.Error(s); panic(s) }
func (r raftLogger) Panicf(f string, v ...any)   { s := fmt.Sprintf(f, v...); r.l.Error(s); panic(s) }
