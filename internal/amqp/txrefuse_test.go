package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestTxCommitFailsOnRefusedPublish (issue #10, hole 4): tx.commit-ok must
// never cover a publish the engine refused. A commit whose publishes a full
// reject-publish queue refused fails with RabbitMQ's channel error (406
// "partial tx completion"), and its acks are not applied.
func TestTxCommitFailsOnRefusedPublish(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("full", true, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	must(t, err)
	_, err = ch.QueueDeclare("work", true, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "work", "job")
	must(t, ch.Tx())
	d := getOne(t, ch, "work")
	must(t, d.Ack(false))
	publish(t, ch, "", "full", "one")
	publish(t, ch, "", "full", "two") // over the limit: refused
	err = ch.TxCommit()
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - partial tx completion" {
		t.Fatalf("commit with a refused publish: %v", e)
	}
	_, obs := b.channel()
	if i, _ := inspect(obs, "full"); i.Messages != 1 {
		t.Fatalf("full queue holds %d messages, want 1", i.Messages)
	}
	// The failed transaction's ack was not applied: the job comes back.
	if d := getOne(t, obs, "work"); string(d.Body) != "job" || !d.Redelivered {
		t.Fatalf("after a failed commit: %q redelivered=%v", d.Body, d.Redelivered)
	}
}

// TestRefusedPublishCounted (issue #10, hole 4): outside confirm and tx
// mode a refused publish is dropped, as RabbitMQ drops it, but never
// silently: it is counted and logged.
func TestRefusedPublishCounted(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("full", true, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	must(t, err)
	publish(t, ch, "", "full", "one")
	publish(t, ch, "", "full", "two")
	poll.CheckFor(t, 5*time.Second, poll.True("the full queue's refusal to be counted", func() bool { return b.srv.RefusedPublishes() == 1 }))
	b.eng.SetAdmission(engine.ErrDiskFull)
	publish(t, ch, "", "full", "three")
	poll.CheckFor(t, 5*time.Second, poll.True("the disk watermark's refusal to be counted", func() bool { return b.srv.RefusedPublishes() == 2 }))
	b.eng.SetAdmission(nil)
	if i, _ := inspect(ch, "full"); i.Messages != 1 {
		t.Fatalf("queue holds %d, want 1", i.Messages)
	}
}
