package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestDirectReplyToScopedToVhost: a reply-to address from one vhost does
// not carry a message from another vhost to its consumer.
func TestDirectReplyToScopedToVhost(t *testing.T) {
	b := startBroker(t, withOptions(Options{Users: []User{
		{Name: "a", Password: "pw", Permissions: map[string]Permission{"/": {".*", ".*", ".*"}}},
		{Name: "b", Password: "pw", Permissions: map[string]Permission{"other": {".*", ".*", ".*"}}},
	}}))
	ca, err := amqp091.Dial("amqp://a:pw@" + b.ln.Addr().String() + "/")
	must(t, err)
	defer ca.Close()
	cha, err := ca.Channel()
	must(t, err)
	_, err = cha.QueueDeclare("rpc", false, false, false, false, nil)
	must(t, err)
	replies, err := cha.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	must(t, err)
	must(t, cha.Publish("", "rpc", false, false, amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("ping")}))
	req := getOne(t, cha, "rpc")

	cb, err := amqp091.Dial("amqp://b:pw@" + b.ln.Addr().String() + "/other")
	must(t, err)
	defer cb.Close()
	chb, err := cb.Channel()
	must(t, err)
	returns := chb.NotifyReturn(make(chan amqp091.Return, 1))
	must(t, chb.Publish("", req.ReplyTo, true, false, amqp091.Publishing{Body: []byte("from another vhost")}))
	select {
	case <-returns: // mandatory and unroutable in its own vhost
	case <-time.After(10 * time.Second):
		t.Fatal("the cross-vhost reply was not returned")
	}
	// The same reply from the requester's vhost is delivered.
	must(t, cha.Publish("", req.ReplyTo, false, false, amqp091.Publishing{Body: []byte("pong")}))
	select {
	case d := <-replies:
		if string(d.Body) != "pong" {
			t.Fatalf("reply %q (a message crossed vhosts)", d.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply")
	}
}
