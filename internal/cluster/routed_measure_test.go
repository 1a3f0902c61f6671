package cluster

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMeasureRoutedDeadLetters reports (never fails on timing) how long an
// AMQP dead letter takes from the reject to its dead-letter queue's
// consumer, with placement "subset", for each place of the source and the
// queue bound to its dead-letter exchange: both on shard 0 (routed in
// one engine), the source on shard 0 and the queue on shard 2 (a
// transfer), the source on shard 1 and the queue on shard 0 (a route
// transfer), and on shards 1 and 2 (a route transfer, then a transfer).
// For each: one dead letter at a time (the next rejected once the last
// arrived), then a burst rejected at once. Run with
// SLUICE_MEASURE_ROUTED=1 (docs/benchmarks.md "AMQP dead letters of
// queues off shard 0").
func TestMeasureRoutedDeadLetters(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE_ROUTED") == "" {
		t.Skip("a measurement: set SLUICE_MEASURE_ROUTED=1")
	}
	nodes := subsetNodes(t)
	ch := amqpChannel(t, nodes[0], true)
	if err := ch.ExchangeDeclare("mdlx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	pinned := amqp.Table{"x-expires": int32(3600000)} // stays on shard 0
	declare := func(name string, args amqp.Table) {
		t.Helper()
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
	}
	const single, burst = 40, 200
	for _, l := range []struct {
		name           string
		srcK, dlqK     int
		srcArg, dlqArg amqp.Table
	}{
		{"both on shard 0", 0, 0, pinned, pinned},
		{"source on shard 0, queue on shard 2 (transfer)", 0, 2, pinned, nil},
		{"source on shard 1, queue on shard 0 (route transfer)", 1, 0, nil, pinned},
		{"source on shard 1, queue on shard 2 (route transfer, transfer)", 1, 2, nil, nil},
	} {
		src := subsetName(nodes[0], "msrc"+strconv.Itoa(l.srcK)+strconv.Itoa(l.dlqK), max(l.srcK, 1))
		dlq := subsetName(nodes[0], "mdlq"+strconv.Itoa(l.srcK)+strconv.Itoa(l.dlqK), max(l.dlqK, 1))
		declare(dlq, l.dlqArg)
		if err := ch.QueueBind(dlq, src, "mdlx", false, nil); err != nil {
			t.Fatal(err)
		}
		args := amqp.Table{"x-dead-letter-exchange": "mdlx"}
		for k, v := range l.srcArg {
			args[k] = v
		}
		declare(src, args)
		got, err := amqpChannel(t, nodes[1], false).Consume(dlq, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		get := func() amqp.Delivery {
			t.Helper()
			d, ok, err := ch.Get(src, false)
			if err != nil || !ok {
				t.Fatalf("get from %s: %v, %v", src, ok, err)
			}
			return d
		}
		wait := func() {
			t.Helper()
			select {
			case <-got:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: a dead letter did not arrive in %s within 30 s", l.name, dlq)
			}
		}
		var lat []time.Duration
		for i := range single {
			publishConfirmed(t, ch, src, "one/"+strconv.Itoa(i))
			d := get()
			at := time.Now()
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
			wait()
			lat = append(lat, time.Since(at))
		}
		slices.Sort(lat)
		ds := make([]amqp.Delivery, 0, burst)
		for i := range burst {
			publishConfirmed(t, ch, src, "burst/"+strconv.Itoa(i))
		}
		for range burst {
			ds = append(ds, get())
		}
		at := time.Now()
		for _, d := range ds {
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		}
		for range burst {
			wait()
		}
		all := time.Since(at)
		t.Logf("%s: one at a time (%d): p50 %v, p90 %v, max %v; %d rejected at once: the last arrived after %v",
			l.name, single, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond),
			lat[len(lat)-1].Round(time.Millisecond), burst, all.Round(time.Millisecond))
	}
}
