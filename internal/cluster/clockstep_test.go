package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/server"
)

// TestLeaderClockStepIsNotFollowed: the leader's wall clock steps 20 s
// forward while a message is in flight with a 15 s visibility timeout;
// the engine's clock does not step with it (clock.Steady under the
// leadership's timeline), so the message is not redelivered early.
func TestLeaderClockStepIsNotFollowed(t *testing.T) {
	clocks := []*clock.Stepping{{}, {}, {}}
	nodes, _ := startThreeWith(t, func(*server.Options) {}, func(i int, o *Options) { o.Clock = clocks[i] }, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := awaitLeader(t, nodes)
	li := int(leader.opts.Cluster.NodeID - 1)
	cli := directSQS(leader, 10*time.Second)
	q, received := oneInFlight(ctx, t, cli, "clock-step", 15)
	clocks[li].Step(20 * time.Second)
	// Two long polls of a second each on the leader: the message in
	// flight must not come back.
	for range 2 {
		out, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) > 0 {
			t.Fatalf("the message in flight was redelivered %v after its 15s receive: the engine followed the leader's clock step of 20s",
				time.Since(received).Round(time.Millisecond))
		}
	}
	if took := time.Since(received); took > 12*time.Second {
		t.Skipf("the check took %v, too close to the 15s visibility timeout to judge", took)
	}
	if _, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("after the step")}); err != nil {
		t.Fatalf("send after the step: %v", err)
	}
}
