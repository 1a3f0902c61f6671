package pebblestore

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// TestMeta checks that meta records are written atomically with a batch,
// survive a reopen, are invisible to Scan and Get, and are untouched by a
// DeleteRange over everything.
func TestMeta(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Set([]byte("k"), []byte("v"))
	p, err := s.WriteMeta(&b, []Meta{{"applied", []byte("7")}, {"adv/1", []byte("a")}, {"adv/2", []byte("b")}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.DeleteRange(nil, []byte{0xff, 0xff})
	if _, err := s.WriteMeta(&b, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if v, err := s.GetMeta("applied"); err != nil || string(v) != "7" {
		t.Fatalf("GetMeta(applied) = %q, %v; want 7", v, err)
	}
	if _, err := s.GetMeta("nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetMeta(nope) = %v; want ErrNotFound", err)
	}
	var got []string
	if err := s.ScanMeta("adv/", func(name string, v []byte) error {
		got = append(got, name+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "adv/1=a" || got[1] != "adv/2=b" {
		t.Fatalf("ScanMeta = %v", got)
	}
	n := 0
	if err := s.Scan(nil, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("Scan saw %d keys after DeleteRange; want 0 (meta hidden)", n)
	}
	if !IsReserved([]byte(metaPrefix + "x")) {
		t.Fatal("meta key not reserved")
	}
}
