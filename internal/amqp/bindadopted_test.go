package amqp

import (
	"context"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
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
	returns := publishMandatory(t, ch, "k-sq", "k-gone")
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
	if n := b.records(metaBindings); n != 1 {
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
	returns := publishMandatory(t, ch, "k-gone", "k-both")
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

// slowConfigEngine is an engine whose Config of one queue blocks until
// released: a queue of another shard whose leader does not answer yet.
type slowConfigEngine struct {
	*engine.Engine
	slow    string
	release chan struct{}
}

func (e *slowConfigEngine) Config(name string) (*engine.QueueConfig, error) {
	if name == e.slow {
		<-e.release
	}
	return e.Engine.Config(name)
}

// TestStartWaitsForSlowBindingRestoresAtMostRestoreWait: a start whose
// bindings to a queue AMQP did not declare cannot be restored at once (the
// lookup of the queue hangs, as on a shard whose leader does not answer)
// waits for them at most restoreWait on its clock, then serves; the
// binding is restored once the lookup answers.
func TestStartWaitsForSlowBindingRestoresAtMostRestoreWait(t *testing.T) {
	b := startBroker(t)
	if _, _, err := b.eng.CreateQueue("sq", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	conn := b.dial()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("sq", "k", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	b.stop()

	topo := NewTopology()
	eng, err := engine.Open(engine.Options{Store: b.st, DeadLetterRouter: topo})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	slow := &slowConfigEngine{Engine: eng, slow: "sq", release: make(chan struct{})}
	clk := clock.NewFake(time.Now())
	type started struct {
		srv *Server
		err error
	}
	done := make(chan started, 1)
	go func() {
		srv, err := New(slow, topo, Options{Clock: clk})
		done <- started{srv, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the start does not wait on its clock: %v", err)
	}
	select {
	case <-done:
		t.Fatal("the start returned before its restore finished or its wait ended")
	default:
	}
	clk.Advance(restoreWait)
	var s started
	select {
	case s = <-done:
	case <-ctx.Done():
		close(slow.release)
		t.Fatal("the start waited past restoreWait for a binding's queue")
	}
	if s.err != nil {
		close(slow.release)
		t.Fatal(s.err)
	}
	// While the binding waits, dead letters of a queue of another shard
	// are not routed (AdoptSource refuses: its caller keeps them), since
	// the exchange would route them nowhere and they would be dropped.
	if err := s.srv.AdoptSource("elsewhere"); err == nil {
		close(slow.release)
		t.Fatal("AdoptSource with a binding not restored: nil, want an error")
	}
	close(slow.release)
	poll.CheckFor(t, 10*time.Second, poll.True("AdoptSource once the binding is restored", func() bool {
		return s.srv.AdoptSource("elsewhere") == nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	defer func() {
		s.srv.Close()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c, err := amqp091.Dial("amqp://guest:guest@" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// The first pass answers once released: the binding routes again.
	poll.CheckFor(t, 10*time.Second, poll.True("a publish through the restored binding in sq", func() bool {
		pc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.direct", "k", false, false, amqp091.Publishing{Body: []byte("x")})
		if err != nil || !pc.Wait() {
			return false
		}
		info, err := eng.GetQueue("sq")
		return err == nil && info.Visible > 0
	}))
}

// publishMandatory puts ch in confirm mode and publishes to amq.direct,
// mandatory, one message per key (its body the key), each confirmed with
// an ack before the next; it returns the channel of the returns (every
// return precedes its message's ack).
func publishMandatory(t *testing.T, ch *amqp091.Channel, keys ...string) <-chan amqp091.Return {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, len(keys)))
	for _, key := range keys {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.direct", key, true, false, amqp091.Publishing{Body: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatalf("publish to %s nacked", key)
		}
	}
	return returns
}
