package amqp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
)

// holdingStore holds, while hold is set, the Wait of every durable write
// from the first write that deletes something on (the acks' deletes are
// written without a sync; the durable write after them is their sync
// barrier), until release is closed.
type holdingStore struct {
	store.Store
	hold    atomic.Bool
	deleted atomic.Bool  // a delete was written while hold was set
	held    atomic.Int64 // durable writes waiting
	release chan struct{}
}

// hasDelete reports whether b deletes something.
func hasDelete(b *store.Batch) bool {
	for _, op := range b.Ops {
		if op.Kind == store.OpDelete || op.Kind == store.OpSingleDelete {
			return true
		}
	}
	return false
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
	if err != nil || !s.hold.Load() {
		return p, err
	}
	if hasDelete(b) {
		s.deleted.Store(true)
	}
	if durable && s.deleted.Load() {
		return &heldPending{Pending: p, s: s}, nil
	}
	return p, nil
}

// holdingRig is a broker on a holdingStore, one channel of a connection to
// it, and a durable queue "acks" holding n messages sent through the
// engine.
type holdingRig struct {
	hs      *holdingStore
	b       *broker
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	release func() // closes hs.release (once)
}

func newHoldingRig(t *testing.T, n int) *holdingRig {
	t.Helper()
	hs := &holdingStore{release: make(chan struct{})}
	var once sync.Once
	r := &holdingRig{hs: hs, release: func() { once.Do(func() { close(hs.release) }) }}
	r.b = startBroker(t, withStoreWrapper(func(s store.Store) store.Store { hs.Store = s; return hs }))
	r.conn, r.ch = r.b.channel()
	// Registered after the broker's and the connection's: runs before
	// them, so a failed test still closes and shuts down.
	t.Cleanup(r.release)
	_, err := r.ch.QueueDeclare("acks", true, false, false, false, nil)
	must(t, err)
	for i := 0; i < n; i += engine.MaxBatch {
		ms := make([]engine.Message, min(engine.MaxBatch, n-i))
		for j := range ms {
			ms[j].Body = fmt.Appendf(nil, "m%d", i+j)
		}
		_, err = r.b.eng.Send("acks", ms)
		must(t, err)
	}
	return r
}

// ackAll consumes "acks", sets the store holding, then takes n deliveries
// and acks each.
func (r *holdingRig) ackAll(t *testing.T, n int) {
	t.Helper()
	ds, err := r.ch.Consume("acks", "c", false, false, false, false, nil)
	must(t, err)
	r.hs.hold.Store(true)
	for i := 0; i < n; i++ {
		select {
		case d := <-ds:
			must(t, d.Ack(false))
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d deliveries arrived", i, n)
		}
	}
}

// heldUntilReleased checks that the reply done waits for stands while the
// sync after the acks' deletes is held: done must not deliver before that
// sync reaches the store nor while it is held; once released, it delivers
// without an error.
func (r *holdingRig) heldUntilReleased(t *testing.T, reply string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.hs.held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the acks' sync never reached the store")
		}
		select {
		case err := <-done:
			t.Fatalf("%s came (%v) before the acks' sync was written", reply, err)
		case <-time.After(time.Millisecond): // polling the store wrapper
		}
	}
	select {
	case err := <-done:
		t.Fatalf("%s came (%v) while the acks' sync was held", reply, err)
	case <-time.After(50 * time.Millisecond):
		// Not a timing assertion: a reply that came now would be wrong at
		// any speed; this only gives a wrong one the chance to show.
	}
	r.release()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never came after the sync", reply)
	}
}

// empty reports an error unless queue "acks" holds nothing.
func (r *holdingRig) empty() error {
	info, err := r.b.eng.GetQueue("acks")
	if err != nil {
		return err
	}
	if info.InFlight != 0 || info.Visible != 0 {
		return fmt.Errorf("%d in flight, %d visible; want nothing left", info.InFlight, info.Visible)
	}
	return nil
}

// TestAckAppliedBeforeNextReply: basic.ack has no reply, but a channel
// runs its methods in order, applies the acks before it (one engine write,
// without waiting for its sync) and syncs them before it answers the next
// synchronous method. So the reply to a basic.qos sent after acks proves
// them durable — what the cluster fault harness relies on to call AMQP
// deletes certain (docs/guarantees.md). Here the sync after the deletes is
// held: basic.qos-ok must not come until it is released, and then the
// messages are gone.
func TestAckAppliedBeforeNextReply(t *testing.T) {
	r := newHoldingRig(t, engine.MaxBatch)
	must(t, r.ch.Qos(engine.MaxBatch, 0, false))
	r.ackAll(t, engine.MaxBatch)
	qosDone := make(chan error, 1)
	go func() { qosDone <- r.ch.Qos(engine.MaxBatch, 0, false) }()
	r.heldUntilReleased(t, "basic.qos-ok", qosDone)
	if err := r.empty(); err != nil {
		t.Fatalf("after the qos reply: %v", err)
	}
}

// errTermLost stands for what a cluster node's store answers when its
// leader lost its term before a write was applied.
var errTermLost = errors.New("not the leader: lost leadership before the write was applied")

// failingDeleteStore, while fail is set, drops every write that deletes
// something and fails the Wait of every durable write from then on, as a
// leader's store does for the writes in flight when it loses its term.
type failingDeleteStore struct {
	store.Store
	fail    atomic.Bool
	dropped atomic.Bool  // a delete was dropped
	held    atomic.Int64 // failing writes waiting for release
	release chan struct{}
}

// failedPending is a write that was never applied: its Wait holds until
// release, then fails (a leader learns only after a while that its term
// is gone).
type failedPending struct{ s *failingDeleteStore }

func (p failedPending) Wait() error {
	p.s.held.Add(1)
	<-p.s.release
	return errTermLost
}

func (s *failingDeleteStore) Write(b *store.Batch, durable bool) (store.Pending, error) {
	if s.fail.Load() {
		if hasDelete(b) {
			s.dropped.Store(true) // dropped, as a lost term drops it
		}
		if s.dropped.Load() {
			if durable {
				return failedPending{s}, nil
			}
			return store.Done{}, nil // its failure shows at the next sync
		}
	}
	return s.Store.Write(b, durable)
}

// TestFailedAckIsNotProvedByTheNextReply is TestAckAppliedBeforeNextReply's
// other half, on one node: when applying acks fails (here the store fails
// their write after a while, as a cluster leader's does when it loses its
// term), the server closes the connection and must not answer a basic.qos
// that was sent after the acks — not even after its connection.close: a
// client library may still hand such a qos-ok to the waiting call
// (amqp091-go did), which would then prove acks never applied, and their
// messages come back. A raw client reads every frame the server writes.
// The one-shard counterpart of internal/cluster's
// TestShardsAMQPAckAfterTheQueuesLeaderMoved; the cluster fault harness
// reported this timeline as a resurrection (docs/reliability.md). The
// client's own connection.close is such a proof too, and is not answered.
func TestFailedAckIsNotProvedByTheNextReply(t *testing.T) {
	t.Run("basic.qos", func(t *testing.T) {
		failedAckNotProved(t, 1, &wire.BasicQos{PrefetchCount: 2}, &wire.BasicQosOK{})
	})
	// connection.close-ok proves the acks before it too
	// (TestAckSyncedBeforeConnectionCloseOK): when their sync fails, the
	// socket closes without it.
	t.Run("connection.close", func(t *testing.T) {
		failedAckNotProved(t, 0, &wire.ConnectionClose{ReplyCode: 200, ReplyText: "bye"}, &wire.ConnectionCloseOK{})
	})
}

// failedAckNotProved acks two deliveries while the store fails their
// write, sends proof on channel ch (0: the connection), and checks that
// its reply, of want's type, never comes, and that the messages are back
// after a restart.
func failedAckNotProved(t *testing.T, ch uint16, proof, want wire.Method) {
	fs := &failingDeleteStore{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(fs.release) }) }
	b := startBroker(t, withStoreWrapper(func(s store.Store) store.Store { fs.Store = s; return fs }))
	t.Cleanup(release) // runs before the broker's stop: a failed test ends
	_, _, err := b.eng.CreateQueue("acks", engine.DefaultQueueConfig(), nil)
	must(t, err)
	_, err = b.eng.Send("acks", []engine.Message{{Body: []byte("m1")}, {Body: []byte("m2")}})
	must(t, err)

	c := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 16, FrameMax: 131072})
	must(t, c.nc.SetReadDeadline(time.Now().Add(20*time.Second)))
	// next reads the next method frame, skipping content frames.
	next := func() wire.Method {
		t.Helper()
		for {
			f, err := wire.ReadFrame(c.r, 0)
			must(t, err)
			if f.Type != wire.FrameMethod {
				continue
			}
			m, err := wire.ParseMethod(f.Payload)
			must(t, err)
			return m
		}
	}
	expect := func(want wire.Method) {
		t.Helper()
		if m := next(); fmt.Sprintf("%T", m) != fmt.Sprintf("%T", want) {
			t.Fatalf("got %s, want %s", m.Name(), want.Name())
		}
	}
	expect(&wire.ConnectionOpenOK{})
	sendMethod(t, c.w, 1, &wire.ChannelOpen{})
	expect(&wire.ChannelOpenOK{})
	sendMethod(t, c.w, 1, &wire.BasicQos{PrefetchCount: 2})
	expect(&wire.BasicQosOK{})
	sendMethod(t, c.w, 1, &wire.BasicConsume{Queue: "acks", ConsumerTag: "c"})
	expect(&wire.BasicConsumeOK{})
	expect(&wire.BasicDeliver{})
	expect(&wire.BasicDeliver{})

	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened", what)
			}
			time.Sleep(time.Millisecond) // polling the store wrapper and the inbox
		}
	}
	// The acks' deletes are dropped (written without a sync, they fail
	// nothing yet); the proof after them waits for their sync, which
	// the store fails only on release, as acks and a qos sent while a
	// leader is losing its term do.
	fs.fail.Store(true)
	sendMethod(t, c.w, 1, &wire.BasicAck{DeliveryTag: 1})
	sendMethod(t, c.w, 1, &wire.BasicAck{DeliveryTag: 2})
	sendMethod(t, c.w, ch, proof)
	poll("the sync after the acks", func() bool { return fs.held.Load() > 0 })
	release()
	closed := false
	for {
		f, err := wire.ReadFrame(c.r, 0)
		if err != nil {
			break // the server ended the connection
		}
		if f.Type != wire.FrameMethod {
			continue
		}
		m, err := wire.ParseMethod(f.Payload)
		must(t, err)
		if fmt.Sprintf("%T", m) == fmt.Sprintf("%T", want) {
			t.Fatalf("%s answered after acks whose delete failed (after connection.close: %v): the client would hold a proof of acks never applied", proof.Name(), closed)
		}
		if _, ok := m.(*wire.ConnectionClose); ok {
			closed = true
			sendMethod(t, c.w, 0, &wire.ConnectionCloseOK{})
		}
	}
	if !closed && ch != 0 {
		// A channel's method: the server must close the connection.
		// (The client's own connection.close ends it anyway.)
		t.Fatal("the connection ended without connection.close")
	}
	// Nothing was deleted: the store holds both messages, and the engine
	// (failed, as after a lost term) gives them back once reopened.
	fs.fail.Store(false)
	b.restart()
	info, err := b.eng.GetQueue("acks")
	must(t, err)
	if info.Visible+info.InFlight != 2 {
		t.Fatalf("after the failed acks and a restart: %d visible, %d in flight; want both messages back", info.Visible, info.InFlight)
	}
}

// TestAckSyncedBeforeConnectionCloseOK: connection.close-ok, too, proves
// the acks before it durable: a client whose Close returned may take its
// acks for applied. Here the sync after the deletes is held: Close must
// not return until it is released.
func TestAckSyncedBeforeConnectionCloseOK(t *testing.T) {
	r := newHoldingRig(t, 2)
	r.ackAll(t, 2)
	closed := make(chan error, 1)
	go func() { closed <- r.conn.Close() }()
	r.heldUntilReleased(t, "connection.close-ok", closed)
	if err := r.empty(); err != nil {
		t.Fatalf("after close-ok: %v", err)
	}
}

// TestUnsyncedAcksBounded: acks are written without a sync, but a channel
// that has written maxUnsyncedAcks of them waits for a sync before it
// applies more, with no synchronous method to make it: a consumer cannot
// run arbitrarily far ahead of what is durable (in a cluster, committed).
func TestUnsyncedAcksBounded(t *testing.T) {
	const n = maxUnsyncedAcks + 10*engine.MaxBatch
	r := newHoldingRig(t, n)
	r.ackAll(t, n)
	poll.CheckFor(t, 10*time.Second, poll.True("a sync after maxUnsyncedAcks acks", func() bool { return r.hs.held.Load() > 0 }))
	r.release()
	poll.CheckFor(t, 10*time.Second, r.empty)
}
