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
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/crash"
)

// The deep-backlog scenario on a FIFO queue (FIFO queues are not served
// over AMQP, so over SQS): SLUICE_PERF_MESSAGES (default 2,000,000) 1 KiB
// messages in SLUICE_PERF_FIFO_GROUPS message groups (default 64, a
// multiple of fifoPublishers), sent in batches of 10 by fifoPublishers
// senders, each owning its groups and sending them in order, while nobody
// receives; kill -9; restart; drain with fifoConsumers receivers (batches
// of 10, long poll, one DeleteMessageBatch per batch). The same figures as
// TestDeepBacklog are reported, never asserted. Asserted: every
// acknowledged message is received, and each group's messages arrive in the
// order they were sent. Deduplication entries stay in memory for the
// five-minute deduplication window (docs/guarantees.md), so RSS while
// publishing includes them.
//
//	SLUICE_PERF=1 SLUICE_PERF_FIFO=1 go test -run TestDeepBacklogFIFO -v -timeout 90m ./test/perf/   # make perf-fifo
const (
	envFIFO       = "SLUICE_PERF_FIFO"
	envFIFOGroups = "SLUICE_PERF_FIFO_GROUPS"

	fifoQueue      = "perf.fifo"
	fifoPublishers = 8
	fifoConsumers  = 4
)

func TestDeepBacklogFIFO(t *testing.T) {
	skipUnlessPerf(t)
	if os.Getenv(envFIFO) != "1" {
		t.Skipf("set %s=1 to run the deep backlog on a FIFO queue", envFIFO)
	}
	groups := 64
	if v := os.Getenv(envFIFOGroups); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n%fifoPublishers != 0 {
			t.Fatalf("%s=%q: want a positive multiple of %d", envFIFOGroups, v, fifoPublishers)
		}
		groups = n
	}
	var delivered []atomic.Bool
	runDeepBacklog(t, "FIFO, "+strconv.Itoa(groups)+" groups: ",
		func(b *broker, total int) int {
			delivered = make([]atomic.Bool, total)
			return publishFIFO(t, b, total, groups)
		},
		func(b *broker, want int) int { return drainFIFO(t, b, want, groups, delivered) })
}

func sqsClient(b *broker, timeout time.Duration) *sqs.Client {
	return crash.NewClient("http://"+b.httpAddr, "perf", 2*(fifoPublishers+fifoConsumers), timeout)
}

// publishFIFO creates the FIFO queue and sends total messages: message i
// goes to group i % groups, with deduplication id i, sent by publisher
// i % fifoPublishers, which sends its messages in index order one batch at
// a time, so each group's order is its indexes' order. It returns how many
// sends succeeded.
func publishFIFO(t *testing.T, b *broker, total, groups int) int {
	t.Helper()
	c := sqsClient(b, time.Minute)
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fifoQueue),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	fill := filler(bodySize)
	var acked atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, fifoPublishers)
	for p := range fifoPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entries := make([]types.SendMessageBatchRequestEntry, 0, batchSize)
			flush := func() error {
				if len(entries) == 0 {
					return nil
				}
				res, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: entries})
				if err != nil {
					return err
				}
				if len(res.Failed) > 0 {
					return fmt.Errorf("%d entries failed, first: %s", len(res.Failed), aws.ToString(res.Failed[0].Message))
				}
				acked.Add(int64(len(res.Successful)))
				entries = entries[:0]
				return nil
			}
			for i := p; i < total; i += fifoPublishers {
				id := strconv.Itoa(i)
				entries = append(entries, types.SendMessageBatchRequestEntry{
					Id: aws.String(id), MessageBody: aws.String(indexedBody(i, fill)),
					MessageGroupId: aws.String("g" + strconv.Itoa(i%groups)), MessageDeduplicationId: aws.String(id)})
				if len(entries) == batchSize {
					if err := flush(); err != nil {
						errc <- fmt.Errorf("publisher %d: %w", p, err)
						return
					}
				}
			}
			if err := flush(); err != nil {
				errc <- fmt.Errorf("publisher %d: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("publish: %v", err)
	}
	return int(acked.Load())
}

// drainFIFO receives and deletes until want distinct messages were
// received or no message came for a minute, and returns how many distinct
// messages were received. A message received twice (its visibility timeout
// ran out) is counted once; a group's message that arrives before an
// earlier one of its group fails the test. A request that fails or takes
// longer than fifoRequestTimeout is counted, reported and retried (its
// messages come back when their visibility timeout ends), so that one
// lost response does not stop the measurement.
func drainFIFO(t *testing.T, b *broker, want, groups int, delivered []atomic.Bool) int {
	t.Helper()
	const fifoRequestTimeout = 10 * time.Second
	c := sqsClient(b, fifoRequestTimeout)
	var failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(fifoQueue)})
	if err != nil {
		t.Fatal(err)
	}
	last := make([]atomic.Int64, groups) // per group, the last index received, plus one
	var distinct, outOfOrder atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, fifoConsumers)
	for range fifoConsumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl,
					MaxNumberOfMessages: batchSize, WaitTimeSeconds: 1, VisibilityTimeout: 30})
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					return
				}
				if len(res.Messages) == 0 {
					continue
				}
				del := make([]types.DeleteMessageBatchRequestEntry, 0, len(res.Messages))
				for k, m := range res.Messages {
					body := aws.ToString(m.Body)
					i, err := bodyIndex(body)
					if err != nil || i < 0 || i >= len(delivered) {
						errc <- fmt.Errorf("unexpected body %.20q", body)
						return
					}
					g := i % groups
					if prev := last[g].Load(); int64(i)+1 <= prev {
						if !delivered[i].Load() {
							outOfOrder.Add(1) // not a redelivery: order broken
						}
					} else {
						last[g].Store(int64(i) + 1)
					}
					if !delivered[i].Swap(true) {
						distinct.Add(1)
					}
					del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), ReceiptHandle: m.ReceiptHandle})
				}
				dres, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: url.QueueUrl, Entries: del})
				if err == nil && len(dres.Failed) > 0 {
					err = fmt.Errorf("%d deletes failed, first: %s", len(dres.Failed), aws.ToString(dres.Failed[0].Message))
				}
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					return
				}
				if distinct.Load() >= int64(want) {
					cancel()
				}
			}
		}()
	}
	n, lastAt := int64(0), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		<-tick.C
		if got := distinct.Load(); got != n {
			n, lastAt = got, time.Now()
		} else if time.Since(lastAt) > time.Minute {
			attrs, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err == nil {
				t.Logf("drain stalled at %d of %d for a minute; queue: visible %s, in flight %s, delayed %s", got, want,
					attrs.Attributes["ApproximateNumberOfMessages"], attrs.Attributes["ApproximateNumberOfMessagesNotVisible"],
					attrs.Attributes["ApproximateNumberOfMessagesDelayed"])
			} else {
				t.Logf("drain stalled at %d of %d for a minute (queue attributes: %v)", got, want, err)
			}
			cancel()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("consume: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Logf("%d receive or delete requests failed or timed out (after %v) and were retried; the first: %v", n, fifoRequestTimeout, firstErr.Load())
	}
	if n := outOfOrder.Load(); n > 0 {
		t.Errorf("%d messages arrived before an earlier message of their group", n)
	}
	return int(distinct.Load())
}
