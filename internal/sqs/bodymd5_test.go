package sqs_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/engine"
)

// TestReceiveMD5OfBodyStoredOrComputed: SendMessage and SendMessageBatch
// hand the engine the body's MD5, and ReceiveMessage reports that stored
// digest; a message that reached the queue without one (an AMQP publish,
// an older store) gets MD5OfBody computed at receive. Either way the value
// is the MD5 of the body (the SDK checks it too).
func TestReceiveMD5OfBodyStoredOrComputed(t *testing.T) {
	e := newEnv(t)
	q := e.create("md5")
	e.send(q, "one")
	if _, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("two")},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Send("md5", []engine.Message{{Body: []byte("three")}}); err != nil {
		t.Fatal(err)
	}

	// What the engine keeps: SQS sends carry the digest, the engine send does not.
	ds, err := e.eng.Receive(context.Background(), "md5", engine.ReceiveRequest{Max: 10, Visibility: time.Second, VisibilitySet: true, WaitSet: true})
	if err != nil || len(ds) != 3 {
		t.Fatalf("engine receive: %d %v", len(ds), err)
	}
	for _, d := range ds {
		want := string(d.Body) != "three"
		if d.BodyMD5Set != want || (want && d.BodyMD5 != md5.Sum(d.Body)) {
			t.Fatalf("%q: digest %x set=%v", d.Body, d.BodyMD5, d.BodyMD5Set)
		}
	}
	e.clk.Advance(2 * time.Second)

	got := map[string]string{}
	for i := 0; i < 10 && len(got) < 3; i++ {
		for _, m := range e.receive(q).Messages {
			got[*m.Body] = *m.MD5OfBody
		}
	}
	if len(got) != 3 {
		t.Fatalf("received %v", got)
	}
	for body, sum := range got {
		want := md5.Sum([]byte(body))
		if sum != hex.EncodeToString(want[:]) {
			t.Errorf("%q: MD5OfBody %s, want %x", body, sum, want)
		}
	}
}
