package api

import (
	"encoding/json"
	"testing"
	"time"
)

// TestWireGolden pins the JSON of every wire type, empty and with every
// field set. The golden strings were taken from the broker's output before
// the types moved here from internal/admin (issue 16), so a change to a
// tag, an omitempty or a field type shows up as a failure, not as a
// silent break of deployed CLIs and workers.
//
// One string differs from that output on purpose: FailureReport{} now
// carries "terminal":false. The broker only decodes reports, and the worker
// SDK, which encodes them, has always sent terminal. Queue gained
// "waiting" (receives parked on the queue) on 2026-12-02: a field added,
// which older CLIs ignore.
func TestWireGolden(t *testing.T) {
	at := time.Date(2026, 11, 24, 21, 30, 0, 123456789, time.UTC)
	f := 2.5
	no := false
	msg := Message{ID: "id", Body: "b", BodyEncoding: "base64",
		Attributes:  []Attribute{{Name: "n", DataType: "Binary", StringValue: "s", BinaryValue: []byte{1, 2}}},
		TraceHeader: "tr", SenderID: "snd", SentAt: &at, FirstReceiveAt: &at, ReceiveCount: 3, GroupID: "g", DedupID: "d",
		SequenceNumber: "7", State: "visible", VisibleAt: &at, LastReceivedAt: &at, DeadLetterSource: "src",
		DeadLetter:  &DeadLetterInfo{SourceQueue: "src", Reason: "terminal", Attempts: 2, FirstReceiveAt: &at, LastReceiveAt: &at, DeadLetteredAt: &at},
		LastFailure: &FailureRecord{ErrorClass: "E", Message: "m", Trace: "t", ConsumerID: "c", ConsumerVersion: "v", ReportedAt: &at, Attempt: 1},
		Redrive:     &RedriveInfo{OriginalMessageID: "o", Count: 1, TaskID: "tk", At: &at}}
	flt := Filter{Reason: "terminal", ErrorClass: "E", SourceQueue: "s", SentAfter: &at, SentBefore: &at, Attribute: &AttributeFilter{Name: "a", Value: "v"}, IDs: []string{"x"}}
	q := Queue{Name: "q", FIFO: true, Visible: 1, InFlight: 2, Delayed: 3, Waiting: 7, OldestAgeSeconds: 1.5, DeadLetterQueue: "q-dlq", MaxReceiveCount: 5,
		IsDeadLetterQueue: true, Sources: []string{"a"}, Counters: Counters{1, 2, 3, 4, 5, 6},
		RetryPolicy: &RetryPolicy{Strategy: "exponential", BaseSeconds: 1, CapSeconds: 2}, Paused: true,
		Config: &QueueConfig{FIFO: true, ContentBasedDedup: true, DedupScope: "queue", FifoThroughputLimit: "perQueue", DelaySeconds: 1,
			MaxMessageSize: 2, RetentionSeconds: 3, ReceiveWaitSeconds: 4, VisibilitySeconds: 5,
			DeadLetter: &DeadLetterPolicy{Target: "t", MaxReceiveCount: 3}, RedriveAllow: &RedriveAllowPolicy{Permission: "byQueue", SourceQueues: []string{"s"}},
			Retry: &RetryPolicy{Strategy: "fixed"}, Extra: map[string]string{"k": "v"}},
		Tags: map[string]string{"owner": "me"}, CreatedAt: &at, ModifiedAt: &at}
	task := Task{ID: "t", Source: "s", Destination: "d", Rate: 5, Status: "RUNNING", Moved: 1, ToMove: 2, Returned: 3, ReturnedClasses: []string{"E"},
		FailureReason: "f", StopRule: "returned", Refilled: 4, StartedAt: &at, UpdatedAt: &at, Filter: &flt, SafetyWindowSeconds: 60, SafetyThreshold: 3}
	for i, c := range []struct {
		v    any
		want string
	}{
		{Queue{},
			`{"name":"","fifo":false,"visible":0,"inflight":0,"delayed":0,"waiting":0,"oldestAgeSeconds":0,"isDeadLetterQueue":false,"sources":null,"counters":{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0},"paused":false}`},
		{q,
			`{"name":"q","fifo":true,"visible":1,"inflight":2,"delayed":3,"waiting":7,"oldestAgeSeconds":1.5,"deadLetterQueue":"q-dlq","maxReceiveCount":5,"isDeadLetterQueue":true,"sources":["a"],"counters":{"sent":1,"received":2,"redelivered":3,"deleted":4,"deadLettered":5,"expired":6},"retryPolicy":{"strategy":"exponential","baseSeconds":1,"capSeconds":2},"paused":true,"config":{"fifo":true,"contentBasedDeduplication":true,"deduplicationScope":"queue","fifoThroughputLimit":"perQueue","delaySeconds":1,"maxMessageSize":2,"retentionSeconds":3,"receiveWaitSeconds":4,"visibilityTimeoutSeconds":5,"deadLetter":{"target":"t","maxReceiveCount":3},"redriveAllow":{"permission":"byQueue","sourceQueues":["s"]},"retry":{"strategy":"fixed","baseSeconds":0,"capSeconds":0},"extra":{"k":"v"}},"tags":{"owner":"me"},"createdAt":"2026-11-24T21:30:00.123456789Z","modifiedAt":"2026-11-24T21:30:00.123456789Z"}`},
		{Counters{},
			`{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0}`},
		{RetryPolicy{},
			`{"strategy":"","baseSeconds":0,"capSeconds":0}`},
		{QueueConfig{},
			`{"fifo":false,"delaySeconds":0,"maxMessageSize":0,"retentionSeconds":0,"receiveWaitSeconds":0,"visibilityTimeoutSeconds":0}`},
		{DeadLetterPolicy{},
			`{"target":"","maxReceiveCount":0}`},
		{RedriveAllowPolicy{},
			`{"permission":""}`},
		{Message{},
			`{"id":"","body":"","receiveCount":0}`},
		{msg,
			`{"id":"id","body":"b","bodyEncoding":"base64","attributes":[{"name":"n","dataType":"Binary","stringValue":"s","binaryValue":"AQI="}],"traceHeader":"tr","senderId":"snd","sentAt":"2026-11-24T21:30:00.123456789Z","firstReceiveAt":"2026-11-24T21:30:00.123456789Z","receiveCount":3,"groupId":"g","dedupId":"d","sequenceNumber":"7","state":"visible","visibleAt":"2026-11-24T21:30:00.123456789Z","lastReceivedAt":"2026-11-24T21:30:00.123456789Z","deadLetterSource":"src","deadLetter":{"sourceQueue":"src","reason":"terminal","attempts":2,"firstReceiveAt":"2026-11-24T21:30:00.123456789Z","lastReceiveAt":"2026-11-24T21:30:00.123456789Z","deadLetteredAt":"2026-11-24T21:30:00.123456789Z"},"lastFailure":{"errorClass":"E","message":"m","trace":"t","consumerId":"c","consumerVersion":"v","reportedAt":"2026-11-24T21:30:00.123456789Z","attempt":1},"redrive":{"originalMessageId":"o","count":1,"taskId":"tk","at":"2026-11-24T21:30:00.123456789Z"}}`},
		{Attribute{},
			`{"name":"","dataType":""}`},
		{DeadLetterInfo{},
			`{"sourceQueue":"","reason":"","attempts":0}`},
		{FailureRecord{},
			`{"attempt":0}`},
		{RedriveInfo{},
			`{"originalMessageId":"","count":0}`},
		{Page{},
			`{"messages":null}`},
		{Page{Messages: []Message{{ID: "m"}}, Next: "n"},
			`{"messages":[{"id":"m","body":"","receiveCount":0}],"next":"n"}`},
		{Filter{},
			`{}`},
		{flt,
			`{"reason":"terminal","errorClass":"E","sourceQueue":"s","sentAfter":"2026-11-24T21:30:00.123456789Z","sentBefore":"2026-11-24T21:30:00.123456789Z","attribute":{"name":"a","value":"v"},"ids":["x"]}`},
		{AttributeFilter{},
			`{"name":""}`},
		{DeleteRequest{},
			`{"filter":{}}`},
		{DeleteRequest{Filter: flt, All: true},
			`{"filter":{"reason":"terminal","errorClass":"E","sourceQueue":"s","sentAfter":"2026-11-24T21:30:00.123456789Z","sentBefore":"2026-11-24T21:30:00.123456789Z","attribute":{"name":"a","value":"v"},"ids":["x"]},"all":true}`},
		{DeleteResult{Deleted: 2},
			`{"deleted":2}`},
		{ImportResult{Imported: 3},
			`{"imported":3}`},
		{RedriveRequest{},
			`{"filter":{}}`},
		{RedriveRequest{Destination: "d", Rate: 4, Filter: flt, DryRun: true, SafetyWindowSeconds: 5, SafetyThreshold: 6},
			`{"destination":"d","rate":4,"filter":{"reason":"terminal","errorClass":"E","sourceQueue":"s","sentAfter":"2026-11-24T21:30:00.123456789Z","sentBefore":"2026-11-24T21:30:00.123456789Z","attribute":{"name":"a","value":"v"},"ids":["x"]},"dryRun":true,"safetyWindowSeconds":5,"safetyThreshold":6}`},
		{DryRun{},
			`{"dryRun":false,"total":0,"byDestination":null,"sample":null}`},
		{DryRun{DryRun: true, Total: 2, ByDestination: map[string]int{"a": 2}, Sample: []Message{{ID: "m"}}},
			`{"dryRun":true,"total":2,"byDestination":{"a":2},"sample":[{"id":"m","body":"","receiveCount":0}]}`},
		{Task{},
			`{"id":"","source":"","rate":0,"status":"","moved":0,"toMove":0,"returned":0,"returnedClasses":null,"refilled":0,"safetyWindowSeconds":0,"safetyThreshold":0}`},
		{task,
			`{"id":"t","source":"s","destination":"d","rate":5,"status":"RUNNING","moved":1,"toMove":2,"returned":3,"returnedClasses":["E"],"failureReason":"f","stopRule":"returned","refilled":4,"startedAt":"2026-11-24T21:30:00.123456789Z","updatedAt":"2026-11-24T21:30:00.123456789Z","filter":{"reason":"terminal","errorClass":"E","sourceQueue":"s","sentAfter":"2026-11-24T21:30:00.123456789Z","sentBefore":"2026-11-24T21:30:00.123456789Z","attribute":{"name":"a","value":"v"},"ids":["x"]},"safetyWindowSeconds":60,"safetyThreshold":3}`},
		{TaskList{},
			`{"tasks":null}`},
		{TaskList{Tasks: []Task{{ID: "t"}}},
			`{"tasks":[{"id":"t","source":"","rate":0,"status":"","moved":0,"toMove":0,"returned":0,"returnedClasses":null,"refilled":0,"safetyWindowSeconds":0,"safetyThreshold":0}]}`},
		{QueueList{},
			`{"queues":null}`},
		{QueueList{Queues: []Queue{{Name: "q"}}},
			`{"queues":[{"name":"q","fifo":false,"visible":0,"inflight":0,"delayed":0,"waiting":0,"oldestAgeSeconds":0,"isDeadLetterQueue":false,"sources":null,"counters":{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0},"paused":false}]}`},
		{FailureReport{},
			`{"receiptHandle":"","terminal":false}`},
		{FailureReport{QueueURL: "http://h/0/q", Queue: "q", ReceiptHandle: "r", ErrorClass: "E", ErrorMessage: "m", Trace: "t",
			ConsumerID: "c", ConsumerVersion: "v", Terminal: true, RetryAfterSeconds: &f},
			`{"queueUrl":"http://h/0/q","queue":"q","receiptHandle":"r","errorClass":"E","errorMessage":"m","trace":"t","consumerId":"c","consumerVersion":"v","terminal":true,"retryAfterSeconds":2.5}`},
		{FailureOutcome{},
			`{"deadLettered":false}`},
		{FailureOutcome{DeadLettered: true, Target: "t", VisibleAt: &at},
			`{"deadLettered":true,"target":"t","visibleAt":"2026-11-24T21:30:00.123456789Z"}`},
		{ErrorBody{},
			`{"error":{"code":"","message":""}}`},
		{ErrorBody{Error: ErrorDetail{Code: "C", Message: "m"}},
			`{"error":{"code":"C","message":"m"}}`},
		{CreateQueueRequest{},
			`{}`},
		{CreateQueueRequest{FIFO: true, VisibilityTimeoutSeconds: 3, DeadLetterQueue: &no, MaxReceiveCount: 4, Owner: "o", Tags: map[string]string{"a": "b"}},
			`{"fifo":true,"visibilityTimeoutSeconds":3,"deadLetterQueue":false,"maxReceiveCount":4,"owner":"o","tags":{"a":"b"}}`},
		{CreateQueueResponse{},
			`{"queue":{"name":"","fifo":false,"visible":0,"inflight":0,"delayed":0,"waiting":0,"oldestAgeSeconds":0,"isDeadLetterQueue":false,"sources":null,"counters":{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0},"paused":false},"warnings":null}`},
		{CreateQueueResponse{Queue: Queue{Name: "q"}, DeadLetterQueue: &Queue{Name: "q-dlq"},
			Warnings: []Finding{{Queue: "q", Check: "visibility", Verdict: "yellow", Reason: "r", Fix: "f"}, {Queue: "q", Check: "c", Verdict: "green"}}},
			`{"queue":{"name":"q","fifo":false,"visible":0,"inflight":0,"delayed":0,"waiting":0,"oldestAgeSeconds":0,"isDeadLetterQueue":false,"sources":null,"counters":{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0},"paused":false},"deadLetterQueue":{"name":"q-dlq","fifo":false,"visible":0,"inflight":0,"delayed":0,"waiting":0,"oldestAgeSeconds":0,"isDeadLetterQueue":false,"sources":null,"counters":{"sent":0,"received":0,"redelivered":0,"deleted":0,"deadLettered":0,"expired":0},"paused":false},"warnings":[{"queue":"q","check":"visibility","verdict":"yellow","reason":"r","fix":"f"},{"queue":"q","check":"c","verdict":"green","reason":""}]}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%d %T: %v", i, c.v, err)
		}
		if string(b) != c.want {
			t.Errorf("%d %T:\n got %s\nwant %s", i, c.v, b, c.want)
		}
	}
}
