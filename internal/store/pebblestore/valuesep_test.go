package pebblestore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// blobFiles counts the store's live blob files.
func blobFiles(s *Store) int { return int(s.db.Metrics().BlobFiles.LiveCount) }

// TestValueSeparation: values of ValueSeparationMin bytes or more (message
// bodies) are written to blob files at flush, so compactions move keys
// rather than bodies; small values stay in the sstables; both read back
// after a reopen; a negative minimum turns it off.
func TestValueSeparation(t *testing.T) {
	body := func(i int) []byte { return []byte(fmt.Sprintf("%06d", i) + strings.Repeat("b", 1018)) }
	fill := func(s *Store) {
		for i := range 200 {
			var b store.Batch
			b.Set(fmt.Appendf(nil, "M/%06d/0", i), body(i))
			b.Set(fmt.Appendf(nil, "M/%06d/1", i), []byte("state"))
			p, err := s.Write(&b, true)
			if err != nil || p.Wait() != nil {
				t.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("on", func(t *testing.T) {
		dir := t.TempDir()
		s := mustOpen(t, dir, Options{})
		fill(s)
		if n := blobFiles(s); n == 0 {
			t.Fatal("no blob file after flushing 200 KiB of bodies")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, dir, Options{})
		defer s.Close()
		n := 0
		err := s.Scan([]byte("M/"), func(k, v []byte) error {
			i := n / 2
			want := []byte("state")
			if bytes.HasSuffix(k, []byte("/0")) {
				want = body(i)
			}
			if !bytes.Equal(v, want) {
				return fmt.Errorf("%s: %.20q…, want %.20q…", k, v, want)
			}
			n++
			return nil
		})
		if err != nil || n != 400 {
			t.Fatalf("scan after reopen: %d records, %v", n, err)
		}
		if v, err := s.Get([]byte("M/000123/0")); err != nil || !bytes.Equal(v, body(123)) {
			t.Fatalf("get: %.20q %v", v, err)
		}

		// Deleted bodies give their blob files back once compaction
		// drops the keys that referenced them.
		var b store.Batch
		b.DeleteRange([]byte("M/"), []byte("M0"))
		if p, err := s.Write(&b, true); err != nil || p.Wait() != nil {
			t.Fatal(err)
		}
		if err := s.db.Compact(context.Background(), []byte("M/"), []byte("M0"), false); err != nil {
			t.Fatal(err)
		}
		if n := blobFiles(s); n != 0 {
			t.Fatalf("%d blob files left after deleting every body and compacting", n)
		}
	})

	t.Run("off", func(t *testing.T) {
		s := mustOpen(t, t.TempDir(), Options{ValueSeparationMin: -1})
		defer s.Close()
		fill(s)
		if n := blobFiles(s); n != 0 {
			t.Fatalf("%d blob files with value separation off", n)
		}
	})
}
