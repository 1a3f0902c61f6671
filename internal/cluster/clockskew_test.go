package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/testlog"
)

// TestClockOffsetMeasured: each follower measures its wall clock against
// the cluster's (the leader's engine clock) at every status report and the
// leader's view shows every member's offset, so a node whose clock is 3 s
// off is seen (view, /metrics, a warning in its log), whether it leads or
// not: the cluster's clock is the median of the voters' from the first
// leadership on (a new cluster's first leader asks the voters for their
// clocks, clockprobe.go), so the offsets are the same whoever leads; nodes
// in sync show about 0 and do not warn.
func TestClockOffsetMeasured(t *testing.T) {
	skew := []time.Duration{0, 0, 3 * time.Second} // median 0
	logs := make([]*testlog.Buffer, 3)
	nodes, _ := startThreeWith(t, func(*server.Options) {}, func(i int, o *Options) {
		o.Clock = clock.Offset{By: skew[i]}
		o.Logger, logs[i] = testlog.New(slog.LevelInfo)
	}, nil, 3)
	var v ClusterView
	poll.CheckFor(t, 30*time.Second, poll.True("every member's clock offset in the leader's view", func() bool {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if v, err = nodes[0].leaderView(ctx); err != nil || len(v.Members) != 3 {
			return false
		}
		for _, m := range v.Members {
			if m.ClockOffsetMs == nil {
				return false
			}
		}
		return true
	}))
	for _, m := range v.Members {
		want := skew[m.ID-1].Seconds() * 1000
		if got := *m.ClockOffsetMs; math.Abs(got-want) > 200 {
			t.Errorf("member %d (leader %d): clock offset %.1f ms in the view, want about %.0f ms", m.ID, v.Leader, got, want)
		}
	}
	for k, n := range nodes {
		vals, _ := scrape(t, n)
		want := skew[k].Seconds()
		if got, ok := vals["sluice_cluster_clock_offset_seconds"]; !ok || math.Abs(got-want) > 0.2 {
			t.Errorf("node %d (leader %d): sluice_cluster_clock_offset_seconds = %v (exported: %v), want about %.1f", k+1, v.Leader, got, ok, want)
		}
	}
	// A follower's warning comes with its first report; the leader's
	// with its followers' reports.
	poll.CheckFor(t, 10*time.Second, poll.True("the node 3 s off warned", func() bool {
		return strings.Contains(logs[2].String(), "clock disagrees with the")
	}))
	for k := range 2 {
		if strings.Contains(logs[k].String(), "clock disagrees with the") {
			t.Errorf("node %d, in sync, warned:\n%s", k+1, logs[k])
		}
	}
}

// TestFailoverKeepsTheClusterClock: a node whose clock is 20 s ahead takes
// over from a leader with a correct clock. It leads on the old leader's
// clock (then steered to the voters' median), so a message received with a 10 s
// visibility timeout just before the failover stays hidden — on its own
// clock the lease would have ended 10 s ago and the message would be
// redelivered at once — and a message sent after the failover carries a
// SentTimestamp on the old leader's time, not 20 s ahead.
func TestFailoverKeepsTheClusterClock(t *testing.T) {
	const ahead = 20 * time.Second
	skew := []time.Duration{0, 0, ahead}
	nodes, _ := startThreeWith(t, func(*server.Options) {}, func(i int, o *Options) {
		o.Clock = clock.Offset{By: skew[i]}
	}, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	skewed := nodes[2]
	if l := awaitLeader(t, nodes); l == skewed {
		handOver(t, nodes, 0, 1) // away from the skewed node
	}
	leader := awaitLeader(t, nodes[:2])
	poll.CheckFor(t, 30*time.Second, poll.True("the skewed node measured its clock against the leader's", func() bool {
		skewed.mu.Lock()
		defer skewed.mu.Unlock()
		c := skewed.clockGood
		return c.measured && c.leader == leader.opts.Cluster.NodeID && (c.offset-ahead).Abs() < 200*time.Millisecond
	}))

	q, received := oneInFlight(ctx, t, directSQS(leader, 10*time.Second), "timeline", 10)
	handOver(t, nodes, 0, skewed.opts.Cluster.NodeID)
	checkTakeover(ctx, t, directSQS(skewed, 10*time.Second), q, received, 10*time.Second, ahead)
	vals, _ := scrape(t, skewed)
	if off := vals["sluice_cluster_clock_offset_seconds"]; math.Abs(off-ahead.Seconds()) > 0.5 {
		t.Errorf("the new leader's sluice_cluster_clock_offset_seconds = %v, want about %v (its wall clock minus the cluster's)", off, ahead.Seconds())
	}
	// The other voter's reports keep the cluster's clock where the majority
	// of the clocks is: the new leader steers toward them (the median of
	// 0 s, 0 s and its own +20 s), not toward its own clock.
	poll.CheckFor(t, 20*time.Second, func() error {
		skewed.mu.Lock()
		tl := skewed.timeline
		skewed.mu.Unlock()
		if tl == nil {
			return fmt.Errorf("the skewed node does not lead")
		}
		if got := tl.seg.Load().target; (got + ahead).Abs() > 200*time.Millisecond {
			return fmt.Errorf("the new leader's clock slews toward %v, want about %v (the voters' median)", got, -ahead)
		}
		return nil
	})
}

// oneInFlight creates queue name through cli, sends it one message ("in
// flight") and receives it with a visibility timeout of vis seconds; it
// returns the queue's URL and when the receive was answered.
func oneInFlight(ctx context.Context, t *testing.T, cli *sqs.Client, name string, vis int32) (*string, time.Time) {
	t.Helper()
	q, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("in flight")}); err != nil {
		t.Fatal(err)
	}
	got, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, VisibilityTimeout: vis})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive on the first leader: %v, %d messages", err, len(got.Messages))
	}
	return q.QueueUrl, time.Now()
}

// checkTakeover judges a new leader whose clock is ahead of the cluster's,
// reached through sc, after oneInFlight's receive at received with the
// visibility timeout vis: it sends a message ("after") until the new leader
// takes it, then receives, and fails the test if the message in flight
// comes back within its timeout or if the new message's SentTimestamp is
// more than 2 s off the true time. It skips when the takeover took too
// long to judge.
func checkTakeover(ctx context.Context, t *testing.T, sc *sqs.Client, q *string, received time.Time, vis, ahead time.Duration) {
	t.Helper()
	var sentAt time.Time
	poll.CheckFor(t, 30*time.Second, func() error {
		if _, err := sc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("after")}); err != nil {
			return err
		}
		sentAt = time.Now()
		return nil
	})
	if took := time.Since(received); took > vis*4/5 {
		t.Skipf("the takeover took %v, too close to the %v visibility timeout to judge", took, vis)
	}
	out, err := sc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Errorf("received %d messages from the new leader, want 1 (the one sent to it)", len(out.Messages))
	}
	for _, m := range out.Messages {
		switch body := aws.ToString(m.Body); body {
		case "in flight":
			t.Errorf("the message in flight was redelivered %v after its %v receive, by a new leader whose clock is %v ahead",
				time.Since(received).Round(time.Millisecond), vis, ahead)
		case "after":
			ms, _ := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
			if d := time.UnixMilli(ms).Sub(sentAt); d.Abs() > 2*time.Second {
				t.Errorf("SentTimestamp of a send to the new leader is %v off the true time, want the cluster's clock (±2 s)", d.Round(time.Millisecond))
			}
		}
	}
}

// TestStampClockOnlyWhileLeading: a status report's answer carries the
// clock the answering node's engine runs on, and no clock at all from a
// node without one (its leadership just ended): its wall clock is not the
// cluster's, and a follower that measured it would carry that node's skew
// into its own next leadership.
func TestStampClockOnlyWhileLeading(t *testing.T) {
	n := &Node{}
	rec := httptest.NewRecorder()
	n.stampClock(rec)
	if h := rec.Header().Get(clockHeader); h != "" {
		t.Fatalf("a node without a timeline stamped %s", h)
	}
	base := clock.NewFake(time.Unix(1_800_000_000, 0))
	n.timeline = newTimeline(base, -20*time.Second, 0)
	rec = httptest.NewRecorder()
	n.stampClock(rec)
	got, err := strconv.ParseInt(rec.Header().Get(clockHeader), 10, 64)
	if err != nil || got != base.Now().Add(-20*time.Second).UnixNano() {
		t.Fatalf("a leader stamped %q (%v), want its engine clock %d", rec.Header().Get(clockHeader), err, base.Now().Add(-20*time.Second).UnixNano())
	}
}
