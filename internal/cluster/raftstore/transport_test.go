package raftstore

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// TestSendQueueFullDrops checks that a peer whose queue is full costs the
// loop nothing: send never blocks, drops, and reports the peer
// unreachable so Raft backs off and resends.
func TestSendQueueFullDrops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var unreachable atomic.Int64
	tr := newTransport(1, ln, nodeauth.SurfaceRaft, []Peer{{ID: 1}, {ID: 2, RaftAddr: "127.0.0.1:1"}}, quietLogger(), nil, nil, nil,
		func(*pb.Message) []byte { return nil }, func(id uint64) {
			if id == 2 {
				unreachable.Add(1)
			}
		})
	// Not started: nothing drains peer 2's queue.
	m := &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1))}
	for range sendQueueLen + 10 {
		tr.send(m)
	}
	if got := unreachable.Load(); got != 10 {
		t.Fatalf("unreachable reported %d times, want 10 (one per dropped message)", got)
	}
	tr.close()
}

// TestOversizedFrameClosesConnection sends a frame header over the limit
// to a live node: the node closes that connection and keeps working.
func TestOversizedFrameClosesConnection(t *testing.T) {
	c := newCluster(t, 1)
	c.leader(-1)
	conn, err := net.Dial("tcp", c.peers[0].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := nodeauth.DialConn(conn, nil, nodeauth.SurfaceRaft, 2, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after an oversized frame: %v, want EOF (connection closed)", err)
	}
	poll.CheckFor(t, 10*time.Second, func() error { return writeKV(c.nodes[0].Store(), "still", "works") })
}
