package amqp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
)

// holdingStore holds the Wait of every durable write that deletes
// something while hold is set, until release is closed.
type holdingStore struct {
	store.Store
	hold    atomic.Bool
	held    atomic.Int64 // durable deletes waiting
	release chan struct{}
}

type heldPending struct {
	store.Pending
	s    *holdingStore
	once sync.Once
}

func (p *heldPending) Wait() error {
	p.once.Do(func() {
		p.s.held.Add(1)
		<-p.s.release
	})
	return p.Pending.Wait()
}

func (s *holdingStore) Write(b *store.Batch, durable bool) (store.Pending, error) {
	p, err := s.Store.Write(b, durable)
	if err != nil || !durable || !s.hold.Load() {
		return p, err
	}
	for _, op := range b.Ops {
		if op.Kind == store.OpDelete || op.Kind == store.OpSingleDelete {
			return &heldPending{Pending: p, s: s}, nil
		}
	}
	return p, nil
}

// TestAckAppliedBeforeNextReply: basic.ack has no reply, but a channel
// runs its methods in order and applies the acks before it (durably, one
// engine write) before it answers the next synchronous method. So the
// reply to a basic.qos sent after acks proves them durable — what the
// cluster fault harness relies on to call AMQP deletes certain
// (docs/guarantees.md). Here the delete's sync is held: basic.qos-ok must
// not come until it is released, and then the messages are gone.
func TestAckAppliedBeforeNextReply(t *testing.T) {
	hs := &holdingStore{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hs.release) }) }
	b := startBroker(t, withStoreWrapper(func(s store.Store) store.Store { hs.Store = s; return hs }))
	_, ch := b.channel()
	// Registered after the broker's and the connection's: runs before
	// them, so a failed test still closes and shuts down.
	t.Cleanup(release)
	_, err := ch.QueueDeclare("acks", true, false, false, false, nil)
	must(t, err)
	ms := make([]engine.Message, engine.MaxBatch)
	for i := range ms {
		ms[i].Body = fmt.Appendf(nil, "m%d", i)
	}
	_, err = b.eng.Send("acks", ms)
	must(t, err)
	must(t, ch.Qos(engine.MaxBatch, 0, false))
	ds, err := ch.Consume("acks", "c", false, false, false, false, nil)
	must(t, err)
	hs.hold.Store(true)
	for range ms {
		select {
		case d := <-ds:
			must(t, d.Ack(false))
		case <-time.After(10 * time.Second):
			t.Fatal("deliveries did not arrive")
		}
	}
	qosDone := make(chan error, 1)
	go func() { qosDone <- ch.Qos(engine.MaxBatch, 0, false) }()
	deadline := time.Now().Add(10 * time.Second)
	for hs.held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the acks' delete never reached the store")
		}
		select {
		case err := <-qosDone:
			t.Fatalf("basic.qos answered (%v) before the acks were written", err)
		case <-time.After(time.Millisecond): // polling the store wrapper
		}
	}
	select {
	case err := <-qosDone:
		t.Fatalf("basic.qos answered (%v) while the acks' delete waits for its sync", err)
	case <-time.After(50 * time.Millisecond):
		// Not a timing assertion: a reply that came now would be wrong at
		// any speed; this only gives a wrong one the chance to show.
	}
	release()
	select {
	case err := <-qosDone:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("basic.qos never answered after the sync")
	}
	info, err := b.eng.GetQueue("acks")
	must(t, err)
	if info.InFlight != 0 || info.Visible != 0 {
		t.Fatalf("after the qos reply: %d in flight, %d visible; want nothing left", info.InFlight, info.Visible)
	}
}
