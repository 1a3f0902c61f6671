package sqs_test

import (
	"encoding/base64"
	"encoding/xml"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// stepUntil advances the fake clock in small steps until cond holds and
// returns the simulated time that passed. Before each step it waits until
// cond holds or the engine's scheduler and the move task are parked on the
// clock (poll.AdvanceUntil), so each step finds the task done with the
// last one. cond may be called more than once per step.
func (e *env) stepUntil(what string, step time.Duration, cond func() bool) time.Duration {
	e.t.Helper()
	return poll.AdvanceUntil(e.t, e.clk, step, 2, what, cond)
}

// withDLQ creates a dead-letter queue and sources that dead-letter on the
// second receive (maxReceiveCount 1).
func (e *env) withDLQ(dlq string, sources ...string) {
	e.t.Helper()
	e.create(dlq)
	for _, s := range sources {
		e.create(s, "RedrivePolicy", `{"deadLetterTargetArn":"`+e.arn(dlq)+`","maxReceiveCount":1}`)
	}
}

// deadLetter sends bodies to the source src and drives them into dlq the
// SQS way: one receive, the lease runs out, the next receive moves them.
// It returns their MessageIds.
func (e *env) deadLetter(src, dlq string, bodies ...string) []string {
	e.t.Helper()
	before, _ := strconv.Atoi(e.attr(e.url(dlq), "ApproximateNumberOfMessages"))
	var ids []string
	for _, b := range bodies {
		ids = append(ids, *e.send(e.url(src), b).MessageId)
	}
	for got := 0; got < len(bodies); {
		n := len(e.receive(e.url(src)).Messages)
		if n == 0 {
			e.t.Fatalf("could not receive all of %d messages from %s", len(bodies), src)
		}
		got += n
	}
	e.clk.Advance(31 * time.Second)
	want := strconv.Itoa(before + len(bodies))
	poll.CheckFor(e.t, 5*time.Second, poll.True("messages in "+dlq, func() bool {
		e.receive(e.url(src))
		return e.attr(e.url(dlq), "ApproximateNumberOfMessages") == want
	}))
	return ids
}

func (e *env) startMove(dlq, dest string, rate int32) string {
	e.t.Helper()
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn(dlq))}
	if dest != "" {
		in.DestinationArn = aws.String(e.arn(dest))
	}
	if rate != 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(rate)
	}
	out, err := e.cli.StartMessageMoveTask(e.ctx, in)
	if err != nil {
		e.t.Fatalf("StartMessageMoveTask: %v", err)
	}
	if out.TaskHandle == nil || *out.TaskHandle == "" {
		e.t.Fatal("no TaskHandle")
	}
	return *out.TaskHandle
}

func (e *env) moveTasks(dlq string, max int32) []types.ListMessageMoveTasksResultEntry {
	e.t.Helper()
	in := &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(e.arn(dlq))}
	if max != 0 {
		in.MaxResults = aws.Int32(max)
	}
	out, err := e.cli.ListMessageMoveTasks(e.ctx, in)
	if err != nil {
		e.t.Fatalf("ListMessageMoveTasks: %v", err)
	}
	return out.Results
}

// latest is the newest task of dlq.
func (e *env) latest(dlq string) types.ListMessageMoveTasksResultEntry {
	e.t.Helper()
	r := e.moveTasks(dlq, 0)
	if len(r) != 1 {
		e.t.Fatalf("want the latest task, got %d", len(r))
	}
	return r[0]
}

func (e *env) cancelMove(handle string) (*sqs.CancelMessageMoveTaskOutput, error) {
	return e.cli.CancelMessageMoveTask(e.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func handleOf(taskID, sourceArn string) string {
	return base64.StdEncoding.EncodeToString([]byte(`{"taskId":"` + taskID + `","sourceArn":"` + sourceArn + `"}`))
}

// TestCatalogueMoveTasks is catalogue item 38 (SQS reference §8.5), one
// subtest per clause, with aws-sdk-go-v2 over AWS JSON 1.0.
func TestCatalogueMoveTasks(t *testing.T) {
	t.Run("38_SourceMustBeDLQ", func(t *testing.T) {
		e := newEnv(t)
		e.create("plain")
		_, err := e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("plain"))})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Source queue must be configured as a Dead Letter Queue.")
	})

	t.Run("38_MissingQueues404", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		_, err := e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq")), DestinationArn: aws.String(e.arn("missing"))})
		var rnf *types.ResourceNotFoundException
		if !errors.As(err, &rnf) {
			t.Fatalf("want *types.ResourceNotFoundException, got %T %v", err, err)
		}
		wantAPIError(t, err, "ResourceNotFoundException", 404, "The resource that you specified for the DestinationArn parameter doesn't exist.")
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("missing"))})
		wantAPIError(t, err, "ResourceNotFoundException", 404, "The resource that you specified for the SourceArn parameter doesn't exist.")
		// Another account's queue is not here either.
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:111122223333:dlq")})
		wantAPIError(t, err, "ResourceNotFoundException", 404, "SourceArn parameter doesn't exist.")
		_, err = e.cli.ListMessageMoveTasks(e.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(e.arn("missing"))})
		wantAPIError(t, err, "ResourceNotFoundException", 404, "SourceArn parameter doesn't exist.")
		// Parameter checks.
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq")), MaxNumberOfMessagesPerSecond: aws.Int32(501)})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid.")
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq")), MaxNumberOfMessagesPerSecond: aws.Int32(0)})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value 0 for parameter MaxNumberOfMessagesPerSecond is invalid.")
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String("not-an-arn")})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value not-an-arn for parameter SourceArn is invalid.")
		_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq")), DestinationArn: aws.String(e.arn("dlq"))})
		wantAPIError(t, err, "InvalidParameterValue", 400, "must be different from the source")
	})

	t.Run("38_SecondStartRejected", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.deadLetter("src", "dlq", bodies("m", 5)...)
		e.startMove("dlq", "", 1)
		_, err := e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq"))})
		wantAPIError(t, err, "InvalidParameterValue", 400, "There is already a task running. Only one active task is allowed for a source queue arn at a given time.")
	})

	t.Run("38_BadHandles", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.deadLetter("src", "dlq", "a")
		for _, bad := range []string{"garbage", "e30=", handleOf("", e.arn("dlq")), handleOf("id", "dlq"), base64.StdEncoding.EncodeToString([]byte("[]"))} {
			_, err := e.cancelMove(bad)
			wantAPIError(t, err, "InvalidParameterValue", 400, "Value for parameter TaskHandle is invalid.")
		}
		_, err := e.cancelMove(handleOf("0123456789abcdef0123456789abcdef", e.arn("nope")))
		wantAPIError(t, err, "ResourceNotFoundException", 404, "The resource that you specified for the SourceArn parameter doesn't exist.")
		_, err = e.cancelMove(handleOf("0123456789abcdef0123456789abcdef", e.arn("dlq")))
		wantAPIError(t, err, "ResourceNotFoundException", 404, "Task does not exist.")
		// A real task's id under another (existing) source is not that source's task.
		h := e.startMove("dlq", "", 0)
		raw, _ := base64.StdEncoding.DecodeString(h)
		other := strings.Replace(string(raw), e.arn("dlq"), e.arn("src"), 1)
		_, err = e.cancelMove(base64.StdEncoding.EncodeToString([]byte(other)))
		wantAPIError(t, err, "ResourceNotFoundException", 404, "Task does not exist.")
		// Once the task has finished its handle cannot cancel it (only
		// RUNNING tasks can be cancelled): Sluice's answer is the 404.
		e.stepUntil("completion", 50*time.Millisecond, func() bool { return *e.latest("dlq").Status == "COMPLETED" })
		_, err = e.cancelMove(h)
		wantAPIError(t, err, "ResourceNotFoundException", 404, "Task does not exist.")
		_, err = e.cli.CancelMessageMoveTask(e.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String("")})
		wantAPIError(t, err, "MissingParameter", 400, "TaskHandle")
	})

	t.Run("38_CancelGivesCancelledWithCountAndRate", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.create("dest")
		e.deadLetter("src", "dlq", bodies("m", 10)...)
		before := e.clk.Now()
		h := e.startMove("dlq", "dest", 1)
		while := e.latest("dlq")
		if while.TaskHandle == nil || *while.TaskHandle != h || *while.Status != "RUNNING" || *while.ApproximateNumberOfMessagesToMove != 10 ||
			while.MaxNumberOfMessagesPerSecond == nil || *while.MaxNumberOfMessagesPerSecond != 1 ||
			*while.DestinationArn != e.arn("dest") || *while.SourceArn != e.arn("dlq") || while.FailureReason != nil ||
			while.StartedTimestamp != before.UnixMilli() {
			t.Fatalf("while running: %+v", while)
		}
		e.stepUntil("some progress", 100*time.Millisecond, func() bool { return e.latest("dlq").ApproximateNumberOfMessagesMoved >= 2 })
		out, err := e.cancelMove(h)
		if err != nil {
			t.Fatal(err)
		}
		if out.ApproximateNumberOfMessagesMoved < 2 || out.ApproximateNumberOfMessagesMoved >= 10 {
			t.Fatalf("cancel reported %d moved", out.ApproximateNumberOfMessagesMoved)
		}
		var after types.ListMessageMoveTasksResultEntry
		poll.CheckFor(t, 5*time.Second, poll.True("CANCELLED", func() bool { after = e.latest("dlq"); return *after.Status == "CANCELLED" }))
		if after.TaskHandle != nil || after.MaxNumberOfMessagesPerSecond == nil || *after.MaxNumberOfMessagesPerSecond != 1 ||
			after.ApproximateNumberOfMessagesMoved < out.ApproximateNumberOfMessagesMoved || *after.ApproximateNumberOfMessagesToMove != 10 {
			t.Fatalf("after cancel: %+v", after)
		}
		// What moved is in the destination; the rest stays in the DLQ.
		moved := strconv.FormatInt(after.ApproximateNumberOfMessagesMoved, 10)
		left := strconv.FormatInt(10-after.ApproximateNumberOfMessagesMoved, 10)
		if e.attr(e.url("dest"), "ApproximateNumberOfMessages") != moved || e.attr(e.url("dlq"), "ApproximateNumberOfMessages") != left {
			t.Fatal("messages moved do not match the count")
		}
		// The source is free for a new task.
		e.startMove("dlq", "dest", 0)
	})

	t.Run("38_DeletedDestinationFails", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.create("dest")
		e.deadLetter("src", "dlq", bodies("m", 10)...)
		e.startMove("dlq", "dest", 1)
		e.stepUntil("some progress", 100*time.Millisecond, func() bool { return e.latest("dlq").ApproximateNumberOfMessagesMoved >= 3 })
		if _, err := e.cli.DeleteQueue(e.ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(e.url("dest"))}); err != nil {
			t.Fatal(err)
		}
		e.stepUntil("FAILED", 100*time.Millisecond, func() bool { return *e.latest("dlq").Status == "FAILED" })
		got := e.latest("dlq")
		if got.FailureReason == nil || *got.FailureReason != "AWS.SimpleQueueService.NonExistentQueue" || got.TaskHandle != nil ||
			got.ApproximateNumberOfMessagesMoved < 3 || got.ApproximateNumberOfMessagesMoved >= 10 {
			t.Fatalf("failed task: %+v", got)
		}
		if n := e.attr(e.url("dlq"), "ApproximateNumberOfMessages"); n != strconv.FormatInt(10-got.ApproximateNumberOfMessagesMoved, 10) {
			t.Fatalf("dlq holds %s after the failure: messages lost or duplicated", n)
		}
	})

	t.Run("38_CompletedTaskHasNoHandle", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.deadLetter("src", "dlq", bodies("m", 3)...)
		e.startMove("dlq", "", 0)
		e.stepUntil("completion", 50*time.Millisecond, func() bool { return *e.latest("dlq").Status == "COMPLETED" })
		got := e.latest("dlq")
		if got.TaskHandle != nil || got.DestinationArn != nil || got.MaxNumberOfMessagesPerSecond != nil || got.FailureReason != nil ||
			got.ApproximateNumberOfMessagesMoved != 3 || *got.ApproximateNumberOfMessagesToMove != 3 {
			t.Fatalf("completed task: %+v", got)
		}
		_, body := e.rawJSON("/", "ListMessageMoveTasks", `{"SourceArn":"`+e.arn("dlq")+`"}`)
		for _, absent := range []string{"TaskHandle", "DestinationArn", "MaxNumberOfMessagesPerSecond", "FailureReason"} {
			if strings.Contains(body, absent) {
				t.Fatalf("%s present in %s", absent, body)
			}
		}
	})

	t.Run("38_NoDestinationReturnsToSeveralSources", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "s1", "s2")
		ids1 := e.deadLetter("s1", "dlq", "one-a", "one-b")
		ids2 := e.deadLetter("s2", "dlq", "two-a")
		e.startMove("dlq", "", 0)
		e.stepUntil("completion", 50*time.Millisecond, func() bool { return *e.latest("dlq").Status == "COMPLETED" })
		check := func(src string, ids []string, want ...string) {
			t.Helper()
			got := e.receive(e.url(src), func(in *sqs.ReceiveMessageInput) {
				in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"ApproximateReceiveCount", "SluiceOriginalMessageId", "SluiceRedriveCount"}
			}).Messages
			if len(got) != len(want) {
				t.Fatalf("%s holds %d messages, want %d", src, len(got), len(want))
			}
			for i, m := range got {
				// Oldest first; each a new message with a fresh receive count
				// that remembers its original id.
				if *m.Body != want[i] || *m.MessageId == ids[i] || m.Attributes["SluiceOriginalMessageId"] != ids[i] ||
					m.Attributes["SluiceRedriveCount"] != "1" || m.Attributes["ApproximateReceiveCount"] != "1" {
					t.Fatalf("%s message %d: %s %v", src, i, *m.Body, m.Attributes)
				}
			}
		}
		check("s1", ids1, "one-a", "one-b")
		check("s2", ids2, "two-a")
	})

	t.Run("38_ListingNewestFirst", func(t *testing.T) {
		e := newEnv(t)
		e.withDLQ("dlq", "src")
		e.create("dest")
		e.deadLetter("src", "dlq", "a")
		e.startMove("dlq", "dest", 0)
		e.stepUntil("completion", 50*time.Millisecond, func() bool { return *e.latest("dlq").Status == "COMPLETED" })
		e.clk.Advance(time.Second)
		e.deadLetter("src", "dlq", bodies("b", 3)...)
		e.startMove("dlq", "", 1)
		if r := e.moveTasks("dlq", 0); len(r) != 1 || *r[0].Status != "RUNNING" {
			t.Fatalf("default MaxResults must list only the newest: %+v", r)
		}
		r := e.moveTasks("dlq", 10)
		if len(r) != 2 || *r[0].Status != "RUNNING" || *r[1].Status != "COMPLETED" || r[0].StartedTimestamp <= r[1].StartedTimestamp || r[1].DestinationArn == nil {
			t.Fatalf("listing %+v", r)
		}
		_, err := e.cli.ListMessageMoveTasks(e.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(e.arn("dlq")), MaxResults: aws.Int32(11)})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value 11 for parameter MaxResults is invalid.")
		// A queue that never had a task lists nothing (an empty Results).
		_, body := e.rawJSON("/", "ListMessageMoveTasks", `{"SourceArn":"`+e.arn("dest")+`"}`)
		if body != `{"Results":[]}` {
			t.Fatalf("empty listing %s", body)
		}
	})
}

// TestMoveTaskRate checks that MaxNumberOfMessagesPerSecond holds in
// simulated time: at no point has the task moved more than its token
// bucket allows (one message at once, then rate per second).
func TestMoveTaskRate(t *testing.T) {
	e := newEnv(t)
	e.withDLQ("dlq", "src")
	e.create("dest")
	e.deadLetter("src", "dlq", bodies("m", 10)...)
	const rate = 2
	start := e.clk.Now()
	e.startMove("dlq", "dest", rate)
	elapsed := e.stepUntil("completion", 100*time.Millisecond, func() bool {
		cur := e.latest("dlq")
		allowed := 1 + int64(rate*e.clk.Now().Sub(start).Seconds())
		if cur.ApproximateNumberOfMessagesMoved > allowed {
			t.Fatalf("%d moved after %v: more than %d/s", cur.ApproximateNumberOfMessagesMoved, e.clk.Now().Sub(start), rate)
		}
		return *cur.Status == "COMPLETED"
	})
	// 10 messages at 2/s: the first at once, nine more need 4.5 s.
	if elapsed < 4500*time.Millisecond {
		t.Fatalf("10 messages moved in %v of simulated time at %d/s", elapsed, rate)
	}
	if got := e.latest("dlq"); got.ApproximateNumberOfMessagesMoved != 10 || e.attr(e.url("dest"), "ApproximateNumberOfMessages") != "10" {
		t.Fatalf("completed %+v", got)
	}
}

// listMoveTasksXML is the Query protocol's ListMessageMoveTasks response.
type listMoveTasksXML struct {
	XMLName xml.Name `xml:"ListMessageMoveTasksResponse"`
	Entries []struct {
		TaskHandle                        *string
		Status                            string
		SourceArn                         string
		DestinationArn                    *string
		MaxNumberOfMessagesPerSecond      *int
		ApproximateNumberOfMessagesMoved  int
		ApproximateNumberOfMessagesToMove int
		FailureReason                     *string
		StartedTimestamp                  int64
	} `xml:"ListMessageMoveTasksResult>ListMessageMoveTasksResultEntry"`
	RequestID string `xml:"ResponseMetadata>RequestId"`
}

// TestMoveTasksQuery is the move task round trip over the Query protocol:
// start, list (flattened ListMessageMoveTasksResultEntry), cancel, errors.
func TestMoveTasksQuery(t *testing.T) {
	e := newEnv(t)
	e.withDLQ("dlq", "src")
	e.create("dest")
	e.deadLetter("src", "dlq", bodies("m", 5)...)

	resp, body := e.query("/", url.Values{"Action": {"StartMessageMoveTask"}, "SourceArn": {e.arn("dlq")}, "DestinationArn": {e.arn("dest")}, "MaxNumberOfMessagesPerSecond": {"1"}})
	var start struct {
		XMLName    xml.Name `xml:"StartMessageMoveTaskResponse"`
		TaskHandle string   `xml:"StartMessageMoveTaskResult>TaskHandle"`
	}
	if err := xml.Unmarshal([]byte(body), &start); err != nil || resp.StatusCode != 200 || start.TaskHandle == "" {
		t.Fatalf("start: %d %s %v", resp.StatusCode, body, err)
	}

	resp, body = e.query("/", url.Values{"Action": {"ListMessageMoveTasks"}, "SourceArn": {e.arn("dlq")}, "MaxResults": {"10"}})
	var list listMoveTasksXML
	if err := xml.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != 200 || len(list.Entries) != 1 || list.RequestID == "" {
		t.Fatalf("list: %d %s %v", resp.StatusCode, body, err)
	}
	r := list.Entries[0]
	if r.TaskHandle == nil || *r.TaskHandle != start.TaskHandle || r.Status != "RUNNING" || r.SourceArn != e.arn("dlq") ||
		r.DestinationArn == nil || *r.DestinationArn != e.arn("dest") || r.MaxNumberOfMessagesPerSecond == nil || *r.MaxNumberOfMessagesPerSecond != 1 ||
		r.ApproximateNumberOfMessagesToMove != 5 || r.FailureReason != nil || r.StartedTimestamp != e.clk.Now().UnixMilli() {
		t.Fatalf("entry %+v\n%s", r, body)
	}
	if !strings.Contains(body, `xmlns="http://queue.amazonaws.com/doc/2012-11-05/"`) {
		t.Fatalf("namespace: %s", body)
	}

	resp, body = e.query("/", url.Values{"Action": {"CancelMessageMoveTask"}, "TaskHandle": {start.TaskHandle}})
	var cancel struct {
		XMLName xml.Name `xml:"CancelMessageMoveTaskResponse"`
		Moved   *int     `xml:"CancelMessageMoveTaskResult>ApproximateNumberOfMessagesMoved"`
	}
	if err := xml.Unmarshal([]byte(body), &cancel); err != nil || resp.StatusCode != 200 || cancel.Moved == nil {
		t.Fatalf("cancel: %d %s %v", resp.StatusCode, body, err)
	}
	poll.CheckFor(t, 5*time.Second, poll.True("CANCELLED", func() bool { return *e.latest("dlq").Status == "CANCELLED" }))
	_, body = e.query("/", url.Values{"Action": {"ListMessageMoveTasks"}, "SourceArn": {e.arn("dlq")}})
	if strings.Contains(body, "<TaskHandle>") || !strings.Contains(body, "<Status>CANCELLED</Status>") {
		t.Fatalf("after cancel: %s", body)
	}

	resp, body = e.query("/", url.Values{"Action": {"CancelMessageMoveTask"}, "TaskHandle": {"garbage"}})
	e.wantQueryError(resp, body, 400, "InvalidParameterValue", "Value for parameter TaskHandle is invalid.")
	resp, body = e.query("/", url.Values{"Action": {"CancelMessageMoveTask"}, "TaskHandle": {start.TaskHandle}})
	e.wantQueryError(resp, body, 404, "ResourceNotFoundException", "Task does not exist.")
	resp, body = e.query("/", url.Values{"Action": {"StartMessageMoveTask"}, "SourceArn": {e.arn("dlq")}, "DestinationArn": {e.arn("nope")}})
	e.wantQueryError(resp, body, 404, "ResourceNotFoundException", "The resource that you specified for the DestinationArn parameter doesn't exist.")
	resp, body = e.query("/", url.Values{"Action": {"StartMessageMoveTask"}, "SourceArn": {e.arn("src")}})
	e.wantQueryError(resp, body, 400, "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.")
	resp, body = e.query("/", url.Values{"Action": {"ListMessageMoveTasks"}})
	e.wantQueryError(resp, body, 400, "MissingParameter", "The request must contain the parameter SourceArn.")
	// Move task actions do not address a queue URL.
	resp, body = e.query("/"+account+"/dlq", url.Values{"Action": {"ListMessageMoveTasks"}, "SourceArn": {e.arn("dlq")}})
	e.wantQueryError(resp, body, 400, "InvalidAction", "The action ListMessageMoveTasks is not valid for this endpoint.")
}
