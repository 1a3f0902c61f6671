package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestWaitingReceivesGauge: sluice_queue_waiting_receives shows a parked
// long poll on its queue while it waits, and 0 once it has returned.
func TestWaitingReceivesGauge(t *testing.T) {
	f := newFixture(t)
	f.create("polled", nil)
	f.create("quiet", nil)
	expect(t, f.scrape(), 0, "sluice_queue_waiting_receives", "queue", "polled")

	done := make(chan []engine.Delivery, 1)
	go func() {
		d, _ := f.e.Receive(context.Background(), "polled", engine.ReceiveRequest{Max: 1, Wait: 20 * time.Second, WaitSet: true})
		done <- d
	}()
	poll.Parked(t, f.clk, 1)
	fs := f.scrape()
	expect(t, fs, 1, "sluice_queue_waiting_receives", "queue", "polled")
	expect(t, fs, 0, "sluice_queue_waiting_receives", "queue", "quiet")

	f.send("polled", "wake")
	select {
	case d := <-done:
		if len(d) != 1 {
			t.Fatalf("the long poll got %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not return")
	}
	expect(t, f.scrape(), 0, "sluice_queue_waiting_receives", "queue", "polled")
}
