package clusterfaults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/test/faults"
)

// at is a fixed instant plus ms milliseconds, for synthetic histories.
func at(ms int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
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

// metaWith is the metadata of an SDK response that carried the given
// X-Sluice-Term and X-Sluice-Node ("": no headers), as the SDK's
// raw-response middleware records it.
func metaWith(term, node string) middleware.Metadata {
	return metaWithEngine(term, node, "")
}

// metaWithEngine is metaWith with X-Sluice-Engine engine (none when
// empty).
func metaWithEngine(term, node, engine string) middleware.Metadata {
	resp := &smithyhttp.Response{Response: &http.Response{Header: http.Header{}}}
	if term != "" {
		resp.Header.Set("X-Sluice-Term", term)
		resp.Header.Set("X-Sluice-Node", node)
	}
	if engine != "" {
		resp.Header.Set("X-Sluice-Engine", engine)
	}
	_, md, _ := awsmiddleware.AddRawResponse{}.HandleDeserialize(context.Background(), middleware.DeserializeInput{},
		middleware.DeserializeHandlerFunc(func(context.Context, middleware.DeserializeInput) (middleware.DeserializeOutput, middleware.Metadata, error) {
			return middleware.DeserializeOutput{RawResponse: resp}, middleware.Metadata{}, nil
		}))
	return md
}

// TestDeletesCertainInTheirReceivesTerm: a delivery's epoch is the term
// its receive's answer carried. A delete answered in that same term is
// certain, so a later receive of the message is flagged as a
// resurrection; one answered in another term, or without a term, settles
// the message without being certain. Within one term a receive count
// must grow. Every answer's (term, node) reaches the monitor, where two
// leaders named for one term are a violation.
func TestDeletesCertainInTheirReceivesTerm(t *testing.T) {
	tgt := faults.Target[*member]{}
	run := func(deleteTerm string) (faults.Report, *workload, *monitor) {
		mo := &monitor{}
		w := newWorkload(nil, "t", false)
		w.served = mo.served
		w.Ck.Attempt(faults.Send{ID: "m1", Body: "m1|-|"}, at(0))
		w.Ck.Acked("m1", "id1", at(10))
		e := w.Hooks.Epoch(tgt, metaWith("7", "1"))
		w.Ck.Received(faults.Receipt{ID: "m1", Body: "m1|-|", MessageID: "id1", Begin: at(500), End: at(510), Count: 1, Visibility: 30 * time.Second, Epoch: e})
		l := faults.Lease{Count: 1, Epoch: e}
		w.Ck.DeleteAttempted("m1", l, at(520))
		w.Hooks.DeleteAcked(tgt, "m1", l, at(500), at(600), metaWith(deleteTerm, "1"))
		// The message comes back in term 8 after the lease, and is
		// deleted again.
		e2 := w.Hooks.Epoch(tgt, metaWith("8", "2"))
		w.Ck.Received(faults.Receipt{ID: "m1", Body: "m1|-|", MessageID: "id1", Begin: at(31000), End: at(31010), Count: 2, Visibility: 30 * time.Second, Epoch: e2})
		l2 := faults.Lease{Count: 2, Epoch: e2}
		w.Ck.DeleteAttempted("m1", l2, at(31020))
		w.Hooks.DeleteAcked(tgt, "m1", l2, at(31000), at(31100), metaWith("8", "2"))
		return w.Ck.Report(), w, mo
	}
	if r, w, _ := run("7"); len(r.Resurrected) != 1 || w.sameTerm.Load() != 2 || w.deletes.Load() != 2 {
		t.Fatalf("delete answered in its receive's term 7: want the resurrection flagged, got %d same-term deletes; %s", w.sameTerm.Load(), r)
	}
	for _, term := range []string{"8", ""} {
		if r, w, _ := run(term); r.Violations() != 0 || w.sameTerm.Load() != 1 {
			t.Fatalf("delete answered with term %q: want no verdict, got %d same-term deletes; %s", term, w.sameTerm.Load(), r)
		}
	}
	_, w, mo := run("7")
	if w.noTerm.Load() != 0 {
		t.Fatalf("%d deliveries without a term", w.noTerm.Load())
	}
	if v, n, terms := mo.leaderViolations(); len(v) != 0 || n != 2 || terms != 2 {
		t.Fatalf("answers from leader 1 in term 7 and 2 in term 8: violations %q, %d observations, %d terms", v, n, terms)
	}
	mo.served(0, 7, 3)
	if v, _, _ := mo.leaderViolations(); len(v) != 1 || !strings.Contains(v[0], "term 7") {
		t.Fatalf("answers from nodes 1 and 3 in term 7: violations %q", v)
	}
	// Another shard's terms are its own: node 2 leading shard 1 in term
	// 7 conflicts with no one; node 3 in the same term of shard 1 does.
	mo.served(1, 7, 2)
	mo.served(1, 8, 2)
	if v, _, _ := mo.leaderViolations(); len(v) != 1 || v[0] != "term 7: leaders [1 3]" {
		t.Fatalf("shard 1's term 7 led by node 2: violations %q, want shard 0's only", v)
	}
	mo.served(1, 7, 3)
	if v, _, _ := mo.leaderViolations(); len(v) != 2 || v[0] != "shard 1 term 7: leaders [2 3]" {
		t.Fatalf("shard 1's term 7 led by nodes 2 and 3: violations %q", v)
	}

	// Two receives in one term with the same count: a lease forgotten
	// without a crash.
	w = newWorkload(nil, "t", false)
	w.Ck.Attempt(faults.Send{ID: "m2", Body: "m2|-|"}, at(0))
	w.Ck.Acked("m2", "id2", at(10))
	for _, ms := range []int{100, 40000} {
		e := w.Hooks.Epoch(tgt, metaWith("9", "1"))
		w.Ck.Received(faults.Receipt{ID: "m2", Body: "m2|-|", MessageID: "id2", Begin: at(ms), End: at(ms + 10), Count: 1, Visibility: 30 * time.Second, Epoch: e})
	}
	if r := w.Ck.Report(); len(r.Corrupt) != 1 {
		t.Fatalf("receive count 1 twice in term 9: want it flagged, got %s", r)
	}

	// A fresh engine within a term (X-Sluice-Engine 2) is another
	// incarnation: the first engine's unsynced lease may be unknown to
	// it, so the same count again is no violation, and a delete it
	// answered for the first engine's receive is not certain.
	w = newWorkload(nil, "t", false)
	w.Ck.Attempt(faults.Send{ID: "m3", Body: "m3|-|"}, at(0))
	w.Ck.Acked("m3", "id3", at(10))
	e := w.Hooks.Epoch(tgt, metaWithEngine("9", "1", "1"))
	w.Ck.Received(faults.Receipt{ID: "m3", Body: "m3|-|", MessageID: "id3", Begin: at(100), End: at(110), Count: 1, Visibility: 30 * time.Second, Epoch: e})
	l := faults.Lease{Count: 1, Epoch: e}
	w.Ck.DeleteAttempted("m3", l, at(120))
	w.Hooks.DeleteAcked(tgt, "m3", l, at(100), at(200), metaWithEngine("9", "1", "2"))
	e2 := w.Hooks.Epoch(tgt, metaWithEngine("9", "1", "2"))
	w.Ck.Received(faults.Receipt{ID: "m3", Body: "m3|-|", MessageID: "id3", Begin: at(40000), End: at(40010), Count: 1, Visibility: 30 * time.Second, Epoch: e2})
	l2 := faults.Lease{Count: 1, Epoch: e2}
	w.Ck.DeleteAttempted("m3", l2, at(40020))
	w.Hooks.DeleteAcked(tgt, "m3", l2, at(40000), at(40100), metaWithEngine("9", "1", "2"))
	if r := w.Ck.Report(); r.Violations() != 0 || w.sameTerm.Load() != 1 {
		t.Fatalf("receive count 1 in term 9 by engines 1 and 2, the first delete answered by engine 2: want no verdict and 1 certain delete, got %d; %s", w.sameTerm.Load(), r)
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

// TestStuckGoroutines: from a node's log ending in a goroutine dump, the
// goroutines blocked a minute or more and those in a leadership's end are
// picked, the others left.
func TestStuckGoroutines(t *testing.T) {
	log := "time=… level=INFO msg=x\nSIGQUIT: quit\nPC=0x1 m=0 sigcode=0\n\n" +
		"goroutine 1 [running]:\nmain.main()\n\n" +
		"goroutine 7 [chan receive, 3 minutes]:\ngithub.com/sluicemq/sluice/internal/amqp.(*Server).Close()\n\n" +
		"goroutine 9 [chan receive]:\ngithub.com/sluicemq/sluice/internal/cluster.(*leadership).end(...)\n\n" +
		"goroutine 11 [select, 2 seconds]:\nnet/http.(*conn).serve()\n"
	got := stuckGoroutines(log, 10)
	if !strings.Contains(got, "goroutine 7 ") || !strings.Contains(got, "goroutine 9 ") || strings.Contains(got, "goroutine 1 ") || strings.Contains(got, "goroutine 11 ") {
		t.Fatalf("picked:\n%s", got)
	}
	// While the AMQP server's Close waits, its connections' goroutines
	// are picked whatever their time; without that wait, they are not.
	dump := func(closeFrame string) string {
		return "SIGQUIT: quit\nPC=0x1 m=0 sigcode=0\n\n" +
			"goroutine 11 [select, 2 seconds]:\nnet/http.(*conn).serve()\n\n" +
			"goroutine 12 [select]:\ngithub.com/sluicemq/sluice/internal/amqp.(*channel).run()\n\n" +
			"goroutine 13 [sync.WaitGroup.Wait, 1 minutes]:\ngithub.com/sluicemq/sluice/internal/amqp.(*Server)." + closeFrame + "(0x1)\n"
	}
	got = stuckGoroutines(dump("Close"), 10)
	if !strings.Contains(got, "goroutine 12 ") || !strings.Contains(got, "goroutine 13 ") || strings.Contains(got, "goroutine 11 ") {
		t.Fatalf("picked while the AMQP server closes:\n%s", got)
	}
	if got := stuckGoroutines(dump("Other"), 10); strings.Contains(got, "goroutine 12 ") || !strings.Contains(got, "goroutine 13 ") {
		t.Fatalf("picked while no Close waits:\n%s", got)
	}
	if stuckGoroutines("no dump here", 10) != "" {
		t.Fatal("picked goroutines from a log without a dump")
	}
}
