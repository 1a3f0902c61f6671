// Package storetest is the conformance suite for store.Store
// implementations. Every implementation runs Run; implementations that
// persist also run RunReopen.
//
// The suite uses only keys that do not begin with "\x00sluice/", which
// stores may reserve for themselves.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// Run runs the conformance suite. open must return a new, empty, open store
// each time it is called; the suite closes it (a second Close may return
// store.ErrClosed, which the suite ignores).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"SetScan", testSetScan},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"DeleteRange", testDeleteRange},
		{"SingleDelete", testSingleDelete},
		{"OpsOrderWithinBatch", testOpsOrderWithinBatch},
		{"PrefixBoundaries", testPrefixBoundaries},
		{"ScanStops", testScanStops},
		{"ScanRange", testScanRange},
		{"ScanLengths", testScanLengths},
		{"WriteDoesNotAlias", testWriteDoesNotAlias},
		{"BatchAtomicity", testBatchAtomicity},
		{"WriteOrder", testWriteOrder},
		{"BatchReuse", testBatchReuse},
		{"ConcurrentDurableWriters", testConcurrentDurable},
		{"EmptyBatch", testEmptyBatch},
		{"SyncAndWaitTwice", testSyncAndWaitTwice},
		{"Random", testRandom},
		{"Get", testGet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { closeIgnoringClosed(t, s) })
			tc.fn(t, s)
		})
	}
	t.Run("Closed", func(t *testing.T) {
		testClosed(t, open(t))
	})
}

// RunReopen runs the persistence tests. open opens (creating if needed) the
// store kept in dir; the suite passes directories from t.TempDir, closes
// every store it opens, and opens the same directory again.
func RunReopen(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	t.Run("ReopenKeepsEverything", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		m := newModel()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 200 {
			var b store.Batch
			randomBatch(rng, &b, 20)
			write(t, s, &b, i%3 == 0)
			m.apply(&b)
		}
		if err := s.Sync(); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		m.check(t, s)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		s = open(t, dir)
		m.check(t, s)
		// The reopened store keeps working, and persists again.
		var b store.Batch
		b.Set([]byte("after-reopen"), []byte("x"))
		b.DeleteRange([]byte("k"), []byte("l"))
		write(t, s, &b, true)
		m.apply(&b)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		s = open(t, dir)
		defer closeIgnoringClosed(t, s)
		m.check(t, s)
	})
	t.Run("CloseMakesNonDurableWritesDurable", func(t *testing.T) {
		// Not promised by the contract ("may be lost"), but a clean Close of
		// an on-disk store that loses acknowledged writes would be a bug.
		dir := t.TempDir()
		s := open(t, dir)
		var b store.Batch
		b.Set([]byte("a"), []byte("1"))
		write(t, s, &b, false)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		s = open(t, dir)
		defer closeIgnoringClosed(t, s)
		expect(t, s, nil, "a=1")
	})
}

func closeIgnoringClosed(t *testing.T, s store.Store) {
	t.Helper()
	if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

// write writes b and waits for it, failing the test on error.
func write(t testing.TB, s store.Store, b *store.Batch, durable bool) {
	t.Helper()
	p, err := s.Write(b, durable)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func set(t *testing.T, s store.Store, kv ...string) {
	t.Helper()
	var b store.Batch
	for i := 0; i < len(kv); i += 2 {
		b.Set([]byte(kv[i]), []byte(kv[i+1]))
	}
	write(t, s, &b, true)
}

// dump returns the scan of prefix as "key=value" strings, keys quoted with
// %q when they are not plain printable text.
func dump(t *testing.T, s store.Store, prefix []byte) []string {
	t.Helper()
	var out []string
	err := s.Scan(prefix, func(k, v []byte) error {
		out = append(out, show(k)+"="+show(v))
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%q): %v", prefix, err)
	}
	return out
}

func show(b []byte) string {
	if len(b) == 0 {
		return `""`
	}
	for _, c := range b {
		if c < 0x21 || c > 0x7e || c == '=' {
			return fmt.Sprintf("%q", b)
		}
	}
	return string(b)
}

func expect(t *testing.T, s store.Store, prefix []byte, want ...string) {
	t.Helper()
	got := dump(t, s, prefix)
	if !slices.Equal(got, want) {
		t.Fatalf("Scan(%q) =\n  %q\nwant\n  %q", prefix, got, want)
	}
}

func testSetScan(t *testing.T, s store.Store) {
	expect(t, s, nil)
	set(t, s, "b", "2", "a", "1", "c", "3")
	set(t, s, "aa", "11", "", "empty-key", "e", "")
	expect(t, s, nil, `""=empty-key`, "a=1", "aa=11", "b=2", "c=3", `e=""`)
}

func testOverwrite(t *testing.T, s store.Store) {
	set(t, s, "k", "1")
	set(t, s, "k", "2")
	expect(t, s, nil, "k=2")
	set(t, s, "k", "")
	expect(t, s, nil, `k=""`)
}

func testDelete(t *testing.T, s store.Store) {
	set(t, s, "a", "1", "b", "2")
	var b store.Batch
	b.Delete([]byte("a"))
	b.Delete([]byte("missing"))
	write(t, s, &b, true)
	expect(t, s, nil, "b=2")
	set(t, s, "a", "3")
	expect(t, s, nil, "a=3", "b=2")
}

// testSingleDelete: a key set once and single-deleted is gone, in the same
// batch or a later one; a key deleted (point or range) and set again may
// be single-deleted; a single delete of a missing key is harmless.
func testSingleDelete(t *testing.T, s store.Store) {
	set(t, s, "a", "1", "b", "2", "c", "3")
	var b store.Batch
	b.SingleDelete([]byte("a"))
	b.SingleDelete([]byte("missing"))
	write(t, s, &b, true)
	expect(t, s, nil, "b=2", "c=3")

	b.Reset()
	b.Set([]byte("d"), []byte("4"))
	b.SingleDelete([]byte("d"))
	write(t, s, &b, true)
	expect(t, s, nil, "b=2", "c=3")

	// Set, delete, set again: one set since the last delete.
	b.Reset()
	b.Delete([]byte("b"))
	b.DeleteRange([]byte("c"), []byte("d"))
	write(t, s, &b, false)
	set(t, s, "b", "5", "c", "6")
	b.Reset()
	b.SingleDelete([]byte("b"))
	b.SingleDelete([]byte("c"))
	write(t, s, &b, true)
	expect(t, s, nil)
}

func testDeleteRange(t *testing.T, s store.Store) {
	set(t, s, "a", "1", "b", "2", "b\x00", "3", "bz", "4", "c", "5", "d", "6")
	var b store.Batch
	b.DeleteRange([]byte("b"), []byte("c")) // end is exclusive
	write(t, s, &b, true)
	expect(t, s, nil, "a=1", "c=5", "d=6")

	// Empty and inverted ranges delete nothing.
	b.Reset()
	b.DeleteRange([]byte("c"), []byte("c"))
	b.DeleteRange([]byte("d"), []byte("a"))
	write(t, s, &b, true)
	expect(t, s, nil, "a=1", "c=5", "d=6")

	// A range with 0xff bytes at the end covers keys beyond any ASCII.
	set(t, s, "\xff", "7", "\xff\xff", "8")
	b.Reset()
	b.DeleteRange([]byte("c"), []byte("\xff\xff"))
	write(t, s, &b, true)
	expect(t, s, nil, "a=1", `"\xff\xff"=8`)

	// Keys set after the range deletion are visible.
	set(t, s, "cc", "9")
	expect(t, s, nil, "a=1", "cc=9", `"\xff\xff"=8`)
}

func testOpsOrderWithinBatch(t *testing.T, s store.Store) {
	var b store.Batch
	b.Set([]byte("x"), []byte("1"))
	b.Delete([]byte("x"))
	b.Set([]byte("y"), []byte("1"))
	b.DeleteRange([]byte("y"), []byte("z"))
	b.Set([]byte("z"), []byte("1"))
	b.Set([]byte("z"), []byte("2"))
	b.DeleteRange([]byte("w"), []byte("wz"))
	b.Set([]byte("w1"), []byte("1"))
	write(t, s, &b, true)
	expect(t, s, nil, "w1=1", "z=2")
}

func testPrefixBoundaries(t *testing.T, s store.Store) {
	keys := []string{
		"", "\x00", "\x00\xff", "a", "a\x00", "a\xfe\xff", "a\xff", "a\xff\x00",
		"a\xff\xff", "a\xff\xff\xff", "b", "\xfe", "\xfe\xff", "\xff",
		"\xff\x00", "\xff\xff", "\xff\xff\xff",
	}
	var b store.Batch
	for _, k := range keys {
		b.Set([]byte(k), []byte("v"))
	}
	write(t, s, &b, true)

	for _, prefix := range []string{
		"", "\x00", "a", "a\xfe", "a\xff", "a\xff\xff", "a\xff\xff\xff",
		"b", "c", "\xfe", "\xff", "\xff\xff", "\xff\xff\xff", "\xff\xff\xff\xff",
	} {
		var want []string
		for _, k := range keys {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				want = append(want, k)
			}
		}
		sort.Strings(want)
		var got []string
		err := s.Scan([]byte(prefix), func(k, v []byte) error {
			got = append(got, string(k))
			return nil
		})
		if err != nil {
			t.Fatalf("Scan(%q): %v", prefix, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Scan(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func testScanStops(t *testing.T, s store.Store) {
	set(t, s, "a", "1", "b", "2", "c", "3")
	stop := errors.New("stop")
	var seen []string
	err := s.Scan(nil, func(k, v []byte) error {
		seen = append(seen, string(k))
		if string(k) == "b" {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Fatalf("Scan returned %v, want the callback's error", err)
	}
	if !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("Scan visited %q after the callback failed", seen)
	}
}

// testScanRange checks ScanRange's bounds (start inclusive, end exclusive,
// nil end unbounded), that deleted keys (point and range) are not seen,
// that ErrStopScan stops it without an error and another error is
// returned.
func testScanRange(t *testing.T, s store.Store) {
	set(t, s, "a", "1", "b", "2", "b\x00", "3", "c", "4", "d", "5", "e", "6")
	var b store.Batch
	b.Delete([]byte("c"))
	b.DeleteRange([]byte("d"), []byte("e"))
	write(t, s, &b, true)
	scan := func(start, end []byte, stopAt string) ([]string, error) {
		var seen []string
		err := s.ScanRange(start, end, func(k, v []byte) error {
			seen = append(seen, string(k)+"="+string(v))
			if string(k) == stopAt {
				return store.ErrStopScan
			}
			return nil
		})
		return seen, err
	}
	for _, tc := range []struct {
		start, end []byte
		stop       string
		want       []string
	}{
		{[]byte("b"), []byte("e"), "", []string{"b=2", "b\x00=3"}},
		{[]byte("b"), []byte("e\x00"), "", []string{"b=2", "b\x00=3", "e=6"}},
		{[]byte("a\x00"), nil, "", []string{"b=2", "b\x00=3", "e=6"}},
		{nil, []byte("b"), "", []string{"a=1"}},
		{[]byte("a"), nil, "b", []string{"a=1", "b=2"}},
		{[]byte("f"), nil, "", nil},
		{[]byte("c"), []byte("c"), "", nil},
	} {
		got, err := scan(tc.start, tc.end, tc.stop)
		if err != nil {
			t.Fatalf("ScanRange(%q, %q): %v", tc.start, tc.end, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ScanRange(%q, %q) stopping at %q = %q, want %q", tc.start, tc.end, tc.stop, got, tc.want)
		}
	}
	boom := errors.New("boom")
	if err := s.ScanRange(nil, nil, func(k, v []byte) error { return boom }); err != boom {
		t.Fatalf("ScanRange returned %v, want the callback's error", err)
	}
}

// testScanLengths checks that ScanLengths reports each value's length,
// small and large (a store may keep large values apart from their keys),
// within the same bounds as ScanRange.
func testScanLengths(t *testing.T, s store.Store) {
	var b store.Batch
	sizes := map[string]int{"k1": 0, "k2": 10, "k3": 255, "k4": 256, "k5": 4096, "k6": 70000, "z": 7}
	for k, n := range sizes {
		b.Set([]byte(k), bytes.Repeat([]byte{'v'}, n))
	}
	b.Delete([]byte("k2"))
	write(t, s, &b, true)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var order []string
	err := s.ScanLengths([]byte("k"), []byte("l"), func(k []byte, n int) error {
		got[string(k)] = n
		order = append(order, string(k))
		return nil
	})
	if err != nil {
		t.Fatalf("ScanLengths: %v", err)
	}
	if !slices.Equal(order, []string{"k1", "k3", "k4", "k5", "k6"}) {
		t.Fatalf("ScanLengths visited %q", order)
	}
	for _, k := range order {
		if got[k] != sizes[k] {
			t.Errorf("ScanLengths: %s has length %d, want %d", k, got[k], sizes[k])
		}
	}
	n := 0
	err = s.ScanLengths(nil, nil, func(k []byte, _ int) error {
		n++
		if n == 2 {
			return store.ErrStopScan
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("ScanLengths stopped after %d keys with %v, want 2 and nil", n, err)
	}
}

// testWriteDoesNotAlias checks that a store does not alias the caller's
// batch buffers: mutating them after Write changes nothing stored.
func testWriteDoesNotAlias(t *testing.T, s store.Store) {
	key := []byte("key")
	val := []byte("value")
	var b store.Batch
	b.Set(key, val)
	write(t, s, &b, false)
	copy(key, "XXX")
	copy(val, "XXXXX")
	expect(t, s, nil, "key=value")
}

// testBatchAtomicity has a writer rewrite a group of keys, one batch per
// generation, while readers scan: a scan must never see two generations.
func testBatchAtomicity(t *testing.T, s store.Store) {
	const keys, gens = 16, 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				var vals []string
				err := s.Scan([]byte("g/"), func(k, v []byte) error {
					vals = append(vals, string(v))
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				if len(vals) != 0 && len(vals) != keys {
					errs <- fmt.Errorf("scan saw %d of %d keys of a batch", len(vals), keys)
					return
				}
				for _, v := range vals {
					if v != vals[0] {
						errs <- fmt.Errorf("scan saw generations %s and %s together", vals[0], v)
						return
					}
				}
			}
		}()
	}
	var b store.Batch
	for g := range gens {
		b.Reset()
		for k := range keys {
			b.Set(fmt.Appendf(nil, "g/%02d", k), fmt.Appendf(nil, "%d", g))
		}
		p, err := s.Write(&b, g%10 == 0)
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testWriteOrder checks that later writes win, durable or not, even when
// their Pendings are waited for out of order or not at all.
func testWriteOrder(t *testing.T, s store.Store) {
	var pendings []store.Pending
	var b store.Batch
	for i := range 100 {
		b.Reset()
		b.Set([]byte("k"), fmt.Appendf(nil, "%03d", i))
		b.Set(fmt.Appendf(nil, "n/%03d", i), nil)
		p, err := s.Write(&b, i%2 == 0)
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		pendings = append(pendings, p)
	}
	for i := len(pendings) - 1; i >= 0; i-- {
		if err := pendings[i].Wait(); err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
	}
	expect(t, s, []byte("k"), "k=099")
	if n := len(dump(t, s, []byte("n/"))); n != 100 {
		t.Fatalf("%d keys under n/, want 100", n)
	}
}

func testBatchReuse(t *testing.T, s store.Store) {
	var b store.Batch
	buf := []byte("a")
	b.Set(buf, []byte("1"))
	write(t, s, &b, true)
	b.Reset()
	if b.Len() != 0 || b.Size() != 0 {
		t.Fatalf("after Reset: Len %d Size %d", b.Len(), b.Size())
	}
	buf[0] = 'b'
	b.Set(buf, []byte("2"))
	b.Delete([]byte("nothing"))
	write(t, s, &b, true)
	expect(t, s, nil, "a=1", "b=2")
}

// testConcurrentDurable has many producers write durably at once, as a busy
// broker does; every acknowledged write must be visible afterwards.
func testConcurrentDurable(t *testing.T, s store.Store) {
	const writers, each = 64, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b store.Batch
			for i := range each {
				b.Reset()
				b.Set(fmt.Appendf(nil, "w%02d/%03d", w, i), fmt.Appendf(nil, "%d.%d", w, i))
				p, err := s.Write(&b, true)
				if err == nil {
					err = p.Wait()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := 0
	err := s.Scan(nil, func(k, v []byte) error {
		var w, i int
		if _, err := fmt.Sscanf(string(k), "w%02d/%03d", &w, &i); err != nil {
			return fmt.Errorf("key %q: %v", k, err)
		}
		if want := fmt.Sprintf("%d.%d", w, i); string(v) != want {
			return fmt.Errorf("key %q = %q, want %q", k, v, want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != writers*each {
		t.Fatalf("%d keys visible, want %d", n, writers*each)
	}
}

func testEmptyBatch(t *testing.T, s store.Store) {
	for _, durable := range []bool{false, true} {
		write(t, s, &store.Batch{}, durable)
	}
	expect(t, s, nil)
	// An empty durable batch after a non-durable write still succeeds.
	var b store.Batch
	b.Set([]byte("a"), []byte("1"))
	write(t, s, &b, false)
	write(t, s, &store.Batch{}, true)
	expect(t, s, nil, "a=1")
}

func testSyncAndWaitTwice(t *testing.T, s store.Store) {
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync on empty store: %v", err)
	}
	var b store.Batch
	b.Set([]byte("a"), []byte("1"))
	p, err := s.Write(&b, true)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	b.Reset()
	b.Set([]byte("b"), []byte("2"))
	write(t, s, &b, false)
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	expect(t, s, nil, "a=1", "b=2")
}

func testClosed(t *testing.T, s store.Store) {
	var b store.Batch
	b.Set([]byte("a"), []byte("1"))
	p, err := s.Write(&b, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The Pending of a write from before Close still answers (whatever it
	// says, it must not hang).
	_ = p.Wait()
	if _, err := s.Write(&b, true); !errors.Is(err, store.ErrClosed) {
		t.Errorf("durable Write after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Write(&b, false); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Write(&store.Batch{}, false); !errors.Is(err, store.ErrClosed) {
		t.Errorf("empty Write after Close: %v, want ErrClosed", err)
	}
	if err := s.Scan(nil, func(k, v []byte) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Scan after Close: %v, want ErrClosed", err)
	}
	if err := s.Sync(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

// testRandom applies random batches to the store and to a model, comparing
// full and prefix scans along the way.
func testRandom(t *testing.T, s store.Store) {
	rng := rand.New(rand.NewPCG(7, 11))
	m := newModel()
	var b store.Batch
	for i := range 300 {
		b.Reset()
		randomBatch(rng, &b, 10)
		write(t, s, &b, rng.IntN(4) == 0)
		m.apply(&b)
		if i%25 == 0 {
			m.check(t, s)
		}
	}
	m.check(t, s)
}

// randomBatch appends up to n random operations on a small key space, so
// that overwrites, deletes and ranges collide.
func randomBatch(rng *rand.Rand, b *store.Batch, n int) {
	key := func() []byte {
		k := []byte{"kmz\xff"[rng.IntN(4)]}
		for range rng.IntN(3) {
			k = append(k, "a\x00\xff"[rng.IntN(3)])
		}
		return k
	}
	for range 1 + rng.IntN(n) {
		switch r := rng.IntN(10); {
		case r < 7:
			b.Set(key(), fmt.Appendf(nil, "%d", rng.Int64()))
		case r < 9:
			b.Delete(key())
		default:
			b.DeleteRange(key(), key())
		}
	}
}

// model is the reference store the random and reopen tests compare to.
type model struct{ m map[string]string }

func newModel() *model { return &model{m: map[string]string{}} }

func (m *model) apply(b *store.Batch) {
	for _, op := range b.Ops {
		switch op.Kind {
		case store.OpSet:
			m.m[string(op.Key)] = string(op.Value)
		case store.OpDelete, store.OpSingleDelete:
			delete(m.m, string(op.Key))
		case store.OpDeleteRange:
			for k := range m.m {
				if k >= string(op.Key) && k < string(op.Value) {
					delete(m.m, k)
				}
			}
		}
	}
}

func (m *model) check(t *testing.T, s store.Store) {
	t.Helper()
	keys := make([]string, 0, len(m.m))
	for k := range m.m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // Go compares strings bytewise, as stores order keys
	for _, prefix := range []string{"", "k", "m", "\xff", "\xffa", "\xff\xff"} {
		var want []string
		for _, k := range keys {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				want = append(want, show([]byte(k))+"="+show([]byte(m.m[k])))
			}
		}
		got := dump(t, s, []byte(prefix))
		if !slices.Equal(got, want) {
			t.Fatalf("Scan(%q) =\n  %q\nmodel says\n  %q", prefix, got, want)
		}
	}
}

// testGet: Get sees the latest write, returns its own copy, and reports
// missing and deleted keys as ErrNotFound.
func testGet(t *testing.T, s store.Store) {
	var b store.Batch
	b.Set([]byte("k"), []byte("v1"))
	b.Set([]byte("k"), []byte("v2"))
	b.Set([]byte("gone"), []byte("x"))
	b.Delete([]byte("gone"))
	b.Set([]byte("r1"), []byte("x"))
	b.DeleteRange([]byte("r"), []byte("s"))
	p, err := s.Write(&b, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	v, err := s.Get([]byte("k"))
	if err != nil || string(v) != "v2" {
		t.Fatalf("Get(k) = %q, %v", v, err)
	}
	v[0] = 'X' // the caller owns the copy
	if again, _ := s.Get([]byte("k")); string(again) != "v2" {
		t.Fatalf("Get returned shared memory: %q", again)
	}
	for _, k := range []string{"missing", "gone", "r1"} {
		if _, err := s.Get([]byte(k)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%s) = %v, want ErrNotFound", k, err)
		}
	}
}
