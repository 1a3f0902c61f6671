package cluster

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// A cluster node's Raft log and state store fail, like a single node's
// store, on a write that finds the disk full although min_free_disk
// refuses new messages before it (another process filled the disk, or a
// follower's disk filled with entries the others committed): the shard's
// Raft node stops for good (raftstore.Node.Failure), and the others go on
// without it as without a dead member. A failed write(2), unlike a
// failed fsync, has lost nothing (raftstore.Node.FailedOnFullDisk), so
// Supervise restarts such a node in place once space is back, as
// server.Supervise does for a single node.

// fullDiskPoll is how often Supervise looks for a shard stopped on a full
// disk, and then for space.
const fullDiskPoll = time.Second

// Supervise creates a node from opts (New) and runs it (Run) until ctx
// ends, like New then Run, with one addition: when one of the node's
// shards stops because a write of its Raft log or state store found the
// disk full, and no shard stopped for another reason
// (raftstore.Node.FailedOnFullDisk), it waits until space is back (free
// space above 125 % of min_free_disk, and a probe file written and synced
// in the data directory: server.SpaceBack), then stops the node
// gracefully (the shards it still leads hand their leadership over; its
// clients' connections close) and opens a new one on the same data
// directory and the same public and Raft addresses, which recovers the
// stores as a restart after a crash does and catches up from the
// leaders. Until then the node keeps serving through its other shards and
// answers /health 503 with store_failed. Every other failure stays
// fail-stop. started, if not nil, is called with each node New returns,
// before it runs.
func Supervise(ctx context.Context, opts Options, started func(*Node)) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var prev *Node
	open := func() (*Node, error) {
		if prev != nil {
			// A node opened again listens where this one did, port 0 or not.
			opts.Server = prev.pinnedAddrs(opts.Server)
		}
		n, err := New(opts)
		if err == nil {
			prev = n
		}
		return n, err
	}
	return server.SuperviseInPlace(ctx, log, "a shard's Raft log or state store failed on a full disk", "node", open, started)
}

// pinnedAddrs returns o with each listen address configured with port 0
// (the public HTTP and AMQP listeners, the Raft listener) replaced by the
// address this node bound, so that a node opened again listens there too.
func (n *Node) pinnedAddrs(o server.Options) server.Options {
	if anyPort(o.SQSListen) {
		o.SQSListen = n.HTTPAddr()
	}
	if o.AMQPListen != "" && anyPort(o.AMQPListen) {
		o.AMQPListen = n.AMQPAddr()
	}
	raftListen := o.Cluster.RaftListen
	if raftListen == "" {
		raftListen = o.Cluster.Self().Raft
	}
	if anyPort(raftListen) {
		o.Cluster.RaftListen = n.raftAddr
	}
	return o
}

// anyPort reports whether addr asks for any free port (port 0).
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (port == "0" || port == "")
}

// AwaitSpaceAfterFullDisk implements server.InPlace: it polls every
// fullDiskPoll for a shard to have stopped on a full disk with no shard
// stopped otherwise (failedOnFullDisk), and for space to be back
// (spaceBack).
func (n *Node) AwaitSpaceAfterFullDisk(ctx context.Context) bool {
	return server.AwaitSpace(ctx, fullDiskPoll, n.log,
		"a shard's Raft log or state store failed on a full disk: this node takes no part in it until space returns, then restarts in place",
		n.failedOnFullDisk, n.spaceBack)
}

// failedOnFullDisk reports whether some shard's Raft node stopped on a
// full disk and none stopped for another reason.
func (n *Node) failedOnFullDisk() bool {
	full := false
	for k := range n.shards.Len() {
		r := n.shards.Shard(k)
		if r == nil || r.Failure() == nil {
			continue
		}
		if !r.FailedOnFullDisk() {
			return false
		}
		full = true
	}
	return full
}

// spaceBack reports, as an error, why the data directory cannot take the
// stores' writes yet (server.SpaceBack; free space is checked when this
// node watches its disk: min_free_disk set, the real filesystem).
func (n *Node) spaceBack() error {
	var resumeAt uint64
	if min := n.opts.MinFreeDisk; min > 0 && n.opts.StoreFS == nil {
		resumeAt = uint64(min) + uint64(min)/4
	}
	return server.SpaceBack(n.opts.StoreFS, n.opts.DataDir, resumeAt, n.freeBytes)
}
