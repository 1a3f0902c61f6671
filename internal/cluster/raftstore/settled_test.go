package raftstore

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// TestSettledReadsSeeWaitedWrites: the view's settled reads (the engine's
// deduplication lookups, store.SettledReader) see every write whose Wait
// has returned, on the leader, without read-your-writes; a closed view
// refuses them.
func TestSettledReadsSeeWaitedWrites(t *testing.T) {
	c := newCluster(t, 1)
	li := c.leader(-1)
	s := c.nodes[li].Store()
	sr, ok := s.(store.SettledReader)
	if !ok {
		t.Fatal("the view does not implement store.SettledReader")
	}
	for _, k := range []string{"a1", "a2", "b1"} {
		if err := writeKV(s, k, "v"+k); err != nil {
			t.Fatalf("write %s: %v", k, err)
		}
	}
	if v, err := sr.GetSettled([]byte("a2")); err != nil || string(v) != "va2" {
		t.Fatalf("GetSettled(a2) = %q, %v", v, err)
	}
	if _, err := sr.GetSettled([]byte("zz")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSettled(zz): %v, want ErrNotFound", err)
	}
	var keys []string
	err := sr.ScanRangeSettled([]byte("a"), []byte("b"), func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	})
	if err != nil || len(keys) != 2 || keys[0] != "a1" || keys[1] != "a2" {
		t.Fatalf("ScanRangeSettled(a, b) = %q, %v", keys, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sr.GetSettled([]byte("a1")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("GetSettled on a closed view: %v, want ErrClosed", err)
	}
	if err := sr.ScanRangeSettled(nil, nil, func(_, _ []byte) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ScanRangeSettled on a closed view: %v, want ErrClosed", err)
	}
}
