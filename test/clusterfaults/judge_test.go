package clusterfaults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/test/faults"
)

// at is a fixed instant plus ms milliseconds, for synthetic histories.
func at(ms int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// obsEvery is one node's observations: a poll every 10 ms from 0 to 2000
// ms, answering term termAt(ms).
func obsEvery(termAt func(ms int) uint64) []observation {
	var out []observation
	for ms := 0; ms < 2000; ms += 10 {
		out = append(out, observation{start: at(ms), end: at(ms + 5), term: termAt(ms), role: "follower", leader: 1})
	}
	return out
}

// TestLeaderViolations: two nodes that say they lead one term, or nodes
// that name different leaders for it, are flagged; leaders of different
// terms are not.
func TestLeaderViolations(t *testing.T) {
	ok := [][]observation{
		{{term: 2, role: "leader", leader: 1}, {term: 3, role: "follower", leader: 2}},
		{{term: 2, role: "follower", leader: 1}, {term: 3, role: "leader", leader: 2}},
		{{term: 3, role: "candidate"}},
	}
	if v, n, terms := leaderViolations(ok); len(v) != 0 || n != 5 || terms != 2 {
		t.Fatalf("a clean history: violations %q, %d observations, %d terms", v, n, terms)
	}
	twoSelf := [][]observation{{{term: 4, role: "leader", leader: 1}}, {{term: 4, role: "leader", leader: 2}}}
	if v, _, _ := leaderViolations(twoSelf); len(v) != 1 || !strings.Contains(v[0], "term 4") {
		t.Fatalf("two nodes leading term 4: violations %q", v)
	}
	twoNamed := [][]observation{{{term: 5, role: "follower", leader: 2}}, {{term: 5, role: "follower", leader: 3}}}
	if v, _, _ := leaderViolations(twoNamed); len(v) != 1 {
		t.Fatalf("leaders 2 and 3 named for term 5: violations %q", v)
	}
}

// TestCertainDeletesNeedOneTerm: a receive begun after an acknowledged
// delete is flagged as a resurrection only when the monitor proves the
// delete and its receive were served in one term. Across an election (the
// new leader may not know the lease) the delete is not certain, and
// neither is it when too few nodes were polled after the acknowledgement.
func TestCertainDeletesNeedOneTerm(t *testing.T) {
	run := func(obs [][]observation) faults.Report {
		mo := &monitor{obs: obs}
		w := &workload{}
		w.Ck = faults.NewChecker(false, 0)
		w.Ck.Attempt(faults.Send{ID: "m1", Body: "m1|-|"}, at(0))
		w.Ck.Acked("m1", "id1", at(10))
		w.Ck.Received(faults.Receipt{ID: "m1", Body: "m1|-|", MessageID: "id1", Begin: at(500), End: at(510), Count: 1, Visibility: 30 * time.Second, Epoch: 1})
		l := faults.Lease{Count: 1, Epoch: 1}
		w.Ck.DeleteAttempted("m1", l, at(520))
		w.Ck.DeleteAcked("m1", l, -1, at(600))
		w.deletes = append(w.deletes, ackedDelete{id: "m1", lease: l, receiveBegin: at(500), ackedAt: at(600)})
		// The message comes back, and is deleted again.
		w.Ck.Received(faults.Receipt{ID: "m1", Body: "m1|-|", MessageID: "id1", Begin: at(1000), End: at(1010), Count: 2, Visibility: 30 * time.Second, Epoch: 2})
		w.Ck.DeleteAcked("m1", faults.Lease{Count: 2, Epoch: 2}, -1, at(1100))
		w.settleCertainty(mo)
		return w.Ck.Report()
	}
	steady := func(int) uint64 { return 7 }
	elected := func(ms int) uint64 { // term 8 from 550 ms on
		if ms >= 550 {
			return 8
		}
		return 7
	}
	if r := run([][]observation{obsEvery(steady), obsEvery(steady), obsEvery(steady)}); len(r.Resurrected) != 1 {
		t.Fatalf("one term throughout: want the resurrection flagged, got %s", r)
	}
	if r := run([][]observation{obsEvery(elected), obsEvery(elected), obsEvery(steady)}); len(r.Resurrected) != 0 {
		t.Fatalf("an election between receive and delete: want no verdict, got %s", r)
	}
	// Only one of three nodes polled after the acknowledgement: no bound.
	few := obsEvery(steady)[:55] // up to 550 ms
	if r := run([][]observation{obsEvery(steady), few, few}); len(r.Resurrected) != 0 {
		t.Fatalf("a minority polled after the delete: want no verdict, got %s", r)
	}
}

// TestHarnessCatchesLoss shows the whole harness can fail: on a real
// three-node cluster without faults, a rogue consumer the Checker does not
// know deletes messages behind its back (what a broker that loses
// acknowledged messages looks like to clients), and the run must report
// them lost, and nothing else.
func TestHarnessCatchesLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, 8*time.Second)
	if _, err := c.awaitStable(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(c, "loss", false)
	if err := w.createQueues(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx, rand.New(rand.NewPCG(1, 2)))
	poll.CheckFor(t, 30*time.Second, poll.True("some sends acknowledged", func() bool { return w.Ck.Report().Acked >= 200 }))

	// The rogue consumer, through node 2.
	m := c.nodes[1]
	_, client := m.current()
	url, err := m.queueURL(ctx, w.Main)
	if err != nil {
		t.Fatal(err)
	}
	stolen := map[string]bool{} // body ids
	poll.CheckFor(t, 30*time.Second, func() error {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		for _, msg := range out.Messages {
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: msg.ReceiptHandle}); err != nil {
				return err
			}
			id, _, _ := strings.Cut(aws.ToString(msg.Body), "|")
			stolen[id] = true
		}
		if len(stolen) < 20 {
			return fmt.Errorf("%d messages stolen", len(stolen))
		}
		return nil
	})
	// Drain until everything but the stolen messages is settled, so that
	// the verdict does not depend on how fast the drain is.
	w.StopProducers()
	rng := rand.New(rand.NewPCG(3, 4))
	poll.CheckFor(t, 2*time.Minute, func() error {
		if n := w.Ck.Unsettled(); n > len(stolen) {
			return fmt.Errorf("%d unsettled, %d stolen", n, len(stolen))
		}
		if empty, desc := w.queuesEmpty(ctx, rng); !empty {
			return errors.New(desc)
		}
		return nil
	})
	w.StopConsumers()
	r := w.Ck.Report()
	t.Logf("%d messages deleted behind the checker's back; %s", len(stolen), r)
	// (A stolen message is only reported settled if a consumer's delete
	// took longer than its lease and landed after the theft: in a run
	// without faults, practically never.)
	if len(r.Lost) == 0 || len(r.Lost) > len(stolen) {
		t.Fatalf("%d messages reported lost, %d stolen:\n%s", len(r.Lost), len(stolen), r.Details(30))
	}
	for _, l := range r.Lost {
		if id, _, _ := strings.Cut(l, " "); !stolen[id] {
			t.Fatalf("reported lost but not stolen: %s", l)
		}
	}
}
