package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

func TestPoisonMessageReachesDLQWithFullContext(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	ids := f.send("q", engine.Message{
		Body:       []byte(`{"order": 42}`),
		Attributes: []engine.Attribute{{Name: "tenant", DataType: "String", StringValue: "acme"}},
	})
	f.clk.Advance(2 * time.Second)
	d := f.receive("q", 1)
	var out api.FailureOutcome
	f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{
		QueueURL: "http://127.0.0.1:9324/000000000000/q", ReceiptHandle: d[0].ReceiptHandle,
		ErrorClass: "KeyError", ErrorMessage: "no customer 42", Trace: "worker.go:17",
		ConsumerID: "worker-1", ConsumerVersion: "v1.4.2", Terminal: true,
	}, http.StatusOK, &out)
	if !out.DeadLettered || out.Target != "dlq" || out.VisibleAt != nil {
		t.Fatalf("outcome %+v", out)
	}

	var list api.QueueList
	f.doJSON("GET", "/sluice/v1/queues", nil, http.StatusOK, &list)
	if len(list.Queues) != 2 {
		t.Fatalf("queues %+v", list)
	}
	dlq, q := list.Queues[0], list.Queues[1]
	if dlq.Name != "dlq" || !dlq.IsDeadLetterQueue || !slices.Equal(dlq.Sources, []string{"q"}) || dlq.Visible != 1 || dlq.OldestAgeSeconds != 2 {
		t.Fatalf("dlq %+v", dlq)
	}
	if q.DeadLetterQueue != "dlq" || q.MaxReceiveCount != 5 || q.IsDeadLetterQueue || q.Counters.DeadLettered != 1 || q.Config != nil {
		t.Fatalf("q %+v", q)
	}

	var page api.Page
	f.doJSON("GET", "/sluice/v1/queues/dlq/messages", nil, http.StatusOK, &page)
	if len(page.Messages) != 1 || page.Next != "" {
		t.Fatalf("page %+v", page)
	}
	m := page.Messages[0]
	if m.ID != ids[0] || m.Body != `{"order": 42}` || m.ReceiveCount != 1 || m.State != "visible" ||
		len(m.Attributes) != 1 || m.Attributes[0].StringValue != "acme" || m.SentAt == nil {
		t.Fatalf("message %+v", m)
	}
	dl := m.DeadLetter
	if dl == nil || dl.SourceQueue != "q" || dl.Reason != engine.ReasonTerminal || dl.Attempts != 1 ||
		dl.FirstReceiveAt == nil || dl.LastReceiveAt == nil || dl.DeadLetteredAt == nil {
		t.Fatalf("deadLetter %+v", dl)
	}
	lf := m.LastFailure
	if lf == nil || lf.ErrorClass != "KeyError" || lf.Message != "no customer 42" || lf.Trace != "worker.go:17" ||
		lf.ConsumerID != "worker-1" || lf.ConsumerVersion != "v1.4.2" || lf.Attempt != 1 || lf.ReportedAt == nil {
		t.Fatalf("lastFailure %+v", lf)
	}
	// Browsing changed nothing, and show returns the same message.
	var one api.Message
	f.doJSON("GET", "/sluice/v1/queues/dlq/messages/"+ids[0], nil, http.StatusOK, &one)
	if one.ID != m.ID || one.ReceiveCount != 1 || one.LastFailure.ErrorClass != "KeyError" {
		t.Fatalf("show %+v", one)
	}
	var detail api.Queue
	f.doJSON("GET", "/sluice/v1/queues/q", nil, http.StatusOK, &detail)
	if detail.Config == nil || detail.Config.DeadLetter.Target != "dlq" || detail.Config.VisibilitySeconds != 30 || detail.CreatedAt == nil {
		t.Fatalf("detail %+v", detail)
	}
}

func TestFailureReportRetriesAndRefusals(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	f.create("plain", nil)
	f.send("q", engine.Message{Body: []byte("x")})
	d := f.receive("q", 1)
	retry := 7.5
	var out api.FailureOutcome
	f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: d[0].ReceiptHandle, ErrorClass: "Timeout", RetryAfterSeconds: &retry}, http.StatusOK, &out)
	if out.DeadLettered || out.VisibleAt == nil || !out.VisibleAt.Equal(f.clk.Now().Add(7500*time.Millisecond)) {
		t.Fatalf("retry outcome %+v", out)
	}
	// The handle is stale now: the lease ended with the report.
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: d[0].ReceiptHandle}, http.StatusConflict, "MessageNotInflight")
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: "garbage"}, http.StatusBadRequest, "ReceiptHandleInvalid")
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "nope", ReceiptHandle: "x"}, http.StatusNotFound, "QueueNotFound")
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{ReceiptHandle: "x"}, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q"}, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", QueueURL: "http://h/1/other", ReceiptHandle: "x"}, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/failures", `{"queue":"q","receiptHandle":"x","termnal":true}`, http.StatusBadRequest, "InvalidRequest")
	neg := -1.0
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: "x", RetryAfterSeconds: &neg}, http.StatusBadRequest, "InvalidRetryAfter")
	// Terminal on a queue without a DLQ leaves the message alone.
	f.send("plain", engine.Message{Body: []byte("y")})
	d = f.receive("plain", 1)
	f.wantError("POST", "/sluice/v1/failures", api.FailureReport{Queue: "plain", ReceiptHandle: d[0].ReceiptHandle, Terminal: true}, http.StatusConflict, "NoDeadLetterQueue")
	if info, _ := f.eng.GetQueue("plain"); info.InFlight != 1 {
		t.Fatalf("message disturbed: %+v", info)
	}
}

func TestBrowseFiltersAndPaging(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	keyIDs := f.poison(5, "KeyError")
	mid := f.clk.Now()
	f.clk.Advance(time.Second)
	timeoutIDs := f.poison(3, "TimeoutError")
	f.send("q", engine.Message{Body: []byte("tagged"), Attributes: []engine.Attribute{{Name: "tenant", DataType: "String", StringValue: "acme"}}})
	d := f.receive("q", 1)
	f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: d[0].ReceiptHandle, ErrorClass: "Other", Terminal: true}, http.StatusOK, nil)

	browse := func(query string) []string {
		t.Helper()
		var p api.Page
		f.doJSON("GET", "/sluice/v1/queues/dlq/messages?"+query, nil, http.StatusOK, &p)
		var ids []string
		for _, m := range p.Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got := browse("errorClass=KeyError"); !slices.Equal(got, keyIDs) {
		t.Fatalf("errorClass: %v want %v", got, keyIDs)
	}
	if got := browse("sentAfter=" + url.QueryEscape(mid.Format(time.RFC3339Nano)) + "&errorClass=TimeoutError"); !slices.Equal(got, timeoutIDs) {
		t.Fatalf("sentAfter: %v", got)
	}
	if got := browse("sentBefore=" + url.QueryEscape(mid.Format(time.RFC3339Nano))); !slices.Equal(got, keyIDs) {
		t.Fatalf("sentBefore: %v", got)
	}
	if got := browse("attribute=tenant=acme"); len(got) != 1 {
		t.Fatalf("attribute: %v", got)
	}
	if got := browse("attribute=tenant=other"); len(got) != 0 {
		t.Fatalf("attribute value: %v", got)
	}
	if got := browse("id=" + keyIDs[1] + "&id=" + timeoutIDs[2]); !slices.Equal(got, []string{keyIDs[1], timeoutIDs[2]}) {
		t.Fatalf("ids: %v", got)
	}
	if got := browse("reason=terminal&sourceQueue=q"); len(got) != 9 {
		t.Fatalf("reason: %v", got)
	}
	if got := browse("reason=max_receives"); len(got) != 0 {
		t.Fatalf("reason max_receives: %v", got)
	}
	// Paging: 9 messages, 4 per page, the cursor walks them in order.
	var all []string
	cursor := ""
	pages := 0
	for {
		var p api.Page
		f.doJSON("GET", "/sluice/v1/queues/dlq/messages?limit=4&cursor="+cursor, nil, http.StatusOK, &p)
		pages++
		for _, m := range p.Messages {
			all = append(all, m.ID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if pages != 3 || len(all) != 9 || !slices.Equal(all[:5], keyIDs) {
		t.Fatalf("paging: %d pages, %v", pages, all)
	}
	// Bad queries are 400s naming the problem.
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=-1", "sentAfter=yesterday", "errorclass=KeyError",
		"attribute==v", "id=nope", "reason=a&reason=b", "sentAfter=2026-03-02T00:00:00Z&sentBefore=2026-03-01T00:00:00Z"} {
		f.wantError("GET", "/sluice/v1/queues/dlq/messages?"+q, nil, http.StatusBadRequest, "InvalidRequest")
	}
	f.wantError("GET", "/sluice/v1/queues/nope/messages", nil, http.StatusNotFound, "QueueNotFound")
	f.wantError("GET", "/sluice/v1/queues/dlq/messages/"+strings.Repeat("0", 8)+"-0000-4000-8000-000000000000", nil, http.StatusNotFound, "MessageNotFound")
	f.wantError("GET", "/sluice/v1/queues/dlq/messages/not-an-id", nil, http.StatusBadRequest, "InvalidRequest")
}

func TestDeleteOneByFilterAndRefuseEmpty(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	keyIDs := f.poison(3, "KeyError")
	f.poison(2, "TimeoutError")

	var res api.DeleteResult
	f.doJSON("DELETE", "/sluice/v1/queues/dlq/messages/"+keyIDs[0], nil, http.StatusOK, &res)
	if res.Deleted != 1 {
		t.Fatalf("delete one: %+v", res)
	}
	f.wantError("DELETE", "/sluice/v1/queues/dlq/messages/"+keyIDs[0], nil, http.StatusNotFound, "MessageNotFound")

	// An empty filter is refused, however it is spelt.
	for _, body := range []any{`{}`, `{"filter":{}}`, api.DeleteRequest{}, `{"all":false}`} {
		f.wantError("POST", "/sluice/v1/queues/dlq/messages:delete", body, http.StatusBadRequest, "EmptyFilter")
	}
	f.wantError("POST", "/sluice/v1/queues/dlq/messages:delete", ``, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/dlq/messages:delete", `{"filter":{"errorClas":"KeyError"}}`, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/dlq/messages:delete", api.DeleteRequest{All: true, Filter: api.Filter{ErrorClass: "KeyError"}}, http.StatusBadRequest, "InvalidRequest")
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 4 {
		t.Fatalf("refused deletes deleted: %+v", info)
	}

	f.doJSON("POST", "/sluice/v1/queues/dlq/messages:delete", api.DeleteRequest{Filter: api.Filter{ErrorClass: "KeyError"}}, http.StatusOK, &res)
	if res.Deleted != 2 {
		t.Fatalf("delete by filter: %+v", res)
	}
	f.doJSON("POST", "/sluice/v1/queues/dlq/messages:delete", api.DeleteRequest{All: true}, http.StatusOK, &res)
	if res.Deleted != 2 {
		t.Fatalf("delete all: %+v", res)
	}
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("dlq not empty: %+v", info)
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	f.create("restored", nil)
	ids := f.poison(3, "KeyError")
	// A binary body survives as base64.
	f.send("q", engine.Message{Body: []byte{0xff, 0x00, 0xfe}, Attributes: []engine.Attribute{{Name: "bin", DataType: "Binary", BinaryValue: []byte{1, 2}}}})
	d := f.receive("q", 1)
	f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: d[0].ReceiptHandle, ErrorClass: "Decode", Terminal: true}, http.StatusOK, nil)
	ids = append(ids, d[0].MessageID)

	code, export := f.do("GET", "/sluice/v1/queues/dlq/export", nil)
	if code != http.StatusOK {
		t.Fatalf("export %d %s", code, export)
	}
	lines := strings.Split(strings.TrimSpace(string(export)), "\n")
	if len(lines) != 4 {
		t.Fatalf("export has %d lines:\n%s", len(lines), export)
	}
	var exported []api.Message
	for _, l := range lines {
		var m api.Message
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		exported = append(exported, m)
	}
	if exported[3].BodyEncoding != "base64" {
		t.Fatalf("binary body %+v", exported[3])
	}
	// A filtered export.
	_, only := f.do("GET", "/sluice/v1/queues/dlq/export?errorClass=Decode", nil)
	if n := strings.Count(string(only), "\n"); n != 1 {
		t.Fatalf("filtered export: %d lines", n)
	}

	var res api.ImportResult
	f.doJSON("POST", "/sluice/v1/queues/restored/import", export, http.StatusOK, &res)
	if res.Imported != 4 {
		t.Fatalf("import %+v", res)
	}
	var page api.Page
	f.doJSON("GET", "/sluice/v1/queues/restored/messages", nil, http.StatusOK, &page)
	if len(page.Messages) != 4 {
		t.Fatalf("restored %+v", page)
	}
	for i, m := range page.Messages {
		want := exported[i]
		if m.ID != ids[i] || m.Body != want.Body || m.BodyEncoding != want.BodyEncoding || m.ReceiveCount != want.ReceiveCount ||
			!m.SentAt.Equal(*want.SentAt) || m.DeadLetter == nil || *m.DeadLetter.DeadLetteredAt != *want.DeadLetter.DeadLetteredAt ||
			m.DeadLetter.SourceQueue != "q" || m.LastFailure == nil || m.LastFailure.ErrorClass != want.LastFailure.ErrorClass ||
			len(m.Attributes) != len(want.Attributes) {
			t.Fatalf("message %d changed in the round trip:\n got %+v\nwant %+v", i, m, want)
		}
	}
	if !bytes.Equal(page.Messages[3].Attributes[0].BinaryValue, []byte{1, 2}) {
		t.Fatalf("binary attribute %+v", page.Messages[3].Attributes)
	}

	// A malformed line refuses the whole import and names the line.
	bad := lines[0] + "\n\n" + lines[1] + "\n" + `{"id":"x","body":"b"}` + "\n" + lines[2] + "\n"
	f.create("other", nil)
	e := f.wantError("POST", "/sluice/v1/queues/other/import", bad, http.StatusBadRequest, "InvalidImportLine")
	if !strings.Contains(e.Error.Message, "line 4") {
		t.Fatalf("error does not name the line: %q", e.Error.Message)
	}
	for _, b := range []string{"{not json\n", `{"id":"` + ids[0] + `"}` + "\n", `{"id":"` + ids[0] + `","body":"x","bodyEncoding":"rot13"}`, `{"id":"` + ids[0] + `","body":"x"} {}`,
		`{"id":"` + ids[0] + `","body":"x","priority":256}`, `{"id":"` + ids[0] + `","body":"x","priority":-1}`,
		// No protocol checks envelopes in this handler: refused.
		`{"id":"` + ids[0] + `","body":"x","envelope":"AQIDBA=="}`} {
		f.wantError("POST", "/sluice/v1/queues/other/import", b, http.StatusBadRequest, "InvalidImportLine")
	}
	if info, _ := f.eng.GetQueue("other"); info.Visible != 0 {
		t.Fatalf("a refused import stored messages: %+v", info)
	}
	f.wantError("POST", "/sluice/v1/queues/nope/import", export, http.StatusNotFound, "QueueNotFound")
	f.wantError("GET", "/sluice/v1/queues/nope/export", nil, http.StatusNotFound, "QueueNotFound")
	f.wantError("GET", "/sluice/v1/queues/dlq/export?limit=3", nil, http.StatusBadRequest, "InvalidRequest")
}

func TestExportStreamsEveryPage(t *testing.T) {
	f := newFixture(t)
	f.create("big", nil)
	const n = 2*exportPageSize + 7
	var msgs []engine.Message
	for i := range n {
		msgs = append(msgs, engine.Message{Body: fmt.Appendf(nil, "m%04d", i)})
		if len(msgs) == engine.MaxBatch {
			f.send("big", msgs...)
			msgs = nil
		}
	}
	f.send("big", msgs...)
	resp, err := f.srv.Client().Get(f.srv.URL + "/sluice/v1/queues/big/export")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	i := 0
	for sc.Scan() {
		var m api.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Body != fmt.Sprintf("m%04d", i) {
			t.Fatalf("line %d: %s %v", i+1, sc.Bytes(), err)
		}
		i++
	}
	if i != n {
		t.Fatalf("exported %d of %d", i, n)
	}
}

func TestRedriveDryRunThenDrain(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	f.create("fixed", nil)
	ids := f.poison(6, "KeyError")

	var dry api.DryRun
	f.doJSON("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{DryRun: true}, http.StatusOK, &dry)
	if !dry.DryRun || dry.Total != 6 || dry.ByDestination["q"] != 6 || len(dry.Sample) != 6 || dry.Sample[0].ID != ids[0] {
		t.Fatalf("dry run %+v", dry)
	}
	f.doJSON("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{DryRun: true, Destination: "fixed", Filter: api.Filter{IDs: ids[:2]}}, http.StatusOK, &dry)
	if dry.Total != 2 || dry.ByDestination["fixed"] != 2 {
		t.Fatalf("filtered dry run %+v", dry)
	}
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 6 {
		t.Fatal("dry run moved messages")
	}

	var tk api.Task
	code, body := f.do("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{Rate: 100})
	if code != http.StatusAccepted || json.Unmarshal(body, &tk) != nil || tk.Status != engine.TaskRunning || tk.ToMove != 6 || tk.Rate != 100 {
		t.Fatalf("start: %d %s", code, body)
	}
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{}, http.StatusConflict, "TaskRunning")
	f.stepUntil("the redrive to complete", 20*time.Millisecond, func() bool { return f.task(tk.ID).Status == engine.TaskCompleted })
	done := f.task(tk.ID)
	if done.Moved != 6 || done.Finished() != true {
		t.Fatalf("done %+v", done)
	}
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("dlq not drained: %+v", info)
	}
	var page api.Page
	f.doJSON("GET", "/sluice/v1/queues/q/messages", nil, http.StatusOK, &page)
	if len(page.Messages) != 6 || page.Messages[0].Redrive == nil || page.Messages[0].Redrive.OriginalMessageID != ids[0] || page.Messages[0].Redrive.TaskID != tk.ID {
		t.Fatalf("redriven messages %+v", page.Messages)
	}
	var tasks api.TaskList
	f.doJSON("GET", "/sluice/v1/tasks?source=dlq", nil, http.StatusOK, &tasks)
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].ID != tk.ID {
		t.Fatalf("tasks %+v", tasks)
	}
	f.doJSON("GET", "/sluice/v1/tasks", nil, http.StatusOK, &tasks)
	if len(tasks.Tasks) != 1 {
		t.Fatalf("all tasks %+v", tasks)
	}
	// Finished tasks cannot be cancelled or resumed.
	f.wantError("POST", "/sluice/v1/tasks/"+tk.ID+"/cancel", nil, http.StatusConflict, "InvalidTaskState")
	f.wantError("POST", "/sluice/v1/tasks/"+tk.ID+"/resume", nil, http.StatusConflict, "InvalidTaskState")
}

func TestRedriveBeforeFixPausesThenCancelResume(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	f.poison(10, "KeyError")
	var tk api.Task
	f.doJSON("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{Rate: 50, SafetyThreshold: 3, SafetyWindowSeconds: 60}, http.StatusAccepted, &tk)
	if tk.SafetyThreshold != 3 || tk.SafetyWindowSeconds != 60 {
		t.Fatalf("task %+v", tk)
	}
	// The consumer is still broken: everything redriven fails terminally.
	failAll := func() {
		for _, d := range f.receive("q", 10) {
			f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{Queue: "q", ReceiptHandle: d.ReceiptHandle, ErrorClass: "KeyError", Terminal: true}, http.StatusOK, nil)
		}
	}
	f.stepUntil("the safety stop", 10*time.Millisecond, func() bool {
		failAll()
		return f.task(tk.ID).Status == engine.TaskPaused
	})
	paused := f.task(tk.ID)
	if paused.Returned < 3 || !slices.Equal(paused.ReturnedClasses, []string{"KeyError"}) || !strings.Contains(paused.FailureReason, "SafetyStop") || paused.Moved == 10 {
		t.Fatalf("paused %+v", paused)
	}
	// A paused task still blocks a second redrive of the same source.
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{}, http.StatusConflict, "TaskRunning")
	// Resume (the operator says it is fixed), then cancel.
	var resumed api.Task
	f.doJSON("POST", "/sluice/v1/tasks/"+tk.ID+"/resume", nil, http.StatusOK, &resumed)
	if resumed.Status != engine.TaskRunning || resumed.FailureReason != "" || resumed.Returned != 0 {
		t.Fatalf("resumed %+v", resumed)
	}
	f.wantError("POST", "/sluice/v1/tasks/"+tk.ID+"/resume", nil, http.StatusConflict, "InvalidTaskState")
	var cancelled api.Task
	f.doJSON("POST", "/sluice/v1/tasks/"+tk.ID+"/cancel", nil, http.StatusOK, &cancelled)
	if cancelled.Status != engine.TaskCancelling && cancelled.Status != engine.TaskCancelled && cancelled.Status != engine.TaskCompleted {
		t.Fatalf("cancelled %+v", cancelled)
	}
	f.stepUntil("the cancel to finish", 10*time.Millisecond, func() bool { return f.task(tk.ID).Finished() })
}

func TestErrorStatuses(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5)
	f.create("fifo.fifo", func(c *engine.QueueConfig) { c.FIFO = true })
	f.wantError("GET", "/sluice/v1/queues/nope", nil, http.StatusNotFound, "QueueNotFound")
	f.wantError("GET", "/sluice/v1/tasks/nope", nil, http.StatusNotFound, "TaskNotFound")
	f.wantError("POST", "/sluice/v1/tasks/nope/cancel", nil, http.StatusNotFound, "TaskNotFound")
	f.wantError("GET", "/sluice/v1/tasks?source=nope", nil, http.StatusNotFound, "QueueNotFound")
	f.wantError("GET", "/sluice/v1/tasks?src=dlq", nil, http.StatusBadRequest, "InvalidRequest")
	f.wantError("GET", "/sluice/v1/nothing", nil, http.StatusNotFound, "NotFound")
	f.wantError("PUT", "/sluice/v1/queues", nil, http.StatusMethodNotAllowed, "MethodNotAllowed")
	f.wantError("GET", "/sluice/v1/queues?x=1", nil, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/q/redrive", api.RedriveRequest{}, http.StatusBadRequest, "NotDeadLetterQueue")
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{Destination: "nope"}, http.StatusBadRequest, "DestinationNotFound")
	// DLQ-91: an empty destination is an error, not "to origin".
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", `{"destination":""}`, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", `{"destination":"","dryRun":true}`, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{Destination: "fifo.fifo"}, http.StatusBadRequest, "InvalidParameter")
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{Rate: 501}, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/dlq/redrive", api.RedriveRequest{SafetyThreshold: -1}, http.StatusBadRequest, "InvalidRequest")
	f.wantError("POST", "/sluice/v1/queues/nope/redrive", api.RedriveRequest{}, http.StatusNotFound, "QueueNotFound")
	f.wantError("POST", "/sluice/v1/failures", strings.Repeat(" ", MaxRequestBody+1), http.StatusRequestEntityTooLarge, "RequestTooLarge")
	// The alerts endpoint belongs to another handler.
	if code, body := f.do("GET", "/sluice/v1/alerts", nil); code != http.StatusOK || string(body) != "alerts" {
		t.Fatalf("alerts: %d %s", code, body)
	}
	// A failed store answers 503 to changes.
	f.poison(1, "KeyError")
	f.st.Fail(errors.New("disk on fire"))
	f.wantError("POST", "/sluice/v1/queues/dlq/messages:delete", api.DeleteRequest{All: true}, http.StatusServiceUnavailable, "StorageFailed")
}

// TestExportFilenameInjection: a queue name with quotes and semicolons
// (possible over AMQP) cannot add parameters to Content-Disposition.
func TestExportFilenameInjection(t *testing.T) {
	f := newFixture(t)
	name := `evil"; filename*=UTF-8''x.html; a="`
	f.create(name, nil)
	resp, err := f.srv.Client().Get(f.srv.URL + "/sluice/v1/queues/" + url.PathEscape(name) + "/export")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cd := resp.Header.Get("Content-Disposition")
	disp, params, err := mime.ParseMediaType(cd)
	if err != nil || disp != "attachment" || params["filename"] != name+".jsonl" || len(params) != 1 {
		t.Fatalf("Content-Disposition %q parses as %q %v %v", cd, disp, params, err)
	}
}
