package worker

import (
	"encoding/json"
	"testing"

	"github.com/sluicemq/sluice/api"
)

// TestFailureReportBodyGolden pins the bytes of the failure reports the
// SQS source (queueUrl) and the AMQP source (queue) send. The golden
// strings are what the worker's own report types encoded before they were
// replaced by api.FailureReport (issue 16): deployed brokers see the same
// JSON.
func TestFailureReportBodyGolden(t *testing.T) {
	const u = "http://127.0.0.1:9324/000000000000/orders"
	secs := 12.5
	for i, c := range []struct {
		v    api.FailureReport
		want string
	}{
		{api.FailureReport{QueueURL: u, ReceiptHandle: "r"},
			`{"queueUrl":"http://127.0.0.1:9324/000000000000/orders","receiptHandle":"r","terminal":false}`},
		{api.FailureReport{QueueURL: u, ReceiptHandle: "r", ErrorClass: "E", ErrorMessage: "m", Trace: "t", ConsumerID: "c", ConsumerVersion: "v", Terminal: true},
			`{"queueUrl":"http://127.0.0.1:9324/000000000000/orders","receiptHandle":"r","errorClass":"E","errorMessage":"m","trace":"t","consumerId":"c","consumerVersion":"v","terminal":true}`},
		{api.FailureReport{QueueURL: u, ReceiptHandle: "r", ErrorClass: "E", RetryAfterSeconds: &secs},
			`{"queueUrl":"http://127.0.0.1:9324/000000000000/orders","receiptHandle":"r","errorClass":"E","terminal":false,"retryAfterSeconds":12.5}`},
		{api.FailureReport{Queue: "orders", ReceiptHandle: "r"},
			`{"queue":"orders","receiptHandle":"r","terminal":false}`},
		{api.FailureReport{Queue: "orders", ReceiptHandle: "r", ErrorClass: "E", ErrorMessage: "m", Trace: "t", ConsumerID: "c", ConsumerVersion: "v", Terminal: true},
			`{"queue":"orders","receiptHandle":"r","errorClass":"E","errorMessage":"m","trace":"t","consumerId":"c","consumerVersion":"v","terminal":true}`},
		{api.FailureReport{Queue: "orders", ReceiptHandle: "r", ErrorClass: "E", RetryAfterSeconds: &secs},
			`{"queue":"orders","receiptHandle":"r","errorClass":"E","terminal":false,"retryAfterSeconds":12.5}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%d:\n got %s\nwant %s", i, b, c.want)
		}
	}
}
