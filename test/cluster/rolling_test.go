package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
)

// TestRollingRestart runs the rolling restart of docs/operations.md
// ("A cluster, one node at a time") on three real processes while
// producers send through every node that is up: before each node stops,
// `sluice cluster check-stop <id> --wait` (asked through another node)
// must say it is safe, which after the first restart means waiting until
// the node restarted before has caught up; the node is stopped with
// SIGTERM (it hands its leaderships over) and started again on its data
// directory. Every node is restarted once, the leader among them. Sends
// keep being acknowledged while each node is down, and at the end every
// acknowledged message is received once at least, and none that was not
// sent.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	awaitLeader(t, ctx, nodes, 0)
	const name = "rolling-orders"
	if _, err := nodes[0].sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"VisibilityTimeout": "5"}}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		tried   = map[string]bool{} // every body sent, acknowledged or not
		failed  int
		lastErr error
		down    atomic.Uint64 // the node being restarted, 0 for none
		ackedN  atomic.Int64
		stop    = make(chan struct{})
		senders sync.WaitGroup
	)
	// A node restarted comes back on new public ports, so a sender asks
	// for its client and the queue's URL on it afresh.
	var nodesMu sync.Mutex
	type target struct {
		c   *sqs.Client
		url string
	}
	targets := map[string]target{} // by a process's address: a restart makes a new one
	endpoint := func(i int) (*sqs.Client, string, error) {
		nodesMu.Lock()
		n := nodes[i]
		addr := n.srv.Addr // its current address: restart replaces n.srv under nodesMu
		tg, ok := targets[addr]
		c := n.sqs()
		nodesMu.Unlock()
		if n.id == down.Load() {
			return nil, "", fmt.Errorf("node %d is down", n.id)
		}
		if ok {
			return tg.c, tg.url, nil
		}
		// Bounded, as the send is: a node stopped after the check above
		// refuses connections, and the SDK would retry for minutes (its
		// 20 attempts with up to 20 s between them) against the address it
		// had, which a restart does not bring back; a first version without
		// this bound held a sender, and the test, for the whole 3 minutes.
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		out, err := c.GetQueueUrl(gctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return nil, "", fmt.Errorf("node %d: GetQueueUrl: %w", n.id, err)
		}
		nodesMu.Lock()
		targets[addr] = target{c, *out.QueueUrl}
		nodesMu.Unlock()
		return c, *out.QueueUrl, nil
	}
	for p := range 2 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				c, url, err := endpoint((p + k) % len(nodes))
				if err != nil {
					continue
				}
				body := "p" + strconv.Itoa(p) + "-" + strconv.Itoa(k)
				mu.Lock()
				tried[body] = true
				mu.Unlock()
				// Bounded: a send in flight to the node being stopped is
				// retried by the SDK against an address that is gone
				// (the node comes back on other ports).
				sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = c.SendMessage(sctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
				scancel()
				if err != nil {
					mu.Lock()
					failed++
					lastErr = err
					mu.Unlock()
					continue
				}
				mu.Lock()
				acked[body] = true
				mu.Unlock()
				ackedN.Add(1)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		senders.Wait()
	}()

	checkStop := func(via *node, id uint64) (int, string) {
		var out bytes.Buffer
		code := cli.Cluster(ctx, []string{"check-stop", "--endpoint", via.srv.URL(), "--wait", "60s", strconv.FormatUint(id, 10)},
			&cli.Env{Stdout: &out, Stderr: &out})
		return code, out.String()
	}
	for i, n := range nodes {
		via := nodes[(i+1)%len(nodes)]
		code, out := checkStop(via, n.id)
		if code != cli.ExitOK {
			t.Fatalf("check-stop %d through node %d: exit %d:\n%s", n.id, via.id, code, out)
		}
		t.Logf("check-stop %d: %s", n.id, out)
		before := ackedN.Load()
		down.Store(n.id)
		if err := n.srv.Stop(30 * time.Second); err != nil {
			t.Fatalf("stopping node %d: %v", n.id, err)
		}
		// Writable through the two others while it is down.
		poll.CheckFor(t, 30*time.Second, poll.True(fmt.Sprintf("sends acknowledged with node %d down", n.id), func() bool {
			return ackedN.Load() >= before+20
		}))
		nodesMu.Lock()
		n.restart(t, ctx)
		nodesMu.Unlock()
		down.Store(0)
	}
	// The last node restarted back in sync: any node may be stopped again.
	for _, n := range nodes {
		if code, out := checkStop(nodes[0], n.id); code != cli.ExitOK {
			t.Errorf("check-stop %d after the restarts: exit %d:\n%s", n.id, code, out)
		}
	}
	close(stop)
	senders.Wait()
	mu.Lock()
	t.Logf("%d sends acknowledged, %d failed after the SDK's retries (last: %v)", len(acked), failed, lastErr)
	mu.Unlock()

	// Every acknowledged message comes back; nothing else does.
	seen := map[string]bool{}
	poll.CheckFor(t, 60*time.Second, func() error {
		c, url, err := endpoint(1)
		if err != nil {
			return err
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		for _, m := range out.Messages {
			if !tried[*m.Body] { // an unacknowledged send may have been stored: at least once
				t.Errorf("received %q, which was never sent", *m.Body)
			}
			seen[*m.Body] = true
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
		if missing := len(acked) - countIn(acked, seen); missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not received yet", missing, len(acked))
		}
		return nil
	})
}
