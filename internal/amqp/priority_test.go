package amqp

import (
	"fmt"
	"testing"
	"time"

	"github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestConsumerPriorities: a consumer with a higher x-priority gets every
// message while it has prefetch credit; a lower one gets them only while
// the higher is blocked on its credit, and gives up its wait for messages
// as soon as the higher has credit again.
func TestConsumerPriorities(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("prio", true, false, false, false, nil)
	must(t, err)
	_, chLow := b.channel()
	_, chHigh := b.channel()
	must(t, chLow.Qos(100, 0, false))
	must(t, chHigh.Qos(3, 0, false))
	low, err := chLow.Consume("prio", "low", false, false, false, false, nil)
	must(t, err)
	high, err := chHigh.Consume("prio", "high", false, false, false, false, amqp091.Table{"x-priority": int32(10)})
	must(t, err)
	// waiting polls until tag's consumer, and no other, waits for
	// messages in the engine.
	waiting := func(tag string) {
		t.Helper()
		poll.CheckFor(t, 5*time.Second, poll.True(tag+" alone waiting in the engine", func() bool {
			info, _ := b.eng.GetQueue("prio")
			w := waitingConsumers(b, "prio")
			return info.Waiting == 1 && len(w) == 1 && w[0] == tag
		}))
	}
	// Only the higher one waits for messages while it has credit.
	waiting("high")
	publish(t, ch, "", "prio", "0")
	if d := recv(t, high); string(d.Body) != "0" {
		t.Fatalf("high got %q", d.Body)
	} else {
		must(t, d.Ack(false))
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the ack applied", func() bool {
		info, _ := b.eng.GetQueue("prio")
		return info.InFlight == 0
	}))
	// Three unacknowledged block it: the rest go to the lower one.
	var held []amqp091.Delivery
	for i := 1; i <= 6; i++ {
		publish(t, ch, "", "prio", fmt.Sprint(i))
	}
	for range 3 {
		held = append(held, recv(t, high))
	}
	for range 3 {
		recv(t, low)
	}
	// The lower one waits in the engine now; an ack gives the higher
	// credit again, and the lower gives up its wait.
	waiting("low")
	must(t, held[0].Ack(false))
	waiting("high")
	publish(t, ch, "", "prio", "next")
	if d := recv(t, high); string(d.Body) != "next" {
		t.Fatalf("after its credit came back the higher one got %q", d.Body)
	}
	select {
	case d := <-low:
		t.Fatalf("the lower one got %q while the higher had credit", d.Body)
	default:
	}
}

// waitingConsumers lists the tags of queue q's consumers whose engine
// wait is registered (priority.go): those inside Engine.Receive.
func waitingConsumers(b *broker, q string) []string {
	t := b.srv.topo
	t.mu.RLock()
	qu := t.vhosts["/"].queues[q]
	t.mu.RUnlock()
	if qu == nil {
		return nil
	}
	qu.prio.mu.Lock()
	defer qu.prio.mu.Unlock()
	var out []string
	for c, st := range qu.prio.cons {
		if st.cancel != nil {
			out = append(out, c.tag)
		}
	}
	return out
}
