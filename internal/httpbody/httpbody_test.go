package httpbody

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	b := NewBudget(32<<10, 50*time.Millisecond, nil)
	_, release, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 12<<10)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 12<<10)), 1<<20); !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	if b.InUse() != 16<<10 {
		t.Fatalf("failed read left %d held", b.InUse())
	}
	b.wait = time.Minute
	done := make(chan error)
	go func() {
		_, _, err := b.Read(context.Background(), bytes.NewReader(make([]byte, 12<<10)), 1<<20)
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
