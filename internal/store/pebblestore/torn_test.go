package pebblestore

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/testlog"
)

// These tests damage the files of a store on the real disk and check what
// reopening it does. The store is never closed cleanly before the damage:
// each test copies the directory while the store is open, right after its
// last durable write returned, which is what a power cut at that moment
// leaves behind (every write was synced, and pebble writes nothing in the
// background at this size).

func captureLogger() (*slog.Logger, *testlog.Buffer) { return testlog.New(slog.LevelDebug) }

// tornKey and tornValue name the i-th key of batch n. Values are large
// enough that the WAL spans several 32 KiB blocks.
func tornKey(n, i int) string { return fmt.Sprintf("k/%03d/%d", n, i) }

func tornValue(n, i int) string {
	return strings.Repeat(fmt.Sprintf("value %03d.%d;", n, i), 100)
}

// walImage is a crash image of a store that wrote batches durable
// batches of two keys each.
type walImage struct {
	dir     string
	wal     string  // path of the newest WAL in dir
	ends    []int64 // ends[n]: the WAL's size once batch n was durable
	batches int
}

// newestWAL returns the path of the highest-numbered *.log file in dir.
func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no WAL in %s (%v)", dir, err)
	}
	slices.Sort(logs) // pebble pads WAL numbers to six digits
	return logs[len(logs)-1]
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// makeWALImage writes batches durable batches to a new store and returns a
// copy of its directory taken before Close.
func makeWALImage(t *testing.T, batches int, reopened bool) walImage {
	t.Helper()
	src := t.TempDir()
	s := mustOpen(t, src, Options{})
	if reopened {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, src, Options{})
	}
	img := walImage{dir: t.TempDir(), batches: batches}
	for n := range batches {
		write(t, s, true, tornKey(n, 0), tornValue(n, 0), tornKey(n, 1), tornValue(n, 1))
		img.ends = append(img.ends, fileSize(t, newestWAL(t, src)))
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img.dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	img.wal = newestWAL(t, img.dir)
	if got, want := fileSize(t, img.wal), img.ends[batches-1]; got != want {
		t.Fatalf("image WAL is %d bytes, want %d", got, want)
	}
	return img
}

// start returns the WAL offset at which batch n's record starts.
func (img walImage) start(n int) int64 { return img.ends[n-1] }

// flipBit inverts one bit of the file at off.
func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll returns every key and value in s.
func readAll(t *testing.T, s store.Store) map[string]string {
	t.Helper()
	got := make(map[string]string)
	err := s.Scan(nil, func(k, v []byte) error {
		got[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

// checkBatches fails unless s holds exactly batches [0, n), each with its
// exact values: nothing of a later batch, and nothing else.
func checkBatches(t *testing.T, s store.Store, n int) {
	t.Helper()
	got := readAll(t, s)
	want := make(map[string]string)
	for b := range n {
		for i := range 2 {
			want[tornKey(b, i)] = tornValue(b, i)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %s: got %d bytes %.20q, want %d bytes %.20q", k, len(got[k]), got[k], len(v), v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected key %q", k)
		}
	}
}

const tornWarning = "discarded a torn WAL tail"

// TestTornTail damages the end of the newest WAL in the ways a crash during
// a write can, and checks that reopening keeps every batch before the
// damage, nothing of the damaged record and no garbage, and says so at Warn
// naming the file.
func TestTornTail(t *testing.T) {
	const batches = 40
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name   string
		damage func(t *testing.T, img walImage)
		keep   int // batches that must survive
	}{
		{
			name: "truncated in the last record",
			damage: func(t *testing.T, img walImage) {
				mid := (img.start(batches-1) + img.ends[batches-1]) / 2
				if err := os.Truncate(img.wal, mid); err != nil {
					t.Fatal(err)
				}
			},
			keep: batches - 1,
		},
		{
			name: "truncated in the last record's header",
			damage: func(t *testing.T, img walImage) {
				if err := os.Truncate(img.wal, img.start(batches-1)+5); err != nil {
					t.Fatal(err)
				}
			},
			keep: batches - 1,
		},
		{
			name: "garbage appended",
			damage: func(t *testing.T, img walImage) {
				garbage := make([]byte, 200)
				for i := range garbage {
					garbage[i] = byte(rng.IntN(255) + 1)
				}
				appendFile(t, img.wal, garbage)
			},
			keep: batches,
		},
		{
			name: "partial record appended",
			damage: func(t *testing.T, img walImage) {
				// The first half of a real record: a valid chunk header
				// for this WAL whose payload was not all written.
				b, err := os.ReadFile(img.wal)
				if err != nil {
					t.Fatal(err)
				}
				rec := b[img.start(batches-1):img.ends[batches-1]]
				appendFile(t, img.wal, rec[:len(rec)/2])
			},
			keep: batches,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := makeWALImage(t, batches, true)
			tc.damage(t, img)

			log, out := captureLogger()
			s := mustOpen(t, img.dir, Options{Logger: log})
			checkBatches(t, s, tc.keep)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			warned := false
			for line := range strings.Lines(out.String()) {
				if strings.Contains(line, tornWarning) {
					warned = true
					t.Log(strings.TrimSpace(line))
					if !strings.Contains(line, "level=WARN") || !strings.Contains(line, filepath.Base(img.wal)) {
						t.Errorf("torn tail log line is not a warning naming %s: %s", filepath.Base(img.wal), line)
					}
				}
			}
			if !warned {
				t.Errorf("no %q log line; log:\n%s", tornWarning, out)
			}

			// The tail is gone for good: the next open finds a clean
			// store with the same contents and nothing to warn about.
			log, out = captureLogger()
			s = mustOpen(t, img.dir, Options{Logger: log})
			defer s.Close()
			checkBatches(t, s, tc.keep)
			if strings.Contains(out.String(), tornWarning) {
				t.Errorf("second open warned again:\n%s", out)
			}
		})
	}
}

// TestCleanWALNoWarning checks that neither a crash image with intact
// records nor a cleanly closed store produces the torn-tail warning.
func TestCleanWALNoWarning(t *testing.T) {
	img := makeWALImage(t, 10, true)
	log, out := captureLogger()
	s := mustOpen(t, img.dir, Options{Logger: log})
	checkBatches(t, s, 10)
	write(t, s, true, tornKey(10, 0), tornValue(10, 0), tornKey(10, 1), tornValue(10, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, img.dir, Options{Logger: log})
	defer s.Close()
	checkBatches(t, s, 11)
	if strings.Contains(out.String(), tornWarning) {
		t.Errorf("clean WAL produced a torn-tail warning:\n%s", out)
	}
}

// TestWALCorruptionFailsOpen flips a bit in the middle of an older record
// of the newest WAL, one followed by blocks of records written after it was
// synced. Pebble must refuse to open, not replay up to the damage and drop
// the acknowledged batches after it.
func TestWALCorruptionFailsOpen(t *testing.T) {
	const batches = 60
	img := makeWALImage(t, batches, true)
	if img.ends[batches-1] < 3*32<<10 {
		t.Fatalf("WAL is only %d bytes; the test needs several 32 KiB blocks", img.ends[batches-1])
	}
	victim := 5
	flipBit(t, img.wal, (img.start(victim)+img.ends[victim])/2)

	log, out := captureLogger()
	s, err := Open(img.dir, Options{Logger: log})
	if err == nil {
		got := readAll(t, s)
		_ = s.Close()
		t.Fatalf("Open succeeded on a WAL corrupt in the middle, with %d keys (of %d written)", len(got), 2*batches)
	}
	t.Logf("Open: %v", err)
	if !pebble.IsCorruptionError(err) {
		t.Errorf("error is not a pebble corruption error: %v", err)
	}
	if !strings.Contains(err.Error(), filepath.Base(img.wal)) {
		t.Errorf("error does not name the WAL %s: %v", filepath.Base(img.wal), err)
	}
	if strings.Contains(out.String(), tornWarning) {
		t.Errorf("corruption was reported as a torn tail:\n%s", out)
	}
}

// TestWALCorruptionInLastBlockIsTornTail pins down the limit of pebble's
// corruption detection (see docs/adr/0001-storage-engine.md, "Torn tails
// and corruption"): after a bad chunk, pebble's record reader looks for
// proof of a later sync only in the following 32 KiB blocks. A bit flip in
// the newest WAL's last block, even in a record followed by other synced
// records in that block, is therefore indistinguishable from a torn tail:
// the damaged record and everything after it are dropped. The store does
// not prevent that (yet), but it must not pass unnoticed: either Open fails
// or the warning names the file and the number of bytes dropped.
func TestWALCorruptionInLastBlockIsTornTail(t *testing.T) {
	const batches = 40
	img := makeWALImage(t, batches, true)
	lastBlock := img.ends[batches-1] &^ (32<<10 - 1)
	victim := batches - 1
	for victim > 0 && img.start(victim-1) >= lastBlock {
		victim--
	}
	if victim >= batches-1 {
		t.Fatalf("the last block holds only the last record; adjust the value size")
	}
	flipBit(t, img.wal, (img.start(victim)+img.ends[victim])/2)

	log, out := captureLogger()
	s, err := Open(img.dir, Options{Logger: log})
	if err != nil {
		t.Logf("Open failed (corruption detected): %v", err)
		return
	}
	defer s.Close()
	checkBatches(t, s, victim)
	if !strings.Contains(out.String(), tornWarning) {
		t.Errorf("dropped %d acknowledged batches without a warning; log:\n%s", batches-victim, out)
	}
	t.Logf("bit flip in batch %d of %d (last block starts at %d): batches %d..%d dropped with a warning",
		victim, batches, lastBlock, victim, batches-1)
}

// TestWALCorruptionInNewStore flips a bit early in the WAL of a store that
// has never been reopened. Pebble creates a new database's first WAL before
// it raises the format to the pinned version, so that WAL is written
// without the synced-offset chunk headers that let the reader tell
// corruption from a torn tail (they start with the next WAL: after the
// first restart or the first memtable rotation). Reopening then keeps only
// the batches before the damage. What the store must guarantee is that
// this is never silent: either Open fails, or the torn-tail warning names
// the file.
func TestWALCorruptionInNewStore(t *testing.T) {
	const batches = 60
	img := makeWALImage(t, batches, false)
	victim := 5
	flipBit(t, img.wal, (img.start(victim)+img.ends[victim])/2)

	log, out := captureLogger()
	s, err := Open(img.dir, Options{Logger: log})
	if err != nil {
		t.Logf("Open failed (corruption detected): %v", err)
		return
	}
	defer s.Close()
	got := readAll(t, s)
	if len(got) == 2*batches {
		return // the damage was not reached (cannot happen with one-record batches)
	}
	if !strings.Contains(out.String(), tornWarning) {
		t.Fatalf("dropped %d of %d keys without a warning; log:\n%s", 2*batches-len(got), 2*batches, out)
	}
	checkBatches(t, s, victim)
	t.Logf("new store: bit flip in batch %d of %d: Open succeeded, batches %d..%d dropped with a warning",
		victim, batches, victim, batches-1)
}

// TestSSTableCorruption flips a bit in the data of an sstable. Reading the
// store must fail with a corruption error, never return the other keys as
// if the damaged ones did not exist.
func TestSSTableCorruption(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	for n := range 40 {
		write(t, s, true, tornKey(n, 0), tornValue(n, 0), tornKey(n, 1), tornValue(n, 1))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Opening replays the WAL and flushes it to an sstable.
	s = mustOpen(t, dir, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(ssts) == 0 {
		t.Fatalf("no sstable in %s (%v)", dir, err)
	}
	var biggest string
	for _, p := range ssts {
		if biggest == "" || fileSize(t, p) > fileSize(t, biggest) {
			biggest = p
		}
	}
	// Data blocks come first; a third of the way in is data, well before
	// the index, properties and footer at the end.
	flipBit(t, biggest, fileSize(t, biggest)/3)

	s, err = Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Logf("Open: %v", err)
		if !pebble.IsCorruptionError(err) {
			t.Errorf("Open error is not a corruption error: %v", err)
		}
		return
	}
	defer s.Close()
	n := 0
	err = s.Scan(nil, func(k, v []byte) error {
		n++
		return nil
	})
	if err == nil {
		t.Fatalf("Scan of a corrupt sstable succeeded with %d keys (of 80 written)", n)
	}
	t.Logf("Scan stopped after %d keys: %v", n, err)
	if !pebble.IsCorruptionError(err) {
		t.Errorf("Scan error is not a corruption error: %v", err)
	}
}
