package amqp

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// An auto-delete queue deleted when its last consumer goes, racing
// publishes to it through the default exchange (which adopt SQS-only
// queues), must not leave a stale topology entry: a redeclare with
// auto-delete then failed with 406 "inequivalent arg 'auto_delete'" while
// a passive declare gave 404.
func TestAutoDeleteRaceLeavesNoStaleQueue(t *testing.T) {
	b := startBroker(t)
	adminConn, admin := b.channel()
	const q = "race.autodelete"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		_, ch := b.channel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ch.PublishWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: []byte("x")}) != nil {
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(deadline) || i < 30; i++ {
		if _, err := admin.QueueDeclare(q, true, true, false, false, nil); err != nil {
			t.Fatalf("round %d: declare: %v", i, err)
		}
		c, err := amqp091.Dial(b.url)
		must(t, err)
		ch, err := c.Channel()
		must(t, err)
		must(t, ch.Qos(1, 0, false))
		_, err = ch.Consume(q, "", false, false, false, false, nil)
		must(t, err)
		must(t, c.Close()) // the last consumer goes: the queue is deleted
		if _, err := inspect(admin, q); err == nil {
			t.Fatalf("round %d: queue still exists after its last consumer went", i)
		} else if e := amqpErr(t, err); e.Code != 404 {
			t.Fatalf("round %d: passive declare: %v", i, err)
		}
		adminConn.Close() // the 404 closed the channel
		adminConn = b.dial()
		admin, err = adminConn.Channel()
		must(t, err)
	}
}
