//go:build linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/crash"
)

// The many-queues backlog: a consumer outage that backs up many queues at
// once, each shallow, together deep. A single deep queue costs one ready
// window (TestDeepBacklog); here SLUICE_PERF_QUEUES queues (default 400)
// each take SLUICE_PERF_QUEUE_DEPTH messages (default 2,100, just above
// one ready window) of SLUICE_PERF_BODY bytes (default 200), so that what
// bounds memory is the sum of the windows: ready_memory_budget for their
// index and body_memory_budget for their bodies (docs/architecture.md, hot
// and cold). manySenders senders send batches of 10 over SQS, each to its
// share of the queues in turn, so that every queue grows at once; kill -9;
// restart; manyConsumers consumers receive (batches of 10, no wait) and
// batch-delete, each over its share of the queues. Reported, never
// asserted: peak RSS while sending, RSS with the whole backlog queued,
// restart time, peak RSS after the restart and while draining, drain rate.
// Asserted: every acknowledged message is received. SLUICE_PERF_CONFIG
// names a TOML config for the broker (perfConfig), to compare budgets.
//
//	SLUICE_PERF=1 SLUICE_PERF_MANY=1 go test -run TestManyQueues -v -timeout 60m ./test/perf/   # make perf-many
const (
	envMany       = "SLUICE_PERF_MANY"
	envManyQueues = "SLUICE_PERF_QUEUES"
	envManyDepth  = "SLUICE_PERF_QUEUE_DEPTH"
	envManyBody   = "SLUICE_PERF_BODY"
	envConfig     = "SLUICE_PERF_CONFIG"

	manySenders   = 16
	manyConsumers = 16
)

// manyLoad is the scenario's shape and its delivery record.
type manyLoad struct {
	queues, depth, body int
	urls                []*string
	acked               []atomic.Int64 // per queue, messages acknowledged
	seen                []atomic.Bool  // per message (queue*depth + i), received at least once
}

func TestManyQueues(t *testing.T) {
	skipUnlessPerf(t)
	if os.Getenv(envMany) != "1" {
		t.Skipf("set %s=1 to run the many-queues backlog", envMany)
	}
	l := &manyLoad{queues: envInt(t, envManyQueues, 400), depth: envInt(t, envManyDepth, 2_100), body: envInt(t, envManyBody, 200)}
	if l.body < indexLen {
		t.Fatalf("%s=%d: want at least %d bytes", envManyBody, l.body, indexLen)
	}
	config, extra := perfConfig(t)
	l.acked = make([]atomic.Int64, l.queues)
	l.seen = make([]atomic.Bool, l.queues*l.depth)
	bin := buildBinary(t)
	dir := dataDir(t)
	label := fmt.Sprintf("%d queues × %d messages of %d B", l.queues, l.depth, l.body)
	if config != "" {
		label += " (config " + config + ")"
	}

	b := startBroker(t, bin, dir, extra...)
	c := crash.NewClient("http://"+b.httpAddr, "perf", 2*max(manySenders, manyConsumers), time.Minute)
	l.create(t, c)
	rss := watchRSS(b.cmd.Process.Pid)
	start := time.Now()
	sent := l.send(t, c)
	elapsed := time.Since(start)
	sendPeak := rss.stop()
	full := pidRSS(b.cmd.Process.Pid)
	t.Logf("%s: sent %d in %v: %.0f msg/s; peak RSS while sending %.0f MiB, with the whole backlog queued %.0f MiB",
		label, sent, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), mib(sendPeak), mib(full))

	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
	restartAt := time.Now()
	b = startBroker(t, bin, dir, extra...)
	healthy := waitHealth(t, b.httpAddr)
	rss = watchRSS(b.cmd.Process.Pid)
	t.Logf("%s: restart (exec → /health 200) %v", label, healthy.Sub(restartAt).Round(time.Millisecond))

	c = crash.NewClient("http://"+b.httpAddr, "perf", 2*max(manySenders, manyConsumers), 10*time.Second)
	start = time.Now()
	drained := l.drain(t, c)
	dur := time.Since(start)
	drainPeak := rss.stop()
	t.Logf("%s: drained %d in %v: %.0f msg/s; peak RSS after the restart and while draining %.0f MiB",
		label, drained, dur.Round(time.Millisecond), float64(drained)/dur.Seconds(), mib(drainPeak))
	peak := max(sendPeak, drainPeak)
	t.Logf("%s: peak RSS %.0f MiB (issue #13's ≤ 256 MiB at any depth: %s)", label, mib(peak), meets(peak <= 256<<20))
	if drained < sent {
		t.Errorf("received %d of %d acknowledged messages", drained, sent)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
}

func (l *manyLoad) create(t *testing.T, c *sqs.Client) {
	t.Helper()
	l.urls = make([]*string, l.queues)
	for q := range l.queues {
		out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("many-%04d", q))})
		if err != nil {
			t.Fatal(err)
		}
		l.urls[q] = out.QueueUrl
	}
}

// send fills every queue to depth: sender s owns the queues q with
// q % manySenders == s and sends one batch to each of them in turn. A
// body starts with its message's number (queue*depth + i), zero-padded.
func (l *manyLoad) send(t *testing.T, c *sqs.Client) int {
	t.Helper()
	fill := filler(l.body)
	var wg sync.WaitGroup
	errc := make(chan error, manySenders)
	for s := range manySenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entries := make([]types.SendMessageBatchRequestEntry, 0, batchSize)
			for i := 0; i < l.depth; i += batchSize {
				for q := s; q < l.queues; q += manySenders {
					entries = entries[:0]
					for k := i; k < min(i+batchSize, l.depth); k++ {
						entries = append(entries, types.SendMessageBatchRequestEntry{
							Id: aws.String(strconv.Itoa(k - i)), MessageBody: aws.String(indexedBody(q*l.depth+k, fill))})
					}
					res, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: l.urls[q], Entries: entries})
					if err == nil && len(res.Failed) > 0 {
						err = fmt.Errorf("%d entries failed, first: %s", len(res.Failed), aws.ToString(res.Failed[0].Message))
					}
					if err != nil {
						errc <- fmt.Errorf("sender %d: %w", s, err)
						return
					}
					l.acked[q].Add(int64(len(res.Successful)))
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("send: %v", err)
	}
	total := 0
	for q := range l.queues {
		total += int(l.acked[q].Load())
	}
	return total
}

// drain receives and deletes until every acknowledged message was
// received once, or nothing new arrived for a minute, and returns how
// many distinct messages were received. Consumer k owns the queues q with
// q % manyConsumers == k and polls them in turn (no wait) until each has
// given all its messages. A failed request is counted, reported and
// retried: its messages come back when their visibility timeout ends.
func (l *manyLoad) drain(t *testing.T, c *sqs.Client) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var distinct, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	errc := make(chan error, manyConsumers)
	for k := range manyConsumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int
			got := make(map[int]int64)
			for q := k; q < l.queues; q += manyConsumers {
				if l.acked[q].Load() > 0 {
					mine = append(mine, q)
				}
			}
			for len(mine) > 0 && ctx.Err() == nil {
				for j := 0; j < len(mine); j++ {
					q := mine[j]
					res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: l.urls[q],
						MaxNumberOfMessages: batchSize, VisibilityTimeout: 60})
					if err != nil {
						if ctx.Err() != nil || errors.Is(err, context.Canceled) {
							return
						}
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					if len(res.Messages) == 0 {
						continue
					}
					del := make([]types.DeleteMessageBatchRequestEntry, 0, len(res.Messages))
					for i, m := range res.Messages {
						body := aws.ToString(m.Body)
						n, err := bodyIndex(body)
						if err != nil || n/l.depth != q {
							errc <- fmt.Errorf("queue %d: unexpected body %.20q", q, body)
							return
						}
						if !l.seen[n].Swap(true) {
							distinct.Add(1)
							got[q]++
						}
						del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
					}
					dres, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: l.urls[q], Entries: del})
					if err == nil && len(dres.Failed) > 0 {
						err = fmt.Errorf("%d deletes failed, first: %s", len(dres.Failed), aws.ToString(dres.Failed[0].Message))
					}
					if err != nil {
						if ctx.Err() != nil || errors.Is(err, context.Canceled) {
							return
						}
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					if got[q] >= l.acked[q].Load() {
						mine[j] = mine[len(mine)-1]
						mine = mine[:len(mine)-1]
						j--
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	n, lastAt := int64(0), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
		}
		if got := distinct.Load(); got != n {
			n, lastAt = got, time.Now()
		} else if time.Since(lastAt) > time.Minute {
			t.Logf("drain stalled at %d for a minute", got)
			cancel()
			<-done
			break wait
		}
	}
	close(errc)
	for err := range errc {
		t.Errorf("consume: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Logf("%d receive or delete requests failed and were retried; the first: %v", n, firstErr.Load())
	}
	return int(distinct.Load())
}
