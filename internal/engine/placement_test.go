package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// placements reads the test store's entries as name → "shard/gone".
func placementsOf(t *testing.T, f *fixture, shard int) map[string]Placement {
	t.Helper()
	ps, err := StoredPlacements(f.st, shard)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Placement{}
	for _, p := range ps {
		out[p.Name] = p
	}
	return out
}

// TestUpdatePlacements: a shard's held queues get entries naming it; a
// name whose live entry names another shard is left and reported; a
// name reported gone is marked only once its entry is PlacementGrace
// old; a queue held again revives its entry; a restart keeps them; the
// entries marked gone NameReuseDelay ago are swept by a later update.
func TestUpdatePlacements(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &fixture{t: t, st: newTestStore(t), clk: clk}
	f.open()
	u, err := f.e.UpdatePlacements(1, []string{"a", "b"}, nil)
	if err != nil || u.Written != 2 || u.Gone != 0 || len(u.Elsewhere) != 0 {
		t.Fatalf("first update: %+v, %v", u, err)
	}
	u, err = f.e.UpdatePlacements(2, []string{"b", "c"}, nil)
	if err != nil || u.Written != 1 || !slices.Equal(u.Elsewhere, []string{"b"}) {
		t.Fatalf("shard 2 claims b, which lives on 1: %+v, %v", u, err)
	}
	if u, err = f.e.UpdatePlacements(1, []string{"a", "b"}, nil); err != nil || u.Written != 0 {
		t.Fatalf("an update that changes nothing: %+v, %v", u, err)
	}
	// Gone a moment after its entry was written: a create on its way.
	if u, err = f.e.UpdatePlacements(1, nil, []string{"a", "c"}); err != nil || u.Gone != 0 {
		t.Fatalf("gone within the grace: %+v, %v", u, err)
	}
	clk.Advance(PlacementGrace)
	// c names shard 2: shard 1 cannot mark it.
	if u, err = f.e.UpdatePlacements(1, nil, []string{"a", "c", "zz"}); err != nil || u.Gone != 1 {
		t.Fatalf("gone after the grace: %+v, %v", u, err)
	}
	f.restart()
	ps := placementsOf(t, f, -1)
	if len(ps) != 3 || ps["a"].Gone.IsZero() || ps["a"].Shard != 1 || !ps["b"].Gone.IsZero() || ps["c"].Shard != 2 {
		t.Fatalf("after a restart: %+v", ps)
	}
	if got := placementsOf(t, f, 2); len(got) != 1 || got["c"].Shard != 2 {
		t.Fatalf("shard 2's entries: %+v", got)
	}
	// A name gone from shard 1 may be taken by shard 2 (made there once
	// the name was free) or come back on shard 1.
	if u, err = f.e.UpdatePlacements(2, []string{"a"}, nil); err != nil || u.Written != 1 {
		t.Fatalf("shard 2 takes a's gone name: %+v, %v", u, err)
	}
	if ps = placementsOf(t, f, -1); ps["a"].Shard != 2 || !ps["a"].Gone.IsZero() {
		t.Fatalf("a after shard 2 took it: %+v", ps["a"])
	}
	clk.Advance(PlacementGrace)
	if _, err = f.e.UpdatePlacements(2, nil, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	// Swept once NameReuseDelay after the mark, by a later update.
	clk.Advance(NameReuseDelay)
	if _, err = f.e.UpdatePlacements(3, []string{"d"}, nil); err != nil {
		t.Fatal(err)
	}
	ps = placementsOf(t, f, -1)
	if _, ok := ps["a"]; ok || len(ps) != 3 {
		t.Fatalf("after the sweep: %+v; want b, c, d", ps)
	}
}

// TestMarkPlacementDeleted: a shard's leader that deleted a queue marks
// its entry gone at once, also one written a moment ago (no grace); not
// an entry naming another shard, one already gone or missing; and not
// once DeletedMarkWindow has passed since the delete, when the name may
// live again. DeleteQueue calls Options.Deleted once the delete is
// committed, with its time; DropQueue and a failed delete do not.
func TestMarkPlacementDeleted(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	type call struct {
		name string
		at   time.Time
	}
	var calls []call
	var f *fixture
	f = &fixture{t: t, st: newTestStore(t), clk: clk, opts: func(o *Options) {
		o.Deleted = func(name string, at time.Time) {
			if _, err := f.e.GetQueue(name); !errors.Is(err, ErrQueueNotFound) {
				t.Errorf("Deleted(%s) called while the queue is still there: %v", name, err)
			}
			calls = append(calls, call{name, at})
		}
	}}
	f.open()
	if _, err := f.e.UpdatePlacements(1, []string{"a", "b", "c"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.UpdatePlacements(2, []string{"d"}, nil); err != nil {
		t.Fatal(err)
	}
	del := clk.Now()
	for _, c := range []struct {
		shard int
		name  string
		want  bool
	}{{1, "a", true}, {1, "a", false}, {1, "d", false}, {1, "zz", false}} {
		if got, err := f.e.MarkPlacementDeleted(c.shard, c.name, del); err != nil || got != c.want {
			t.Fatalf("MarkPlacementDeleted(%d, %s): %v, %v; want %v", c.shard, c.name, got, err, c.want)
		}
	}
	clk.Advance(DeletedMarkWindow)
	if got, err := f.e.MarkPlacementDeleted(1, "b", del); err != nil || !got {
		t.Fatalf("a mark at the window's end: %v, %v", got, err)
	}
	clk.Advance(time.Nanosecond)
	if got, err := f.e.MarkPlacementDeleted(1, "c", del); err != nil || got {
		t.Fatalf("a mark past the window: %v, %v", got, err)
	}
	ps := placementsOf(t, f, -1)
	if ps["a"].Gone.IsZero() || ps["b"].Gone.IsZero() || !ps["c"].Gone.IsZero() || !ps["d"].Gone.IsZero() {
		t.Fatalf("entries after the marks: %+v", ps)
	}
	if _, err := f.e.MarkPlacementDeleted(-1, "c", del); err == nil {
		t.Fatal("a mark for shard -1 was taken")
	}

	for _, name := range []string{"q1", "q2"} {
		if _, _, err := f.e.CreateQueue(name, DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	if err := f.e.DeleteQueue("q1"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.DropQueue("q2"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.DeleteQueue("q3"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].name != "q1" || !calls[0].at.Equal(clk.Now()) {
		t.Fatalf("Deleted calls %+v; want q1 at %v", calls, clk.Now())
	}
}

// TestUpdatePlacementsRefusesBadInput: a negative shard, an empty name
// and too many names are refused with a ConfigError, writing nothing.
func TestUpdatePlacementsRefusesBadInput(t *testing.T) {
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.open()
	var ce *ConfigError
	for _, c := range []struct {
		shard      int
		held, gone []string
	}{
		{-1, []string{"a"}, nil},
		{1, []string{""}, nil},
		{1, nil, []string{string(make([]byte, maxPlacementName+1))}},
		{1, make([]string, MaxPlacementNames+1), nil},
	} {
		if _, err := f.e.UpdatePlacements(c.shard, c.held, c.gone); !errors.As(err, &ce) {
			t.Errorf("shard %d, %d held, %d gone: %v; want a ConfigError", c.shard, len(c.held), len(c.gone), err)
		}
	}
	if ps := placementsOf(t, f, -1); len(ps) != 0 {
		t.Fatalf("refused updates wrote %+v", ps)
	}
}

// FuzzDecodePlacement: any value decodes without panicking, and what one
// decodes to encodes to a value that decodes to the same (varints may
// arrive longer than the encoder writes them).
func FuzzDecodePlacement(f *testing.F) {
	f.Add(encodePlacement(3, 1_700_000_000_000_000_000, 0))
	f.Add(encodePlacement(0, -1, 5))
	f.Add([]byte{recordV1})
	f.Fuzz(func(t *testing.T, v []byte) {
		s, p, g, err := decodePlacement(v)
		if err != nil {
			return
		}
		back := encodePlacement(s, p, g)
		if s2, p2, g2, err := decodePlacement(back); err != nil || s2 != s || p2 != p || g2 != g {
			t.Fatalf("%x decodes to (%d, %d, %d), re-encoded %x decodes to (%d, %d, %d), %v", v, s, p, g, back, s2, p2, g2, err)
		}
	})
}

// TestRecordLeader: a shard's leader record is replaced by one of a later
// term (or a new advertisement in the same term), never by an older one,
// and outlives a restart; each shard's record is read back by its key.
func TestRecordLeader(t *testing.T) {
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.open()
	steps := []struct {
		shard      int
		term, node uint64
		ad         string
		written    bool
	}{
		{1, 5, 2, "a", true},
		{1, 5, 2, "a", false}, // the same
		{1, 5, 2, "b", true},  // the same leader, a new address
		{1, 4, 3, "c", false}, // an older term
		{1, 6, 3, "c", true},
		{2, 1, 1, "d", true},
	}
	for _, s := range steps {
		w, err := f.e.RecordLeader(s.shard, s.term, s.node, []byte(s.ad))
		if err != nil || w != s.written {
			t.Fatalf("RecordLeader(%d, %d, %d, %q) = %v, %v; want %v", s.shard, s.term, s.node, s.ad, w, err, s.written)
		}
	}
	f.restart()
	for _, want := range []ShardLeader{{Shard: 1, Term: 6, Node: 3, Ad: []byte("c")}, {Shard: 2, Term: 1, Node: 1, Ad: []byte("d")}} {
		got, ok, err := StoredLeader(f.st, want.Shard)
		if err != nil || !ok || got.Shard != want.Shard || got.Term != want.Term || got.Node != want.Node || string(got.Ad) != string(want.Ad) {
			t.Fatalf("shard %d's record: %+v, %v, %v; want %+v", want.Shard, got, ok, err, want)
		}
	}
	if _, ok, err := StoredLeader(f.st, 3); ok || err != nil {
		t.Fatalf("shard 3, never recorded: %v, %v", ok, err)
	}
	var ce *ConfigError
	for _, bad := range []func() error{
		func() error { _, err := f.e.RecordLeader(-1, 1, 1, nil); return err },
		func() error { _, err := f.e.RecordLeader(1, 0, 1, nil); return err },
		func() error { _, err := f.e.RecordLeader(1, 1, 0, nil); return err },
		func() error { _, err := f.e.RecordLeader(1, 9, 1, make([]byte, maxLeaderAd+1)); return err },
	} {
		if err := bad(); !errors.As(err, &ce) {
			t.Errorf("a bad record: %v, want a ConfigError", err)
		}
	}
}

// FuzzDecodeLeader: any value decodes without panicking, and what one
// decodes to encodes to a value that decodes to the same.
func FuzzDecodeLeader(f *testing.F) {
	f.Add(encodeLeader(7, 3, []byte(`{"term":7}`)))
	f.Add([]byte{recordV1, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		term, node, ad, err := decodeLeader(v)
		if err != nil {
			return
		}
		t2, n2, a2, err := decodeLeader(encodeLeader(term, node, ad))
		if err != nil || t2 != term || n2 != node || string(a2) != string(ad) {
			t.Fatalf("%x: (%d, %d, %q) came back (%d, %d, %q), %v", v, term, node, ad, t2, n2, a2, err)
		}
	})
}
