package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/test/crash"
)

// TestShardsRouteMoveTasks: a redrive of a dead-letter queue that lives
// on a shard other than 0, started through one node, is found through
// every node by its id (GET /sluice/v1/tasks/{id}, what `sluice dlq
// redrive --wait` polls), by its source (?source=), and in the list of
// every task; and it can be cancelled through any node.
func TestShardsRouteMoveTasks(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := shardClient(nodes[0])
	dlqName := "parked"
	for i := 0; hashShard(dlqName, 3) == 0; i++ {
		dlqName = fmt.Sprintf("parked-%d", i)
	}
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlqName)})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs"), Attributes: map[string]string{
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, attrs.Attributes["QueueArn"]),
		"VisibilityTimeout": "0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Many messages in the DLQ and a slow rate: the task is still
	// running when it is cancelled below.
	for i := range 30 {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: src.QueueUrl, MaxNumberOfMessages: 10}); err != nil {
			return err
		}
		a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
		if err != nil {
			return err
		}
		if got := a.Attributes["ApproximateNumberOfMessages"]; got != "30" {
			return fmt.Errorf("%s holds %s messages, want 30", dlqName, got)
		}
		return nil
	})
	if k, ok := nodes[0].findQueue(dlqName); !ok || k == 0 {
		t.Fatalf("%s is on shard %d (found %v): the test needs it off shard 0", dlqName, k, ok)
	}

	var started api.Task
	if err := postJSON(ctx, "http://"+nodes[1].HTTPAddr()+"/sluice/v1/queues/"+dlqName+"/redrive", api.RedriveRequest{Rate: 1}, http.StatusAccepted, &started); err != nil {
		t.Fatalf("start a redrive through node 2: %v", err)
	}
	for _, n := range nodes {
		var tk api.Task
		if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+n.HTTPAddr()+"/sluice/v1/tasks/"+started.ID, &tk); err != nil || tk.ID != started.ID || tk.Source != dlqName {
			t.Fatalf("the task through node %d: %+v, %v", n.opts.Cluster.NodeID, tk, err)
		}
		for _, path := range []string{"/sluice/v1/tasks?source=" + dlqName, "/sluice/v1/tasks"} {
			var l api.TaskList
			if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+n.HTTPAddr()+path, &l); err != nil || len(l.Tasks) != 1 || l.Tasks[0].ID != started.ID {
				t.Fatalf("GET %s through node %d: %+v, %v", path, n.opts.Cluster.NodeID, l, err)
			}
		}
	}
	var cancelled api.Task
	if err := postJSON(ctx, "http://"+nodes[2].HTTPAddr()+"/sluice/v1/tasks/"+started.ID+"/cancel", nil, http.StatusOK, &cancelled); err != nil || cancelled.ID != started.ID {
		t.Fatalf("cancel through node 3: %+v, %v", cancelled, err)
	}
	// An unknown id is answered 404 (by shard 0) through any node.
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+nodes[0].HTTPAddr()+"/sluice/v1/tasks/0123456789abcdef", &api.Task{}); err == nil {
		t.Fatal("an unknown task was found")
	}
}

// postJSON POSTs body (nil: none) as JSON to url and decodes the answer,
// which must have status want, into v.
func postJSON(ctx context.Context, url string, body any, want int, v any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != want {
		var eb bytes.Buffer
		_, _ = eb.ReadFrom(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, eb.String())
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
