package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
	ctx, nodes, _ := startSpreadShards(t)

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

// startSpreadShards starts three `sluice server --shards 3` processes
// (skipped with -short), waits until every node routes every shard and
// each node leads one (the balancer moves a leadership only after two
// 10 s rounds agree), and returns the test's context, the nodes and each
// shard's leader as the first node saw it.
func startSpreadShards(t *testing.T) (context.Context, []*node, map[int]uint64) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	t.Cleanup(cancel)
	nodes := startClusterWith(t, ctx, 3, "--shards", "3")
	var byShard map[int]uint64
	// Up to two moves, each two balancer rounds (10 s) apart; 100 s
	// leaves room for a round that declines (a member that did not
	// answer within half an election timeout on a loaded machine).
	poll.CheckFor(t, 100*time.Second, func() error {
		byShard = map[int]uint64{}
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
					byShard[sh.Shard] = sh.Leader
				}
			}
		}
		if len(leaders) != 3 {
			return fmt.Errorf("shard leaders %v: not one per node yet", leaders)
		}
		return nil
	})
	return ctx, nodes, byShard
}

// TestShardsAMQPPublishWhileAShardLeaderFreezes: an AMQP publisher on
// shard 0's leader publishes with confirms into a queue whose shard
// another node leads; that node is frozen (SIGSTOP: its connections stay
// open and never answer). Every publish is answered — nacked while the
// shard has no serving leader, confirmed once it has a new one — within
// 20 s, where the router's call to the frozen leader would otherwise
// wait out its 30 s call timeout (internal/server callTimeout); the
// router ends it when its node learns of the new leader. Every confirmed
// message is then received.
func TestShardsAMQPPublishWhileAShardLeaderFreezes(t *testing.T) {
	ctx, nodes, leaders := startSpreadShards(t)
	lead0 := leaders[0]
	front, _ := splitLeader(nodes, lead0)
	// A queue on a shard that another node leads.
	var name, url string
	var victimID uint64
	for i := 0; victimID == 0; i++ {
		if i == 40 {
			t.Fatal("40 queues, none on a shard another node than shard 0's leader leads")
		}
		name = fmt.Sprintf("frozen-%d", i)
		out, err := front.sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		url = aws.ToString(out.QueueUrl)
		if k, leader, err := crash.ShardOf(ctx, front.srv.URL(), url); err != nil {
			t.Fatal(err)
		} else if k != 0 && leader != lead0 {
			victimID = leader
		}
	}
	victim, _ := splitLeader(nodes, victimID)

	// Through shard 0's leader: its own server, no relay in between.
	conn, ch := amqpChannel(t, front)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ctx, ch, name, "before", 3)
	acked := []string{"before-0", "before-1", "before-2"}

	freeze(t, victim.srv.PID)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(victim.srv.PID, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw) // before the cluster's own cleanup stops it
	frozenAt := time.Now()
	nacks, reopened := 0, 0
	for i := 0; ; i++ {
		if time.Since(frozenAt) > 90*time.Second {
			t.Fatalf("no publish confirmed in 90 s after freezing node %d (%d nacked)", victimID, nacks)
		}
		if ch.IsClosed() {
			// A publish the router could not place may close the
			// channel rather than nack it: open another and go on.
			if conn.IsClosed() {
				conn, ch = amqpChannel(t, front)
			} else {
				var err error
				if ch, err = conn.Channel(); err != nil {
					t.Fatal(err)
				}
			}
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			reopened++
		}
		body := fmt.Sprintf("during-%d", i)
		start := time.Now()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
		if err != nil {
			continue // the channel closed under it: reopened above
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		ok, err := dc.WaitContext(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("publish %s, %v after freezing node %d (leader of the queue's shard): neither confirmed nor nacked within 20 s: %v",
				body, start.Sub(frozenAt).Round(time.Millisecond), victimID, err)
		}
		if ok {
			acked = append(acked, body)
			t.Logf("froze node %d; %d publishes nacked (%d channels reopened), then %s confirmed %v after the freeze, answered in %v",
				victimID, nacks, reopened, body, time.Since(frozenAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			break
		}
		nacks++
	}
	publishConfirmed(t, ctx, ch, name, "after", 3)
	acked = append(acked, "after-0", "after-1", "after-2")
	thaw()

	got := map[string]bool{}
	poll.CheckFor(t, 60*time.Second, func() error {
		out, err := front.sqs().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		for _, m := range out.Messages {
			got[aws.ToString(m.Body)] = true
			if _, err := front.sqs().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
		for _, b := range acked {
			if !got[b] {
				return fmt.Errorf("confirmed %s not received yet (%d of %d received)", b, len(got), len(acked))
			}
		}
		return nil
	})
}

// freeze stops process pid with SIGSTOP and returns once the kernel shows
// it stopped. The signal is only queued by kill: under load the process
// ran on for a moment, and a call it answered then — a publish confirmed
// 1 ms "after the freeze" — passed for the new leader's (CI, 2026-12-06).
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// "pid (comm) state ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("/proc/%d/stat: %q", pid, b)
		}
		if st := b[i+2]; st != 'T' {
			return fmt.Errorf("process %d in state %c, not stopped yet", pid, st)
		}
		return nil
	})
}
