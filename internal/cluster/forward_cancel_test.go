package cluster

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/testlog"
)

// TestForwardEndsWhenTheLeaderChanges: a request a follower forwarded to a
// leader that then goes silent (frozen, cut off) is answered 503 once the
// follower learns of a new leader, instead of hanging until the client
// gives up; one the old leader had already answered (an event stream
// whose headers are in) is left to finish. The leader's internal HTTP listener sits behind a cuttableLink, silenced;
// a request through the follower is in flight on it when the link goes
// silent; leadership then moves to the third node, over Raft links the
// test leaves alone.
func TestForwardEndsWhenTheLeaderChanges(t *testing.T) {
	ports := brokertest.ReservePorts(t, 3)
	links := make([]*cuttableLink, 3)
	for i := range links {
		links[i] = newCuttableLink(t, ports[i])
	}
	logs := make([]*testlog.Buffer, 3)
	nodes, _ := startThreeWith(t, func(o *server.Options) {
		i := o.Cluster.NodeID - 1
		o.Cluster.InternalHTTPListen = ports[i]
		o.Cluster.InternalHTTPAdvertise = links[i].ln.Addr().String()
	}, func(i int, o *Options) { o.Logger, logs[i] = testlog.New(slog.LevelDebug) }, nil, 3)
	// logTail is the end of node id's log, for a failure's message.
	logTail := func(id uint64) string {
		l := logs[id-1].String()
		return l[max(0, len(l)-6000):]
	}
	// A leadership settled for a second: under a loaded CI machine a node
	// that missed the first heartbeats can start a second election just
	// after the first, deposing the leader this test is about to silence
	// (a run failed so, 2026-12-05: "could not be reached" from the
	// deposed leader, not the change the test makes).
	settledLeadership(t, nodes, time.Second)
	leader, followers := leaderAndFollowers(t, nodes)
	via, other := followers[0], followers[1]
	ctx := context.Background()
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + via.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("frozen")})
	if err != nil {
		t.Fatal(err)
	}
	// A dashboard event stream through the follower: answered (its
	// headers are in), then open for as long as the stream lasts. A
	// leader change must not cut it: its answer is already coming.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+via.HTTPAddr()+"/sluice/v1/dashboard/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.Body.Close() }() // the test's own stream
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("event stream through the follower: %s", stream.Status)
	}
	// Its first event comes through at once: the follower's proxy
	// flushes an event stream as it goes (the leader writes the first
	// overview before any sample; a proxy that held it back would keep
	// it until the stream ends, and this read until ctx does).
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() && sc.Text() != "event: overview" {
	}
	if sc.Err() != nil || sc.Text() != "event: overview" {
		t.Fatalf("event stream through the follower: no first event (%v)", sc.Err())
	}
	// The follower now holds connections to the leader through its link;
	// silence it, and send a long poll that will find no answer.
	link := links[leader.opts.Cluster.NodeID-1]
	link.silent.Store(true)
	// A generous bound: the request must end because the leader changed,
	// long before this. Reaching it is the failure this test looks for,
	// not a timing assertion.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
		done <- err
	}()
	// Wait until the request is forwarded to the leader (through the
	// silent link: no answer can come back).
	poll.CheckFor(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			return errors.New("answered through a silent link: " + errString(err))
		default:
		}
		if len(via.forwardsTo(leader.opts.Cluster.NodeID)) < 2 {
			return errors.New("the long poll is not forwarded to the leader yet")
		}
		return nil
	})
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	err = leader.raft.TransferLeadershipTo(tctx, other.opts.Cluster.NodeID)
	tcancel()
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "StatusCode: 503") || !strings.Contains(err.Error(), "leader changed") {
		t.Fatalf("the forwarded request ended with %v; want a 503 saying the leader changed\nthe follower's log:\n%s", err, logTail(via.opts.Cluster.NodeID))
	}
	if rctx.Err() != nil {
		t.Fatal("the request ended only at the client's deadline")
	}
	// The event stream's forward is still there: answered, not cut.
	fs := via.forwardsTo(leader.opts.Cluster.NodeID)
	if len(fs) != 1 || !fs[0].answered.Load() {
		t.Fatalf("forwards left to the old leader: %d (want the answered event stream alone)", len(fs))
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// forwardsTo lists the requests this node is forwarding to leader.
func (n *Node) forwardsTo(leader uint64) []*forward {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*forward
	for f := range n.forwards {
		if f.leader == leader {
			out = append(out, f)
		}
	}
	return out
}

// settledLeadership waits until every node reports one leader in one
// term, unchanged for at least hold.
func settledLeadership(t *testing.T, nodes []*Node, hold time.Duration) {
	t.Helper()
	var leader, term uint64
	var since time.Time
	poll.CheckFor(t, 60*time.Second, func() error {
		st := nodes[0].raft.Status()
		for _, n := range nodes[1:] {
			if o := n.raft.Status(); o.Leader != st.Leader || o.Term != st.Term {
				leader = 0
				return errors.New("the nodes do not agree on a leader yet")
			}
		}
		if st.Leader == 0 {
			leader = 0
			return errors.New("no leader yet")
		}
		if st.Leader != leader || st.Term != term {
			leader, term, since = st.Leader, st.Term, time.Now()
		}
		if time.Since(since) < hold {
			return errors.New("the leadership is not settled yet")
		}
		return nil
	})
}
