package raftstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
)

// TestUnsyncedWriteRidesWithTheNextWrite checks the hold of view.Write: a
// write without durable is not a Raft entry of its own but goes in the
// next write's entry, in order before it, and is read back at once by
// its own view; left alone, it is proposed by itself within unsyncedHold
// and reaches every node.
func TestUnsyncedWriteRidesWithTheNextWrite(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	ld := c.nodes[li]
	s := ld.Store()
	if err := writeKV(s, "warm", "up"); err != nil {
		t.Fatal(err)
	}
	last := ld.Status().LastIndex

	for i := range 5 {
		var b store.Batch
		b.Set([]byte(fmt.Sprint("ack", i)), []byte("1"))
		if _, err := s.Write(&b, false); err != nil {
			t.Fatal(err)
		}
	}
	// Overwritten by the durable write below: the held write must apply
	// first.
	var b store.Batch
	b.Set([]byte("ack4"), []byte("2"))
	if err := writeKV(s, "send", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	if err := writeKV(s, "ack4", "3"); err != nil {
		t.Fatal(err)
	}
	if got := ld.Status().LastIndex - last; got != 2 {
		t.Fatalf("five held writes and two durable ones took %d entries, want 2", got)
	}
	if v, err := s.Get([]byte("ack4")); err != nil || string(v) != "3" {
		t.Fatalf("Get(ack4) = %q, %v; want the durable write's 3, applied after the held 2", v, err)
	}

	// Held alone: a read of its own view sees it, and it is proposed
	// within the hold, without any other write.
	b.Reset()
	b.Set([]byte("lone"), []byte("1"))
	if _, err := s.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("lone")); err != nil || string(v) != "1" {
		t.Fatalf("Get(lone) right after its write = %q, %v", v, err)
	}
	b.Reset()
	b.Set([]byte("lone2"), []byte("1"))
	if _, err := s.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		poll.CheckFor(t, 10*time.Second, func() error {
			for _, k := range []string{"ack0", "ack3", "send", "lone", "lone2"} {
				want := "1"
				if k == "send" {
					want = "x"
				}
				if err := stateHas(nd, k, want); err != nil {
					return err
				}
			}
			return stateHas(nd, "ack4", "3")
		})
	}
}

// TestHeldWriteWait checks a held write's Pending: Wait proposes it and
// returns once it is applied, and a Close proposes what is held.
func TestHeldWriteWait(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	s := c.nodes[li].Store()
	var b store.Batch
	b.Set([]byte("a"), []byte("1"))
	p, err := s.Write(&b, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := stateHas(c.nodes[li], "a", "1"); err != nil {
		t.Fatalf("after Wait: %v", err)
	}
	b.Reset()
	b.Set([]byte("b"), []byte("1"))
	p, err = s.Write(&b, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := stateHas(c.nodes[li], "b", "1"); err != nil {
		t.Fatalf("after Close and Wait: %v", err)
	}
}
