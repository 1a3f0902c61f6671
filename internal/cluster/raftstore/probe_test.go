package raftstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestProbe: a node asks each peer for its ProbeAnswer on a connection of
// its own, and gets it with the instants around the exchange; a peer that
// sets none answers empty; an answer longer than MaxProbeAnswer is cut;
// the probes leave Raft alone (the group keeps its leader and commits).
// An unknown id and a blocked transport (a partition) fail.
func TestProbe(t *testing.T) {
	long := bytes.Repeat([]byte{'x'}, MaxProbeAnswer+10)
	c := startClusterTuned(t, 3, false, func(i int, cfg *Config) {
		switch i {
		case 0:
			cfg.ProbeAnswer = func(int) []byte { return []byte("node 1") }
		case 1:
			cfg.ProbeAnswer = func(int) []byte { return long }
		}
	})
	l := c.leader(-1)
	term := c.nodes[l].Status().Term
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want := map[int][]byte{0: []byte("node 1"), 1: long[:MaxProbeAnswer], 2: {}}
	for from := range 3 {
		for to := range 3 {
			if from == to {
				continue
			}
			before := time.Now()
			a, sent, got, err := c.nodes[from].Probe(ctx, uint64(to+1), time.Now)
			if err != nil {
				t.Fatalf("probe %d → %d: %v", from+1, to+1, err)
			}
			if !bytes.Equal(a, want[to]) {
				t.Errorf("probe %d → %d answered %q, want %q", from+1, to+1, a, want[to])
			}
			if sent.Before(before) || got.Before(sent) || time.Since(got) < 0 {
				t.Errorf("probe %d → %d: sent %v, got %v, asked at %v", from+1, to+1, sent, got, before)
			}
		}
	}
	if _, _, _, err := c.nodes[0].Probe(ctx, 1, time.Now); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("probe of itself: %v, want ErrUnknownMember", err)
	}
	if _, _, _, err := c.nodes[0].Probe(ctx, 9, time.Now); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("probe of a non-member: %v, want ErrUnknownMember", err)
	}
	if st := c.nodes[l].Status(); st.Term != term || st.Leader != uint64(l+1) {
		t.Errorf("after the probes: leader %d in term %d, want %d in term %d", st.Leader, st.Term, l+1, term)
	}
	if err := writeKV(c.nodes[l].Store(), "after", "probes"); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		for _, nd := range c.nodes {
			if err := stateHas(nd, "after", "probes"); err != nil {
				return err
			}
		}
		return nil
	})
	// A partitioned node neither asks nor answers.
	c.nodes[2].tr.setBlocked(true)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, _, _, err := c.nodes[0].Probe(short, 3, time.Now); err == nil {
		t.Error("a probe of a partitioned node answered")
	}
	cancelShort()
	if _, _, _, err := c.nodes[2].Probe(ctx, 1, time.Now); err == nil {
		t.Error("a partitioned node's probe was answered")
	}
	c.nodes[2].tr.setBlocked(false)
}

// TestProbeIgnoredByRaft: a node of an older release hands a probe to its
// Raft loop like any message, and Raft drops it (RawNode.Step refuses a
// message type it only makes locally), so the probe goes unanswered and
// the group is undisturbed: fed straight into the loop of the leader and
// of a follower, it changes no term or leader, and writes still commit.
func TestProbeIgnoredByRaft(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader(-1)
	term := c.nodes[l].Status().Term
	for i, nd := range c.nodes {
		from := uint64((i+1)%3 + 1)
		nd.recvc <- &pb.Message{Type: pb.MessageType_MsgUnreachable.Enum(), From: new(from), To: new(nd.cfg.ID), Context: []byte(probeContext)}
	}
	if err := writeKV(c.nodes[l].Store(), "after", "probe"); err != nil {
		t.Fatal(err)
	}
	if st := c.nodes[l].Status(); st.Term != term || st.Leader != uint64(l+1) {
		t.Errorf("after probes fed to Raft: leader %d in term %d, want %d in term %d", st.Leader, st.Term, l+1, term)
	}
}
