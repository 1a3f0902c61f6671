package sqs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// TestCatalogue drives the conformance catalogue of the SQS reference (§10)
// with aws-sdk-go-v2 over AWS JSON 1.0; each subtest names its number.
// Query-specific items are in TestCatalogueQuery.
func TestCatalogue(t *testing.T) {
	t.Run("01_GetQueueUrlMissing", func(t *testing.T) {
		e := newEnv(t)
		_, err := e.cli.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
		var qdne *types.QueueDoesNotExist
		if !errors.As(err, &qdne) {
			t.Fatalf("want *types.QueueDoesNotExist, got %T %v", err, err)
		}
		wantAPIError(t, err, "AWS.SimpleQueueService.NonExistentQueue", 400, "The specified queue does not exist.")
	})

	t.Run("02_CreateQueueDifferentAttributes", func(t *testing.T) {
		e := newEnv(t)
		e.create("q", "DelaySeconds", "1")
		_, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"DelaySeconds": "2"}})
		var qne *types.QueueNameExists
		if !errors.As(err, &qne) {
			t.Fatalf("want *types.QueueNameExists, got %v", err)
		}
		wantAPIError(t, err, "QueueAlreadyExists", 400, "A queue already exists with the same name and a different value for attribute DelaySeconds")
		if strings.HasSuffix(qne.ErrorMessage(), ".") {
			t.Fatalf("message must not end with a period: %q", qne.ErrorMessage())
		}
		// Same values: idempotent.
		e.create("q", "DelaySeconds", "1")
	})

	t.Run("03_CreateQueueAfterModifiedAttributes", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q", "VisibilityTimeout", "30")
		if _, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"VisibilityTimeout": "60"}}); err != nil {
			t.Fatal(err)
		}
		_, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"VisibilityTimeout": "30"}})
		wantAPIError(t, err, "QueueAlreadyExists", 400, "attribute VisibilityTimeout")
		e.create("q")
		e.create("q", "VisibilityTimeout", "60")
	})

	t.Run("04_FifoSuffix", func(t *testing.T) {
		e := newEnv(t)
		_, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("nofifo"), Attributes: map[string]string{"FifoQueue": "true"}})
		wantAPIError(t, err, "InvalidParameterValue", 400, "must end with .fifo suffix")
		_, err = e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("std.fifo")})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	})

	t.Run("05_StandardWithFifoAttributes", func(t *testing.T) {
		e := newEnv(t)
		for attr, msg := range map[string]string{
			"ContentBasedDeduplication": "Unknown Attribute ContentBasedDeduplication.",
			"DeduplicationScope":        "You can specify the DeduplicationScope only when FifoQueue is set to true.",
			"FifoThroughputLimit":       "You can specify the FifoThroughputLimit only when FifoQueue is set to true.",
		} {
			val := map[string]string{"ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}[attr]
			_, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("std"), Attributes: map[string]string{attr: val}})
			wantAPIError(t, err, "InvalidAttributeName", 400, msg)
		}
	})

	t.Run("06_SetFifoQueue", func(t *testing.T) {
		e := newEnv(t)
		std := e.create("std")
		fifo := e.create("f.fifo", "FifoQueue", "true")
		_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &std, Attributes: map[string]string{"FifoQueue": "true"}})
		wantAPIError(t, err, "InvalidAttributeName", 400, "Unknown Attribute FifoQueue.")
		_, err = e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &fifo, Attributes: map[string]string{"FifoQueue": "false"}})
		wantAPIError(t, err, "InvalidAttributeValue", 400, "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.")
	})

	t.Run("07_MaxNumberOfMessages", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		_, err := e.cli.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: 11})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
	})

	t.Run("08_WaitTimeSecondsAndEmptyReceive", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		for _, w := range []int32{21, -1} {
			_, err := e.cli.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: &q, WaitTimeSeconds: w})
			wantAPIError(t, err, "InvalidParameterValue", 400, fmt.Sprintf("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", w))
		}
		resp, body := e.rawJSON("/", "ReceiveMessage", `{"QueueUrl":"`+q+`"}`)
		if resp.StatusCode != 200 || body != "{}" {
			t.Fatalf("empty receive: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("09_LongPollReturnsEarly", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "one")
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		defer cancel()
		out, err := e.cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: 10, WaitTimeSeconds: 20})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("long poll: %v %v", out, err)
		}
		// A waiting long poll wakes on a send (the fake clock never moves).
		done := make(chan *sqs.ReceiveMessageOutput, 1)
		go func() {
			out, _ := e.cli.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: &q, WaitTimeSeconds: 20})
			done <- out
		}()
		poll.Parked(t, e.clk, 1) // the long poll
		e.send(q, "two")
		select {
		case out := <-done:
			if out == nil || len(out.Messages) != 1 || *out.Messages[0].Body != "two" {
				t.Fatalf("woken poll got %+v", out)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("long poll did not wake on send")
		}
	})

	t.Run("10_OversizedMessage", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String(strings.Repeat("x", 1048577))})
		wantAPIError(t, err, "InvalidParameterValue", 400, "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.")
		e.send(q, strings.Repeat("x", 1048576)) // exactly the limit is fine
		if _, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
			t.Fatal(err)
		}
		_, err = e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String(strings.Repeat("x", 1025))})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Message must be shorter than 1024 bytes.")
	})

	t.Run("11_BatchTooLong", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		entries := []types.SendMessageBatchRequestEntry{
			{Id: aws.String("a"), MessageBody: aws.String(strings.Repeat("x", 524288))},
			{Id: aws.String("b"), MessageBody: aws.String(strings.Repeat("x", 524289))},
		}
		_, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: entries})
		var btl *types.BatchRequestTooLong
		if !errors.As(err, &btl) {
			t.Fatalf("want BatchRequestTooLong, got %v", err)
		}
		wantAPIError(t, err, "AWS.SimpleQueueService.BatchRequestTooLong", 400, "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.")
	})

	t.Run("12_BatchOneOversizedEntry", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q", "MaximumMessageSize", "1024")
		entries := []types.SendMessageBatchRequestEntry{
			{Id: aws.String("ok1"), MessageBody: aws.String("small")},
			{Id: aws.String("big"), MessageBody: aws.String(strings.Repeat("x", 1025))},
			{Id: aws.String("ok2"), MessageBody: aws.String("small")},
		}
		out, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Successful) != 2 || len(out.Failed) != 1 {
			t.Fatalf("successful %d failed %d", len(out.Successful), len(out.Failed))
		}
		f := out.Failed[0]
		if *f.Id != "big" || *f.Code != "InvalidParameterValue" || !f.SenderFault || !strings.Contains(*f.Message, "shorter than 1024 bytes") {
			t.Fatalf("failed entry %+v", f)
		}
	})

	t.Run("13_TooManyEntries", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		var send []types.SendMessageBatchRequestEntry
		var del []types.DeleteMessageBatchRequestEntry
		var vis []types.ChangeMessageVisibilityBatchRequestEntry
		for i := 0; i < 20; i++ {
			id := aws.String(strconv.Itoa(i))
			send = append(send, types.SendMessageBatchRequestEntry{Id: id, MessageBody: aws.String("x")})
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: id, ReceiptHandle: aws.String("h")})
			vis = append(vis, types.ChangeMessageVisibilityBatchRequestEntry{Id: id, ReceiptHandle: aws.String("h")})
		}
		const code, msg = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10. You have sent 20."
		_, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: send})
		wantAPIError(t, err, code, 400, msg)
		_, err = e.cli.DeleteMessageBatch(e.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q, Entries: del})
		wantAPIError(t, err, code, 400, msg)
		_, err = e.cli.ChangeMessageVisibilityBatch(e.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q, Entries: vis})
		wantAPIError(t, err, code, 400, msg)
	})

	t.Run("14_InvalidBatchEntryId", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		for _, id := range []string{"", strings.Repeat("a", 100), "invalid:id"} {
			_, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String(id), MessageBody: aws.String("x")}}})
			wantAPIError(t, err, "AWS.SimpleQueueService.InvalidBatchEntryId", 400, "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
			_, err = e.cli.DeleteMessageBatch(e.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q, Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String(id), ReceiptHandle: aws.String("h")}}})
			wantAPIError(t, err, "AWS.SimpleQueueService.InvalidBatchEntryId", 400, "at most 80 letters long")
		}
	})

	t.Run("15_EmptyBody", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("")})
		wantAPIError(t, err, "MissingParameter", 400, "The request must contain the parameter MessageBody.")
	})

	t.Run("16_EmptyStringAttribute", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("String"), StringValue: aws.String("")}}})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Message (user) attribute 'a' must contain a non-empty value of type 'String'.")
	})

	t.Run("17_FifoRequiresIds", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("f.fifo", "FifoQueue", "true")
		_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
		wantAPIError(t, err, "InvalidParameterValue", 400, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
		_, err = e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
		wantAPIError(t, err, "MissingParameter", 400, "The request must contain the parameter MessageGroupId.")
		// A batch fails as a whole (conformance_test.go covers it fully).
		_, err = e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String("a"), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")}}})
		wantAPIError(t, err, "InvalidParameterValue", 400, "The request must contain the parameter MessageGroupId.")
	})

	t.Run("18_FifoDelay", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("f.fifo", "FifoQueue", "true", "DelaySeconds", "5")
		_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1"), DelaySeconds: 2})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.")
		// aws-sdk-go-v2 leaves DelaySeconds 0 out, so send it raw.
		if resp, body := e.rawJSON("/", "SendMessage", `{"QueueUrl":"`+q+`","MessageBody":"x","MessageGroupId":"g","MessageDeduplicationId":"d2","DelaySeconds":0}`); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("queue delay not applied")
		}
		if e.attr(q, "ApproximateNumberOfMessagesDelayed") != "1" {
			t.Fatal("message not delayed")
		}
		e.clk.Advance(5 * time.Second)
		if got := e.receive(q); len(got.Messages) != 1 {
			t.Fatal("delayed message not delivered after the queue delay")
		}
	})

	t.Run("19_InvalidFifoIds", func(t *testing.T) {
		e := newEnv(t)
		fifo := e.create("f.fifo", "FifoQueue", "true", "ContentBasedDeduplication", "true")
		std := e.create("std")
		for _, bad := range []string{"", strings.Repeat("a", 129), "group 123"} {
			_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &fifo, MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(bad)})
			wantAPIError(t, err, "InvalidParameterValue", 400, "for parameter MessageDeduplicationId is invalid. Reason: MessageDeduplicationId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
			for _, q := range []string{fifo, std} {
				_, err = e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x"), MessageGroupId: aws.String(bad)})
				wantAPIError(t, err, "InvalidParameterValue", 400, "Value "+bad+" for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
			}
		}
	})

	t.Run("20_PurgeInProgress", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		if _, err := e.cli.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: &q}); err != nil {
			t.Fatal(err)
		}
		_, err := e.cli.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: &q})
		var pip *types.PurgeQueueInProgress
		if !errors.As(err, &pip) {
			t.Fatalf("want PurgeQueueInProgress, got %v", err)
		}
		wantAPIError(t, err, "AWS.SimpleQueueService.PurgeQueueInProgress", 403, "Only one PurgeQueue operation on q is allowed every 60 seconds.")
		e.clk.Advance(60 * time.Second)
		if _, err := e.cli.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: &q}); err != nil {
			t.Fatalf("purge after 60 s: %v", err)
		}
	})

	t.Run("21_PurgeRemovesEverything", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "inflight")
		e.receive(q)
		e.send(q, "delayed", func(in *sqs.SendMessageInput) { in.DelaySeconds = 60 })
		e.send(q, "visible")
		if _, err := e.cli.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: &q}); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(2 * time.Minute)
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatalf("purge left %d messages", len(got.Messages))
		}
		fifo := e.create("f.fifo", "FifoQueue", "true")
		dedup := func(in *sqs.SendMessageInput) {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("d")
		}
		e.send(fifo, "x", dedup)
		if _, err := e.cli.PurgeQueue(e.ctx, &sqs.PurgeQueueInput{QueueUrl: &fifo}); err != nil {
			t.Fatal(err)
		}
		e.send(fifo, "x", dedup)
		if got := e.receive(fifo); len(got.Messages) != 1 {
			t.Fatal("purge did not clear the dedup cache")
		}
	})

	t.Run("22_InvalidReceiptHandle", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		_, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: aws.String("garbage")})
		var rhi *types.ReceiptHandleIsInvalid
		if !errors.As(err, &rhi) {
			t.Fatalf("want ReceiptHandleIsInvalid, got %v", err)
		}
		wantAPIError(t, err, "ReceiptHandleIsInvalid", 400, `The input receipt handle "garbage" is not a valid receipt handle.`)
		_, err = e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q, ReceiptHandle: aws.String("INVALID"), VisibilityTimeout: 10})
		wantAPIError(t, err, "ReceiptHandleIsInvalid", 400, `"INVALID"`)
	})

	t.Run("23_RepeatedDelete", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x")
		h := e.receive(q).Messages[0].ReceiptHandle
		for i := 0; i < 3; i++ {
			if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: h}); err != nil {
				t.Fatalf("delete %d: %v", i, err)
			}
		}
	})

	t.Run("24_ChangeVisibilityAfterDelete", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x")
		h := e.receive(q).Messages[0].ReceiptHandle
		if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: h}); err != nil {
			t.Fatal(err)
		}
		_, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q, ReceiptHandle: h, VisibilityTimeout: 10})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Reason: Message does not exist or is not available for visibility timeout change.")
	})

	t.Run("25_StaleHandleDelete", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x")
		h := e.receive(q, func(in *sqs.ReceiveMessageInput) { in.VisibilityTimeout = 10 }).Messages[0].ReceiptHandle
		e.clk.Advance(11 * time.Second)
		if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: h}); err != nil {
			t.Fatalf("standard stale delete: %v", err)
		}
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("standard queue not empty after stale-handle delete")
		}

		fifo := e.create("f.fifo", "FifoQueue", "true", "ContentBasedDeduplication", "true")
		group := func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("g") }
		e.send(fifo, "a", group)
		h = e.receive(fifo, func(in *sqs.ReceiveMessageInput) { in.VisibilityTimeout = 10 }).Messages[0].ReceiptHandle
		e.clk.Advance(11 * time.Second)
		_, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &fifo, ReceiptHandle: h})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Reason: The receipt handle has expired.")

		e.send(fifo, "b", group)
		msgs := e.receive(fifo, func(in *sqs.ReceiveMessageInput) { in.VisibilityTimeout = 10 }).Messages
		if len(msgs) == 0 {
			t.Fatal("nothing to receive")
		}
		h = msgs[0].ReceiptHandle
		if _, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &fifo, ReceiptHandle: h, VisibilityTimeout: 60}); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(11 * time.Second)
		if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &fifo, ReceiptHandle: h}); err != nil {
			t.Fatalf("FIFO delete after extension: %v", err)
		}
	})

	t.Run("26_ChangeVisibilityZeroNotPermanent", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x")
		h := e.receive(q).Messages[0].ReceiptHandle
		if _, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q, ReceiptHandle: h, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
		if got := e.receive(q); len(got.Messages) != 1 {
			t.Fatal("message not visible after visibility 0")
		}
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("second receive should wait for the queue's timeout")
		}
		e.clk.Advance(31 * time.Second)
		if got := e.receive(q); len(got.Messages) != 1 {
			t.Fatal("message not back after the queue's timeout")
		}
	})

	t.Run("27_FifoGroupOrderAndZeroVisibility", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("f.fifo", "FifoQueue", "true", "ContentBasedDeduplication", "true")
		for _, m := range []struct{ g, b string }{{"g1", "a1"}, {"g2", "b1"}, {"g1", "a2"}, {"g2", "b2"}, {"g1", "a3"}} {
			e.send(q, m.b, func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String(m.g) })
		}
		// aws-sdk-go-v2 leaves a zero VisibilityTimeout out of the request,
		// so this receive is sent raw.
		resp, body := e.rawJSON("/", "ReceiveMessage", `{"QueueUrl":"`+q+`","MaxNumberOfMessages":10,"VisibilityTimeout":0}`)
		var out struct{ Messages []struct{ Body string } }
		if err := json.Unmarshal([]byte(body), &out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var bodies []string
		for _, m := range out.Messages {
			bodies = append(bodies, m.Body)
		}
		got := strings.Join(bodies, ",")
		if got != "a1,a2,a3,b1,b2" && got != "b1,b2,a1,a2,a3" {
			t.Fatalf("order %s: groups must come out whole and in order", got)
		}
		// Visibility 0 released every group at once.
		if again := e.receive(q, func(in *sqs.ReceiveMessageInput) { in.MaxNumberOfMessages = 1 }); len(again.Messages) != 1 {
			t.Fatal("visibility 0 did not release the group")
		}
	})

	t.Run("28_FifoGroupLock", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("f.fifo", "FifoQueue", "true", "ContentBasedDeduplication", "true")
		group := func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("g") }
		e.send(q, "a", group)
		e.send(q, "b", group)
		msgs := e.receive(q).Messages
		if len(msgs) != 2 {
			t.Fatalf("got %d messages", len(msgs))
		}
		if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: msgs[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		e.send(q, "c", group)
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("group not locked after partial delete")
		}
		if _, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q, ReceiptHandle: msgs[1].ReceiptHandle, VisibilityTimeout: 120}); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(60 * time.Second)
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("group not locked after visibility extension")
		}
		e.clk.Advance(61 * time.Second)
		got := e.receive(q).Messages
		if len(got) == 0 || *got[0].Body != "b" {
			t.Fatalf("after expiry got %v", got)
		}
	})

	t.Run("29_30_DeadLetterQueue", func(t *testing.T) {
		e := newEnv(t)
		dlq := e.create("dlq")
		src := e.create("src", "RedrivePolicy", `{"deadLetterTargetArn":"`+e.arn("dlq")+`","maxReceiveCount":1}`)
		sent := e.send(src, "poison", func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}
			in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-abc")}}
		})
		if got := e.receive(src); len(got.Messages) != 1 {
			t.Fatal("first receive must return the message")
		}
		e.clk.Advance(31 * time.Second)
		if got := e.receive(src); len(got.Messages) != 0 {
			t.Fatal("second receive must dead-letter the message instead of returning it")
		}
		got := e.receive(dlq, func(in *sqs.ReceiveMessageInput) {
			in.MessageAttributeNames = []string{"All"}
			in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"All"}
		}).Messages
		if len(got) != 1 {
			t.Fatal("DLQ empty")
		}
		m := got[0]
		if *m.MessageId != *sent.MessageId {
			t.Errorf("#29: MessageId changed: %s → %s", *sent.MessageId, *m.MessageId)
		}
		if *m.Body != "poison" || *m.MD5OfBody != *sent.MD5OfMessageBody || *m.MD5OfMessageAttributes != *sent.MD5OfMessageAttributes || *m.MessageAttributes["k"].StringValue != "v" {
			t.Errorf("#30: body or attributes changed: %+v", m)
		}
		if m.Attributes["AWSTraceHeader"] != "Root=1-abc" || m.Attributes["DeadLetterQueueSourceArn"] != e.arn("src") || m.Attributes["ApproximateReceiveCount"] != "2" {
			t.Errorf("#30: system attributes %v", m.Attributes)
		}
	})

	t.Run("31_RedrivePolicyValidity", func(t *testing.T) {
		e := newEnv(t)
		e.create("dlq")
		q := e.create("q")
		set := func(v string) error {
			_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"RedrivePolicy": v}})
			return err
		}
		arn := e.arn("dlq")
		for _, bad := range []string{`{"maxReceiveCount":1}`, `{"deadLetterTargetArn":"` + arn + `"}`, `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"abc"}`, `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":1001}`, `not json`} {
			wantAPIError(t, set(bad), "InvalidParameterValue", 400, "for parameter RedrivePolicy is invalid")
		}
		if err := set(`{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"42"}`); err != nil {
			t.Fatalf(`"42": %v`, err)
		}
		if got := e.attr(q, "RedrivePolicy"); got != `{"deadLetterTargetArn":"`+arn+`","maxReceiveCount":42}` {
			t.Fatalf("RedrivePolicy = %s", got)
		}
		if err := set(""); err != nil {
			t.Fatal(err)
		}
		if got := e.attr(q, "RedrivePolicy"); got != "" {
			t.Fatalf("empty policy did not remove it: %q", got)
		}
		wantAPIError(t, set(`{"deadLetterTargetArn":"`+e.arn("missing")+`","maxReceiveCount":1}`), "InvalidParameterValue", 400, "Dead letter target does not exist.")
		e.create("f.fifo", "FifoQueue", "true")
		wantAPIError(t, set(`{"deadLetterTargetArn":"`+e.arn("f.fifo")+`","maxReceiveCount":1}`), "InvalidParameterValue", 400, "same type")
	})

	t.Run("32_ListDeadLetterSourceQueues", func(t *testing.T) {
		e := newEnv(t)
		dlq := e.create("dlq")
		policy := `{"deadLetterTargetArn":"` + e.arn("dlq") + `","maxReceiveCount":3}`
		e.create("s1", "RedrivePolicy", policy)
		e.create("s2", "RedrivePolicy", policy)
		out, err := e.cli.ListDeadLetterSourceQueues(e.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: &dlq})
		if err != nil || strings.Join(out.QueueUrls, " ") != e.url("s1")+" "+e.url("s2") {
			t.Fatalf("sources %v %v", out, err)
		}
		_, body := e.rawJSON("/", "ListDeadLetterSourceQueues", `{"QueueUrl":"`+dlq+`"}`)
		if !strings.Contains(body, `"queueUrls":[`) {
			t.Fatalf("raw body %s", body)
		}
	})

	t.Run("33_SystemAttributeNames", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x")
		m := e.receive(q, func(in *sqs.ReceiveMessageInput) {
			in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"SenderId", "SequenceNumber"}
			//lint:ignore SA1019 item 33 checks that the deprecated member loses to the new one
			in.AttributeNames = []types.QueueAttributeName{"All"}
		}).Messages[0]
		if len(m.Attributes) != 1 || m.Attributes["SenderId"] != "AKIDSLUICETEST" {
			t.Fatalf("attributes %v", m.Attributes)
		}
		e.clk.Advance(31 * time.Second)
		m = e.receive(q, func(in *sqs.ReceiveMessageInput) {
			//lint:ignore SA1019 item 33 checks that the deprecated member still works alone
			in.AttributeNames = []types.QueueAttributeName{"All"}
		}).Messages[0]
		for _, k := range []string{"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"} {
			if m.Attributes[k] == "" {
				t.Errorf("All via AttributeNames lacks %s: %v", k, m.Attributes)
			}
		}
		if m.Attributes["ApproximateReceiveCount"] != "2" || m.Attributes["SequenceNumber"] != "" {
			t.Errorf("attributes %v", m.Attributes)
		}
		if ts, _ := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); ts != e.clk.Now().Add(-31*time.Second).UnixMilli() {
			t.Errorf("SentTimestamp %s is not the send time in epoch ms", m.Attributes["SentTimestamp"])
		}
	})

	t.Run("34_FifoDeduplication", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("f.fifo", "FifoQueue", "true")
		send := func(q, g, d string) *sqs.SendMessageOutput {
			return e.send(q, "x", func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String(g), aws.String(d)
			})
		}
		first := send(q, "g", "d")
		m := e.receive(q).Messages[0]
		if _, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		if again := send(q, "g2", "d"); *again.MessageId != *first.MessageId {
			t.Error("duplicate got a new MessageId")
		}
		if got := e.receive(q); len(got.Messages) != 0 {
			t.Fatal("duplicate delivered after delete")
		}
		mg := e.create("m.fifo", "FifoQueue", "true", "DeduplicationScope", "messageGroup")
		send(mg, "g1", "d")
		send(mg, "g2", "d")
		if got := e.receive(mg); len(got.Messages) != 2 {
			t.Fatalf("messageGroup scope: got %d", len(got.Messages))
		}
		h := e.create("h.fifo", "FifoQueue", "true")
		send(h, "g1", "d")
		if _, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &h, Attributes: map[string]string{"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}}); err != nil {
			t.Fatal(err)
		}
		send(h, "g1", "d")
		if got := e.receive(h); len(got.Messages) != 1 {
			t.Fatalf("high-throughput switch brought back a duplicate: %d", len(got.Messages))
		}
	})

	t.Run("35_DefaultsAndSSE", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		out, err := e.cli.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q, AttributeNames: []types.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"DelaySeconds": "0", "MaximumMessageSize": "1048576", "MessageRetentionPeriod": "345600",
			"ReceiveMessageWaitTimeSeconds": "0", "VisibilityTimeout": "30", "SqsManagedSseEnabled": "true",
			"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0", "ApproximateNumberOfMessagesDelayed": "0",
			"QueueArn":         e.arn("q"),
			"CreatedTimestamp": strconv.FormatInt(e.clk.Now().Unix(), 10), "LastModifiedTimestamp": strconv.FormatInt(e.clk.Now().Unix(), 10),
		}
		for k, v := range want {
			if out.Attributes[k] != v {
				t.Errorf("%s = %q, want %q", k, out.Attributes[k], v)
			}
		}
		if len(out.Attributes) != len(want) {
			t.Errorf("unexpected attributes: %v", out.Attributes)
		}
		_, err = e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("kms"), Attributes: map[string]string{"KmsMasterKeyId": "alias/x", "SqsManagedSseEnabled": "true"}})
		wantAPIError(t, err, "InvalidAttributeName", 400, "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.")
		k := e.create("kms2", "KmsMasterKeyId", "alias/x")
		if e.attr(k, "SqsManagedSseEnabled") != "false" || e.attr(k, "KmsDataKeyReusePeriodSeconds") != "300" {
			t.Error("KMS queue attributes")
		}
	})

	t.Run("36_ListQueuesPagination", func(t *testing.T) {
		e := newEnv(t)
		for _, n := range []string{"p-a", "p-b", "p-c", "other"} {
			e.create(n)
		}
		p1, err := e.cli.ListQueues(e.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("p-"), MaxResults: aws.Int32(2)})
		if err != nil || len(p1.QueueUrls) != 2 || p1.NextToken == nil {
			t.Fatalf("page 1 %+v %v", p1, err)
		}
		p2, err := e.cli.ListQueues(e.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("p-"), MaxResults: aws.Int32(2), NextToken: p1.NextToken})
		if err != nil || len(p2.QueueUrls) != 1 || p2.NextToken != nil || p2.QueueUrls[0] != e.url("p-c") {
			t.Fatalf("page 2 %+v %v", p2, err)
		}
		all, err := e.cli.ListQueues(e.ctx, &sqs.ListQueuesInput{})
		if err != nil || len(all.QueueUrls) != 4 || all.NextToken != nil {
			t.Fatalf("all %+v %v", all, err)
		}
		_, body := e.rawJSON("/", "ListQueues", `{"QueueNamePrefix":"zzz"}`)
		if body != "{}" {
			t.Fatalf("empty ListQueues must omit QueueUrls: %s", body)
		}
	})

	t.Run("37_Permissions", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		add := func(label string) error {
			_, err := e.cli.AddPermission(e.ctx, &sqs.AddPermissionInput{QueueUrl: &q, Label: aws.String(label), AWSAccountIds: []string{"111122223333"}, Actions: []string{"SendMessage"}})
			return err
		}
		if err := add("l1"); err != nil {
			t.Fatal(err)
		}
		var policy struct {
			Statement []struct {
				Sid       string
				Effect    string
				Principal struct{ AWS string }
				Action    string
				Resource  string
			}
		}
		if err := json.Unmarshal([]byte(e.attr(q, "Policy")), &policy); err != nil {
			t.Fatal(err)
		}
		if len(policy.Statement) != 1 || policy.Statement[0].Sid != "l1" || policy.Statement[0].Principal.AWS != "arn:aws:iam::111122223333:root" || policy.Statement[0].Action != "SQS:SendMessage" || policy.Statement[0].Resource != e.arn("q") {
			t.Fatalf("policy %+v", policy)
		}
		wantAPIError(t, add("l1"), "InvalidParameterValue", 400, "Value l1 for parameter Label is invalid. Reason: Already exists.")
		_, err := e.cli.RemovePermission(e.ctx, &sqs.RemovePermissionInput{QueueUrl: &q, Label: aws.String("nope")})
		wantAPIError(t, err, "InvalidParameterValue", 400, "Value nope for parameter Label is invalid. Reason: can't find label.")
		if _, err := e.cli.RemovePermission(e.ctx, &sqs.RemovePermissionInput{QueueUrl: &q, Label: aws.String("l1")}); err != nil {
			t.Fatal(err)
		}
		if got := e.attr(q, "Policy"); got != "" {
			t.Fatalf("policy after removing the last label: %s", got)
		}
	})

	t.Run("40_FairQueueGroupId", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		e.send(q, "x", func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("tenant-1") })
		m := e.receive(q, func(in *sqs.ReceiveMessageInput) {
			in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"MessageGroupId"}
		}).Messages[0]
		if m.Attributes["MessageGroupId"] != "tenant-1" {
			t.Fatalf("attributes %v", m.Attributes)
		}
	})

	t.Run("41_SystemAttributesDoNotChangeAttributeMD5", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		attrs := map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}
		plain := e.send(q, "x", func(in *sqs.SendMessageInput) { in.MessageAttributes = attrs })
		traced := e.send(q, "x", func(in *sqs.SendMessageInput) {
			in.MessageAttributes = attrs
			in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")}}
		})
		if plain.MD5OfMessageSystemAttributes != nil || traced.MD5OfMessageSystemAttributes == nil {
			t.Fatal("MD5OfMessageSystemAttributes must be present exactly when a system attribute was sent")
		}
		if *plain.MD5OfMessageAttributes != *traced.MD5OfMessageAttributes {
			t.Fatal("a system attribute changed MD5OfMessageAttributes")
		}
	})

	t.Run("42_InvalidCharacters", func(t *testing.T) {
		e := newEnv(t)
		q := e.create("q")
		var entries []types.SendMessageBatchRequestEntry
		for i := 0; i < 10; i++ {
			body := "ok"
			if i == 3 {
				body = "bad\x01"
			}
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)})
		}
		out, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: entries})
		if err != nil || len(out.Successful) != 9 || len(out.Failed) != 1 || *out.Failed[0].Code != "InvalidMessageContents" || *out.Failed[0].Id != "3" {
			t.Fatalf("batch %+v %v", out, err)
		}
		_, err = e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("bad\x01")})
		var imc *types.InvalidMessageContents
		if !errors.As(err, &imc) {
			t.Fatalf("want InvalidMessageContents, got %v", err)
		}
		wantAPIError(t, err, "InvalidMessageContents", 400, "Invalid binary character '#x1'")
	})
}

// TestCatalogueQuery covers the items whose Query form differs from JSON,
// and item 39 (Query API specifics), with a plain form-POST client.
func TestCatalogueQuery(t *testing.T) {
	t.Run("01_NonExistentQueueWsdlText", func(t *testing.T) {
		e := newEnv(t)
		resp, body := e.query("/", url.Values{"Action": {"GetQueueUrl"}, "QueueName": {"nope"}})
		e.wantQueryError(resp, body, 400, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist for this wsdl version.")
	})

	t.Run("08_EmptyReceiveResult", func(t *testing.T) {
		e := newEnv(t)
		e.create("q")
		resp, body := e.query("/"+account+"/q", url.Values{"Action": {"ReceiveMessage"}})
		if resp.StatusCode != 200 || !strings.Contains(body, "<ReceiveMessageResult/>") || !strings.Contains(body, `xmlns="http://queue.amazonaws.com/doc/2012-11-05/"`) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		resp, body = e.query("/"+account+"/q", url.Values{"Action": {"ReceiveMessage"}, "WaitTimeSeconds": {"21"}})
		e.wantQueryError(resp, body, 400, "InvalidParameterValue", "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.")
	})

	t.Run("13_14_BatchErrors", func(t *testing.T) {
		e := newEnv(t)
		e.create("q")
		v := url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {e.url("q")}}
		for i := 1; i <= 20; i++ {
			v.Set(fmt.Sprintf("SendMessageBatchRequestEntry.%d.Id", i), strconv.Itoa(i))
			v.Set(fmt.Sprintf("SendMessageBatchRequestEntry.%d.MessageBody", i), "x")
		}
		resp, body := e.query("/", v)
		e.wantQueryError(resp, body, 400, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "You have sent 20.")
		resp, body = e.query("/", url.Values{"Action": {"DeleteMessageBatch"}, "QueueUrl": {e.url("q")},
			"DeleteMessageBatchRequestEntry.1.Id": {"invalid:id"}, "DeleteMessageBatchRequestEntry.1.ReceiptHandle": {"h"}})
		e.wantQueryError(resp, body, 400, "AWS.SimpleQueueService.InvalidBatchEntryId", "at most 80 letters long")
	})

	t.Run("22_InvalidReceiptHandle", func(t *testing.T) {
		e := newEnv(t)
		e.create("q")
		resp, body := e.query("/", url.Values{"Action": {"DeleteMessage"}, "QueueUrl": {e.url("q")}, "ReceiptHandle": {"garbage"}})
		e.wantQueryError(resp, body, 400, "ReceiptHandleIsInvalid", `The input receipt handle "garbage" is not a valid receipt handle.`)
		if !strings.Contains(body, "&quot;garbage&quot;") {
			t.Fatalf("quote not escaped as &quot;: %s", body)
		}
	})

	t.Run("20_PurgeStatus403", func(t *testing.T) {
		e := newEnv(t)
		e.create("q")
		v := url.Values{"Action": {"PurgeQueue"}, "QueueUrl": {e.url("q")}}
		if resp, body := e.query("/", v); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		resp, body := e.query("/", v)
		e.wantQueryError(resp, body, 403, "AWS.SimpleQueueService.PurgeQueueInProgress", "every 60 seconds")
	})

	t.Run("39_QueryAPI", func(t *testing.T) {
		e := newEnv(t)
		e.create("q")
		e.create("other")
		resp, body := e.query("/", url.Values{"Action": {"FooBar"}})
		e.wantQueryError(resp, body, 400, "InvalidAction", "The action FooBar is not valid for this endpoint.")
		resp, body = e.query("/"+account+"/q", url.Values{"Action": {"CreateQueue"}, "QueueName": {"x"}})
		e.wantQueryError(resp, body, 400, "InvalidAction", "The action CreateQueue is not valid for this endpoint.")

		req, _ := http.NewRequest("GET", e.url("q"), nil)
		resp, body = e.do(req)
		if resp.StatusCode != 404 || !strings.Contains(body, "<UnknownOperationException") {
			t.Fatalf("GET queue URL without Action: %d %s", resp.StatusCode, body)
		}

		resp, body = e.query("/"+account+"/q", url.Values{"Action": {"GetQueueAttributes"}, "AttributeName.1": {"Foobar"}})
		e.wantQueryError(resp, body, 400, "InvalidAttributeName", "Unknown Attribute Foobar.")

		// QueueUrl overrides the path.
		resp, body = e.query("/"+account+"/q", url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {e.url("other")}, "AttributeName.1": {"QueueArn"}})
		if resp.StatusCode != 200 || !strings.Contains(body, "<Value>"+e.arn("other")+"</Value>") {
			t.Fatalf("QueueUrl did not override the path: %s", body)
		}

		// Accept: application/json on a Query GET.
		req, _ = http.NewRequest("GET", e.url("q")+"?Action=GetQueueAttributes&AttributeName.1=QueueArn", nil)
		req.Header.Set("Accept", "application/json")
		resp, body = e.do(req)
		var doc struct {
			GetQueueAttributesResponse struct {
				GetQueueAttributesResult struct {
					Attributes []struct{ Name, Value string }
				}
				ResponseMetadata struct{ RequestId string }
			}
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil || resp.StatusCode != 200 ||
			len(doc.GetQueueAttributesResponse.GetQueueAttributesResult.Attributes) != 1 ||
			doc.GetQueueAttributesResponse.GetQueueAttributesResult.Attributes[0].Value != e.arn("q") ||
			doc.GetQueueAttributesResponse.ResponseMetadata.RequestId == "" {
			t.Fatalf("JSON rendering: %d %s %v", resp.StatusCode, body, err)
		}

		// AWS JSON POSTed to a queue path (the PHP SDK does this).
		resp, body = e.rawJSON("/"+account+"/q", "SendMessage", `{"QueueUrl":"`+e.url("q")+`","MessageBody":"php"}`)
		if resp.StatusCode != 200 || !strings.Contains(body, `"MD5OfMessageBody"`) {
			t.Fatalf("JSON to queue path: %d %s", resp.StatusCode, body)
		}
	})
}
