package amqp

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestLongReplyTextStillCloses: a channel error whose text is longer than
// a shortstr (here a 404 naming a missing queue of 250 bytes: RabbitMQ's
// "NOT_FOUND - no queue '…' in vhost '/'") is still sent, its text cut to
// 255 bytes; before, the close could not be encoded, nothing was written,
// and the client waited for the answer to its declare forever.
func TestLongReplyTextStillCloses(t *testing.T) {
	b := startBroker(t)
	conn := b.dial()
	defer func() { _ = conn.Close() }() // the test is over
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("q", 250)
	done := make(chan error, 1)
	go func() {
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a passive declare of a missing queue with a 250-byte name")
	}
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || len(ae.Reason) > 255 || !strings.HasPrefix(ae.Reason, "NOT_FOUND - no queue 'qqq") {
		t.Fatalf("passive declare of a missing queue: %v, want 404 with its text cut to 255 bytes", err)
	}
}

// TestReplyTextCutsAtARune: replyText keeps texts up to 255 bytes and cuts
// longer ones at a UTF-8 boundary.
func TestReplyTextCutsAtARune(t *testing.T) {
	if s := strings.Repeat("a", 255); replyText(s) != s {
		t.Fatal("a 255-byte text was cut")
	}
	s := strings.Repeat("a", 254) + "é" + "tail" // é is 2 bytes at 254–255
	got := replyText(s)
	if len(got) != 254 || !utf8.ValidString(got) {
		t.Fatalf("cut to %d bytes (valid UTF-8: %v), want 254", len(got), utf8.ValidString(got))
	}
}
