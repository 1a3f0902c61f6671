package amqp

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
)

// writeCounter counts the durable, non-empty batches written through it.
type writeCounter struct {
	store.Store
	durable atomic.Int64
}

func (w *writeCounter) Write(b *store.Batch, durable bool) (store.Pending, error) {
	if durable && len(b.Ops) > 0 {
		w.durable.Add(1)
	}
	return w.Store.Write(b, durable)
}

// A no-ack consumer's deliveries are settled with one engine delete per
// batch the consumer takes, not one durable write per delivery (issue 13:
// "acks and no-ack deliveries settle in batches"); every message is
// delivered once and none is left behind.
func TestNoAckSettlesInBatches(t *testing.T) {
	wc := &writeCounter{}
	b := startBroker(t, withStoreWrapper(func(s store.Store) store.Store { wc.Store = s; return wc }))
	_, ch := b.channel()
	_, err := ch.QueueDeclare("noack", true, false, false, false, nil)
	must(t, err)
	const n = 200
	for i := 0; i < n; i += engine.MaxBatch {
		ms := make([]engine.Message, engine.MaxBatch)
		for j := range ms {
			ms[j].Body = fmt.Appendf(nil, "m%03d", i+j)
		}
		_, err := b.eng.Send("noack", ms)
		must(t, err)
	}
	before := wc.durable.Load()
	ds, err := ch.Consume("noack", "c", true, false, false, false, nil)
	must(t, err)
	seen := make(map[string]bool)
	timeout := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case d := <-ds:
			if seen[string(d.Body)] {
				t.Fatalf("%s delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
		case <-timeout:
			t.Fatalf("%d of %d delivered", len(seen), n)
		}
	}
	poll.CheckFor(t, 5*time.Second, poll.True("every no-ack delivery to be settled", func() bool {
		info, err := b.eng.GetQueue("noack")
		must(t, err)
		return info.Visible == 0 && info.InFlight == 0
	}))
	// 200 deliveries taken 10 at a time: 20 deletes (a batch cut short
	// by a slow client is settled in two parts, so allow some more).
	if w := wc.durable.Load() - before; w > n/4 {
		t.Fatalf("%d durable writes settled %d no-ack deliveries; want at most %d", w, n, n/4)
	}
}
