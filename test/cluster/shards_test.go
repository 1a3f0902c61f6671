package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/test/crash"
)

// TestShardsKillAShardLeader: three `sluice server --shards 3` processes.
// The shards' leaders spread over the three nodes; SQS queues created
// through every node live on different shards, served by different
// leaders; kill -9 of the node leading one of them leaves every queue
// served through the two survivors, and every acknowledged message —
// before, across and after the kill — is received, and nothing else.
func TestShardsKillAShardLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	nodes := startClusterWith(t, ctx, 3, "--shards", "3")

	// Every node routes every shard, and each node leads one (the
	// balancer moves a leadership only after two 10 s rounds agree).
	poll.CheckFor(t, 60*time.Second, func() error {
		leaders := map[uint64]bool{}
		for _, n := range nodes {
			rep, err := n.status(ctx)
			if err != nil {
				return err
			}
			if len(rep.Shards) != 3 {
				return fmt.Errorf("node %d lists %d shards", n.id, len(rep.Shards))
			}
			for _, sh := range rep.Shards {
				if sh.Leader == 0 {
					return fmt.Errorf("node %d: shard %d has no leader", n.id, sh.Shard)
				}
				if n == nodes[0] {
					leaders[sh.Leader] = true
				}
			}
		}
		if len(leaders) != 3 {
			return fmt.Errorf("shard leaders %v: not one per node yet", leaders)
		}
		return nil
	})

	const queues, perQueue = 9, 20
	urls := make([]string, queues)
	byShard := map[int][]int{} // shard → queue indexes
	servedBy := map[uint64]bool{}
	for i := range queues {
		out, err := nodes[i%3].sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("spread-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = aws.ToString(out.QueueUrl)
		k, leader, err := crash.ShardOf(ctx, nodes[(i+1)%3].srv.URL(), urls[i])
		if err != nil {
			t.Fatal(err)
		}
		byShard[k] = append(byShard[k], i)
		servedBy[leader] = true
	}
	t.Logf("queues by shard: %v; served by nodes %v", byShard, servedBy)
	if len(servedBy) < 2 {
		t.Fatalf("9 queues all served by node(s) %v", servedBy)
	}

	var mu sync.Mutex
	sent := map[string]int{} // body → queue index
	for i, u := range urls {
		for j := range perQueue {
			n := nodes[(i+j)%3]
			body := fmt.Sprintf("q%d-m%d-via-%d", i, j, n.id)
			if _, err := n.sqs().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(body)}); err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			sent[body] = i
		}
	}

	// The victim: the leader of a shard that holds queues.
	var victimShard int
	for k := range byShard {
		victimShard = k
		break
	}
	_, victimID, err := crash.ShardOf(ctx, nodes[0].srv.URL(), urls[byShard[victimShard][0]])
	if err != nil {
		t.Fatal(err)
	}
	victim, survivors := splitLeader(nodes, victimID)

	// Senders through the survivors to every queue keep going across the
	// kill; only acknowledged sends are owed.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var afterKill, killed = 0, false
	for si, n := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := n.sqs()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (j + si) % queues
				body := fmt.Sprintf("live-q%d-%d-via-%d", i, j, n.id)
				sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				_, err := c.SendMessage(sctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[i]), MessageBody: aws.String(body)})
				cancel()
				mu.Lock()
				if err == nil {
					sent[body] = i
					if killed && i == byShard[victimShard][0] {
						afterKill++
					}
				}
				mu.Unlock()
			}
		}()
	}
	mu.Lock()
	killed = true
	mu.Unlock()
	killedAt := time.Now()
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// The victim's shard gets a new leader, which takes writes.
	poll.CheckFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if afterKill < 5 {
			return fmt.Errorf("%d sends to a queue of the killed leader's shard acknowledged since the kill", afterKill)
		}
		return nil
	})
	t.Logf("killed node %d (leader of shard %d); that shard's queue took sends again after %v", victimID, victimShard, time.Since(killedAt).Round(time.Millisecond))
	close(stop)
	wg.Wait()

	got := map[string]bool{}
	var unknown []string
	poll.CheckFor(t, 60*time.Second, func() error {
		for i, u := range urls {
			n := survivors[i%2]
			out, err := n.sqs().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(u), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				return fmt.Errorf("receive %s via node %d: %v", u, n.id, err)
			}
			for _, m := range out.Messages {
				if q, ok := sent[*m.Body]; !ok || q != i {
					unknown = append(unknown, *m.Body)
				}
				got[*m.Body] = true
				if _, err := n.sqs().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(u), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return fmt.Errorf("delete via node %d: %v", n.id, err)
				}
			}
		}
		missing := 0
		for b := range sent {
			if !got[b] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not received yet", missing, len(sent))
		}
		return nil
	})
	if len(unknown) > 0 {
		t.Fatalf("received %d messages never sent to that queue: %q", len(unknown), unknown)
	}
	t.Logf("%d acknowledged sends over %d queues on %d shards; every one received through the survivors", len(sent), queues, len(byShard))
}
