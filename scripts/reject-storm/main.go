// Command reject-storm measures how fast a broker dead-letters messages
// that a consumer rejects one by one (basic.reject, requeue=false): what a
// bad deploy that fails every message looks like. It declares "rej" with
// a dead-letter queue "rej.dead", publishes N persistent 1 KiB messages
// with confirms, then consumes with prefetch 100 and rejects each, and
// reports the time until the dead-letter queue holds all N.
//
//	go run ./scripts/reject-storm amqp://guest:guest@127.0.0.1:5672/ 20000
//
// Run it against a fresh broker: it does not purge earlier runs' queues.
// Figures: docs/benchmarks-amqp.md, "Rejects".
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: reject-storm AMQP-URL N")
		os.Exit(2)
	}
	url := os.Args[1]
	n, err := strconv.Atoi(os.Args[2])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "reject-storm: N must be a positive integer")
		os.Exit(2)
	}
	conn, err := amqp.Dial(url)
	must(err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	must(err)
	_, err = ch.QueueDeclare("rej.dead", true, false, false, false, nil)
	must(err)
	_, err = ch.QueueDeclare("rej", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rej.dead"})
	must(err)
	must(ch.Confirm(false))
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	body := make([]byte, 1024)
	for i := 0; i < n; i++ {
		must(ch.Publish("", "rej", false, false, amqp.Publishing{DeliveryMode: 2, Body: body}))
	}
	for i := 0; i < n; i++ {
		<-confs
	}
	cc, err := conn.Channel()
	must(err)
	must(cc.Qos(100, 0, false))
	ds, err := cc.Consume("rej", "", false, false, false, false, nil)
	must(err)
	start := time.Now()
	for i := 0; i < n; i++ {
		d := <-ds
		must(d.Reject(false))
	}
	// Until the dead-letter queue holds them all.
	for {
		q, err := ch.QueueDeclarePassive("rej.dead", true, false, false, false, nil)
		must(err)
		if q.Messages >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	el := time.Since(start)
	fmt.Printf("%d rejects dead-lettered in %v: %.0f/s\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
}
