package clusterfaults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluicemq/sluice/test/crash"
	"github.com/sluicemq/sluice/test/faults"
)

// Producers pause while the Checker's backlog exceeds these.
const (
	maxBacklog     = 3000
	maxBacklogFIFO = 600 // a poison message holds its group for up to three leases
)

// newClient is an SDK client with one attempt per call (a retry would blur
// which sends were acknowledged) and the given request timeout.
func newClient(url string, timeout time.Duration) *sqs.Client {
	return crash.NewClient(url, "clusterfaults", faults.Producers+faults.Consumers+4, timeout)
}

// workload drives producers and consumers through every node of a cluster
// and records the history in a faults.Checker.
//
// Epochs: the single-node harness numbers broker incarnations, which the
// test itself creates by killing the broker. In a cluster an incarnation
// is a leader's term: an engine opens per leadership, so within one term
// no lease is forgotten and receive counts only grow. Every answer a
// leader's server gives carries its term (X-Sluice-Term, also through a
// follower that forwarded the request), so a delivery's epoch is the term
// that served its receive, and an acknowledged delete is certain — no
// later receive may return the message — when the same term served it
// (Checker.DeleteAcked then also checks the lease could not have ended).
// A delete answered in another term settles the message without being
// certain: the new leader may not have known the lease, and a standard
// queue acknowledges a stale handle without deleting.
type workload struct {
	faults.Workload[*member]
	c *testCluster

	// epochs numbers the deliveries whose answer carried no term (there
	// should be none; counted in noTerm), above any real term.
	epochs atomic.Int64
	noTerm atomic.Int64
	// deletes counts acknowledged deletes, sameTerm those answered in
	// the term of their receive.
	deletes, sameTerm atomic.Int64
	// served records the (shard, term, node) of every answer, for the
	// monitor.
	served func(shard, term, node uint64)

	errs  sync.Map // "op: message" → *atomic.Int64
	nerrs atomic.Int64

	// pub, on a workload of another shard than AMQP's (spreadWorkloads),
	// publishes to its standard source queue over AMQP as well.
	pub *amqpLoad
}

// noTermEpoch is where the epochs of deliveries without a term start.
const noTermEpoch = 1 << 40

// servedBy is the shard, term and node that served the request whose
// response metadata is meta (X-Sluice-Shard, absent with one shard;
// X-Sluice-Term, X-Sluice-Node); false if it carried no term.
func servedBy(meta middleware.Metadata) (shard, term, node uint64, ok bool) {
	resp, _ := awsmiddleware.GetRawResponse(meta).(*smithyhttp.Response)
	if resp == nil {
		return 0, 0, 0, false
	}
	term, err := strconv.ParseUint(resp.Header.Get("X-Sluice-Term"), 10, 62)
	if err != nil || term == 0 {
		return 0, 0, 0, false
	}
	node, _ = strconv.ParseUint(resp.Header.Get("X-Sluice-Node"), 10, 64)
	shard, _ = strconv.ParseUint(resp.Header.Get("X-Sluice-Shard"), 10, 64)
	return shard, term, node, true
}

// termOf is the epoch of a delivery received in the response of meta:
// the incarnation that served it, its term and the number of its engine
// within the term (X-Sluice-Engine: a leader whose engine failed serves on
// with a fresh one, which may not know a lease the failed one answered),
// as term×engineEpochs + engine, so epochs sort as the incarnations ran.
func (w *workload) termOf(meta middleware.Metadata) (int, bool) {
	shard, term, node, ok := servedBy(meta)
	if !ok {
		return 0, false
	}
	if w.served != nil {
		w.served(shard, term, node)
	}
	return int(term)*engineEpochs + engineOf(meta), true
}

// engineEpochs bounds the engines counted within one term (a leader opens
// at most one a second); an answer of a later one shares the last epoch.
const engineEpochs = 1 << 10

// engineOf is the X-Sluice-Engine of the response of meta, 1 when it has
// none (a node of an older build), at most engineEpochs-1.
func engineOf(meta middleware.Metadata) int {
	resp, _ := awsmiddleware.GetRawResponse(meta).(*smithyhttp.Response)
	if resp == nil {
		return 1
	}
	e, err := strconv.Atoi(resp.Header.Get("X-Sluice-Engine"))
	if err != nil || e < 1 {
		return 1
	}
	return min(e, engineEpochs-1)
}

// dlqEpochs sets the epochs of a workload's DLQ deliveries above every
// term of its source's shard when the two queues live on different
// shards (PolicyLater, spreadWorkloads): the Checker orders a message's
// deliveries by epoch, then receive count, and the terms of two shards
// have no common order — a DLQ delivery served in term 2 of its shard
// comes after the source's deliveries served in term 5 of theirs. So for
// such a pair the Checker judges losses, bodies, receive counts and
// resurrection within each queue, but cannot see a source delivery after
// a DLQ delivery (a message in both queues would show as a second
// dead-lettering instead).
const dlqEpochs = 1 << 36

// epochOf is the Checker's epoch of an answer served in term by t.
func (w *workload) epochOf(t faults.Target[*member], term int) int {
	if w.PolicyLater && strings.HasSuffix(t.URL, "/"+w.DLQ) {
		return dlqEpochs + term
	}
	return term
}

// clockSlack is how far a SentTimestamp may be from the time its message
// was sent (faults.Checker.ClockSlack): far below the skewed node's 20 s.
const clockSlack = 2 * time.Second

func newWorkload(c *testCluster, run string, fifo bool) *workload {
	w := &workload{c: c}
	w.FIFO, w.Run, w.Ck = fifo, run, faults.NewChecker(fifo, faults.MaxReceiveCount)
	// The cluster's clock is the median of the voters' (all on this
	// machine's clock but one skewed node): every SentTimestamp must be
	// the true send time, give or take the slew and the harness's own
	// scheduling.
	w.Ck.ClockSlack = clockSlack
	w.Ck.UnorderedFrom = noTermEpoch // a delivery whose answer carried no term
	w.Main, w.DLQ, w.Backlog = "cf", "cf-dlq", maxBacklog
	if fifo {
		w.Main, w.DLQ, w.Backlog = "cf.fifo", "cf-dlq.fifo", maxBacklogFIFO
	}
	w.Hooks = faults.Hooks[*member]{
		Pick: func(ctx context.Context, rng *rand.Rand, queue string) (faults.Target[*member], error) {
			m, client, url, err := w.pick(ctx, rng, queue)
			return faults.Target[*member]{Client: client, URL: url, Node: m}, err
		},
		Note: func(_ faults.Target[*member], op string, err error) { w.note(op, err) },
		Pause: func(ctx context.Context, _ faults.Target[*member]) {
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing after an error
		},
		Epoch: func(t faults.Target[*member], meta middleware.Metadata) int {
			if term, ok := w.termOf(meta); ok {
				return w.epochOf(t, term)
			}
			w.noTerm.Add(1)
			return noTermEpoch + int(w.epochs.Add(1))
		},
		DeleteAcked: func(t faults.Target[*member], id string, l faults.Lease, _, at time.Time, meta middleware.Metadata) {
			// Epoch -1 matches no delivery: the delete settles the
			// message without being certain.
			epoch := -1
			if term, ok := w.termOf(meta); ok && w.epochOf(t, term) == l.Epoch {
				epoch = l.Epoch
				w.sameTerm.Add(1)
			}
			w.deletes.Add(1)
			w.Ck.DeleteAcked(id, l, epoch, at)
		},
	}
	return w
}

// createQueues makes the DLQ and the source queue (with its redrive
// policy) through node 1.
func (w *workload) createQueues(ctx context.Context) error {
	_, client := w.c.nodes[0].current()
	return w.CreateQueues(ctx, client)
}

// pick returns a random node that is not killed, its client and its URL
// for queue. Paused and partitioned nodes are picked too: their clients
// see what real clients of such a node see.
func (w *workload) pick(ctx context.Context, rng *rand.Rand, queue string) (*member, *sqs.Client, string, error) {
	for ctx.Err() == nil {
		m := w.c.nodes[rng.IntN(len(w.c.nodes))]
		srv, client := m.current()
		if srv == nil {
			faults.SleepCtx(ctx, time.Millisecond) // no spinning while nodes are down
			continue
		}
		u, err := m.queueURL(ctx, queue)
		if err != nil {
			w.note("url", err)
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing before another node is tried
			continue
		}
		return m, client, u, nil
	}
	return nil, nil, "", ctx.Err()
}

// note counts an error by kind. Faults make errors expected; they are
// reported, not judged (only what was acknowledged is owed).
func (w *workload) note(op string, err error) {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		op += fmt.Sprintf(" (HTTP %d)", re.HTTPStatusCode())
	}
	v, _ := w.errs.LoadOrStore(faults.ErrorKind(op, err, 80), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	w.nerrs.Add(1)
}

// errorSummary lists the errors seen, most frequent kinds first (up to 24).
func (w *workload) errorSummary() string {
	type kv struct {
		k string
		n int64
	}
	var all []kv
	w.errs.Range(func(k, v any) bool {
		all = append(all, kv{k.(string), v.(*atomic.Int64).Load()})
		return true
	})
	if len(all) == 0 {
		return "none"
	}
	for i := range all { // a short insertion sort: few kinds
		for j := i; j > 0 && all[j].n > all[j-1].n; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	var parts []string
	for _, e := range all[:min(len(all), 24)] {
		parts = append(parts, fmt.Sprintf("%q×%d", e.k, e.n))
	}
	return strings.Join(parts, ", ")
}

// queuesEmpty reports whether the broker, asked through any live node,
// counts no message in either queue.
func (w *workload) queuesEmpty(ctx context.Context, rng *rand.Rand) (bool, string) {
	var desc []string
	empty := true
	for _, name := range []string{w.Main, w.DLQ} {
		_, client, url, err := w.pick(ctx, rng, name)
		if err != nil {
			return false, err.Error()
		}
		e, d, err := faults.QueueCounts(ctx, client, url, name)
		if err != nil {
			return false, err.Error()
		}
		desc = append(desc, d)
		empty = empty && e
	}
	return empty, strings.Join(desc, "; ")
}

// drain stops the producers, lets the consumers settle every acknowledged
// message until both queues are empty and also (when not nil) reports
// true (faults.Workload.Drain, for up to limit), then stops the consumers.
// held, when not nil, reports whether the broker still holds messages
// elsewhere than in the two SQS queues. It reports whether the drain
// ended with messages still held (then what is not settled may be queued
// rather than lost).
func (w *workload) drain(t testing.TB, ctx context.Context, limit time.Duration, also func(context.Context, *rand.Rand) (bool, string), held func(context.Context, *rand.Rand) bool) (stillHeld bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	return w.Drain(t, ctx, limit, func() (bool, string) {
		empty, desc := w.queuesEmpty(ctx, rng)
		if empty && also != nil {
			empty, desc = also(ctx, rng)
		}
		return empty, desc
	}, func() bool {
		if empty, _ := w.queuesEmpty(ctx, rng); !empty {
			return true
		}
		return held != nil && held(ctx, rng)
	})
}
