package httpbody

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// trickle returns its data one byte per Read, as a slow client would.
type trickle struct{ r io.Reader }

func (t trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), 1)]) }

func TestReadGrowsWithData(t *testing.T) {
	b := NewBudget(1<<20, time.Second, nil)
	for _, n := range []int{0, 1, 4095, 4096, 4097, 100_000} {
		data := bytes.Repeat([]byte("x"), n)
		body, release, err := b.Read(context.Background(), bytes.NewReader(data), 200_000)
		if err != nil || !bytes.Equal(body, data) {
			t.Fatalf("n=%d: %v", n, err)
		}
		if held := b.InUse(); held < int64(cap(body)) || cap(body) > 2*n+firstChunk {
			t.Fatalf("n=%d: holds %d for cap %d", n, held, cap(body))
		}
		release()
		release() // idempotent
		if b.InUse() != 0 {
			t.Fatalf("n=%d: %d still held", n, b.InUse())
		}
	}
	body, _, err := b.Read(context.Background(), trickle{strings.NewReader("hello")}, 10)
	if err != nil || string(body) != "hello" {
		t.Fatal(body, err)
	}
}

// TestReadBodyIsExactAndOwned: the body is an allocation of exactly its
// length that no later read touches (decoders keep strings pointing into
// it), although reads share scratch buffers.
func TestReadBodyIsExactAndOwned(t *testing.T) {
	b := NewBudget(1<<20, time.Second, nil)
	first, release, err := b.Read(context.Background(), bytes.NewReader(bytes.Repeat([]byte("a"), 10_600)), 1<<20)
	if err != nil || len(first) != 10_600 || cap(first) != len(first) || b.InUse() != 10_600 {
		t.Fatalf("len %d cap %d held %d: %v", len(first), cap(first), b.InUse(), err)
	}
	release()
	for i := 0; i < 3; i++ {
		second, release, err := b.Read(context.Background(), bytes.NewReader(bytes.Repeat([]byte("b"), 9_000)), 1<<20)
		if err != nil || !bytes.Equal(second, bytes.Repeat([]byte("b"), 9_000)) {
			t.Fatal(err)
		}
		release()
	}
	if !bytes.Equal(first, bytes.Repeat([]byte("a"), 10_600)) {
		t.Fatal("a later read changed an earlier body")
	}
	if b.InUse() != 0 {
		t.Fatalf("%d held", b.InUse())
	}
}

func TestReadTooLarge(t *testing.T) {
	b := NewBudget(1<<20, time.Second, nil)
	_, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 10_001)), 10_000)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatal(err)
	}
	if _, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 10_000)), 10_000); err != nil { // exactly the cap
		t.Fatal(err)
	}
	if b.InUse() == 0 {
		t.Fatal("an unreleased read holds nothing")
	}
}

// TestBudgetExhausted: a read that cannot get room waits, then fails with
// ErrBusy; room released by another read lets a waiter through.
func TestBudgetExhausted(t *testing.T) {
	b := NewBudget(48<<10, 50*time.Millisecond, nil)
	_, release, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 12<<10)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if b.InUse() != 12<<10 {
		t.Fatalf("a 12 KiB body holds %d", b.InUse())
	}
	// 24 KiB needs a 32 KiB buffer (4, 8, 16, 32 as bytes arrive), filled
	// while the 16 KiB one is still held: with 12 KiB held, 60 KiB.
	if _, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 24<<10)), 1<<20); !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	if b.InUse() != 12<<10 {
		t.Fatalf("failed read left %d held", b.InUse()-12<<10)
	}
	b.wait = time.Minute
	done := make(chan error)
	go func() {
		_, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 24<<10)), 1<<20)
		done <- err
	}()
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNilBudgetAndContext(t *testing.T) {
	var b *Budget
	body, release, err := b.Read(context.Background(), strings.NewReader("abc"), 10)
	if err != nil || string(body) != "abc" || b.InUse() != 0 || b.Limit() != 0 {
		t.Fatal(body, err)
	}
	release()
}

// FuzzRead: whatever the data, the chunking and the cap, Read returns
// exactly the data when it fits, ErrTooLarge when it does not, and leaves
// nothing held once released.
func FuzzRead(f *testing.F) {
	f.Add([]byte(""), 10, 1)
	f.Add([]byte("hello"), 5, 2)
	f.Add(bytes.Repeat([]byte("x"), 9000), 8192, 1000)
	f.Add(bytes.Repeat([]byte("y"), 4097), 1<<20, 4096)
	f.Fuzz(func(t *testing.T, data []byte, max, chunk int) {
		if max < 0 || max > 1<<20 || chunk <= 0 {
			t.Skip()
		}
		b := NewBudget(4<<20, time.Millisecond, nil)
		body, release, err := b.Read(context.Background(), &chunked{data: data, n: chunk}, int64(max))
		switch {
		case len(data) > max:
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("len %d max %d: %v", len(data), max, err)
			}
		case err != nil || !bytes.Equal(body, data):
			t.Fatalf("len %d max %d: %v", len(data), max, err)
		case int64(cap(body)) > int64(max)+1 || b.InUse() < int64(cap(body)):
			t.Fatalf("cap %d, held %d, max %d", cap(body), b.InUse(), max)
		}
		release()
		if b.InUse() != 0 {
			t.Fatalf("%d held after release", b.InUse())
		}
	})
}

// chunked returns data at most n bytes per Read.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// TestReadAllocations: a successful read allocates the body, its holding
// and the release func, nothing per release while nobody waits (it used to
// be seven: four closure cells and a wake-up channel per release).
func TestReadAllocations(t *testing.T) {
	b := NewBudget(1<<20, time.Second, nil)
	data := make([]byte, 3000)
	rd := bytes.NewReader(data)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		rd.Reset(data)
		body, release, err := b.Read(ctx, rd, 1<<20)
		if err != nil || len(body) != len(data) {
			t.Fatal(len(body), err)
		}
		release()
		release() // a second call gives nothing back twice
	})
	if allocs > 3 {
		t.Fatalf("%v allocations per read, want at most 3", allocs)
	}
	if b.InUse() != 0 {
		t.Fatalf("%d bytes held after release", b.InUse())
	}
}

// TestReleaseWakesEveryWaiter: one release that makes room for two waiting
// readers wakes both (releases skip the wake-up only when nobody waits).
func TestReleaseWakesEveryWaiter(t *testing.T) {
	// 8,200 bytes held of 12 KiB: neither 4 KiB first chunk fits beside
	// them, both fit once they are released.
	b := NewBudget(1<<20, time.Minute, nil)
	_, release, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 8200)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.limit = 12 << 10 // (reading 8,200 bytes needed 12 KiB at its peak)
	b.mu.Unlock()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, rel, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 100)), 1<<20)
			if err == nil {
				rel() // before done: the check below must see it released
			}
			done <- err
		}()
	}
	for {
		b.mu.Lock()
		w := b.waiters
		b.mu.Unlock()
		if w == 2 {
			break
		}
		runtime.Gosched()
	}
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if b.InUse() != 0 {
		t.Fatalf("%d bytes held", b.InUse())
	}
}
