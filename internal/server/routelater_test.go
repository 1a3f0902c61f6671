package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// farShard plays the other shard of a cluster, holding SQS queue "far":
// it answers look-ups of it while up, and records the dead letters the
// mover imports into it.
type farShard struct {
	mu      sync.Mutex
	down    bool
	imports int // transfers imported into far
}

func (f *farShard) call(_ context.Context, _, _ string, body []byte) ([]byte, error) {
	c, err := decodeEngineCall(body)
	if err != nil {
		return nil, err
	}
	if c.Queue != "far" {
		return nil, ErrNotElsewhere
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("far's shard does not answer")
	}
	switch c.Op {
	case opGetQueue:
		return encodeGob(engineReply{Info: engine.QueueInfo{Name: "far", Config: engine.DefaultQueueConfig()}})
	case opImport:
		f.imports += len(c.Transfers)
		return encodeGob(engineReply{})
	}
	return encodeGob(engineReply{Err: remoteError{Text: "not played: " + c.Op}})
}

func (f *farShard) set(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *farShard) imported() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.imports
}

// TestDeadLettersWaitForTheBindingsOfAStart: shard 0 (Options.RouteLater)
// starting while the shard of a queue its dead-letter exchange is bound to
// does not answer cannot restore that binding yet. A dead letter meanwhile
// would be routed to the exchange's other queue only — or, with no other,
// dropped. It waits instead, as a route transfer, and once the binding is
// restored the mover routes it here: to both queues, the one elsewhere
// through a transfer; one its exchange routes nowhere is then counted as
// dropped in its source.
func TestDeadLettersWaitForTheBindingsOfAStart(t *testing.T) {
	far := &farShard{}
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	held := func(name string) bool { return name == "far" }
	o.NameTaken, o.QueueHeldElsewhere = held, held
	o.ShardCall = far.call
	o.RouteLater = true
	s, stop := run(t, o, clock.Real{})
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"near", "far"} {
		if q == "near" {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.QueueBind(q, "", "dlx", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	// And a source whose exchange has no binding: its dead letter, kept
	// too, is routed nowhere once the topology is whole, and counted.
	if err := ch.ExchangeDeclare("void", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("lonely", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "void"}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	stop()

	far.set(true) // far's shard is down as shard 0 starts again
	s, stop = run(t, o, clock.Real{})
	defer stop()
	conn, err = amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"src", "lonely"} {
		pc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: []byte("poison")})
		if err != nil || !pc.Wait() {
			t.Fatalf("publish to %s: %v", q, err)
		}
		d, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get from %s: %v %v", q, ok, err)
		}
		if err := d.Nack(false, false); err != nil {
			t.Fatal(err)
		}
		poll.CheckFor(t, 10*time.Second, poll.True("the dead letter out of "+q, func() bool {
			info, err := s.eng.GetQueue(q)
			return err == nil && info.Visible+info.InFlight == 0
		}))
	}
	if info, _ := s.eng.GetQueue("near"); info.Visible != 0 || s.eng.TransfersPending() != 2 {
		t.Fatalf("with a binding not restored: near holds %d, %d transfers pending; want 0 and both dead letters waiting", info.Visible, s.eng.TransfersPending())
	}
	for _, q := range []string{"src", "lonely"} {
		if info, _ := s.eng.GetQueue(q); info.Dropped != 0 {
			t.Fatalf("%s dropped %d while its dead letter waits", q, info.Dropped)
		}
	}

	far.set(false)
	poll.CheckFor(t, 20*time.Second, poll.True("the dead letter in near and far, the other dropped", func() bool {
		info, err := s.eng.GetQueue("near")
		lonely, lerr := s.eng.GetQueue("lonely")
		return err == nil && lerr == nil && info.Visible == 1 && far.imported() == 1 && lonely.Dropped == 1 && s.eng.TransfersPending() == 0
	}))
	got, ok, err := ch.Get("near", true)
	if err != nil || !ok || string(got.Body) != "poison" {
		t.Fatalf("near: %v %v %q", ok, err, got.Body)
	}
	if deaths, _ := got.Headers["x-death"].([]any); len(deaths) != 1 {
		t.Fatalf("x-death %v", got.Headers["x-death"])
	}
}
