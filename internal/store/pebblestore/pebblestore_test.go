package pebblestore

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/storetest"
)

var quiet = slog.New(slog.DiscardHandler)

func mustOpen(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformanceDisk(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return mustOpen(t, t.TempDir(), Options{})
	})
}

func TestConformanceMem(t *testing.T) {
	// Small memtables force flushes and WAL rotation in the middle of the
	// suite, so reads cross memtables and sstables.
	storetest.Run(t, func(t *testing.T) store.Store {
		return mustOpen(t, "db", Options{FS: vfs.NewMem(), MemTableSize: 64 << 10})
	})
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store {
		return mustOpen(t, dir, Options{})
	})
}

func write(t testing.TB, s store.Store, durable bool, kv ...string) {
	t.Helper()
	var b store.Batch
	for i := 0; i < len(kv); i += 2 {
		b.Set([]byte(kv[i]), []byte(kv[i+1]))
	}
	p, err := s.Write(&b, durable)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func TestFormatVersion(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", Options{FS: fs})
	write(t, s, true, "a", "1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The format key is written, durable, and invisible to Scan.
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: slogAdapter{log: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	v, c, err := db.Get([]byte(formatKey))
	if err != nil {
		t.Fatalf("format key: %v", err)
	}
	if string(v) != FormatVersion {
		t.Fatalf("format key = %q, want %q", v, FormatVersion)
	}
	_ = c.Close()
	if err := db.Set([]byte(formatKey), []byte("2"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	_, err = Open("db", Options{FS: fs, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), `format version "2"`) {
		t.Fatalf("Open of format 2: %v, want an unsupported-version error", err)
	}
}

func TestRefusesForeignDatabase(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: slogAdapter{log: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("somebody-else"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open("db", Options{FS: fs, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "not a Sluice store") {
		t.Fatalf("Open of a foreign database: %v, want refusal", err)
	}
}

func TestReservedKeys(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", Options{FS: fs})
	write(t, s, true, "a", "1", "\x00sluicf", "2", "\x00sluice", "3")

	// DeleteRange over everything spares the format key.
	var b store.Batch
	b.DeleteRange(nil, []byte("\xff\xff"))
	p, err := s.Write(&b, true)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := s.Scan(nil, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d keys left after deleting everything", n)
	}
	// Ranges starting or ending inside the reserved span delete only
	// what lies outside it.
	write(t, s, true, "\x00a", "1", "\x00sluicf", "2", "b", "3")
	for _, r := range [][2]string{{"\x00sluice/a", "\x00sluicg"}, {"\x00", "\x00sluice/zzz"}} {
		b.Reset()
		b.DeleteRange([]byte(r[0]), []byte(r[1]))
		if p, err := s.Write(&b, true); err != nil || p.Wait() != nil {
			t.Fatalf("DeleteRange(%q, %q) failed", r[0], r[1])
		}
	}
	var left []string
	if err := s.Scan(nil, func(k, v []byte) error { left = append(left, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "b" {
		t.Fatalf("keys left: %q, want only b", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, "db", Options{FS: fs}) // the format key survived

	// Setting a reserved key is rejected, and fails the store.
	b.Reset()
	b.Set([]byte("\x00sluice/format"), []byte("9"))
	if _, err := s.Write(&b, true); !errors.Is(err, ErrReservedKey) || !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Set of reserved key: %v, want ErrReservedKey and ErrFailed", err)
	}
	if _, err := s.Write(&store.Batch{}, false); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Write after failure: %v, want ErrFailed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""}, {"a", "b"}, {"a\xff", "b"}, {"a\xfe\xff", "a\xff"},
		{"\xff", ""}, {"\xff\xff", ""}, {"\x00", "\x01"},
	} {
		got := prefixEnd([]byte(tc.in))
		if string(got) != tc.want || (tc.want == "" && got != nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPowerLoss writes a numbered sequence of batches, some durable, while
// taking a crash clone of the filesystem: every write acknowledged before
// the crash must survive it, and what survives must be a prefix of the
// sequence (no later write without every earlier one).
func TestPowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, pct := range []int{0, 30, 100} {
		for trial := range 4 {
			t.Run(fmt.Sprintf("unsynced=%d%%/%d", pct, trial), func(t *testing.T) {
				powerLossTrial(t, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), pct)
			})
		}
	}
}

func powerLossTrial(t *testing.T, rng *rand.Rand, unsyncedPct int) {
	fs := crashfs.New()
	// A small memtable makes the WAL rotate and memtables flush mid-run.
	opts := Options{FS: fs, MemTableSize: 256 << 10, Logger: quiet}
	s := mustOpen(t, "db", opts)

	value := func(i int) []byte {
		v := make([]byte, 100+i%900)
		for j := range v {
			v[j] = byte(i + j)
		}
		return v
	}
	var (
		acked   atomic.Int64 // every write <= acked is durable
		stop    = make(chan struct{})
		errc    = make(chan error, 2)
		pending = make(chan struct {
			i int
			p store.Pending
		}, 1024)
		wg sync.WaitGroup
	)
	acked.Store(-1)
	var halt sync.Once // stops the writer also when the test fails before the crash
	t.Cleanup(func() { halt.Do(func() { close(stop) }) })
	writerRNG := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) // rng stays with this goroutine
	wg.Add(2)
	go func() { // writer
		defer wg.Done()
		defer close(pending)
		var b store.Batch
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b.Reset()
			b.Set(fmt.Appendf(nil, "k%07d", i), value(i))
			if i >= 7 {
				b.Delete(fmt.Appendf(nil, "gone%07d", i-7))
			}
			b.Set(fmt.Appendf(nil, "gone%07d", i), []byte("x"))
			durable := writerRNG.IntN(3) == 0
			p, err := s.Write(&b, durable)
			if err != nil {
				errc <- err
				return
			}
			if durable {
				pending <- struct {
					i int
					p store.Pending
				}{i, p}
			}
		}
	}()
	go func() { // waiter: acknowledges durable writes in order
		defer wg.Done()
		for e := range pending {
			if err := e.p.Wait(); err != nil {
				errc <- err
				return
			}
			acked.Store(int64(e.i))
		}
	}()

	target := int64(50 + rng.IntN(1500))
	poll.CheckFor(t, 30*time.Second, poll.True("acknowledged writes", func() bool { return acked.Load() >= target || len(errc) > 0 }))
	mustSurvive := acked.Load()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPct, RNG: rng})
	halt.Do(func() { close(stop) })
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("write before crash: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2 := mustOpen(t, "db", Options{FS: crashed, MemTableSize: 256 << 10})
	defer s2.Close()
	next := 0
	err := s2.Scan([]byte("k"), func(k, v []byte) error {
		var i int
		if _, err := fmt.Sscanf(string(k), "k%07d", &i); err != nil {
			return err
		}
		if i != next {
			return fmt.Errorf("write %d survived but write %d did not", i, next)
		}
		if string(v) != string(value(i)) {
			return fmt.Errorf("write %d has the wrong value", i)
		}
		next++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(next-1) < mustSurvive {
		t.Fatalf("writes up to %d were acknowledged before the crash, but only %d survived", mustSurvive, next)
	}
	// The deletes in the surviving batches survived with them: only the
	// last (up to) 7 "gone" keys remain.
	gone := 0
	if err := s2.Scan([]byte("gone"), func(k, v []byte) error { gone++; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := min(next, 7); gone != want {
		t.Fatalf("%d gone keys after %d writes survived, want %d", gone, next, want)
	}
	t.Logf("acknowledged %d, survived %d", mustSurvive+1, next)
}

// TestSyncFailureFailsStore makes WAL syncs fail with EIO: the waiting
// writer must see the error, and the store must refuse every later write
// rather than retry.
func TestSyncFailureFailsStore(t *testing.T) {
	var failing atomic.Bool
	fs := &hookFS{FS: vfs.NewMem(), onSync: func(name string) error {
		if failing.Load() && strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	}}
	s := mustOpen(t, "db", Options{FS: fs})
	write(t, s, true, "before", "1")

	failing.Store(true)
	var b store.Batch
	b.Set([]byte("during"), []byte("2"))
	p, err := s.Write(&b, true)
	if err != nil {
		t.Fatalf("Write: %v (the failure should surface in Wait)", err)
	}
	err = p.Wait()
	if !errors.Is(err, store.ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Wait: %v, want ErrFailed wrapping EIO", err)
	}
	if err2 := p.Wait(); err2 != err {
		t.Fatalf("second Wait: %v, want %v", err2, err)
	}

	failing.Store(false) // even if the disk recovers, the store stays failed
	for _, durable := range []bool{false, true} {
		if _, err := s.Write(&b, durable); !errors.Is(err, store.ErrFailed) {
			t.Fatalf("Write(durable=%v) after failure: %v, want ErrFailed", durable, err)
		}
	}
	if err := s.Sync(); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Sync after failure: %v, want ErrFailed", err)
	}
	_ = s.Close() // may report the failure; must not hang
}

// TestSyncFailureConcurrent fails WAL syncs under many concurrent writers,
// durable and not: each must end with an error wrapping ErrFailed (from
// Write or Wait) and none may hang.
func TestSyncFailureConcurrent(t *testing.T) {
	var failing atomic.Bool
	fs := &hookFS{FS: vfs.NewMem(), onSync: func(name string) error {
		if failing.Load() && strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	}}
	// The test writes little, so that pebble does not rotate the WAL (its
	// first memtables are small): a failed sync during rotation crashes the
	// process, by pebble's design (see the package doc).
	s := mustOpen(t, "db", Options{FS: fs})
	var (
		wg      sync.WaitGroup
		started atomic.Int64
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b store.Batch
			for i := 0; ; i++ {
				started.Add(1)
				b.Reset()
				b.Set(fmt.Appendf(nil, "w%02d/%06d", w, i), []byte("v"))
				// Some writers interleave non-durable writes, but every
				// writer waits for a sync every other write: unthrottled
				// writers would fill the first memtable and make pebble
				// rotate the failed WAL.
				p, err := s.Write(&b, w%4 != 3 || i%2 == 0)
				if err == nil {
					err = p.Wait()
				}
				if err != nil {
					if !errors.Is(err, store.ErrFailed) {
						t.Errorf("writer %d: %v, want ErrFailed", w, err)
					}
					return
				}
			}
		}()
	}
	poll.CheckFor(t, 30*time.Second, poll.True("writes to start", func() bool { return started.Load() > 200 }))
	failing.Store(true)
	wg.Wait()
	_ = s.Close()
}

// TestScanLengthsOfSeparatedValues: after a flush, values of
// ValueSeparationMin bytes or more live in blob files; ScanLengths must
// still report their lengths (from the value handle, without fetching
// them), and ScanRange must still return them.
func TestScanLengthsOfSeparatedValues(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	var b store.Batch
	want := map[string]int{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("m%04d", i)
		n := 100 + 37*i // from below to well above the separation minimum
		want[k] = n
		b.Set([]byte(k), []byte(strings.Repeat("x", n)))
	}
	p, err := s.Write(&b, true)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	got := 0
	err = s.ScanLengths([]byte("m"), []byte("n"), func(k []byte, n int) error {
		if n != want[string(k)] {
			t.Errorf("%s: length %d, want %d", k, n, want[string(k)])
		}
		got++
		return nil
	})
	if err != nil || got != len(want) {
		t.Fatalf("ScanLengths saw %d keys (%v), want %d", got, err, len(want))
	}
	got = 0
	err = s.ScanRange([]byte("m0100"), []byte("m0110"), func(k, v []byte) error {
		if len(v) != want[string(k)] {
			t.Errorf("%s: value of %d bytes, want %d", k, len(v), want[string(k)])
		}
		got++
		return nil
	})
	if err != nil || got != 10 {
		t.Fatalf("ScanRange saw %d keys (%v), want 10", got, err)
	}
}
