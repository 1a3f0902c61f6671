package cluster

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestDeposedLeaderDeliversNothing: a leader cut off from the others (its
// Raft links severed both ways; clients still reach its own listener)
// goes on believing it leads until CheckQuorum makes it step down, up to
// two election timeouts, while the others elect a new leader after about
// one. A message the new leader has received and deleted must not be
// delivered by the old one in between. Before the leadership lease
// (raftstore lease.go, store.Leaser) it was, in five runs of five.
func TestDeposedLeaderDeliversNothing(t *testing.T) {
	// 50 ms ticks: an election timeout of 500 ms leaves the window wide.
	nodes, links := threeLinkedNodes(t, 50*time.Millisecond)
	leader := awaitLeader(t, nodes)
	client := func(n *Node) *sqs.Client { return directSQS(n, 3*time.Second) }
	ctx := context.Background()
	lc := client(leader)
	q, err := lc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("stale")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("M")}); err != nil {
		t.Fatal(err)
	}
	li := int(leader.opts.Cluster.NodeID - 1)
	var other *Node
	for i, n := range nodes {
		if i != li {
			other = n
		}
	}
	oc := client(other)
	start := time.Now()
	isolate(&links, li)
	// Receive and delete M through the new leader as soon as there is
	// one (a follower forwards to the leader it knows).
	oldID := leader.opts.Cluster.NodeID
	for {
		if st := other.raft.Status(); st.Leader != 0 && st.Leader != oldID {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("no new leader")
		}
		time.Sleep(2 * time.Millisecond)
	}
	elected := time.Since(start)
	for {
		out, err := oc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 1})
		if err == nil && len(out.Messages) == 1 {
			if _, err := oc.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Logf("delete: %v", err)
				continue
			}
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("no new leader")
		}
	}
	deleted := time.Since(start)
	// Now receive on the deposed leader, directly.
	out, err := lc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 1})
	st := leader.raft.Status()
	t.Logf("new leader known %v after the cut, M deleted through it at %v; the old leader (now %s in term %d) answered %v",
		elected, deleted, st.Role, st.Term, err)
	if err == nil && len(out.Messages) > 0 {
		t.Fatalf("the deposed leader delivered %q after the new leader deleted it", aws.ToString(out.Messages[0].Body))
	}
}

// awaitLeader waits until one of nodes says it leads and returns it.
func awaitLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	poll.CheckFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			if st := n.raft.Status(); st.Role == "leader" {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("no leader")
	})
	return leader
}

// directSQS is an SQS client of n's own listener that never retries, so
// every answer is the one n gave, each request bounded by timeout.
func directSQS(n *Node, timeout time.Duration) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
		HTTPClient:  &http.Client{Timeout: timeout},
		Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
}
