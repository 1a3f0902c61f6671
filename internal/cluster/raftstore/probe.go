package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// Probes: a short question to one peer, answered on the same connection.
//
// The layer above asks a peer for a few bytes its own Config.ProbeAnswer
// makes (the cluster asks for the peer's clock, to start a leadership on
// the cluster's time when it has no measurement of its own). A probe runs
// on a connection of its own, opened with the node handshake like any
// other (surface "raft"), so only a node holding the cluster secret can
// ask or answer. On it the dialer sends one frame (the transport's
// format) holding a raftpb.Message of type MsgUnreachable with Context
// probeContext, From and To set; the listener answers with a 4-byte
// big-endian length and that many bytes (at most MaxProbeAnswer), and
// goes on reading; the dialer closes the connection once it has read
// the answer. MsgUnreachable is a message Raft only ever makes inside a
// node: a node of an older release that receives it drops it (RawNode.Step
// refuses a local message from the network), so a probe to it times out
// instead of confusing its Raft state.

// MaxProbeAnswer bounds a probe's answer.
const MaxProbeAnswer = 1024

const probeContext = "sluice-probe/1"

// ErrProbeAnswer is returned for an answer longer than MaxProbeAnswer.
var ErrProbeAnswer = errors.New("raftstore: probe answer too long")

// isProbe reports whether m is a probe.
func isProbe(m *pb.Message) bool {
	return m.GetType() == pb.MessageType_MsgUnreachable && string(m.GetContext()) == probeContext
}

// answerProbe is this node's framed answer to a probe.
func (n *Node) answerProbe() []byte {
	var a []byte
	if n.cfg.ProbeAnswer != nil {
		a = n.cfg.ProbeAnswer(n.cfg.Shard)
	}
	a = a[:min(len(a), MaxProbeAnswer)]
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(a)), uint32(len(a))), a...)
}

// Probe asks member id for its answer (its Config.ProbeAnswer) and
// returns it with the instants, read from now, just before the question
// was written and just after the answer was read: the peer made its
// answer between the two. It fails when id is not a member with an
// address, the peer cannot be reached or authenticated, this node's
// transport is blocked (tests), or ctx ends first; a peer of an older
// release never answers, so ctx must carry a deadline.
func (n *Node) Probe(ctx context.Context, id uint64, now func() time.Time) (answer []byte, sent, got time.Time, err error) {
	n.mu.Lock()
	addr := n.mem.addrs[id]
	n.mu.Unlock()
	if id == n.cfg.ID || addr == "" {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("%w: %d", ErrUnknownMember, id)
	}
	q := &pb.Message{Type: pb.MessageType_MsgUnreachable.Enum(), From: new(n.cfg.ID), To: new(id), Context: []byte(probeContext)}
	f, err := appendFrame(nil, q)
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	return n.tr.probe(ctx, addr, id, f, now)
}

// probe dials id at addr for one question: frame, already encoded.
func (t *transport) probe(ctx context.Context, addr string, id uint64, frame []byte, now func() time.Time) (answer []byte, sent, got time.Time, err error) {
	if t.isBlocked() {
		return nil, time.Time{}, time.Time{}, errors.New("raftstore: transport blocked")
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	defer func() { _ = c.Close() }()
	// The handshake and the exchange end with ctx, or when the transport
	// closes.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	stopT := context.AfterFunc(t.ctx, func() { _ = c.Close() })
	defer stopT()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl) // a failure shows as the next read's or write's
	}
	sc, _, err := t.enc.DialConn(c, t.keys[0], t.surface, t.id, id)
	if err != nil {
		if errors.Is(err, nodeauth.ErrAuth) {
			t.authFailed(addr, err)
		}
		return nil, time.Time{}, time.Time{}, err
	}
	sent = now()
	if _, err := sc.Write(frame); err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(sc, hdr[:]); err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > MaxProbeAnswer {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("%w: %d bytes", ErrProbeAnswer, size)
	}
	answer = make([]byte, size)
	if _, err := io.ReadFull(sc, answer); err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	got = now()
	return answer, sent, got, nil
}
