package pebblestore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// TestSnapshotCopy checks that a Snapshot sees the store as it was when
// taken, that Export in pieces and Import into another store copy data
// and meta records (but not the format record), and that closing the
// store closes an open Snapshot.
func TestSnapshotCopy(t *testing.T) {
	src, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	var b store.Batch
	for i := range 10 {
		b.Set(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i))
	}
	if _, err := src.WriteMeta(&b, []Meta{{"applied", []byte("9")}}, false); err != nil {
		t.Fatal(err)
	}
	sn, err := src.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Later writes are not in the snapshot.
	b.Reset()
	b.Set([]byte("later"), []byte("x"))
	b.Delete([]byte("k0"))
	if _, err := src.WriteMeta(&b, []Meta{{"applied", []byte("10")}}, false); err != nil {
		t.Fatal(err)
	}
	if v, err := sn.GetMeta("applied"); err != nil || string(v) != "9" {
		t.Fatalf("snapshot's applied = %q, %v", v, err)
	}
	dst, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dst.Close() }()
	// Three keys a piece, resuming after the last one seen.
	var start []byte
	for {
		var kvs [][2][]byte
		err := sn.Export(start, func(k, v []byte) error {
			if string(k) == formatKey {
				t.Fatal("Export returned the format record")
			}
			kvs = append(kvs, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
			if len(kvs) == 3 {
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) == 0 {
			break
		}
		err = dst.Import(func(yield func([]byte, []byte) bool) {
			for _, kv := range kvs {
				if !yield(kv[0], kv[1]) {
					return
				}
			}
		}, false)
		if err != nil {
			t.Fatal(err)
		}
		start = append(kvs[len(kvs)-1][0], 0)
	}
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if v, err := dst.Get(fmt.Appendf(nil, "k%d", i)); err != nil || string(v) != fmt.Sprint("v", i) {
			t.Fatalf("copy: k%d = %q, %v", i, v, err)
		}
	}
	if _, err := dst.Get([]byte("later")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("copy has a write made after the snapshot: %v", err)
	}
	if v, err := dst.GetMeta("applied"); err != nil || string(v) != "9" {
		t.Fatalf("copy's applied = %q, %v", v, err)
	}
	// Importing the format record is refused.
	err = dst.Import(func(yield func([]byte, []byte) bool) { yield([]byte(formatKey), []byte("2")) }, false)
	if !errors.Is(err, ErrReservedKey) {
		t.Fatalf("import of the format record: %v", err)
	}
	// Closing the store closes the snapshot, which then says so.
	if err := src.Close(); err != nil {
		t.Fatalf("close with an open snapshot: %v", err)
	}
	if err := sn.Export(nil, func(k, v []byte) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Export after the store closed: %v", err)
	}
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
}
