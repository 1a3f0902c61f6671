package amqp

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// Tests of the dead-letter practice contract over AMQP (docs/dlq-contract.md):
// crash-loop quarantine (DLQ-110), the requeue policy (DLQ-10), counted
// drops (DLQ-12), the per-queue consumer timeout and its extension
// (DLQ-113), and the default delivery limit (DLQ-02).

// checkTimeoutsNow runs every connection's consumer-timeout check at once
// (the keepalive loop runs it every second of real time).
func checkTimeoutsNow(b *broker) {
	b.srv.mu.Lock()
	conns := make([]*conn, 0, len(b.srv.conns))
	for c := range b.srv.conns {
		conns = append(conns, c)
	}
	b.srv.mu.Unlock()
	for _, c := range conns {
		c.checkConsumerTimeouts()
	}
}

// roundTrip waits until the channel has run every command sent before it
// (acks, nacks and rejects get no reply).
func roundTrip(t *testing.T, ch *amqp091.Channel) {
	t.Helper()
	must(t, ch.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil))
}

// declareWorkWithDLQ declares exchange dlx (fanout) → queue dlq, and queue
// work with the given arguments plus x-dead-letter-exchange dlx.
func declareWorkWithDLQ(t *testing.T, ch *amqp091.Channel, args amqp091.Table) {
	t.Helper()
	must(t, ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare("dlq", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dlq", "", "dlx", false, nil))
	if args == nil {
		args = amqp091.Table{}
	}
	args["x-dead-letter-exchange"] = "dlx"
	_, err = ch.QueueDeclare("work", true, false, false, false, args)
	must(t, err)
}

// crashOnce connects, consumes one delivery from q and drops the
// connection without any verdict, as a consumer that crashes does.
func crashOnce(t *testing.T, b *broker, q string) amqp091.Delivery {
	t.Helper()
	c, err := amqp091.Dial(b.url)
	must(t, err)
	ch, err := c.Channel()
	must(t, err)
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, ds)
	must(t, c.Close())
	// The broker has settled the abandoned delivery once nothing is
	// unacknowledged any more.
	poll.CheckFor(t, 5*time.Second, poll.True("the abandoned delivery to return", func() bool {
		info, err := b.eng.GetQueue(q)
		return err == nil && info.InFlight == 0
	}))
	return d
}

func TestCrashLoopQuarantine(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	// A generous delivery limit: only the crash rule may fire.
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-delivery-limit": int64(50)})
	publish(t, ch, "", "work", "crashes the consumer")
	for i := 0; i < 2; i++ {
		crashOnce(t, b, "work")
		b.advance(10*time.Second, 1)
	}
	if info, _ := b.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatal("quarantined after two crashes")
	}
	crashOnce(t, b, "work")
	dl := getOne(t, ch, "dlq")
	if string(dl.Body) != "crashes the consumer" {
		t.Fatalf("dead letter %q", dl.Body)
	}
	ds := deaths(t, dl)
	if len(ds) != 1 || ds[0]["reason"] != engine.ReasonConsumerCrash {
		t.Fatalf("x-death %v", ds)
	}
	if dl.Headers["x-first-death-reason"] != engine.ReasonConsumerCrash {
		t.Fatalf("x-first-death-reason %v", dl.Headers["x-first-death-reason"])
	}
	if info, _ := b.eng.GetQueue("work"); info.Visible+info.InFlight != 0 {
		t.Fatalf("message still in work: %+v", info)
	}
}

func TestCrashLoopWindowAndVerdictsAreSeparate(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-delivery-limit": int64(50)})
	publish(t, ch, "", "work", "slow crasher")
	// Three crashes, but never three within 60 s.
	for i := 0; i < 3; i++ {
		crashOnce(t, b, "work")
		b.advance(31*time.Second, 1)
	}
	// Ordinary failures (nack with requeue) are not crashes.
	for i := 0; i < 3; i++ {
		d := getOne(t, ch, "work")
		must(t, d.Nack(false, true))
	}
	roundTrip(t, ch)
	if info, _ := b.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("quarantined: %+v", info)
	}
	if info, _ := b.eng.GetQueue("work"); info.Visible != 1 {
		t.Fatalf("work %+v", info)
	}
}

func TestCrashLoopSurvivesRestart(t *testing.T) {
	b := startBroker(t, withFakeClock())
	c, ch := b.channel()
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-delivery-limit": int64(50)})
	publish(t, ch, "", "work", "m")
	c.Close()
	crashOnce(t, b, "work")
	crashOnce(t, b, "work")
	b.restart()
	crashOnce(t, b, "work")
	_, ch = b.channel()
	dl := getOne(t, ch, "dlq")
	if ds := deaths(t, dl); ds[0]["reason"] != engine.ReasonConsumerCrash {
		t.Fatalf("x-death %v", ds)
	}
}

func TestCrashLoopCanBeTurnedOff(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-delivery-limit": int64(50), "x-sluice-crash-limit": int64(0)})
	publish(t, ch, "", "work", "m")
	for i := 0; i < 4; i++ {
		crashOnce(t, b, "work")
	}
	if info, _ := b.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatal("quarantined with x-sluice-crash-limit 0")
	}
}

// TestDefaultDeliveryLimitWithDLX: a queue naming a DLX without
// x-delivery-limit dead-letters on the failure that ends the fifth
// delivery (DLQ-02).
func TestDefaultDeliveryLimitWithDLX(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declareWorkWithDLQ(t, ch, nil)
	publish(t, ch, "", "work", "poison")
	for i := 1; i <= 5; i++ {
		d := getOne(t, ch, "work")
		must(t, d.Nack(false, true))
	}
	dl := getOne(t, ch, "dlq")
	if ds := deaths(t, dl); ds[0]["reason"] != "delivery_limit" {
		t.Fatalf("x-death %v", ds)
	}
}

func TestRequeuePolicy(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	order := func(policy string) []string {
		t.Helper()
		q := "rq-" + policy
		args := amqp091.Table{}
		if policy != "" {
			args["x-sluice-requeue"] = policy
		}
		_, err := ch.QueueDeclare(q, true, false, false, false, args)
		must(t, err)
		publish(t, ch, "", q, "A")
		publish(t, ch, "", q, "B")
		must(t, getOne(t, ch, q).Nack(false, true))
		var got []string
		for i := 0; i < 2; i++ {
			d := getOne(t, ch, q)
			got = append(got, string(d.Body))
			must(t, d.Ack(false))
		}
		return got
	}
	if got := order(""); got[0] != "A" || got[1] != "B" {
		t.Fatalf("default (head): %v", got)
	}
	if got := order("head"); got[0] != "A" {
		t.Fatalf("head: %v", got)
	}
	if got := order("tail"); got[0] != "B" || got[1] != "A" {
		t.Fatalf("tail: %v", got)
	}

	// delayed: the nacked message waits out the retry backoff (full
	// jitter, at most 1 s after the first delivery by default).
	_, err := ch.QueueDeclare("rq-delayed", true, false, false, false, amqp091.Table{"x-sluice-requeue": "delayed"})
	must(t, err)
	publish(t, ch, "", "rq-delayed", "A")
	must(t, getOne(t, ch, "rq-delayed").Nack(false, true))
	roundTrip(t, ch)
	info, _ := b.eng.GetQueue("rq-delayed")
	if info.Visible+info.Delayed != 1 {
		t.Fatalf("after nack: %+v", info)
	}
	b.advance(2*time.Second, 1)
	d := getOne(t, ch, "rq-delayed")
	if !d.Redelivered {
		t.Fatal("not marked redelivered")
	}
	must(t, d.Ack(false))

	_, err = ch.QueueDeclare("rq-bad", true, false, false, false, amqp091.Table{"x-sluice-requeue": "sideways"})
	if e := amqpErr(t, err); e.Code != amqp091.PreconditionFailed {
		t.Fatalf("bad policy: %v", err)
	}
}

// TestRequeueDelayedBackoffFromPolicy: with RequeueDelayed the queue's
// RetryPolicy (set over SQS as SluiceRetryPolicy) decides the wait.
func TestRequeueDelayedBackoffFromPolicy(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	_, err := ch.QueueDeclare("slow", true, false, false, false, amqp091.Table{"x-sluice-requeue": "delayed"})
	must(t, err)
	must(t, b.eng.UpdateQueue("slow", func(c *engine.QueueConfig) error {
		c.Retry = &engine.RetryPolicy{Strategy: engine.RetryFixed, Base: time.Minute, Cap: time.Minute}
		return nil
	}))
	publish(t, ch, "", "slow", "A")
	must(t, getOne(t, ch, "slow").Nack(false, true))
	roundTrip(t, ch) // the nack has taken effect before the clock moves
	b.advance(50*time.Second, 1)
	if _, ok, _ := ch.Get("slow", false); ok {
		t.Fatal("delivered before the fixed one-minute backoff")
	}
	b.advance(15*time.Second, 1)
	must(t, getOne(t, ch, "slow").Ack(false))
}

func TestRejectWithoutDLXCountsDrop(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("plain", true, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "plain", "a")
	publish(t, ch, "", "plain", "b")
	must(t, getOne(t, ch, "plain").Reject(false))
	must(t, getOne(t, ch, "plain").Nack(false, false))
	roundTrip(t, ch)
	info, err := b.eng.GetQueue("plain")
	must(t, err)
	if info.Dropped != 2 || info.Deleted != 0 || info.Visible != 0 {
		t.Fatalf("dropped %d deleted %d visible %d", info.Dropped, info.Deleted, info.Visible)
	}
}

func TestConsumerTimeoutPerQueueAndExtension(t *testing.T) {
	b := startBroker(t, withFakeClock())
	c, ch := b.channel()
	_, err := ch.QueueDeclare("t", true, false, false, false, amqp091.Table{"x-consumer-timeout": int64(5000)})
	must(t, err)
	publish(t, ch, "", "t", "slow work")
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ds, err := ch.Consume("t", "", false, false, false, false, amqp091.Table{optFailureHeaders: true})
	must(t, err)
	d := recv(t, ds)
	handle, _ := d.Headers[headerReceipt].(string)
	if handle == "" {
		t.Fatalf("no %s header: %v", headerReceipt, d.Headers)
	}
	// An explicit extension: the lease is pushed to 3 minutes from now,
	// so the consumer timeout ends a minute before that.
	errs, err := b.eng.ChangeVisibility("t", []engine.VisibilityChange{{ReceiptHandle: handle, Timeout: 3 * time.Minute}})
	must(t, err)
	must(t, errs[0])
	b.advance(6*time.Second, 2) // the scheduler and the consumer's wait
	checkTimeoutsNow(b)         // what the keepalive tick does, run now
	// A round trip behind any close the check queued on the channel.
	if _, err := inspect(ch, "t"); err != nil {
		t.Fatalf("channel closed despite the extension: %v", err)
	}
	b.advance(2*time.Minute, 2)
	checkTimeoutsNow(b)
	var got *amqp091.Error
	poll.CheckFor(t, 5*time.Second, poll.True("the consumer timeout", func() bool {
		select {
		case got = <-chClosed:
			return true
		default:
			return false
		}
	}))
	if got == nil || got.Code != amqp091.PreconditionFailed {
		t.Fatalf("close %v", got)
	}
	select {
	case e := <-closed:
		t.Fatalf("connection closed: %v", e)
	default:
	}

	_, ch2 := b.channel()
	_, err = ch2.QueueDeclare("t-bad", true, false, false, false, amqp091.Table{"x-consumer-timeout": int64(10)})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
		t.Fatalf("x-consumer-timeout 10ms: %v", err)
	}
}

// TestDeadLetterRespectsFullDLQ: a DLQ declared with x-max-length and
// x-overflow reject-publish takes dead letters only while it has room;
// the rest are dropped and counted, never inserted past the limit
// (DLQ-97).
func TestDeadLetterRespectsFullDLQ(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	must(t, ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare("dlq", true, false, false, false, amqp091.Table{"x-max-length": int64(2), "x-overflow": "reject-publish"})
	must(t, err)
	must(t, ch.QueueBind("dlq", "", "dlx", false, nil))
	_, err = ch.QueueDeclare("work", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"})
	must(t, err)
	for i := 0; i < 3; i++ {
		publish(t, ch, "", "work", fmt.Sprint(i))
		must(t, getOne(t, ch, "work").Reject(false))
		roundTrip(t, ch)
	}
	if i, _ := inspect(ch, "dlq"); i.Messages != 2 {
		t.Fatalf("dlq holds %d", i.Messages)
	}
	if info, _ := b.eng.GetQueue("work"); info.Dropped != 1 {
		t.Fatalf("work %+v", info)
	}
}

// TestPausedQueueHoldsAMQPConsumers: a consumer of a paused queue gets
// nothing and basic.get answers get-empty while the message stays ready;
// resuming delivers it to the waiting consumer (DLQ-41).
func TestPausedQueueHoldsAMQPConsumers(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	_, err := ch.QueueDeclare("p", true, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "p", "held")
	roundTrip(t, ch)
	must(t, b.eng.SetPaused("p", true))
	if _, ok, err := ch.Get("p", false); err != nil || ok {
		t.Fatalf("get on a paused queue: %v %v", ok, err)
	}
	ds, err := ch.Consume("p", "", false, false, false, false, nil)
	must(t, err)
	// The consumer has looked and waits in the engine: its long poll is
	// parked on the clock beside the scheduler's timer (the held message's
	// retention). A consumer that had taken the message took it before
	// parking: it would be leased, not ready, below.
	poll.Parked(t, b.fake, 2)
	select {
	case d := <-ds:
		t.Fatalf("a paused queue delivered %q", d.Body)
	default:
	}
	if q, _ := inspect(ch, "p"); q.Messages != 1 {
		t.Fatalf("ready %d", q.Messages)
	}
	must(t, b.eng.SetPaused("p", false))
	if d := recv(t, ds); string(d.Body) != "held" {
		t.Fatalf("got %q", d.Body)
	}
}

// FuzzSluiceQueueArgs: x-consumer-timeout, x-sluice-requeue and the
// crash-loop arguments, with any value type: no panic; a refusal is a 406;
// accepted settings give an engine configuration the engine accepts.
func FuzzSluiceQueueArgs(f *testing.F) {
	eng := startBroker(f).eng
	f.Add(int64(5000), "tail", int64(3), int64(60000), true)
	f.Add(int64(10), "sideways", int64(-1), int64(0), false)
	f.Add(int64(1<<62), "delayed", int64(1001), int64(1<<40), true)
	n := 0
	f.Fuzz(func(t *testing.T, timeout int64, requeue string, limit, window int64, asString bool) {
		args := wire.Table{{Key: "x-consumer-timeout", Value: timeout}, {Key: "x-sluice-requeue", Value: requeue},
			{Key: "x-sluice-crash-limit", Value: limit}, {Key: "x-sluice-crash-window", Value: window}}
		if asString {
			args[0].Value = requeue
		}
		st, aerr := parseQueueArgs("/", "fz", args)
		if aerr != nil {
			if aerr.code != wire.PreconditionFailed {
				t.Fatalf("refusal %v", aerr)
			}
			return
		}
		// One queue at a time: the fuzzer runs far more inputs than the
		// engine's queue cap, and the cap is not what this target checks.
		n++
		name := fmt.Sprintf("fz-%d", n)
		if _, _, err := eng.CreateQueue(name, engineConfig(st, DefaultConsumerTimeout), nil); err != nil {
			t.Fatalf("accepted %v but the engine refuses: %v", args, err)
		}
		if err := eng.DeleteQueue(name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	})
}

// TestRetryBudgetOverAMQP: x-sluice-retry-budget 20: of 60 nacked first
// deliveries, 12 are ready again at once and 48 are delayed (DLQ-40).
func TestRetryBudgetOverAMQP(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	_, err := ch.QueueDeclare("rb", true, false, false, false, amqp091.Table{"x-sluice-retry-budget": int64(20)})
	must(t, err)
	for i := 0; i < 60; i++ {
		publish(t, ch, "", "rb", "m")
	}
	roundTrip(t, ch)
	var last amqp091.Delivery
	for i := 0; i < 60; i++ {
		last = getOne(t, ch, "rb")
	}
	must(t, last.Nack(true, true)) // every delivery up to the last
	roundTrip(t, ch)
	info, _ := b.eng.GetQueue("rb")
	if info.Visible != 12 || info.Delayed != 48 {
		t.Fatalf("visible %d delayed %d, want 12 and 48", info.Visible, info.Delayed)
	}
}

// TestCrashLoopSparesPrefetchedMessages: a consumer with prefetch that
// crashes on its first delivery three times quarantines that message
// only; the messages waiting behind it in its prefetch buffer are not
// crashes and stay in the queue (DLQ-110).
func TestCrashLoopSparesPrefetchedMessages(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-delivery-limit": int64(50)})
	for _, body := range []string{"poison", "innocent-1", "innocent-2"} {
		publish(t, ch, "", "work", body)
	}
	roundTrip(t, ch)
	for i := 0; i < 3; i++ {
		c, err := amqp091.Dial(b.url)
		must(t, err)
		cch, err := c.Channel()
		must(t, err)
		must(t, cch.Qos(10, 0, false))
		ds, err := cch.Consume("work", "", false, false, false, false, nil)
		must(t, err)
		for j := 0; j < 3; j++ {
			recv(t, ds)
		}
		must(t, c.Close())
		poll.CheckFor(t, 5*time.Second, poll.True("the deliveries to return", func() bool {
			info, _ := b.eng.GetQueue("work")
			return info.InFlight == 0
		}))
	}
	dl := getOne(t, ch, "dlq")
	if string(dl.Body) != "poison" {
		t.Fatalf("quarantined %q", dl.Body)
	}
	if info, _ := b.eng.GetQueue("work"); info.Visible != 2 {
		t.Fatalf("work %+v", info)
	}
	if info, _ := b.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("more than the poison quarantined: %+v", info)
	}
}

// TestUnknownFailurePolicy: with x-sluice-unknown-failure deadletter a
// plain nack(requeue=true) is terminal: dead-lettered at once (reason
// rejected); the default retries (DLQ-20).
func TestUnknownFailurePolicy(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declareWorkWithDLQ(t, ch, amqp091.Table{"x-sluice-unknown-failure": "deadletter"})
	publish(t, ch, "", "work", "unclassified")
	must(t, getOne(t, ch, "work").Nack(false, true))
	dl := getOne(t, ch, "dlq")
	if ds := deaths(t, dl); ds[0]["reason"] != "rejected" {
		t.Fatalf("x-death %v", ds)
	}
	_, err := ch.QueueDeclare("bad-unknown", true, false, false, false, amqp091.Table{"x-sluice-unknown-failure": "maybe"})
	if e := amqpErr(t, err); e.Code != amqp091.PreconditionFailed {
		t.Fatalf("bad value: %v", err)
	}
}
