package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Peer is one member of the cluster.
type Peer struct {
	ID       uint64 // 1..n, never reused
	RaftAddr string // host:port other nodes dial for Raft traffic
}

// Config configures a node.
type Config struct {
	ID       uint64
	Peers    []Peer       // every member, including this node
	Dir      string       // this node's directory: raft log + state store live under it
	Listener net.Listener // Raft traffic listener (the caller binds it, port 0 in tests)
	// Shard is the shard whose Raft group this node is a member of: its
	// connections' handshakes name it (nodeauth.RaftSurface). 0 for a
	// one-group node; OpenShards sets it for each of its groups.
	Shard        int
	TickInterval time.Duration // default 100 ms; ElectionTicks default 10, HeartbeatTicks 1
	Logger       *slog.Logger
	// Secret is the cluster secret every connection between nodes proves
	// it holds (package nodeauth; transport.go); every member must have
	// the same. Empty: the handshake runs with an empty key and proves
	// nothing (a loopback cluster for development).
	Secret []byte
	// ExtraSecret, when set, is a second secret this node accepts from
	// the nodes that dial it (it dials with Secret): a rotation of the
	// secret without a full restart (docs/operations.md).
	ExtraSecret []byte
	// Encryption, when set, carries every connection of the transport,
	// the probes and snapshots in TLS (nodeauth.Encryption, [cluster]
	// encrypt); nil: plain TCP. Every node of a cluster must agree.
	Encryption *nodeauth.Encryption
	// OnAuthFailure, when set, is called for every connection refused
	// because its handshake failed, either way (a metric counts them).
	OnAuthFailure func()
	// ProbeAnswer, when set, is what this node answers a peer's Probe
	// (at most MaxProbeAnswer bytes; longer is cut); nil answers empty.
	// It is given the node's Shard (a probe is asked on one shard's
	// connections). It is called on a transport goroutine and must not
	// block.
	ProbeAnswer func(shard int) []byte
	// Now, when set, is the clock AdvertisedSince reports apply times on
	// (the cluster node's, so that a test's fake clock is used); nil is
	// time.Now.
	Now func() time.Time
	// Join starts a node that is being added to a running group: it
	// boots with an empty membership and log, never campaigns on its own,
	// and learns everything from the leader once a member ran AddMember
	// for it. Peers lists this node and members it can reach. Ignored
	// once the node has joined (its membership records win).
	Join bool
	// FS is the filesystem of the Raft log and the state store; nil means
	// the operating system's. Tests pass a crashable MemFS (crashfs) to
	// cut power (a CrashClone keeps only what was synced).
	FS vfs.FS
	// Log truncation (see logstore.go): the log is cut once the applied
	// index is CompactEntries entries, or CompactBytes bytes of applied
	// entries, past the log's start, keeping KeepEntries applied entries.
	// Zero means the default (DefaultCompactEntries, DefaultCompactBytes,
	// DefaultKeepEntries); tests lower them.
	CompactEntries uint64
	CompactBytes   uint64
	KeepEntries    uint64
	// SnapshotChunkSize is the target size of one chunk of a snapshot sent
	// to a lagging follower, at most MaxSnapshotChunkSize; 0 means
	// DefaultSnapshotChunkSize.
	SnapshotChunkSize int
	// SnapshotStreams bounds how many snapshot streams the node sends at
	// once, and how many it receives at once, across all its shards'
	// groups (snaplimit.go); SnapshotRate bounds the bytes a second its
	// outgoing streams write together (at least MinSnapshotRate). 0: the
	// defaults (DefaultSnapshotStreams, DefaultSnapshotRate); negative: no
	// bound. OpenShards shares one budget among its groups.
	SnapshotStreams int
	SnapshotRate    int64
	// PromoteLagEntries: the leader promotes a learner (a node just added)
	// to voter once its log holds every entry up to the commit index minus
	// this many (membership.go); 0 means DefaultPromoteLagEntries. At most
	// KeepEntries is used: a new voter then catches up from the log.
	PromoteLagEntries uint64
	// ReplicationFactor is how many voters the leader keeps
	// (membership.go, reconcileVoters): while there are fewer, it promotes
	// a caught-up learner; while there are more, it demotes a voter to
	// learner; and it replaces a voter it has not heard from for
	// ReplaceAfter by a caught-up learner (promote, then demote the silent
	// one). Members beyond it stay learners: full copies of the log that
	// neither vote nor count in the commit quorum, ready to take a voter's
	// place. 0: every member votes (each caught-up learner is promoted, as
	// before this setting existed).
	ReplicationFactor int
	// ReplaceAfter is how long a voter must have been silent (not active
	// in Raft, as the leader sees it) before the leader replaces it with a
	// caught-up learner; 0 means DefaultReplaceAfter. Only with a
	// ReplicationFactor.
	ReplaceAfter time.Duration
	// Promotable, when set, vetoes the promotion of a caught-up learner
	// (reconcileVoters): it is called on the Raft loop, with the node's
	// lock held, so it must not block or call back into the Node. nil:
	// every caught-up learner may be promoted.
	Promotable func(id uint64) bool

	// unsyncedHold is how long a view holds a write without durable back
	// (view.Write); 0 means defaultUnsyncedHold. Tests lengthen it.
	unsyncedHold time.Duration

	// crashPoint, when set, is called at each step of a compaction and of
	// a snapshot install (tests cut the power there; snapshot.go).
	crashPoint func(step string) error
	// sharedLog, when set (OpenShards, with several shards), is the
	// node's shared Raft log store, in which this group's log lives under
	// its shard's keys (sharedlog.go); nil: the group's own store in
	// Dir/raft.
	sharedLog *pebblestore.Store
	// snapLimits is the node's snapshot budget (snaplimit.go), shared by
	// the groups of one OpenShards; nil: Open makes one from
	// SnapshotStreams and SnapshotRate.
	snapLimits *snapLimits
	// ownLogs (tests) makes OpenShards give every shard a log store of
	// its own, as releases before the shared one did.
	ownLogs bool
}

// Defaults.
const (
	DefaultTickInterval = 100 * time.Millisecond
	electionTicks       = 10
	heartbeatTicks      = 1
	// MaxAdvertiseSize bounds the info Advertise replicates.
	MaxAdvertiseSize = 64 << 10
	// MaxEntrySize bounds one encoded write batch (32 MiB): half of
	// MaxFrameSize, so an entry always fits in a message to a peer.
	MaxEntrySize = MaxFrameSize / 2
	// Log truncation and snapshot defaults (Config).
	DefaultCompactEntries    = 10_000
	DefaultCompactBytes      = 64 << 20
	DefaultKeepEntries       = 5_000
	DefaultSnapshotChunkSize = 1 << 20
	// DefaultPromoteLagEntries: a learner within 1,000 entries of the
	// commit index is promoted (an entry is a group-committed batch, so a
	// follower that keeps up is normally far closer); it is well below
	// DefaultKeepEntries, so the new voter finishes catching up from the
	// leader's log rather than from another snapshot.
	DefaultPromoteLagEntries = 1_000
	// DefaultReplaceAfter: a voter silent for 30 s is replaced by a
	// caught-up learner (Config.ReplaceAfter). Longer than a restart of a
	// node, and cheap when it does happen: a learner already holds the
	// log, so the swap moves no data.
	DefaultReplaceAfter = 30 * time.Second
	// MaxSnapshotChunkSize bounds Config.SnapshotChunkSize (16 MiB), so
	// that a chunk and one more record of up to MaxEntrySize fit in a
	// frame.
	MaxSnapshotChunkSize = MaxFrameSize / 4
)

// validate checks the configuration.
func (c *Config) validate() error {
	if c.ID == 0 {
		return errors.New("raftstore: node ID must be positive")
	}
	if c.Dir == "" {
		return errors.New("raftstore: no directory")
	}
	if c.ReplicationFactor < 0 || c.ReplaceAfter < 0 {
		return errors.New("raftstore: ReplicationFactor and ReplaceAfter must not be negative")
	}
	if c.Listener == nil {
		return errors.New("raftstore: no listener")
	}
	if _, ok := c.Listener.(*shardListener); c.Shard != 0 && !ok {
		return fmt.Errorf("raftstore: shard %d needs its listener from OpenShards", c.Shard)
	}
	if c.SnapshotChunkSize < 0 || c.SnapshotChunkSize > MaxSnapshotChunkSize {
		return fmt.Errorf("raftstore: snapshot chunk size %d is outside 0..%d", c.SnapshotChunkSize, MaxSnapshotChunkSize)
	}
	if c.SnapshotRate > 0 && c.SnapshotRate < MinSnapshotRate {
		return fmt.Errorf("raftstore: snapshot rate %d bytes/s is below %d (negative: no limit)", c.SnapshotRate, MinSnapshotRate)
	}
	seen := map[uint64]bool{}
	for _, p := range c.Peers {
		if p.ID == 0 {
			return errors.New("raftstore: peer ID must be positive")
		}
		if seen[p.ID] {
			return fmt.Errorf("raftstore: peer %d listed twice", p.ID)
		}
		if p.ID != c.ID && p.RaftAddr == "" {
			return fmt.Errorf("raftstore: peer %d has no raft address", p.ID)
		}
		seen[p.ID] = true
	}
	if !seen[c.ID] {
		return fmt.Errorf("raftstore: node %d is not in its peer list", c.ID)
	}
	return nil
}
