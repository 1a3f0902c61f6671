package amqp

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestBindingToAnSQSQueueSurvivesARestart: a binding from a durable
// exchange to a queue created over SQS (which AMQP adopts, and does not
// declare) is durable like any other: after a restart a publish through
// it still reaches the queue. Before, the restart dropped the binding (its
// queue was not among the declared ones when the bindings were loaded),
// and the publish was unroutable. A binding to such a queue deleted while
// the broker was down is dropped at the next start.
func TestBindingToAnSQSQueueSurvivesARestart(t *testing.T) {
	b := startBroker(t)
	for _, q := range []string{"sq", "gone"} {
		if _, _, err := b.eng.CreateQueue(q, engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	conn := b.dial()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"sq", "gone"} {
		if err := ch.QueueBind(q, "k-"+q, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	b.stop()
	// "gone" deleted behind AMQP's back (as over SQS on a stopped AMQP
	// front-end): its binding has nothing to restore.
	eng, err := engine.Open(engine.Options{Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.DeleteQueue("gone"); err != nil {
		t.Fatal(err)
	}
	eng.Close()
	b.start()
	conn = b.dial()
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 2))
	for _, key := range []string{"k-sq", "k-gone"} {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.direct", key, true, false, amqp091.Publishing{Body: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatalf("publish to %s nacked", key)
		}
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the publish through the restored binding in sq", func() bool {
		info, err := b.eng.GetQueue("sq")
		return err == nil && info.Visible == 1
	}))
	select {
	case r := <-returns:
		if r.RoutingKey != "k-gone" {
			t.Fatalf("returned %q, want only k-gone's", r.RoutingKey)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the publish to the deleted queue's key was not returned")
	}
	n := 0
	if err := b.eng.ScanMeta(metaBindings, func(string, []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d binding records, want 1 (the deleted queue's dropped)", n)
	}
}

// TestMandatoryPublishToADeletedBoundQueueIsReturned: a queue created over
// SQS, bound to an exchange over AMQP, then deleted over SQS while the
// broker runs keeps its binding in the topology; a mandatory publish that
// reaches only it went nowhere and is returned (RabbitMQ, which drops a
// deleted queue's bindings, returns it as unroutable), then confirmed. One
// that reaches a live queue too is not returned.
func TestMandatoryPublishToADeletedBoundQueueIsReturned(t *testing.T) {
	b := startBroker(t)
	for _, q := range []string{"live", "gone"} {
		if _, _, err := b.eng.CreateQueue(q, engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	conn := b.dial()
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, bind := range [][2]string{{"gone", "k-gone"}, {"gone", "k-both"}, {"live", "k-both"}} {
		if err := ch.QueueBind(bind[0], bind[1], "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.eng.DeleteQueue("gone"); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	for _, key := range []string{"k-gone", "k-both"} {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.direct", key, true, false, amqp091.Publishing{Body: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatalf("publish to %s nacked", key)
		}
	}
	// The confirms came after any return (a return precedes its ack).
	select {
	case r := <-returns:
		if r.RoutingKey != "k-gone" || r.ReplyCode != 312 {
			t.Fatalf("returned %q (%d), want k-gone's 312 NO_ROUTE", r.RoutingKey, r.ReplyCode)
		}
	default:
		t.Fatal("the publish that reached only the deleted queue was not returned")
	}
	select {
	case r := <-returns:
		t.Fatalf("also returned %q", r.RoutingKey)
	default:
	}
	if info, err := b.eng.GetQueue("live"); err != nil || info.Visible != 1 {
		t.Fatalf("live holds %+v, %v; want the k-both publish", info, err)
	}
}
