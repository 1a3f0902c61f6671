package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sluicemq/sluice/test/crash"
)

// Environment knobs. `make faults` sets SLUICE_FAULTS_BUDGET=5m.
const (
	envBudget = "SLUICE_FAULTS_BUDGET" // total load time shared by the tests (default 90s)
	envSeed   = "SLUICE_FAULTS_SEED"   // reproduce a run's random choices
	envChild  = "SLUICE_FAULTS_CHILD"  // set in the disk-fault child process
)

const defaultBudget = 90 * time.Second

// TestMain builds the server once (as test/crash does) unless -short, and
// turns the test binary into the disk-fault broker when it is started as
// one (see diskfault_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runDiskChild(os.Args[1:]))
	}
	os.Exit(crash.Main(m, "sluice-faults-bin-"))
}

// budget returns this test's share of SLUICE_FAULTS_BUDGET: the time it
// spends under load and faults (drains and restarts come on top).
func budget(t *testing.T, share float64) time.Duration {
	t.Helper()
	if testing.Short() {
		t.Skip("fault tests run the broker under load for tens of seconds")
	}
	total := defaultBudget
	if s := os.Getenv(envBudget); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envBudget, s)
		}
		total = d
	}
	return time.Duration(float64(total) * share)
}

// seed returns the run's seed (logged, settable with SLUICE_FAULTS_SEED).
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
		s = n
	}
	t.Logf("%s=%d", envSeed, s)
	return s
}

func binary(t *testing.T) string {
	t.Helper()
	return crash.Binary(t)
}

// incarnation is one life of the broker and the client bound to it.
type incarnation struct {
	srv    *crash.Server
	client *sqs.Client
	urls   map[string]string // queue name → URL
	dead   chan struct{}     // closed just before the process is killed
	epoch  int               // crashes before this incarnation (Receipt.Epoch)
}

func (inc *incarnation) Dead() <-chan struct{} { return inc.dead }

// newClient is an SDK client with one attempt per call (a retry would blur
// which sends were acknowledged) and the given request timeout.
func newClient(url string, timeout time.Duration) *sqs.Client {
	return crash.NewClient(url, "faults", Producers+Consumers+4, timeout)
}

// workload is the shared Workload against one broker process that the
// test kills and restarts: requests go to the current incarnation, and a
// delivery's epoch is the number of crashes before its incarnation.
type workload struct {
	Workload[*incarnation]
	timeout time.Duration // client request timeout
	cl      *crash.Lives[*incarnation]
	crashes int // kills so far; the next incarnation's epoch

	errs     sync.Map // "op: message" → *atomic.Int64, errors on live incarnations
	liveErrs atomic.Int64
}

func newWorkload(fifo bool, run string, timeout time.Duration) *workload {
	w := &workload{timeout: timeout, cl: crash.NewLives[*incarnation]()}
	w.FIFO, w.Run, w.Ck = fifo, run, NewChecker(fifo, MaxReceiveCount)
	w.Main, w.DLQ, w.Backlog = "faults", "faults-dlq", 5000
	if fifo {
		w.Main, w.DLQ, w.Backlog = "faults.fifo", "faults-dlq.fifo", 600
	}
	w.Hooks = Hooks[*incarnation]{
		Pick: func(ctx context.Context, _ *rand.Rand, queue string) (Target[*incarnation], error) {
			inc, err := w.cl.Current(ctx)
			if err != nil {
				return Target[*incarnation]{}, err
			}
			return Target[*incarnation]{Client: inc.client, URL: inc.urls[queue], Node: inc}, nil
		},
		Note:  func(t Target[*incarnation], op string, err error) { w.liveError(t.Node, op, err) },
		Pause: func(ctx context.Context, t Target[*incarnation]) { w.cl.AfterError(ctx, t.Node) },
		// A handle whose lease has ended is refused (FIFO refuses such a
		// delete too): expected, not an error of the broker.
		Refused: func(op, msg string) bool {
			return strings.Contains(strings.ToLower(msg), "receipt handle") || op == "release" && strings.Contains(msg, "MessageNotInflight")
		},
		Epoch: func(t Target[*incarnation], _ middleware.Metadata) int { return t.Node.epoch },
		DeleteAcked: func(t Target[*incarnation], id string, l Lease, _, at time.Time, _ middleware.Metadata) {
			w.Ck.DeleteAcked(id, l, t.Node.epoch, at)
		},
	}
	return w
}

// connect makes an incarnation for srv, looking up the queue URLs.
func (w *workload) connect(ctx context.Context, srv *crash.Server) (*incarnation, error) {
	inc := &incarnation{srv: srv, client: newClient(srv.URL(), w.timeout), urls: map[string]string{}, dead: make(chan struct{}), epoch: w.crashes}
	for _, name := range []string{w.Main, w.DLQ} {
		out, err := inc.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("GetQueueUrl %s: %w", name, err)
		}
		inc.urls[name] = aws.ToString(out.QueueUrl)
	}
	return inc, nil
}

// down marks the current incarnation dead (before it is killed) and
// returns it; workers wait until the next set.
func (w *workload) down() *incarnation {
	old := w.cl.Get()
	w.cl.Set(nil)
	close(old.dead)
	return old
}

func (w *workload) liveError(inc *incarnation, op string, err error) {
	select {
	case <-inc.dead:
		return // the broker was killed under this request
	default:
	}
	v, _ := w.errs.LoadOrStore(ErrorKind(op, err, 100), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	w.liveErrs.Add(1)
}

// errorSummary lists the errors seen on live incarnations.
func (w *workload) errorSummary() string {
	var parts []string
	w.errs.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%q×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// queuesEmpty reports whether the broker counts no message in either queue.
func (w *workload) queuesEmpty(ctx context.Context, inc *incarnation) (bool, string) {
	var desc []string
	empty := true
	for _, name := range []string{w.Main, w.DLQ} {
		e, d, err := QueueCounts(ctx, inc.client, inc.urls[name], name)
		if err != nil {
			return false, err.Error()
		}
		desc = append(desc, d)
		empty = empty && e
	}
	return empty, strings.Join(desc, "; ")
}

// drain stops the producers, lets the consumers settle every acknowledged
// message until both queues are empty (Workload.Drain, for up to 90 s),
// then stops the consumers.
func (w *workload) drain(t *testing.T, ctx context.Context) {
	t.Helper()
	empty := func() (bool, string) { return w.queuesEmpty(ctx, w.cl.Get()) }
	w.Drain(t, ctx, 90*time.Second, empty, func() bool { e, _ := empty(); return !e })
}

// verdict logs the figures and fails the test on any violation.
func (w *workload) verdict(t *testing.T, extra string) Report {
	t.Helper()
	r := w.Ck.Report()
	t.Logf("%s; requests %d; %s", r, w.Ops.Load(), extra)
	t.Logf("errors on live incarnations: %s", w.errorSummary())
	if r.Violations() > 0 {
		t.Errorf("the checker found violations:\n%s", r.Details(10))
	}
	if r.Acked == 0 {
		t.Errorf("no send was acknowledged: the test proves nothing")
	}
	return r
}
