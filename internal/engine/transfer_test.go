package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// shardPair is two engines as two shards of a cluster: src holds the
// source queues, dst the dead-letter queue "dlq", which src sees as held
// elsewhere.
func shardPair(t *testing.T) (src, dst *fixture) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	dst = &fixture{t: t, st: newTestStore(t), clk: clk}
	dst.opts = func(o *Options) {
		o.QueueHeldElsewhere = func(name string) bool { return name == "q" }
		o.SourcesElsewhere = func(bool) (map[string][]string, error) {
			return map[string][]string{"dlq": {"q"}, "not-here": {"other"}}, nil
		}
	}
	dst.open()
	dst.create("dlq", nil)
	src = &fixture{t: t, st: newTestStore(t), clk: clk}
	src.opts = func(o *Options) {
		o.QueueHeldElsewhere = func(name string) bool { return name == "dlq" }
	}
	src.open()
	return src, dst
}

// moveAll is one mover round: the durable transfers of src imported into
// dst, then ended.
func moveAll(t *testing.T, src, dst *Engine) int {
	t.Helper()
	ts, err := src.Transfers(nil, 100, 1<<20)
	if err != nil {
		t.Fatalf("transfers: %v", err)
	}
	if len(ts) == 0 {
		return 0
	}
	if err := dst.ImportTransfers(ts[0].Target, ts); err != nil {
		t.Fatalf("import: %v", err)
	}
	ids := make([]TransferID, len(ts))
	for i, x := range ts {
		ids[i] = x.ID
	}
	if err := src.EndTransfers(ids); err != nil {
		t.Fatalf("end: %v", err)
	}
	return len(ts)
}

func TestDeadLetterToAQueueHeldElsewhere(t *testing.T) {
	src, dst := shardPair(t)
	src.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
	})
	res := src.send("q", Message{Body: []byte("poison"), Attributes: []Attribute{{Name: "k", DataType: "String", StringValue: "v"}}})
	d := src.recv("q", 1, 30*time.Second)
	out, err := src.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: "KeyError", Message: "no such customer", Terminal: true})
	if err != nil || !out.DeadLettered || out.Target != "dlq" {
		t.Fatalf("report: %+v %v", out, err)
	}
	if info, _ := src.e.GetQueue("q"); info.Visible+info.InFlight+info.Delayed != 0 {
		t.Fatalf("source still holds it: %+v", info)
	}
	if n := src.e.TransfersPending(); n != 1 {
		t.Fatalf("pending transfers %d, want 1", n)
	}
	// The transfer is in the source's store: a restart keeps it.
	src.restart()
	if n := src.e.TransfersPending(); n != 1 {
		t.Fatalf("pending transfers after restart %d, want 1", n)
	}
	ts, err := src.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 1 {
		t.Fatalf("transfers: %v %v", ts, err)
	}
	// A mover that imports and dies before ending the transfer imports
	// it again: the second import adds nothing.
	for range 2 {
		if err := dst.e.ImportTransfers("dlq", ts); err != nil {
			t.Fatalf("import: %v", err)
		}
	}
	if moveAll(t, src.e, dst.e) != 1 {
		t.Fatal("the transfer was not there for the next mover")
	}
	if n := src.e.TransfersPending(); n != 0 {
		t.Fatalf("pending transfers after the move %d", n)
	}
	dst.restart()
	got := dst.recv("dlq", 10, -1)
	if len(got) != 1 || got[0].MessageID != res[0].MessageID || string(got[0].Body) != "poison" {
		t.Fatalf("dlq holds %+v", got)
	}
	m := got[0]
	if m.DeadLetter == nil || m.DeadLetter.Reason != ReasonTerminal || m.DeadLetter.SourceQueue != "q" || m.DeadLetter.Attempts != 1 {
		t.Fatalf("dead-letter info %+v", m.DeadLetter)
	}
	if m.LastFailure == nil || m.LastFailure.ErrorClass != "KeyError" {
		t.Fatalf("failure %+v", m.LastFailure)
	}
	if len(m.Attributes) != 1 || m.Attributes[0].StringValue != "v" {
		t.Fatalf("attributes %+v", m.Attributes)
	}
	if moveAll(t, src.e, dst.e) != 0 {
		t.Fatal("an ended transfer came back")
	}
}

func TestDeadLetterElsewhereByReceiveCount(t *testing.T) {
	src, dst := shardPair(t)
	src.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 2}
	})
	for range 3 {
		src.send("q", body("x"))
	}
	// Two receives, each lease expiring; the third receive finds them
	// over the limit and moves them out.
	for i := 0; i < 2; i++ {
		if got := src.recv("q", 10, time.Second); len(got) != 3 {
			t.Fatalf("receive %d: %d messages", i, len(got))
		}
		src.clk.Advance(2 * time.Second)
	}
	src.stepUntil("three transfers", 100*time.Millisecond, func() bool {
		_ = src.recv("q", 10, time.Second)
		return src.e.TransfersPending() == 3
	})
	// A mover reads a bounded round (by count and by bytes, past the
	// first), then goes on after the last one it read.
	first, err := src.e.Transfers(nil, 10, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("a round bounded to 1 byte: %d transfers, %v; want the first alone", len(first), err)
	}
	rest, err := src.e.Transfers(&first[0].ID, 10, 1<<20)
	if err != nil || len(rest) != 2 || rest[0].ID == first[0].ID {
		t.Fatalf("the round after %s: %d transfers, %v; want the other 2", first[0].ID, len(rest), err)
	}
	if moveAll(t, src.e, dst.e) != 3 {
		t.Fatal("want 3 moved")
	}
	if got := dst.recvCopies("dlq", 3, -1); len(got) != 3 || got[0].ReceiveCount != 3 || got[0].DeadLetter == nil || got[0].DeadLetter.Attempts != 2 {
		t.Fatalf("dlq: %+v", got)
	}
}

func TestImportRefusesWithoutLosing(t *testing.T) {
	src, dst := shardPair(t)
	src.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
	})
	ts := terminalDeadLetter(t, src, "x")
	// The dead-letter queue no longer allows this source.
	if err := dst.e.UpdateQueue("dlq", func(c *QueueConfig) error {
		c.RedriveAllow = &RedriveAllowPolicy{Permission: "denyAll"}
		return nil
	}); err != nil {
		t.Fatalf("update: %v", err)
	}
	var ce *ConfigError
	if err := dst.e.ImportTransfers("dlq", ts); !errors.As(err, &ce) {
		t.Fatalf("import into a queue that refuses the source: %v", err)
	}
	if err := dst.e.ImportTransfers("missing", ts); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("import into no queue: %v", err)
	}
	if info, _ := dst.e.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("refused import left %d messages", info.Visible)
	}
	if n := src.e.TransfersPending(); n != 1 {
		t.Fatalf("the transfer is gone: %d pending", n)
	}
}

// TestRedriveToASourceHeldElsewhere: a dead-letter queue whose source
// lives elsewhere lists it, and a redrive moves its messages back there as
// transfers flagged as redrives (the source's own RedriveAllowPolicy does
// not apply), each with a new MessageId and its redrive history; the task
// completes once they have left.
func TestRedriveToASourceHeldElsewhere(t *testing.T) {
	src, dst := shardPair(t)
	src.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
		c.RedriveAllow = &RedriveAllowPolicy{Permission: "denyAll"} // q is no one's DLQ
	})
	var ids []string
	for i := range 3 {
		res := src.send("q", body(string(rune('a'+i))))
		ids = append(ids, res[0].MessageID)
		d := src.recv("q", 1, 30*time.Second)
		if _, err := src.e.ReportFailure("q", d[0].ReceiptHandle, Failure{Terminal: true}); err != nil {
			t.Fatal(err)
		}
	}
	if moveAll(t, src.e, dst.e) != 3 {
		t.Fatal("want 3 dead letters moved")
	}
	if got, err := dst.e.DeadLetterSources("dlq"); err != nil || !slices.Equal(got, []string{"q"}) {
		t.Fatalf("sources of dlq: %q, %v", got, err)
	}
	// It is a dead-letter queue here (alerts, metrics, the advisor); a
	// queue named elsewhere that this engine does not hold is not listed.
	if all := dst.e.DeadLetterQueues(); len(all) != 1 || !slices.Equal(all["dlq"], []string{"q"}) {
		t.Fatalf("dead-letter queues %v, want dlq alone, with q", all)
	}
	tk, err := dst.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Rate: 100})
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	dst.stepUntil("the task completed", 100*time.Millisecond, func() bool {
		got, err := dst.e.GetMoveTask(tk.ID)
		return err == nil && got.Status == TaskCompleted
	})
	if info, _ := dst.e.GetQueue("dlq"); info.Visible+info.InFlight != 0 {
		t.Fatalf("dlq still holds %+v", info)
	}
	ts, err := dst.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 3 || !ts[0].Redrive || ts[0].Target != "q" {
		t.Fatalf("redrive transfers %+v, %v", ts, err)
	}
	if moveAll(t, dst.e, src.e) != 3 {
		t.Fatal("want 3 redriven")
	}
	got := src.recv("q", 10, -1)
	if len(got) != 3 {
		t.Fatalf("q holds %d", len(got))
	}
	for _, m := range got {
		if slices.Contains(ids, m.MessageID) || m.Redrive == nil || !slices.Contains(ids, m.Redrive.OriginalMessageID) || m.Redrive.TaskID != tk.ID {
			t.Fatalf("redriven message %+v (redrive %+v)", m, m.Redrive)
		}
	}
}

// routeTo is a DeadLetterRouter that routes every dead letter to names,
// with envelope env.
type routeTo struct {
	names []string
	env   []byte
}

func (r routeTo) RouteDeadLetter(string, *DeadLetter) ([]string, []byte) { return r.names, r.env }

// TestRoutedDeadLetterElsewhere: a routed dead letter (an AMQP dead-letter
// exchange) whose targets are a queue here and a queue held elsewhere goes
// to both: a copy here, a transfer there, with the router's envelope. Only
// to a queue elsewhere, it is a transfer, not a drop.
func TestRoutedDeadLetterElsewhere(t *testing.T) {
	src, dst := shardPair(t)
	src.opts = func(o *Options) {
		o.QueueHeldElsewhere = func(name string) bool { return name == "dlq" }
		o.DeadLetterRouter = routeTo{names: []string{"here", "dlq"}, env: []byte("x-death")}
	}
	src.restart()
	src.create("here", nil)
	src.create("amqp", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Routed: true} })
	src.send("amqp", body("rejected"))
	d := src.recv("amqp", 1, 30*time.Second)
	if _, err := src.e.Reject("amqp", []string{d[0].ReceiptHandle}, Failure{}); err != nil {
		t.Fatal(err)
	}
	if got := src.recvCopies("here", 1, -1); string(got[0].Envelope) != "x-death" {
		t.Fatalf("local copy %+v", got)
	}
	if moveAll(t, src.e, dst.e) != 1 {
		t.Fatal("want the transfer to dlq")
	}
	got := dst.recv("dlq", 10, -1)
	if len(got) != 1 || string(got[0].Body) != "rejected" || string(got[0].Envelope) != "x-death" {
		t.Fatalf("dlq holds %+v", got)
	}
	if info, _ := src.e.GetQueue("amqp"); info.Visible+info.InFlight != 0 || info.Dropped != 0 {
		t.Fatalf("source %+v", info)
	}
}

// TestImportRecordsSweptAfterTheirKeep: an import record stays importKeep
// after its import (a deposed mover's late import of the same transfer is
// still a no-op), and an import after that sweeps it.
func TestImportRecordsSweptAfterTheirKeep(t *testing.T) {
	src, dst := shardPair(t)
	src.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
	})
	deadLetter := func() []Transfer {
		t.Helper()
		ts := terminalDeadLetter(t, src, "x")
		if err := dst.e.ImportTransfers("dlq", ts); err != nil {
			t.Fatal(err)
		}
		if err := src.e.EndTransfers([]TransferID{ts[0].ID}); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	first := deadLetter()
	// Within importKeep a late import of the same transfer adds nothing.
	src.clk.Advance(importKeep - time.Second)
	if err := dst.e.ImportTransfers("dlq", first); err != nil {
		t.Fatal(err)
	}
	if info, _ := dst.e.GetQueue("dlq"); info.Visible != 1 {
		t.Fatalf("dlq holds %d, want 1", info.Visible)
	}
	// A minute on (imports sweep at most once a minute), past its keep.
	src.clk.Advance(importSweepEvery + time.Second)
	deadLetter() // its import sweeps the first one's record
	if _, err := dst.st.Get(importKey(first[0].ID)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("import record of %s after importKeep: %v, want swept", first[0].ID, err)
	}
}

// terminalDeadLetter sends body to src's queue q, receives it and reports
// a terminal failure, and returns the one transfer that made (src holds no
// other).
func terminalDeadLetter(t *testing.T, src *fixture, body string) []Transfer {
	t.Helper()
	src.send("q", Message{Body: []byte(body)})
	d := src.recv("q", 1, 30*time.Second)
	if _, err := src.e.ReportFailure("q", d[0].ReceiptHandle, Failure{Terminal: true}); err != nil {
		t.Fatal(err)
	}
	ts, err := src.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 1 {
		t.Fatalf("transfers %v, %v", ts, err)
	}
	return ts
}

// pokeWatchStore is a store that records, at each write of a batch
// carrying a transfer record, whether the engine had already told the
// mover (TransferReady).
type pokeWatchStore struct {
	store.Store
	ready func() <-chan struct{}
	early int // transfer batches written after the mover was told
	seen  int // transfer batches written
}

func (s *pokeWatchStore) Write(b *store.Batch, durable bool) (store.Pending, error) {
	for _, op := range b.Ops {
		if op.Kind == store.OpSet && len(op.Key) > 0 && op.Key[0] == prefixTransfer {
			s.seen++
			if s.ready != nil && len(s.ready()) > 0 {
				s.early++
			}
			break
		}
	}
	return s.Store.Write(b, durable)
}

// TestTransferReadyAfterTheWrite: the mover is told of a transfer only
// once the batch carrying it is in the store. Told before (as until
// 2026-12-01), its read could run before the write, find nothing, and
// leave the dead letter waiting out a backoff of up to 30 s.
func TestTransferReadyAfterTheWrite(t *testing.T) {
	ws := &pokeWatchStore{Store: newTestStore(t)}
	src := &fixture{t: t, st: ws, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	src.opts = func(o *Options) { o.QueueHeldElsewhere = func(name string) bool { return name == "dlq" } }
	src.open()
	ws.ready = src.e.TransferReady
	src.create("q", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1} })
	for i := range 3 {
		src.send("q", Message{Body: []byte("poison")})
		d := src.recv("q", 1, 30*time.Second)
		switch i {
		case 0: // a failure report
			if _, err := src.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: "E", Terminal: true}); err != nil {
				t.Fatal(err)
			}
		default: // over its receive count at the next receive
			if errs, err := src.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d[0].ReceiptHandle}}); err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
			if got := src.recv("q", 1, 30*time.Second); len(got) != 0 {
				t.Fatalf("received %d, want the message dead-lettered", len(got))
			}
		}
		select {
		case <-src.e.TransferReady():
		default:
			t.Fatalf("dead letter %d: the mover was not told", i+1)
		}
	}
	if ws.seen != 3 || ws.early != 0 {
		t.Fatalf("%d transfer batches, %d written after the mover was told; want 3, 0", ws.seen, ws.early)
	}
}

// TestMoveTaskWhenOtherShardsDoNotAnswer: a redrive out of a queue
// whose only sources would be on other shards is refused with
// ErrUnavailable (retryable) when those shards' sources cannot be read,
// not with ErrNotDeadLetterQueue; one with a source here starts anyway;
// and the API readers ask for a fresh answer where the periodic ones do
// not.
func TestMoveTaskWhenOtherShardsDoNotAnswer(t *testing.T) {
	var asked []bool
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.opts = func(o *Options) {
		o.SourcesElsewhere = func(fresh bool) (map[string][]string, error) {
			asked = append(asked, fresh)
			return nil, errors.New("shard 2's leader did not answer")
		}
	}
	f.open()
	f.create("graves", nil)
	f.create("local-dlq", nil)
	f.create("src", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "local-dlq", MaxReceiveCount: 1} })
	if _, err := f.e.StartMoveTask(MoveTaskSpec{Source: "graves"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a redrive whose sources are unreadable: %v, want ErrUnavailable", err)
	}
	if _, err := f.e.StartMoveTask(MoveTaskSpec{Source: "local-dlq"}); err != nil {
		t.Fatalf("a redrive with a source on this shard: %v", err)
	}
	if !slices.Contains(asked, true) {
		t.Fatalf("the redrive's check asked %v, want a fresh answer", asked)
	}
	asked = nil
	_ = f.e.DeadLetterQueues()
	if !slices.Equal(asked, []bool{false}) {
		t.Fatalf("DeadLetterQueues asked %v, want one answer that need not be fresh", asked)
	}
}
