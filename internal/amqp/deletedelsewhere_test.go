package amqp

import (
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestQueueDeletedOverSQSIsDeclaredAgain: a queue declared over AMQP and
// deleted outside AMQP (SQS DeleteQueue, the admin API: Engine.DeleteQueue)
// is gone for AMQP too. Once the 60 s the engine holds a deleted name have
// passed, a declare makes it again — with the new declare's arguments,
// not compared with the old one's — and the bindings to its name reach
// it; within them the declare is refused with a 406 that says why. Until
// 2026-12-07 the declare answered 404 NOT_FOUND until the next start.
func TestQueueDeletedOverSQSIsDeclaredAgain(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, amqp091.Table{"x-max-length": int32(5)}); err != nil {
		t.Fatal(err)
	}
	must(t, ch.QueueBind("jobs", "k", "amq.direct", false, nil))
	deliveries, err := ch.Consume("jobs", "c1", false, false, false, false, nil)
	must(t, err)
	cancels := ch.NotifyCancel(make(chan string, 1))
	must(t, b.eng.DeleteQueue("jobs"))

	_, ch2 := b.channel()
	_, err = ch2.QueueDeclare("jobs", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != amqp091.PreconditionFailed || !strings.Contains(e.Reason, "deleted") {
		t.Fatalf("declare within the name's hold: %v, want 406 saying it was deleted", err)
	}
	// Gone from the topology too: the definitions no longer list it.
	for _, d := range b.srv.Definitions().Queues {
		if d.Name == "jobs" {
			t.Fatal("the queue deleted over SQS is still among the AMQP definitions")
		}
	}
	// The consumer of the deleted queue is told (basic.cancel).
	select {
	case tag := <-cancels:
		if tag != "c1" {
			t.Fatalf("cancelled %q, want c1", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the consumer of the deleted queue was not cancelled")
	}
	for range deliveries {
	}

	b.fake.Advance(61 * time.Second)
	_, ch3 := b.channel()
	q, err := ch3.QueueDeclare("jobs", true, false, false, false, amqp091.Table{"x-max-length": int32(10)})
	if err != nil || q.Messages != 0 {
		t.Fatalf("declare after the hold: %+v, %v", q, err)
	}
	publish(t, ch3, "amq.direct", "k", "through the kept binding")
	poll.CheckFor(t, 5*time.Second, poll.True("the publish in the new queue", func() bool {
		info, err := b.eng.GetQueue("jobs")
		return err == nil && info.Visible == 1 && info.Config.MaxLength == 10
	}))

	// And after a restart: the same queue, its new arguments.
	b.restart()
	_, ch4 := b.channel()
	if q, err := ch4.QueueDeclare("jobs", true, false, false, false, amqp091.Table{"x-max-length": int32(10)}); err != nil || q.Messages != 1 {
		t.Fatalf("redeclare after a restart: %+v, %v", q, err)
	}
}

// TestQueueDeletedOverSQSIsGoneAfterARestart: a queue declared over AMQP,
// bound, and deleted outside AMQP, then a restart within the 60 s hold of
// its name: the broker starts, the queue and its bindings are gone (a
// mandatory publish through the binding is returned), and nothing made
// it again. Until 2026-12-07 the start failed ("restoring queue …: queue
// deleted recently"), and after the hold the queue was made again.
func TestQueueDeletedOverSQSIsGoneAfterARestart(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	must(t, ch.QueueBind("jobs", "k", "amq.direct", false, nil))
	must(t, b.eng.DeleteQueue("jobs"))
	b.restart()
	if _, err := b.eng.GetQueue("jobs"); err == nil {
		t.Fatal("the queue deleted over SQS was made again at the start")
	}
	if n, m := b.records(metaBindings), b.records(metaQueues); n != 0 || m != 0 {
		t.Fatalf("%d binding and %d queue records left, want none", n, m)
	}
	_, ch2 := b.channel()
	returns := publishMandatory(t, ch2, "k")
	select {
	case r := <-returns:
		if r.RoutingKey != "k" {
			t.Fatalf("returned %q", r.RoutingKey)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a mandatory publish through the deleted queue's binding was not returned")
	}
	b.fake.Advance(61 * time.Second)
	b.restart()
	if _, err := b.eng.GetQueue("jobs"); err == nil {
		t.Fatal("the queue deleted over SQS was made again at a start after its hold")
	}
}

// TestConsumerOfAQueueDeletedOverSQSIsCancelled: a consumer of a queue
// deleted outside AMQP — an SQS queue it consumes, or one declared over
// AMQP — is told with basic.cancel at once (its deliveries channel
// closes), as RabbitMQ cancels the consumers of a deleted queue. Until
// 2026-12-07 every failed receive after the consumer's turn ended looked
// like a preemption by a higher-priority consumer: the consumer asked the
// engine again at once, forever — no basic.cancel, a core spent.
func TestConsumerOfAQueueDeletedOverSQSIsCancelled(t *testing.T) {
	b := startBroker(t)
	if _, _, err := b.eng.CreateQueue("sqs-made", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	_, ch := b.channel()
	if _, err := ch.QueueDeclare("amqp-made", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cancels := ch.NotifyCancel(make(chan string, 2))
	for _, q := range []string{"sqs-made", "amqp-made"} {
		if _, err := ch.Consume(q, "c-"+q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"sqs-made", "amqp-made"} {
		must(t, b.eng.DeleteQueue(q))
		select {
		case tag := <-cancels:
			if tag != "c-"+q {
				t.Fatalf("cancelled %q, want c-%s", tag, q)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the consumer of %s, deleted over SQS, was not cancelled", q)
		}
		// And a basic.get or a basic.consume of it: 404, as of any
		// queue that does not exist (until 2026-12-07: get-empty,
		// forever; a consume-ok, then basic.cancel).
		_, gch := b.channel()
		_, _, err := gch.Get(q, false)
		if e := amqpErr(t, err); e.Code != amqp091.NotFound {
			t.Fatalf("get from %s, deleted over SQS: %v, want 404", q, err)
		}
		_, cch := b.channel()
		_, err = cch.Consume(q, "", false, false, false, false, nil)
		if e := amqpErr(t, err); e.Code != amqp091.NotFound {
			t.Fatalf("consume of %s, deleted over SQS: %v, want 404", q, err)
		}
	}
}
