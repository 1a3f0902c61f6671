package raftstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Runtime membership.
//
// A change is one etcd raft ConfChange (V1: one node added, promoted or
// removed at a time, which is safe without joint consensus and is all the
// CLI offers), proposed by the leader, with the added node's Raft address
// in its Context. Every node applies it when it commits: RawNode.ApplyConfChange,
// then the transport's peer set, and the state store's meta records in the
// same WriteMeta batch as the applied index:
//
//	"conf"          the ConfState after the change, protobuf-marshalled
//	"member/<id>"   a member's Raft address; "" once it was removed
//	                (a tombstone: ids are never reused)
//
// At Open these records win over Config.Peers, so a restarted node comes
// back with the membership it had applied, whatever its configuration
// file still says. Config.Peers then only supplies addresses the records
// lack (the boot members' before the first change).
//
// A node that joins (Config.Join) starts with an empty ConfState and an
// empty log (not even the boot position, index 1): it can never campaign
// on its own. The leader, finding nothing to append to, sends it a
// snapshot of its state store (snapshot.go), whose ConfState (the "conf"
// record of the copy) includes the new node; the joiner installs it and
// takes its membership (adoptMembership), then receives the entries after
// it.
//
// A node is added as a learner (ConfChangeAddLearnerNode): it receives the
// log but neither votes nor counts in the commit quorum, so adding a node
// that has not started yet, or is still installing its snapshot, does not
// raise the quorum (a group of three that grows to four must otherwise
// have three live nodes to commit). The leader promotes a learner to voter
// (ConfChangeAddNode on a learner) once it has caught up: reconcileVoters,
// on every tick of whichever node leads, so a new leader resumes the
// promotion a failed one left (learners are in the ConfState). With a
// Config.ReplicationFactor the leader keeps that many voters: learners
// beyond it stay learners (standby copies), a voter too many is demoted
// (ConfChangeAddLearnerNode on a voter), and a voter silent for
// Config.ReplaceAfter is replaced by a caught-up learner. One change
// at a time: a promotion waits for any pending change, and AddMember or
// RemoveMember answer ErrChangePending while a promotion or demotion is
// pending.
const (
	metaConf         = "conf"
	metaMemberPrefix = "member/"
)

// Member is one member of the replicated membership.
type Member struct {
	ID       uint64 `json:"id"`
	RaftAddr string `json:"raft"`
	// Membership is Voter or Learner.
	Membership string `json:"membership"`
}

// Kinds of membership (Member.Membership): a voter votes and counts in the commit quorum; a learner
// (a node just added, or one beyond Config.ReplicationFactor) receives the
// log, does neither, and is promoted to voter by the leader once its log
// is within Config.PromoteLagEntries of the commit index and the group
// needs a voter.
const (
	Voter   = "voter"
	Learner = "learner"
)

// Errors of AddMember and RemoveMember (besides ErrNotLeader and
// ErrNodeClosed).
var (
	// ErrChangePending: a membership change is being applied (or the leader
	// has not applied its predecessors' entries yet); retry after it.
	ErrChangePending = errors.New("raftstore: a membership change is already in progress")
	// ErrMemberExists: the id is already a member.
	ErrMemberExists = errors.New("raftstore: the id is already a member")
	// ErrIDRemoved: the id belonged to a removed member; ids are never reused.
	ErrIDRemoved = errors.New("raftstore: the id belonged to a removed member; ids are never reused")
	// ErrUnknownMember: the id is not a member.
	ErrUnknownMember = errors.New("raftstore: no member has this id")
	// ErrLastVoter: removing the member would leave the group without a voter.
	ErrLastVoter = errors.New("raftstore: cannot remove the last voting member")
	// ErrBadAddress: the Raft address is not host:port with a fixed port, or
	// another member uses it.
	ErrBadAddress = errors.New("raftstore: bad raft address")
)

// membership is a node's applied membership. The loop writes it (under
// n.mu); others read it under n.mu.
type membership struct {
	conf    *pb.ConfState
	addrs   map[uint64]string // every member's (and configured peer's) Raft address; "" = removed
	joining bool              // Config.Join and no snapshot installed yet
	// ccID is the change this node proposed in its current leadership and
	// has not applied yet, 0 if none: set by changeMembership, cleared when
	// it applies, when its proposal fails, or when the leadership ends.
	// It outlives a caller that gave up waiting, because the change may
	// still commit and Raft allows one unapplied change at a time.
	ccID  uint64
	ccSeq uint64 // its waiter's key in n.waiters
}

// isMember reports whether id is a voter or learner of cs.
func isMember(cs *pb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id)
}

// loadMembership reads the membership records at Open: the ConfState
// ("conf", else Config.Peers' ids, else empty for a joining node) and the
// addresses (Config.Peers overlaid by "member/" records).
func (n *Node) loadMembership() error {
	m := &n.mem
	m.addrs = map[uint64]string{}
	for _, p := range n.cfg.Peers {
		m.addrs[p.ID] = p.RaftAddr
	}
	err := n.state.ScanMeta(metaMemberPrefix, func(name string, v []byte) error {
		id, err := strconv.ParseUint(name[len(metaMemberPrefix):], 10, 64)
		if err != nil {
			return fmt.Errorf("raftstore: state store: bad record %q", name)
		}
		m.addrs[id] = string(v)
		return nil
	})
	if err != nil {
		return err
	}
	v, err := n.state.GetMeta(metaConf)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if n.cfg.Join {
			m.joining = true
			m.conf = &pb.ConfState{}
			return nil
		}
		voters := make([]uint64, 0, len(n.cfg.Peers))
		for _, p := range n.cfg.Peers {
			voters = append(voters, p.ID)
		}
		m.conf = &pb.ConfState{Voters: voters}
		return nil
	case err != nil:
		return fmt.Errorf("raftstore: state store: %w", err)
	}
	cs := &pb.ConfState{}
	if err := proto.Unmarshal(v, cs); err != nil {
		return fmt.Errorf("raftstore: state store: bad conf record: %w", err)
	}
	m.conf = cs
	return nil
}

// transportPeers are the peers the transport starts with: every known,
// not removed address but this node's.
func (n *Node) transportPeers() []Peer {
	var out []Peer
	for id, addr := range n.mem.addrs {
		if id != n.cfg.ID && addr != "" {
			out = append(out, Peer{ID: id, RaftAddr: addr})
		}
	}
	return out
}

// removedPeer reports whether id was removed from the group (the loop
// drops its messages). Loop only.
func (n *Node) removedPeer(id uint64) bool {
	addr, ok := n.mem.addrs[id]
	return ok && addr == ""
}

// membersLocked lists the applied membership, sorted by id.
func (n *Node) membersLocked() []Member {
	var out []Member
	for _, id := range n.mem.conf.GetVoters() {
		out = append(out, Member{ID: id, RaftAddr: n.mem.addrs[id], Membership: Voter})
	}
	for _, id := range n.mem.conf.GetLearners() {
		out = append(out, Member{ID: id, RaftAddr: n.mem.addrs[id], Membership: Learner})
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// removedLocked reports whether this node was removed from the group.
func (n *Node) removedLocked() bool {
	addr, ok := n.mem.addrs[n.cfg.ID]
	return ok && addr == ""
}

// Members returns the applied membership, sorted by id.
func (n *Node) Members() []Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.membersLocked()
}

// AddMember adds node id, reachable for Raft traffic at raftAddr, as a
// learner, and waits until this node (the leader) has applied the change;
// the leader promotes it to voter later, once it has caught up and a
// voter is needed (reconcileVoters). The new node must be started
// with Config.Join (it then learns the log from the leader). It fails with
// ErrNotLeader on a follower, ErrChangePending while another change
// (a promotion included) is in progress, ErrMemberExists (the id is a
// learner or a voter already), ErrIDRemoved or ErrBadAddress; with ctx's
// error if ctx ends first (the change may still apply: read Members). A
// Retire mark on the id is dropped.
func (n *Node) AddMember(ctx context.Context, id uint64, raftAddr string) error {
	return n.addMember(ctx, id, raftAddr, false)
}

// AddMemberAgain is AddMember that also takes an id the group removed
// before, for a placement controller moving a shard back to a node that
// left it (ADR 0016): the node comes back as a learner, with the state
// it deleted when it left (or, should it have kept a copy, with that
// copy, which the leader's log or snapshot overwrites: a learner neither
// votes nor campaigns, and is promoted only once it has caught up).
func (n *Node) AddMemberAgain(ctx context.Context, id uint64, raftAddr string) error {
	return n.addMember(ctx, id, raftAddr, true)
}

// addMember is AddMember, and AddMemberAgain with again.
func (n *Node) addMember(ctx context.Context, id uint64, raftAddr string, again bool) error {
	if id == 0 {
		return fmt.Errorf("%w: node ids are 1 or more", ErrUnknownMember)
	}
	if _, port, err := net.SplitHostPort(raftAddr); err != nil || port == "0" || port == "" {
		return fmt.Errorf("%w: %q is not host:port with a fixed port", ErrBadAddress, raftAddr)
	}
	cc := &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(id), Context: []byte(raftAddr)}
	return n.changeMembership(ctx, cc, func() error {
		switch addr, known := n.mem.addrs[id]; {
		case isMember(n.mem.conf, id):
			return fmt.Errorf("%w: node %d", ErrMemberExists, id)
		case known && addr == "" && !again:
			return fmt.Errorf("%w: node %d", ErrIDRemoved, id)
		}
		delete(n.leaving, id) // added again: a Retire mark from before no longer holds
		for _, m := range n.membersLocked() {
			if m.RaftAddr == raftAddr {
				return fmt.Errorf("%w: node %d already uses %s", ErrBadAddress, m.ID, raftAddr)
			}
		}
		return nil
	})
}

// RemoveMember removes node id (a voter or a learner) from the group and
// waits until this node (the leader) has applied the change. Removing the
// leader itself is
// allowed: it steps down once the change applies, and the others elect a
// new one. It fails with ErrNotLeader on a follower, ErrChangePending,
// ErrUnknownMember or ErrLastVoter; with ctx's error if ctx ends first.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	cc := &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	return n.changeMembership(ctx, cc, func() error {
		switch cs := n.mem.conf; {
		case !isMember(cs, id):
			return fmt.Errorf("%w: node %d", ErrUnknownMember, id)
		case len(cs.GetVoters()) == 1 && cs.GetVoters()[0] == id:
			return fmt.Errorf("%w: node %d", ErrLastVoter, id)
		}
		return nil
	})
}

// changeMembership queues cc on the leader after checkLocked accepts it,
// and waits until it applies here.
func (n *Node) changeMembership(ctx context.Context, cc *pb.ConfChange, checkLocked func() error) error {
	n.mu.Lock()
	if err := n.changeAllowedLocked(); err != nil {
		n.mu.Unlock()
		return err
	}
	if err := checkLocked(); err != nil {
		n.mu.Unlock()
		return err
	}
	w := n.queueChangeLocked(cc)
	select {
	case n.propc <- struct{}{}:
	default:
	}
	n.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		// The change stays pending (ccID): it may still commit.
		n.mu.Lock()
		n.failLocked(w, ctx.Err())
		n.mu.Unlock()
	}
	if err := w.Wait(); err != nil {
		return fmt.Errorf("raftstore: membership change not confirmed (it may still apply): %w", err)
	}
	return nil
}

// changeAllowedLocked reports why this node cannot propose a membership
// change now (nil if it can): closed, stopped, not the leader, not ready,
// or a change of its own still pending. n.mu held.
func (n *Node) changeAllowedLocked() error {
	switch {
	case n.closed:
		return ErrNodeClosed
	case n.err != nil:
		return n.err
	case n.leaderTerm == 0:
		return ErrNotLeader
	case !n.ready:
		// Entries of earlier terms, a conf change among them perhaps, are
		// not applied yet; raft would silently drop a second change.
		return fmt.Errorf("%w: the leader is still applying its predecessors' entries", ErrChangePending)
	case n.mem.ccID != 0:
		return ErrChangePending
	}
	return nil
}

// queueChangeLocked stamps cc with a fresh id, queues it for the loop and
// marks it as this leadership's pending change; the returned waiter
// completes when it applies here (or fails). The caller checked
// changeAllowedLocked. n.mu held.
func (n *Node) queueChangeLocked(cc *pb.ConfChange) *waiter {
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	cc.Id = new(binary.BigEndian.Uint64(idb[:]) | 1) // never 0
	n.seq++
	w := newWaiter()
	n.waiters[n.seq] = w
	n.mem.ccID, n.mem.ccSeq = cc.GetId(), n.seq
	n.props = append(n.props, proposal{cc: cc, term: n.leaderTerm, seq: n.seq, w: w})
	return w
}

// reconcileVoters keeps the voters at Config.ReplicationFactor (loop
// only, on every tick). It runs on the leader once it is ready and has no
// change of its own pending, and queues at most one change:
//
//   - more voters than the factor: the voter silent longest (never this
//     node; the highest id among those heard from recently) becomes a
//     learner;
//   - fewer voters than the factor (or no factor), or a voter silent for
//     Config.ReplaceAfter: a caught-up learner becomes a voter. A
//     replacement thus takes two changes: the promotion, which leaves one
//     voter too many, then the demotion of the silent one.
//
// One change at a time (ConfChange V1, no joint consensus): a promotion
// or a demotion changes the voters by one, which is safe on its own. A
// voter is silent when the leader has not seen it active in Raft since
// the election timeout before (Status.Heard), counted from the start of
// this leadership for one never heard. A learner is caught up when the
// leader replicates to it normally (tracker.StateReplicate: not probing,
// not receiving a snapshot), has heard from it within the last election
// timeout (RecentActive), its log holds every entry up to commit −
// Config.PromoteLagEntries, and Config.Promotable does not veto it; the
// lowest id goes first.
func (n *Node) reconcileVoters() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.changeAllowedLocked() != nil {
		return
	}
	voters, learners := n.mem.conf.GetVoters(), n.mem.conf.GetLearners()
	leaving := n.leavingLocked()
	for _, id := range learners {
		if leaving(id) {
			// A learner holds no vote: removing it leaves the quorum as
			// it is.
			n.log.Info("raftstore: removing a learner the placement moves out", "learner", id)
			n.queueChangeLocked(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(id)})
			n.kickLocked()
			return
		}
	}
	rf := n.cfg.ReplicationFactor
	if rf > 0 && len(voters) > rf {
		if id := n.leavingVoterLocked(voters, leaving); id != 0 {
			n.log.Info("raftstore: demoting a voter the placement moves out", "voter", id, "voters", len(voters), "replication_factor", rf)
			n.queueChangeLocked(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(id)})
			n.kickLocked()
			return
		}
		if leaving(n.cfg.ID) {
			// This node is the one to go: it stays a voter until it has
			// handed its leadership over (Retire's caller does).
			return
		}
		if time.Since(n.leadSince) < n.cfg.TickInterval*electionTicks {
			// Too early in this leadership to tell a silent voter from
			// one that has not answered yet: wait, rather than demote a
			// live voter and keep a dead one (the state a leader that
			// died between a replacement's two changes leaves).
			return
		}
		if id := n.demotionLocked(voters); id != 0 {
			n.log.Info("raftstore: demoting a voter to learner", "voter", id, "voters", len(voters), "replication_factor", rf)
			n.queueChangeLocked(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(id)})
			n.kickLocked()
		}
		return
	}
	if len(learners) == 0 {
		return
	}
	var silent uint64
	if rf > 0 && len(voters) == rf {
		now := time.Now()
		for _, id := range voters {
			if leaving(id) || id != n.cfg.ID && now.Sub(n.lastHeard(id)) >= n.cfg.ReplaceAfter {
				silent = id
				break
			}
		}
		if silent == 0 {
			return
		}
	}
	commit := n.rn.BasicStatus().GetCommit()
	var id uint64
	n.rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
		if caughtUp(&pr, commit, n.cfg.PromoteLagEntries) && slices.Contains(learners, pid) && (id == 0 || pid < id) && !leaving(pid) &&
			(n.cfg.Promotable == nil || n.cfg.Promotable(pid)) {
			id = pid
		}
	})
	if id == 0 {
		return
	}
	switch {
	case silent != 0 && leaving(silent):
		n.log.Info("raftstore: replacing a voter the placement moves out with a caught-up learner", "voter", silent, "learner", id, "commit", commit)
	case silent != 0:
		n.log.Warn("raftstore: replacing a silent voter with a caught-up learner", "silent_voter", silent, "since", n.lastHeard(silent), "learner", id, "commit", commit)
	default:
		n.log.Info("raftstore: promoting a caught-up learner to voter", "learner", id, "commit", commit)
	}
	n.queueChangeLocked(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: new(id)})
	n.kickLocked()
}

// retiring is a member Retire marked: until when, in which leadership.
type retiring struct {
	until time.Time
	term  uint64
}

// Retire marks ids, members of the group, as moved out of it by a
// placement controller (ADR 0016), for d or until this node's
// leadership ends, whichever is first. While this node leads, the
// group's voters are reconciled around them (reconcileVoters): a marked
// learner is removed; a marked voter is replaced, as a silent one is, by
// a caught-up learner that is not marked, then demoted (never this
// node: the caller hands the leadership over first, TransferCandidates)
// and removed. A member is never removed while it still votes, so the
// group keeps Config.ReplicationFactor voters in sync throughout; with
// no caught-up learner to replace a marked voter, nothing happens until
// there is one. The controller marks again each round; ids that are not
// members are ignored. ErrNotLeader on a follower.
func (n *Node) Retire(ids []uint64, d time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrNodeClosed
	}
	if n.leaderTerm == 0 {
		return ErrNotLeader
	}
	if n.leaving == nil {
		n.leaving = map[uint64]retiring{}
	}
	until := time.Now().Add(d)
	for _, id := range ids {
		n.leaving[id] = retiring{until: until, term: n.leaderTerm}
	}
	n.kickLocked()
	return nil
}

// Retiring lists the members Retire marked that are still marked in this
// leadership, sorted.
func (n *Node) Retiring() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	leaving := n.leavingLocked()
	var out []uint64
	for id := range n.leaving {
		if leaving(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// leavingLocked drops the marks of Retire that expired or belong to an
// earlier leadership, and reports which members are still marked. n.mu
// held.
func (n *Node) leavingLocked() func(id uint64) bool {
	now := time.Now()
	for id, r := range n.leaving {
		if r.term != n.leaderTerm || !now.Before(r.until) {
			delete(n.leaving, id)
		}
	}
	return func(id uint64) bool {
		_, ok := n.leaving[id]
		return ok && isMember(n.mem.conf, id)
	}
}

// leavingVoterLocked is the voter Retire marked to demote when there are
// too many voters: the lowest id marked, never this node; 0 if none.
// n.mu held.
func (n *Node) leavingVoterLocked(voters []uint64, leaving func(uint64) bool) uint64 {
	for _, id := range slices.Sorted(slices.Values(voters)) {
		if id != n.cfg.ID && leaving(id) {
			return id
		}
	}
	return 0
}

// demotionLocked picks the voter to demote when there are too many: the
// one silent longest if any is silent past an election timeout, else the
// highest id; never this node. 0 if none. Loop only, n.mu held.
func (n *Node) demotionLocked(voters []uint64) uint64 {
	now := time.Now()
	quiet := n.cfg.TickInterval * electionTicks
	var pick uint64
	var pickSilence time.Duration
	for _, id := range voters {
		if id == n.cfg.ID {
			continue
		}
		s := now.Sub(n.lastHeard(id))
		if s < quiet {
			s = 0 // heard recently: only the id decides among these
		}
		if pick == 0 || s > pickSilence || (s == pickSilence && id > pick) {
			pick, pickSilence = id, s
		}
	}
	return pick
}

// lastHeard is when this leadership last saw member id active in Raft,
// or when it began if never. Loop only.
func (n *Node) lastHeard(id uint64) time.Time {
	if at, ok := n.heard[id]; ok {
		return at
	}
	return n.leadSince
}

// kickLocked wakes the loop to propose what was queued. n.mu held.
func (n *Node) kickLocked() {
	select {
	case n.propc <- struct{}{}:
	default:
	}
}

// caughtUp reports whether a learner's progress allows its promotion: it
// is a learner and in sync (inSync).
func caughtUp(pr *tracker.Progress, commit, lag uint64) bool {
	return pr.IsLearner && inSync(pr, commit, lag)
}

// inSync reports whether the leader replicates to a member normally,
// heard from it recently, and its log holds every entry up to commit −
// lag.
func inSync(pr *tracker.Progress, commit, lag uint64) bool {
	return pr.RecentActive && pr.State == tracker.StateReplicate &&
		(pr.Match >= commit || commit-pr.Match <= lag)
}

// confApply collects the conf changes of one applied batch (loop only).
type confApply struct {
	cs      *pb.ConfState     // the ConfState after the last change, nil if none
	addrs   map[uint64]string // address changes; "" = removed
	mineSeq uint64            // this node's waiter to complete, 0 if none
}

// applyConfEntry applies one committed conf-change entry to Raft and records its
// effect for the batch's meta records.
func (n *Node) applyConfEntry(ca *confApply, e *pb.Entry) error {
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryType_EntryConfChange {
		v1 := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), v1); err != nil {
			return fmt.Errorf("raftstore: conf change entry %d: %w", e.GetIndex(), err)
		}
		cc = v1
		n.mu.Lock()
		if n.mem.ccID != 0 && v1.GetId() == n.mem.ccID {
			ca.mineSeq = n.mem.ccSeq
		}
		n.mu.Unlock()
	} else {
		v2 := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), v2); err != nil {
			return fmt.Errorf("raftstore: conf change entry %d: %w", e.GetIndex(), err)
		}
		cc = v2
	}
	if ca.addrs == nil {
		ca.addrs = map[uint64]string{}
	}
	for _, c := range cc.AsV2().GetChanges() {
		switch c.GetType() {
		case pb.ConfChangeType_ConfChangeAddNode, pb.ConfChangeType_ConfChangeAddLearnerNode:
			if addr := string(cc.AsV2().GetContext()); addr != "" {
				ca.addrs[c.GetNodeId()] = addr
			}
		case pb.ConfChangeType_ConfChangeRemoveNode:
			ca.addrs[c.GetNodeId()] = ""
		}
	}
	ca.cs = n.rn.ApplyConfChange(cc)
	n.rl.cs = ca.cs
	return nil
}

// meta returns the records a batch with conf changes writes with its
// applied index: "conf" and every changed or current member's address.
func (ca *confApply) meta(n *Node) ([]pebblestore.Meta, error) {
	if ca.cs == nil {
		return nil, nil
	}
	return confMeta(n, ca.cs, ca.addrs)
}

// confMeta encodes cs and the member addresses (known ones, overlaid by
// changed) as meta records.
func confMeta(n *Node, cs *pb.ConfState, changed map[uint64]string) ([]pebblestore.Meta, error) {
	b, err := proto.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("raftstore: marshal conf state: %w", err)
	}
	meta := []pebblestore.Meta{{Name: metaConf, Value: b}}
	addr := func(id uint64) (string, bool) {
		if a, ok := changed[id]; ok {
			return a, true
		}
		a, ok := n.mem.addrs[id] // written by the loop only: no lock needed here
		return a, ok
	}
	for _, id := range slices.Concat(cs.GetVoters(), cs.GetLearners()) {
		if a, ok := addr(id); ok && a != "" {
			meta = append(meta, pebblestore.Meta{Name: metaMemberPrefix + strconv.FormatUint(id, 10), Value: []byte(a)})
		}
	}
	for id, a := range changed {
		if a == "" {
			meta = append(meta, pebblestore.Meta{Name: metaMemberPrefix + strconv.FormatUint(id, 10), Value: nil})
		}
	}
	return meta, nil
}

// commitConfLocked publishes an applied batch's conf changes: the
// membership, the transport's peers, and this node's waiter. n.mu held.
func (n *Node) commitConfLocked(ca *confApply) {
	if ca.cs == nil {
		return
	}
	n.mem.conf = ca.cs
	for id, addr := range ca.addrs {
		if _, known := n.mem.addrs[id]; known && n.mem.addrs[id] == addr {
			continue
		}
		n.mem.addrs[id] = addr
		if id == n.cfg.ID {
			if addr == "" {
				n.log.Warn("raftstore: this node was removed from the group; it no longer votes or campaigns")
			}
			continue
		}
		if addr == "" {
			n.tr.removePeer(id)
		} else {
			n.tr.addPeer(Peer{ID: id, RaftAddr: addr})
		}
	}
	n.log.Info("raftstore: membership changed", "voters", ca.cs.GetVoters(), "learners", ca.cs.GetLearners())
	if ca.mineSeq != 0 {
		if w := n.waiters[ca.mineSeq]; w != nil {
			delete(n.waiters, ca.mineSeq)
			w.finishLocked(nil)
		}
		n.mem.ccID = 0
	}
}

// raftStateRemoved is Status.Role for a node removed from the group.
const raftStateRemoved = "removed"
