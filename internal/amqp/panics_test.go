package amqp

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// TestPanicContainedToConnection: a panic in a channel goroutine (or a
// consumer's) closes that connection with 541, is counted, and leaves
// the broker serving everyone else.
func TestPanicContainedToConnection(t *testing.T) {
	b := startBroker(t)
	b.srv.failpoint = func(where string, m wire.Method) {
		if d, ok := m.(*wire.QueueDeclare); ok && d.Queue == "boom" {
			panic("failpoint: boom")
		}
	}
	bystander, bch := b.channel()
	defer bystander.Close()
	_, err := bch.QueueDeclare("calm", false, false, false, false, nil)
	must(t, err)

	conn, ch := b.channel()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	_, err = ch.QueueDeclare("boom", false, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != 541 {
		t.Fatalf("declare that panics: %v", err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 541 {
			t.Fatalf("connection close: %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed")
	}
	if n := b.srv.Panics(); n != 1 {
		t.Fatalf("%d panics counted", n)
	}
	// The other connection, and new ones, are served.
	publish(t, bch, "", "calm", "still here")
	if d := getOne(t, bch, "calm"); string(d.Body) != "still here" {
		t.Fatalf("got %q", d.Body)
	}
	_, ch2 := b.channel()
	_, err = ch2.QueueDeclare("after", false, false, false, false, nil)
	must(t, err)
}

// TestConsumerPanicContained: the same for a consumer goroutine.
func TestConsumerPanicContained(t *testing.T) {
	b := startBroker(t)
	var fired atomic.Bool
	b.srv.failpoint = func(where string, _ wire.Method) {
		if where == "consumer" && fired.CompareAndSwap(false, true) {
			panic("failpoint: consumer")
		}
	}
	conn, ch := b.channel()
	_, err := ch.QueueDeclare("c", false, false, false, false, nil)
	must(t, err)
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	_, err = ch.Consume("c", "", false, false, false, false, nil)
	must(t, err)
	select {
	case e := <-closed:
		if e == nil || e.Code != 541 {
			t.Fatalf("connection close: %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed")
	}
	if b.srv.Panics() != 1 {
		t.Fatalf("%d panics counted", b.srv.Panics())
	}
	_, ch2 := b.channel()
	_, err = ch2.QueueDeclare("after", false, false, false, false, nil)
	must(t, err)
}
