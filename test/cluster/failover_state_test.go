package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestStateSurvivesFailover: everything the single node promises about a
// message's history survives the leader's SIGKILL, because it is
// replicated state, not the dead leader's memory (issue #14): receive
// counts, the failure context consumers reported, a retry backoff in
// progress, a FIFO deduplication window and a move task half done. The
// clients talk to one follower throughout, which forwards to whichever
// node leads.
func TestStateSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	leader := awaitLeader(t, ctx, nodes, 0)
	victim, survivors := splitLeader(nodes, leader)
	via := survivors[0]
	c := via.sqs()
	t.Logf("leader: node %d; clients through node %d", leader, via.id)

	// Receive counts and failure context: received twice, each time
	// with a failure report, before the failover.
	dlqURL, dlqARN := createQueue(t, ctx, c, "fs-dlq", nil)
	workURL, _ := createQueue(t, ctx, c, "fs-work", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, dlqARN)})
	send(t, ctx, c, workURL, "poison")
	for i, class := range []string{"ClassA", "ClassB"} {
		m := receiveOne(t, ctx, c, workURL, 30)
		if got := m.Attributes["ApproximateReceiveCount"]; got != strconv.Itoa(i+1) {
			t.Fatalf("receive %d: ApproximateReceiveCount %s", i+1, got)
		}
		reportFailure(t, ctx, via, workURL, *m.ReceiptHandle, class)
	}

	// A retry backoff in progress: a fixed 20 s wait after a 1 s lease.
	retryURL, _ := createQueue(t, ctx, c, "fs-retry", map[string]string{
		"SluiceRetryPolicy": `{"strategy":"fixed","baseSeconds":20,"capSeconds":20}`})
	send(t, ctx, c, retryURL, "retried")
	receiveOne(t, ctx, c, retryURL, 1)
	var backoffFrom time.Time
	poll.CheckFor(t, 30*time.Second, func() error {
		a := queueCounts(t, ctx, c, retryURL)
		if a["ApproximateNumberOfMessagesDelayed"] != "1" || a["ApproximateNumberOfMessagesNotVisible"] != "0" {
			return fmt.Errorf("not in its backoff yet: %v", a)
		}
		backoffFrom = time.Now()
		return nil
	})

	// A FIFO deduplication window.
	fifoURL, _ := createQueue(t, ctx, c, "fs-orders.fifo", map[string]string{"FifoQueue": "true"})
	first, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fifoURL), MessageBody: aws.String("first"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d-1")})
	if err != nil {
		t.Fatal(err)
	}

	// A move task half done: 20 messages at 2 per second.
	movesDLQURL, movesDLQARN := createQueue(t, ctx, c, "fs-moves-dlq", nil)
	movesURL, movesARN := createQueue(t, ctx, c, "fs-moves", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":5}`, movesDLQARN)})
	const moved = 20
	for i := range moved {
		send(t, ctx, c, movesDLQURL, fmt.Sprintf("move-%d", i))
	}
	task, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(movesDLQARN),
		DestinationArn: aws.String(movesARN), MaxNumberOfMessagesPerSecond: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 30*time.Second, func() error {
		if n := queueCounts(t, ctx, c, movesURL)["ApproximateNumberOfMessages"]; n == "0" || n == "" {
			return fmt.Errorf("nothing moved yet")
		}
		return nil
	})

	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed node %d; new leader: node %d", victim.id, awaitLeader(t, ctx, survivors, victim.id))

	// The backoff still holds (if this machine got here well within it).
	if time.Since(backoffFrom) < 12*time.Second {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(retryURL), MaxNumberOfMessages: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) != 0 {
			t.Fatalf("received %.1f s into a 20 s backoff: the failover forgot it", time.Since(backoffFrom).Seconds())
		}
	} else {
		t.Logf("the failover took until %.1f s into the backoff: its early end is not checked", time.Since(backoffFrom).Seconds())
	}

	// The receive count goes on from 2; at 3 the message is
	// dead-lettered with the failure reported before the failover.
	m := receiveOne(t, ctx, c, workURL, 30)
	if got := m.Attributes["ApproximateReceiveCount"]; got != "3" {
		t.Fatalf("after the failover: ApproximateReceiveCount %s, want 3", got)
	}
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(workURL),
		ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(workURL), WaitTimeSeconds: 1}); err != nil || len(out.Messages) != 0 {
		t.Fatalf("a fourth receive: %v %v", out, err)
	}
	dead, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL), WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{"Sluice*"}})
	if err != nil || len(dead.Messages) != 1 {
		t.Fatalf("dead letter: %v %v", dead, err)
	}
	da := dead.Messages[0].Attributes
	if *dead.Messages[0].Body != "poison" || da["SluiceDeadLetterReason"] != "max_receives" || da["SluiceAttempts"] != "3" || da["SluiceErrorClass"] != "ClassB" {
		t.Fatalf("dead letter %q: %v", *dead.Messages[0].Body, da)
	}

	// The deduplication window: the same id answers with the first send.
	again, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fifoURL), MessageBody: aws.String("second"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d-1")})
	if err != nil {
		t.Fatal(err)
	}
	if *again.MessageId != *first.MessageId || *again.SequenceNumber != *first.SequenceNumber {
		t.Fatalf("a duplicate after the failover: %s/%s, first %s/%s", *again.MessageId, *again.SequenceNumber, *first.MessageId, *first.SequenceNumber)
	}
	fm := receiveOne(t, ctx, c, fifoURL, 30)
	if *fm.Body != "first" {
		t.Fatalf("FIFO queue holds %q", *fm.Body)
	}
	if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(fifoURL), WaitTimeSeconds: 1}); err != nil || len(out.Messages) != 0 {
		t.Fatalf("a second FIFO message: %v %v", out, err)
	}

	// The move task finishes on the new leader, every message moved once.
	poll.CheckFor(t, 90*time.Second, func() error {
		out, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(movesDLQARN)})
		if err != nil {
			return err
		}
		if len(out.Results) == 0 {
			return fmt.Errorf("no task listed (started %s)", *task.TaskHandle)
		}
		if s := aws.ToString(out.Results[0].Status); s != "COMPLETED" {
			return fmt.Errorf("task %s, %d moved", s, out.Results[0].ApproximateNumberOfMessagesMoved)
		}
		return nil
	})
	got := map[string]int{}
	for len(got) < moved {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(movesURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			t.Fatalf("moved: %d of %d: %v", len(got), moved, got)
		}
		for _, m := range out.Messages {
			got[*m.Body]++
			if got[*m.Body] > 1 {
				t.Fatalf("%s moved twice", *m.Body)
			}
		}
	}
	if n := queueCounts(t, ctx, c, movesDLQURL)["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("%s messages left in the move task's source", n)
	}

	// The backoff ends at its time, and the count goes on.
	poll.CheckFor(t, 60*time.Second, func() error {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(retryURL), WaitTimeSeconds: 2,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			return err
		}
		if len(out.Messages) == 0 {
			return fmt.Errorf("still backing off %.1f s in", time.Since(backoffFrom).Seconds())
		}
		if rc := out.Messages[0].Attributes["ApproximateReceiveCount"]; rc != "2" {
			t.Fatalf("after the backoff: ApproximateReceiveCount %s", rc)
		}
		return nil
	})
	if d := time.Since(backoffFrom); d < 18*time.Second {
		t.Fatalf("delivered %.1f s into a 20 s backoff", d.Seconds())
	}
}

func createQueue(t *testing.T, ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (url, arn string) {
	t.Helper()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	return *out.QueueUrl, a.Attributes["QueueArn"]
}

func send(t *testing.T, ctx context.Context, c *sqs.Client, url, body string) {
	t.Helper()
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
		t.Fatalf("send %s: %v", body, err)
	}
}

// receiveOne receives one message with its receive count, leased for
// visibility seconds.
func receiveOne(t *testing.T, ctx context.Context, c *sqs.Client, url string, visibility int32) types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10,
		VisibilityTimeout:           visibility,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("receive from %s: %d messages", url, len(out.Messages))
	}
	return out.Messages[0]
}

func queueCounts(t *testing.T, ctx context.Context, c *sqs.Client, url string) map[string]string {
	t.Helper()
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	return a.Attributes
}

// reportFailure reports a failed delivery through the failure-report
// extension (POST /sluice/v1/failures), not terminal, to be retried at
// once: it ends the lease.
func reportFailure(t *testing.T, ctx context.Context, n *node, queueURL, receipt, class string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"queueUrl": queueURL, "receiptHandle": receipt,
		"errorClass": class, "errorMessage": "failed with " + class, "consumerId": "worker-1", "retryAfterSeconds": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.srv.URL()+"/sluice/v1/failures", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("failure report: %s %s", resp.Status, b.String())
	}
}

// TestAMQPStateSurvivesFailover: an AMQP message's delivery count and its
// dead-lettering limit survive a kill -9 of the leader. Twice fetched and
// nacked with requeue through a follower (then one confirmed publish, the
// synced write that makes them durable), it comes back after the failover
// as the third delivery (x-delivery-count 2, redelivered), and the next
// nack passes x-delivery-limit 2 and dead-letters it with an x-death
// naming the reason delivery_limit.
func TestAMQPStateSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	leader := awaitLeader(t, ctx, nodes, 0)
	victim, followers := splitLeader(nodes, leader)
	_, ch := amqpChannel(t, followers[0])
	if err := ch.ExchangeDeclare("fs.dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("fs.dead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("fs.dead", "", "fs.dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("fs.work", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "fs.dlx", "x-delivery-limit": int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ctx, ch, "fs.work", "poison", 1)
	get := func(ch *amqp.Channel, q string) amqp.Delivery {
		t.Helper()
		var d amqp.Delivery
		poll.CheckFor(t, 30*time.Second, func() error {
			var ok bool
			var err error
			d, ok, err = ch.Get(q, false)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return fmt.Errorf("%s is empty", q)
			}
			return nil
		})
		return d
	}
	for i := range 2 {
		d := get(ch, "fs.work")
		if n, _ := d.Headers["x-delivery-count"].(int64); int(n) != i {
			t.Fatalf("delivery %d: x-delivery-count %v", i+1, d.Headers["x-delivery-count"])
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	// A delivery and a nack are not synced on their own (docs/
	// guarantees.md, ReceiveMessage): they become durable with the next
	// synced write, here a confirmed publish on the same channel, which
	// the log orders after them.
	if _, err := ch.QueueDeclare("fs.side", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ctx, ch, "fs.side", "sync", 1)

	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	leader = awaitLeader(t, ctx, followers, victim.id)
	t.Logf("killed node %d; new leader: node %d", victim.id, leader)
	via := followers[0]
	if via.id == leader {
		via = followers[1]
	}
	_, ch = amqpChannel(t, via)
	d := get(ch, "fs.work")
	if n, _ := d.Headers["x-delivery-count"].(int64); n != 2 || !d.Redelivered || string(d.Body) != "poison-0" {
		t.Fatalf("after the failover: %q x-delivery-count %v redelivered %v", d.Body, d.Headers["x-delivery-count"], d.Redelivered)
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	dead := get(ch, "fs.dead")
	deaths, _ := dead.Headers["x-death"].([]any)
	if string(dead.Body) != "poison-0" || len(deaths) != 1 {
		t.Fatalf("dead letter %q: headers %v", dead.Body, dead.Headers)
	}
	death, _ := deaths[0].(amqp.Table)
	if death["reason"] != "delivery_limit" || death["queue"] != "fs.work" {
		t.Fatalf("x-death: %v", death)
	}
	if _, ok, err := ch.Get("fs.work", false); err != nil || ok {
		t.Fatalf("fs.work still holds a message (%v) after its dead-lettering: %v", ok, err)
	}
}
