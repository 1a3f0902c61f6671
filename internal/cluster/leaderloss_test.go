package cluster

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

// TestLeaderLossAnswersServiceUnavailable: a send in flight on a leader
// that loses its leadership before the send commits (its Raft links cut,
// CheckQuorum makes it step down) is answered 503 ServiceUnavailable,
// which the SDKs retry through the new leader, not 500 InternalFailure,
// which says the broker is broken (it was, in every run before the
// engine told a lost leadership from a failed disk).
func TestLeaderLossAnswersServiceUnavailable(t *testing.T) {
	nodes, links := threeLinkedNodes(t, 50*time.Millisecond)
	leader := awaitLeader(t, nodes)
	lc := directSQS(leader, 20*time.Second)
	ctx := context.Background()
	q, err := lc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("moved")})
	if err != nil {
		t.Fatal(err)
	}
	isolate(&links, int(leader.opts.Cluster.NodeID-1))
	_, err = lc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("in flight")})
	var api smithy.APIError
	var resp *awshttp.ResponseError
	if !errors.As(err, &api) || !errors.As(err, &resp) {
		t.Fatalf("send on a leader cut off from the others: %v, want a 503 ServiceUnavailable answer", err)
	}
	if api.ErrorCode() != "ServiceUnavailable" || resp.HTTPStatusCode() != http.StatusServiceUnavailable {
		t.Fatalf("send on a leader cut off from the others: %d %s (%v), want 503 ServiceUnavailable", resp.HTTPStatusCode(), api.ErrorCode(), err)
	}
	t.Logf("answered %d %s: %s", resp.HTTPStatusCode(), api.ErrorCode(), api.ErrorMessage())
}
