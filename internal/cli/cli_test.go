package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// fixture is a real engine over memstore on the real clock, the admin
// handler behind a real listener, and the CLI pointed at it through
// $SLUICE_ENDPOINT. Queues: q dead-letters into dlq; other is plain.
type fixture struct {
	t   *testing.T
	eng *engine.Engine
	url string
	// terminal makes commands believe stderr is a terminal.
	terminal bool
	// now, when set, is the commands' clock (Env.Now).
	now func() time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	eng, err := engine.Open(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, admin.New(eng, admin.Options{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); eng.Close() })
	f := &fixture{t: t, eng: eng, url: srv.URL}
	cfg := engine.DefaultQueueConfig()
	f.must(eng.CreateQueue("dlq", cfg, nil))
	f.must(eng.CreateQueue("other", cfg, nil))
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	f.must(eng.CreateQueue("q", cfg, nil))
	return f
}

func (f *fixture) must(_ engine.QueueInfo, _ bool, err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// poison sends n messages to q and dead-letters them with a terminal
// failure of the given class; it returns their ids.
func (f *fixture) poison(n int, class string) []string {
	f.t.Helper()
	var msgs []engine.Message
	for range n {
		msgs = append(msgs, engine.Message{Body: []byte("order for " + class), Attributes: []engine.Attribute{{Name: "tenant", DataType: "String", StringValue: "acme"}}})
	}
	var ids []string
	for len(msgs) > 0 {
		k := min(len(msgs), engine.MaxBatch)
		res, err := f.eng.Send("q", msgs[:k])
		if err != nil {
			f.t.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.MessageID)
		}
		msgs = msgs[k:]
	}
	for got := 0; got < n; {
		d, err := f.eng.Receive(f.t.Context(), "q", engine.ReceiveRequest{Max: 10, WaitSet: true})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, m := range d {
			if _, err := f.eng.ReportFailure("q", m.ReceiptHandle, engine.Failure{
				ErrorClass: class, Message: "cannot process " + m.MessageID, Trace: "at worker.go:10\nat main.go:3", ConsumerVersion: "v2", Terminal: true,
			}); err != nil {
				f.t.Fatal(err)
			}
		}
		got += len(d)
	}
	return ids
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs a CLI command in-process with stdin.
func (f *fixture) run(cmd func(context.Context, []string, *Env) int, stdin string, args ...string) result {
	f.t.Helper()
	var out, errb bytes.Buffer
	env := &Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			if k == EndpointEnv {
				return f.url
			}
			return ""
		},
		PollInterval: 5 * time.Millisecond,
		Terminal:     f.terminal,
		Now:          f.now,
	}
	code := cmd(f.t.Context(), args, env)
	return result{code, out.String(), errb.String()}
}

func (f *fixture) dlq(stdin string, args ...string) result {
	f.t.Helper()
	return f.run(DLQ, stdin, args...)
}

func wantOK(t *testing.T, r result, contains ...string) {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, c := range contains {
		if !strings.Contains(r.stdout, c) {
			t.Fatalf("stdout lacks %q:\n%s", c, r.stdout)
		}
	}
}

func wantExit(t *testing.T, r result, code int, stderr string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, stderr) {
		t.Fatalf("exit %d (want %d), stderr %q (want %q)\nstdout: %s", r.code, code, r.stderr, stderr, r.stdout)
	}
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	return v
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

func TestQueuesAndDLQList(t *testing.T) {
	f := newFixture(t)
	f.poison(3, "KeyError")
	r := f.run(Queues, "")
	wantOK(t, r, "NAME", "VISIBLE", "OLDEST")
	ls := lines(r.stdout)
	if len(ls) != 4 || !strings.HasPrefix(ls[1], "dlq ") || !strings.Contains(ls[3], "dlq") || !strings.Contains(ls[1], " q") {
		t.Fatalf("queues table:\n%s", r.stdout)
	}
	list := decode[api.QueueList](t, f.run(Queues, "", "--json"))
	if len(list.Queues) != 3 || list.Queues[0].Visible != 3 || !list.Queues[0].IsDeadLetterQueue {
		t.Fatalf("queues json %+v", list)
	}

	r = f.dlq("", "list")
	wantOK(t, r, "DEPTH", "SOURCES")
	ls = lines(r.stdout)
	if len(ls) != 2 || !strings.HasPrefix(ls[1], "dlq ") || !strings.HasSuffix(ls[1], " q") || !strings.Contains(ls[1], " 3 ") {
		t.Fatalf("dlq list table:\n%s", r.stdout)
	}
	dlqs := decode[api.QueueList](t, f.dlq("", "list", "--json"))
	if len(dlqs.Queues) != 1 || dlqs.Queues[0].Name != "dlq" || dlqs.Queues[0].Depth() != 3 {
		t.Fatalf("dlq list json %+v", dlqs)
	}
}

func TestPeekAndShow(t *testing.T) {
	f := newFixture(t)
	keys := f.poison(3, "KeyError")
	f.poison(2, "TimeoutError")

	r := f.dlq("", "peek", "dlq")
	wantOK(t, r, "ERROR-CLASS", "KeyError", "TimeoutError", keys[0])
	if n := len(lines(r.stdout)); n != 6 {
		t.Fatalf("peek shows %d lines:\n%s", n, r.stdout)
	}
	// Flags after the queue name, a filter, and paging.
	r = f.dlq("", "peek", "dlq", "--error-class", "KeyError", "--limit", "2", "--since", "1h")
	wantOK(t, r, keys[0], keys[1], "more: sluice dlq peek dlq --cursor ")
	if strings.Contains(r.stdout, "TimeoutError") || strings.Contains(r.stdout, keys[2]) {
		t.Fatalf("filter or limit ignored:\n%s", r.stdout)
	}
	cursor := strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, "--cursor ")+len("--cursor "):])
	page := decode[api.Page](t, f.dlq("", "peek", "dlq", "--error-class", "KeyError", "--cursor", cursor, "--json"))
	if len(page.Messages) != 1 || page.Messages[0].ID != keys[2] || page.Next != "" {
		t.Fatalf("second page %+v", page)
	}
	wantOK(t, f.dlq("", "peek", "dlq", "--attribute", "tenant=nobody"), "no messages in dlq match")
	// Peeking changed nothing.
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 5 || info.Received != 0 {
		t.Fatalf("peek disturbed the queue: %+v", info)
	}

	r = f.dlq("", "show", "dlq", keys[0])
	wantOK(t, r, "id:", keys[0], "reason:", "terminal", "error class:", "KeyError", "version:", "v2", "    at main.go:3", "tenant (String) = acme", "body:\norder for KeyError")
	m := decode[api.Message](t, f.dlq("", "show", "dlq", keys[0], "--json"))
	if m.LastFailure == nil || m.LastFailure.Trace != "at worker.go:10\nat main.go:3" {
		t.Fatalf("show json %+v", m)
	}
	wantExit(t, f.dlq("", "show", "dlq", "00000000-0000-4000-8000-000000000000"), ExitFail, "MessageNotFound")
	wantExit(t, f.dlq("", "show", "nope", keys[0]), ExitFail, "QueueNotFound")
}

func TestDelete(t *testing.T) {
	f := newFixture(t)
	keys := f.poison(3, "KeyError")
	f.poison(2, "TimeoutError")

	wantExit(t, f.dlq("", "delete", "dlq"), ExitUsage, "refusing to delete every message")
	wantExit(t, f.dlq("", "delete", "dlq", "--all", "--error-class", "KeyError"), ExitUsage, "cannot be combined")
	wantExit(t, f.dlq("", "delete", "dlq", keys[0], "--all"), ExitUsage, "not several")
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 5 {
		t.Fatal("a refused delete deleted")
	}
	wantOK(t, f.dlq("", "delete", "dlq", keys[0]), "deleted 1 message(s) from dlq")
	wantExit(t, f.dlq("", "delete", "dlq", keys[0]), ExitFail, "MessageNotFound")
	res := decode[api.DeleteResult](t, f.dlq("", "delete", "dlq", "--error-class", "KeyError", "--json"))
	if res.Deleted != 2 {
		t.Fatalf("delete by filter %+v", res)
	}
	wantOK(t, f.dlq("", "delete", "--all", "dlq"), "deleted 2 message(s)")
}

func TestExportImport(t *testing.T) {
	f := newFixture(t)
	ids := f.poison(4, "KeyError")
	r := f.dlq("", "export", "dlq")
	if r.code != ExitOK || !strings.Contains(r.stderr, "exported 4 message(s)") {
		t.Fatalf("export: %+v", r)
	}
	export := r.stdout
	if n := len(lines(export)); n != 4 {
		t.Fatalf("export has %d lines", n)
	}
	wantOK(t, f.dlq(export, "import", "other"), "imported 4 message(s) into other")
	page := decode[api.Page](t, f.dlq("", "peek", "other", "--json"))
	if len(page.Messages) != 4 {
		t.Fatalf("imported %+v", page)
	}
	for i, m := range page.Messages {
		if m.ID != ids[i] || m.DeadLetter == nil || m.DeadLetter.SourceQueue != "q" || m.LastFailure == nil || m.LastFailure.ErrorClass != "KeyError" {
			t.Fatalf("message %d lost its identity or context: %+v", i, m)
		}
	}
	// A filtered export, and a bad file refused whole with its line.
	r = f.dlq("", "export", "dlq", "--id", ids[2])
	if r.code != ExitOK || len(lines(r.stdout)) != 1 || !strings.Contains(r.stdout, ids[2]) {
		t.Fatalf("filtered export %+v", r)
	}
	bad := lines(export)[0] + "\nnot json\n"
	wantExit(t, f.dlq(bad, "import", "dlq"), ExitFail, "line 2")
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 4 {
		t.Fatalf("a refused import stored messages: %+v", info)
	}
}

func TestRedriveDryRunThenWait(t *testing.T) {
	f := newFixture(t)
	f.poison(25, "KeyError")
	r := f.dlq("", "redrive", "dlq", "--dry-run")
	wantOK(t, r, "dry run: 25 message(s) in dlq would move", "to q: 25", "sample:", "nothing was moved")
	dry := decode[api.DryRun](t, f.dlq("", "redrive", "dlq", "--dry-run", "--to", "other", "--json"))
	if dry.Total != 25 || dry.ByDestination["other"] != 25 {
		t.Fatalf("dry run json %+v", dry)
	}

	start := time.Now()
	r = f.dlq("", "redrive", "dlq", "--rate", "500", "--wait")
	wantOK(t, r, "completed: moved 25 message(s) from dlq to their source queues")
	// Not a terminal: plain progress lines, no bar redrawing with \r.
	if strings.Contains(r.stderr, "\r") || !strings.Contains(r.stderr, "moved 25/25 (100%) COMPLETED\n") {
		t.Fatalf("progress in a pipe: %q", r.stderr)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("redrive took %v", el)
	}
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("dlq not drained: %+v", info)
	}
	if info, _ := f.eng.GetQueue("q"); info.Visible != 25 {
		t.Fatalf("q did not get the messages: %+v", info)
	}
	r = f.dlq("", "tasks", "dlq")
	wantOK(t, r, "COMPLETED", "25/25")
	tasks := decode[api.TaskList](t, f.dlq("", "tasks", "dlq", "--json"))
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].Status != engine.TaskCompleted {
		t.Fatalf("tasks %+v", tasks)
	}
	wantExit(t, f.dlq("", "redrive", "q"), ExitFail, "NotDeadLetterQueue")
	wantExit(t, f.dlq("", "redrive", "dlq", "--to", ""), ExitUsage, "--to needs a queue name")
	wantExit(t, f.dlq("", "cancel", tasks.Tasks[0].ID), ExitFail, "InvalidTaskState")
}

// A redrive before the fix: the consumer keeps failing terminally, the
// safety stop pauses the task, and --wait exits non-zero with the reason.
func TestRedriveWaitPausedBySafetyStop(t *testing.T) {
	f := newFixture(t)
	f.poison(20, "KeyError")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			d, err := f.eng.Receive(ctx, "q", engine.ReceiveRequest{Max: 10, Wait: 20 * time.Millisecond, WaitSet: true})
			if err != nil {
				return
			}
			for _, m := range d {
				f.eng.ReportFailure("q", m.ReceiptHandle, engine.Failure{ErrorClass: "KeyError", Terminal: true})
			}
		}
	}()
	defer func() { cancel(); <-done }()

	r := f.dlq("", "redrive", "dlq", "--rate", "20", "--safety-threshold", "2", "--wait")
	wantExit(t, r, ExitFail, "ended PAUSED")
	if !strings.Contains(r.stderr, "SafetyStop") || !strings.Contains(r.stderr, "KeyError") || !strings.Contains(r.stderr, "sluice dlq resume ") {
		t.Fatalf("reason missing: %q", r.stderr)
	}
	tasks := decode[api.TaskList](t, f.dlq("", "tasks", "dlq", "--json"))
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].Status != engine.TaskPaused {
		t.Fatalf("tasks %+v", tasks)
	}
	id := tasks.Tasks[0].ID
	wantOK(t, f.dlq("", "tasks", "dlq"), "PAUSED", "SafetyStop")
	cancel()
	<-done
	wantOK(t, f.dlq("", "resume", id), "task "+id+": RUNNING")
	wantExit(t, f.dlq("", "resume", id), ExitFail, "InvalidTaskState")
	r = f.dlq("", "cancel", id, "--json")
	tk := decode[api.Task](t, r)
	if tk.Status != engine.TaskCancelling && tk.Status != engine.TaskCancelled && tk.Status != engine.TaskCompleted {
		t.Fatalf("cancel %+v", tk)
	}
}

func TestUsageAndEndpoint(t *testing.T) {
	f := newFixture(t)
	wantExit(t, f.dlq(""), ExitUsage, "Usage: sluice dlq")
	wantExit(t, f.dlq("", "bogus"), ExitUsage, `unknown command "bogus"`)
	wantExit(t, f.dlq("", "peek"), ExitUsage, "missing argument")
	wantExit(t, f.dlq("", "show", "dlq"), ExitUsage, "Usage: sluice dlq show")
	wantExit(t, f.dlq("", "tasks", "a", "b"), ExitUsage, `unexpected argument "b"`)
	wantExit(t, f.dlq("", "peek", "dlq", "--since", "last tuesday"), ExitUsage, "--since")
	wantExit(t, f.dlq("", "peek", "dlq", "--no-such-flag"), ExitUsage, "no-such-flag")
	wantExit(t, f.dlq("", "redrive", "dlq", "--dry-run", "--wait"), ExitUsage, "--wait")
	wantExit(t, f.run(Queues, "", "extra"), ExitUsage, "unexpected argument")
	if r := f.dlq("", "peek", "-h"); r.code != ExitOK || !strings.Contains(r.stderr, "Usage: sluice dlq peek") {
		t.Fatalf("-h: %+v", r)
	}
	if r := f.dlq("", "help"); r.code != ExitOK || !strings.Contains(r.stdout, "redrive QUEUE") {
		t.Fatalf("help: %+v", r)
	}
	// --endpoint wins over $SLUICE_ENDPOINT; an unreachable broker is a
	// failure that says where it looked.
	wantExit(t, f.run(Queues, "", "--endpoint", "http://127.0.0.1:1"), ExitFail, "cannot reach Sluice at http://127.0.0.1:1")
	wantExit(t, f.dlq("", "peek", "nope"), ExitFail, "QueueNotFound")
}

// TestQueuesPauseAndResume: `sluice queues pause` holds delivery (a
// receive gets nothing, the message stays visible, the listing says
// paused) and `resume` lets it flow (DLQ-41).
func TestQueuesPauseAndResume(t *testing.T) {
	f := newFixture(t)
	if _, err := f.eng.Send("other", []engine.Message{{Body: []byte("held")}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, f.run(Queues, "", "pause", "other"), "other paused", "1 message(s) held visible")
	wantOK(t, f.run(Queues, ""), "standard,paused")
	if ds, _ := f.eng.Receive(t.Context(), "other", engine.ReceiveRequest{Max: 1, WaitSet: true}); len(ds) != 0 {
		t.Fatal("delivered while paused")
	}
	wantOK(t, f.run(Queues, "", "resume", "other"), "other delivering")
	if ds, _ := f.eng.Receive(t.Context(), "other", engine.ReceiveRequest{Max: 1, WaitSet: true}); len(ds) != 1 {
		t.Fatal("not delivered after resume")
	}
	wantExit(t, f.run(Queues, "", "pause", "nope"), ExitFail, "QueueNotFound")
	wantExit(t, f.run(Queues, "", "pause"), ExitUsage, "")
}

// TestQueuesCreateWithDLQ: creating a queue creates its DLQ by default
// (14-day retention, limit 5, the owner on both); --no-dlq opts out with
// a warning; a limit outside 3–10 warns (DLQ-62, DLQ-80, DLQ-151).
func TestQueuesCreateWithDLQ(t *testing.T) {
	f := newFixture(t)
	r := f.run(Queues, "", "create", "payments", "--owner", "team-pay")
	wantOK(t, r, "created payments with dead-letter queue payments-dlq (max receives 5)")
	if r.stderr != "" {
		t.Fatalf("warnings for a sound queue: %s", r.stderr)
	}
	dlq, err := f.eng.GetQueue("payments-dlq")
	if err != nil || dlq.Config.Retention != 14*24*time.Hour || dlq.Tags["owner"] != "team-pay" {
		t.Fatalf("dlq %+v %v", dlq, err)
	}
	src, _ := f.eng.GetQueue("payments")
	if d := src.Config.DeadLetter; d == nil || d.Target != "payments-dlq" || d.MaxReceiveCount != 5 {
		t.Fatalf("source %+v", src.Config.DeadLetter)
	}
	r = f.run(Queues, "", "create", "scratch", "--no-dlq")
	wantOK(t, r, "created scratch")
	if !strings.Contains(r.stderr, "created without a dead-letter queue") {
		t.Fatalf("no opt-out warning: %q", r.stderr)
	}
	if _, err := f.eng.GetQueue("scratch-dlq"); err == nil {
		t.Fatal("a DLQ despite --no-dlq")
	}
	r = f.run(Queues, "", "create", "eager", "--max-receives", "1")
	if r.code != ExitOK || !strings.Contains(r.stderr, "max_receive_count") {
		t.Fatalf("no limit warning: %d %q", r.code, r.stderr)
	}
	r = f.run(Queues, "", "create", "jobs.fifo", "--fifo")
	wantOK(t, r, "jobs-dlq.fifo")
	wantExit(t, f.run(Queues, "", "create", "payments"), ExitFail, "QueueAlreadyExists")
	wantExit(t, f.run(Queues, "", "create", "x.fifo"), ExitFail, "InvalidRequest")
}
