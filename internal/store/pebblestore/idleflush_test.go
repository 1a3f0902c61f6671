package pebblestore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
)

// TestIdleFlushFreesDrainedBodies: a backlog of about 24 MiB of message
// bodies in eight queues is written and then deleted, as consumers drain
// it, and the store goes quiet. The deletes of the drain's end sit in a
// memtable that no longer fills, so the blob files holding the bodies
// they delete are still live; the idle flush then makes pebble compact
// them away without a restart. (With idle flushes off they stay until
// the next busy spell or restart: 54 MiB of a 94 MiB backlog, watched for
// 10 s, when this was written.)
func TestIdleFlushFreesDrainedBodies(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{MemTableSize: MinMemTableSize, IdleFlushAfter: 100 * time.Millisecond})
	defer func() { _ = s.Close() }()
	rng := rand.NewChaCha8([32]byte{1})
	const n, per = 24000, 100
	key := func(kind string, i int) []byte { return fmt.Appendf(nil, "M/%s/q%d/%08d", kind, i%8, i) }
	commit := func(b *store.Batch) {
		p, err := s.Write(b, true)
		if err != nil || p.Wait() != nil {
			t.Fatalf("write: %v", err)
		}
	}
	for i := 0; i < n; i += per {
		var b store.Batch
		for j := i; j < i+per; j++ {
			body := make([]byte, 1024)
			_, _ = rng.Read(body)
			b.Set(key("body", j), body)
		}
		commit(&b)
	}
	for i := 0; i < n; i += per {
		var b store.Batch
		for j := i; j < i+per; j++ {
			b.SingleDelete(key("body", j))
			b.Set(key("state", j), []byte("leased"))
			b.Delete(key("state", j))
		}
		commit(&b)
	}
	m := s.db.Metrics()
	if m.BlobFiles.LiveCount == 0 {
		t.Fatalf("the drain left no live blob file: nothing for an idle flush to free (blob metrics %+v)", m.BlobFiles)
	}
	t.Logf("after the drain: %d live blob files, %d bytes", m.BlobFiles.LiveCount, m.BlobFiles.LiveSize)
	poll.CheckFor(t, 20*time.Second, func() error {
		if b := s.db.Metrics().BlobFiles; b.LiveCount > 0 {
			return fmt.Errorf("%d blob files (%d bytes) still live while the store is quiet", b.LiveCount, b.LiveSize)
		}
		return nil
	})
	for i := 0; i < n; i += n / 10 {
		if _, err := s.Get(key("body", i)); err == nil {
			t.Fatalf("deleted body %d read back after the idle flush", i)
		}
	}
}
