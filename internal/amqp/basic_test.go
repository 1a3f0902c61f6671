package amqp

import (
	"testing"
)

func TestPublishConsumeAck(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	q, err := ch.QueueDeclare("work", true, false, false, false, nil)
	must(t, err)
	if q.Name != "work" {
		t.Fatalf("name %q", q.Name)
	}
	publish(t, ch, "", "work", "hello")
	msgs, err := ch.Consume("work", "c1", false, false, false, false, nil)
	must(t, err)
	d := recv(t, msgs)
	if string(d.Body) != "hello" || d.Redelivered || d.RoutingKey != "work" || d.DeliveryTag != 1 {
		t.Fatalf("delivery %+v", d)
	}
	must(t, d.Ack(false))
	eventually(t, "queue empty", func() bool {
		info, _ := b.eng.GetQueue("work")
		return info.Visible == 0 && info.InFlight == 0
	})
}
