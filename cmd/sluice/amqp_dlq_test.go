package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func runAt(t *testing.T, s *server.Server, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append(args, "--endpoint", "http://"+s.SQSAddr()), &out, &errb)
	return out.String(), errb.String(), code
}

// jobsWithDLX declares the RabbitMQ poison setup: "jobs" dead-letters
// through the fanout exchange "jobs-dlx" into "jobs-dlq".
const jobsWithDLX = `
[[exchanges]]
name = "jobs-dlx"
type = "fanout"
durable = true

[[amqp_queues]]
name = "jobs"
durable = true
[amqp_queues.arguments]
x-dead-letter-exchange = "jobs-dlx"

[[amqp_queues]]
name = "jobs-dlq"
durable = true

[[bindings]]
source = "jobs-dlx"
destination = "jobs-dlq"
`

// amqpChannel opens a connection to s as guest and a channel on it; both
// close when the test ends.
func amqpChannel(t *testing.T, s *server.Server) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// The RabbitMQ poison walkthrough: a queue with an x-dead-letter-exchange
// whose rejected messages land in a queue bound to that exchange. That
// queue is a dead-letter queue everywhere (dlq list, metrics, overview,
// advisor) and is redriven to its source from the CLI.
func TestAMQPDeadLetterQueueIsADLQ(t *testing.T) {
	s, stop := startConfigured(t, t.TempDir(), "")
	defer stop()
	ch := amqpChannel(t, s)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare("jobs-dlx", "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare("jobs-dlq", true, false, false, false, nil)
	must(err)
	must(ch.QueueBind("jobs-dlq", "", "jobs-dlx", false, nil))
	_, err = ch.QueueDeclare("jobs", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "jobs-dlx"})
	must(err)
	must(ch.Confirm(false))
	for i := range 3 {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "jobs", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf(`{"job":%d}`, i))})
		must(err)
		if ok, err := c.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish %d not confirmed: %v", i, err)
		}
	}
	// The consumer rejects all three: poison.
	dels, err := ch.Consume("jobs", "poison", false, false, false, false, nil)
	must(err)
	for range 3 {
		select {
		case d := <-dels:
			must(d.Nack(false, false))
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}
	must(ch.Cancel("poison", false))

	// dlq list names jobs-dlq with its source.
	poll.CheckFor(t, 10*time.Second, poll.True("jobs-dlq in dlq list with 3 messages", func() bool {
		out, _, code := runAt(t, s, "dlq", "list", "--json")
		var l api.QueueList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false
		}
		return len(l.Queues) == 1 && l.Queues[0].Name == "jobs-dlq" && l.Queues[0].Visible == 3 &&
			strings.Join(l.Queues[0].Sources, ",") == "jobs"
	}))
	base := "http://" + s.SQSAddr()
	if m := getBody(t, base+"/metrics"); !strings.Contains(m, `sluice_queue_is_dlq{queue="jobs-dlq"} 1`) {
		t.Fatal("sluice_queue_is_dlq is not 1 for jobs-dlq")
	}
	var ov struct {
		Queues []struct {
			Name              string `json:"name"`
			IsDeadLetterQueue bool   `json:"isDeadLetterQueue"`
			DeadLetterQueue   string `json:"deadLetterQueue"`
		} `json:"queues"`
	}
	must(json.Unmarshal([]byte(getBody(t, base+"/sluice/v1/dashboard/overview")), &ov))
	for _, q := range ov.Queues {
		if q.Name == "jobs" && q.DeadLetterQueue != "jobs-dlq" || q.Name == "jobs-dlq" && !q.IsDeadLetterQueue {
			t.Fatalf("overview: %+v", ov.Queues)
		}
	}
	var adv struct {
		Findings []struct{ Queue, Check, Verdict, Reason string } `json:"findings"`
	}
	must(json.Unmarshal([]byte(getBody(t, base+"/sluice/v1/advisor")), &adv))
	for _, f := range adv.Findings {
		if f.Queue == "jobs-dlq" && strings.Contains(f.Reason, "no dead-letter queue") {
			t.Fatalf("advisor flags the DLQ: %+v", f)
		}
	}
	out, errs, code := runAt(t, s, "dlq", "peek", "jobs-dlq")
	if code != 0 || strings.Count(out, "jobs") < 3 {
		t.Fatalf("peek: %d %s %s", code, out, errs)
	}

	// Dry run, then the redrive, back into jobs.
	out, errs, code = runAt(t, s, "dlq", "redrive", "jobs-dlq", "--dry-run")
	if code != 0 || !strings.Contains(out, "3") || !strings.Contains(out, "jobs") {
		t.Fatalf("dry run: %d %q %q", code, out, errs)
	}
	out, errs, code = runAt(t, s, "dlq", "redrive", "jobs-dlq", "--rate", "100", "--wait")
	if code != 0 {
		t.Fatalf("redrive: %d %q %q", code, out, errs)
	}
	got := map[string]bool{}
	dels, err = ch.Consume("jobs", "", false, false, false, false, nil)
	must(err)
	for len(got) < 3 {
		select {
		case d := <-dels:
			got[string(d.Body)] = true
			must(d.Ack(false))
		case <-time.After(10 * time.Second):
			t.Fatalf("redriven messages missing: got %v", got)
		}
	}
	if !got[`{"job":0}`] || !got[`{"job":2}`] {
		t.Fatalf("redriven bodies %v", got)
	}
}

// Dead letters that arrive with their own x-death history (moved over
// from RabbitMQ, say) are redriven to the queue their latest x-death entry
// names.
func TestRedriveByXDeath(t *testing.T) {
	s, stop := startConfigured(t, t.TempDir(), jobsWithDLX)
	defer stop()
	ch := amqpChannel(t, s)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	death := amqp091.Table{"count": int64(3), "reason": "rejected", "queue": "jobs", "exchange": "", "routing-keys": []interface{}{"jobs"}}
	c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "jobs-dlq", false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, Body: []byte(`{"job":"from-rabbit"}`),
		Headers: amqp091.Table{"x-death": []interface{}{death}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
	out, errs, code := runAt(t, s, "dlq", "redrive", "jobs-dlq", "--dry-run")
	if code != 0 || !strings.Contains(out, "to jobs: 1") {
		t.Fatalf("dry run: %d %q %q", code, out, errs)
	}
	if out, errs, code := runAt(t, s, "dlq", "redrive", "jobs-dlq", "--wait"); code != 0 {
		t.Fatalf("redrive: %d %q %q", code, out, errs)
	}
	d, ok, err := ch.Get("jobs", true)
	if err != nil || !ok || string(d.Body) != `{"job":"from-rabbit"}` {
		t.Fatalf("jobs after the redrive: %v %v %q", ok, err, d.Body)
	}
}

// The safety stop works for AMQP dead letters: a redrive into a consumer
// that still rejects them pauses itself, and says so.
func TestAMQPRedriveSafetyStop(t *testing.T) {
	s, stop := startConfigured(t, t.TempDir(), jobsWithDLX)
	defer stop()
	ch := amqpChannel(t, s)
	for i := range 10 {
		if err := ch.PublishWithContext(context.Background(), "", "jobs", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("poison %d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer that rejects everything, before and after the "fix".
	dels, err := ch.Consume("jobs", "rejecter", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range dels {
			d.Nack(false, false)
		}
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("10 dead letters", func() bool {
		info, err := s.Engine().GetQueue("jobs-dlq")
		return err == nil && info.Visible == 10
	}))
	out, errs, code := runAt(t, s, "dlq", "redrive", "jobs-dlq", "--rate", "20", "--safety-threshold", "2", "--wait")
	if code != 1 || !strings.Contains(errs, "ended PAUSED") || !strings.Contains(errs, "sluice dlq resume ") {
		t.Fatalf("redrive into a rejecting consumer: exit %d\n%s\n%s", code, out, errs)
	}
}
