package pebblestore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// TestSingleDeleteLeavesNothingAndResurrectsNothing: the engine's pattern
// of writes on pebble, across flushes and a full compaction. A content
// record (set once) and a state record (set once) that are single-deleted
// before the memtable is flushed leave no key and no tombstone in the
// sstables; a state record set twice and deleted, a key set, deleted and
// set again then single-deleted, and a single delete that reaches a set
// already flushed, all stay gone after the compaction and a reopen.
func TestSingleDeleteLeavesNothingAndResurrectsNothing(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	write := func(fill func(b *store.Batch)) {
		t.Helper()
		var b store.Batch
		fill(&b)
		p, err := s.Write(&b, true)
		if err == nil {
			err = p.Wait()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	body := strings.Repeat("b", 1024)
	key := func(i int, kind string) []byte { return fmt.Appendf(nil, "M/%06d/%s", i, kind) }

	tables := func() int64 {
		var n int64
		for _, l := range s.db.Metrics().Levels {
			n += l.TablesCount
		}
		return n
	}
	if err := s.db.Flush(); err != nil { // the store's own records
		t.Fatal(err)
	}
	before := tables()

	// 1000 messages consumed within one memtable: set content, set state
	// once, single-delete both.
	for i := range 1000 {
		write(func(b *store.Batch) { b.Set(key(i, "0"), []byte(body)) })
		write(func(b *store.Batch) { b.Set(key(i, "1"), []byte("lease")) })
		write(func(b *store.Batch) {
			b.SingleDelete(key(i, "0"))
			b.SingleDelete(key(i, "1"))
		})
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := tables(); n != before {
		t.Fatalf("the flush of 1000 consumed messages wrote %d sstables, want none (a set and its single delete vanish together)", n-before)
	}

	// Set twice then delete; set, delete, set, single-delete; and a
	// single delete that meets a set already in an sstable.
	write(func(b *store.Batch) { b.Set([]byte("T/twice"), []byte("v1")) })
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	write(func(b *store.Batch) { b.Set([]byte("T/twice"), []byte("v2")) })
	write(func(b *store.Batch) { b.Delete([]byte("T/twice")) })
	write(func(b *store.Batch) { b.Set([]byte("T/again"), []byte("v1")) })
	write(func(b *store.Batch) { b.Delete([]byte("T/again")) })
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	write(func(b *store.Batch) { b.Set([]byte("T/again"), []byte("v2")) })
	write(func(b *store.Batch) { b.Set([]byte("T/flushed"), []byte("v1")) })
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	write(func(b *store.Batch) {
		b.SingleDelete([]byte("T/again"))
		b.SingleDelete([]byte("T/flushed"))
	})
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(context.Background(), []byte("A"), []byte("Z"), true); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		for _, prefix := range []string{"M/", "T/"} {
			if err := s.Scan([]byte(prefix), func(k, v []byte) error {
				return fmt.Errorf("key %q=%q is back", k, v)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	check(s)
}
