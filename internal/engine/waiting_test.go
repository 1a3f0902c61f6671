package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestWaitingCountsParkedReceives: QueueInfo.Waiting counts the receives
// parked on a queue, on that queue only, from their first wait until they
// return, whichever way they end: a message arrives, the wait runs out,
// or the caller gives up.
func TestWaitingCountsParkedReceives(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.create("other", nil)
	waiting := func(name string) int {
		t.Helper()
		info, err := f.e.GetQueue(name)
		if err != nil {
			t.Fatal(err)
		}
		return info.Waiting
	}
	park := func(ctx context.Context, wait time.Duration) <-chan []Delivery {
		out := make(chan []Delivery, 1)
		go func() {
			d, _ := f.e.Receive(ctx, "q", ReceiveRequest{Max: 1, Wait: wait, WaitSet: true})
			out <- d
		}()
		return out
	}
	want := func(n int, when string) {
		t.Helper()
		if got := waiting("q"); got != n {
			t.Fatalf("%s: Waiting = %d, want %d", when, got, n)
		}
		if got := waiting("other"); got != 0 {
			t.Fatalf("%s: the other queue's Waiting = %d, want 0", when, got)
		}
	}
	result := func(ch <-chan []Delivery, what string) []Delivery {
		t.Helper()
		select {
		case d := <-ch:
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return", what)
			return nil
		}
	}

	if d := f.recv("q", 1, -1); len(d) != 0 {
		t.Fatalf("short poll of an empty queue: %v", d)
	}
	want(0, "after a short poll")

	long := park(context.Background(), 20*time.Second)
	poll.Parked(t, f.clk, 1)
	want(1, "one long poll parked")

	short := park(context.Background(), 5*time.Second)
	poll.Parked(t, f.clk, 2)
	want(2, "two parked")
	f.clk.Advance(5 * time.Second)
	if d := result(short, "the 5 s long poll"); len(d) != 0 {
		t.Fatalf("the 5 s long poll got %v", d)
	}
	want(1, "after a wait ran out")

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := park(ctx, 20*time.Second)
	poll.Parked(t, f.clk, 2)
	want(2, "two parked again")
	cancel()
	result(gaveUp, "the cancelled long poll")
	want(1, "after a caller gave up")

	f.send("q", body("x"))
	if d := result(long, "the 20 s long poll"); len(d) != 1 {
		t.Fatalf("the 20 s long poll got %v", d)
	}
	want(0, "after a message ended the last wait")
}
