package server

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// TestInjectedStoreHoldsTheState: with InjectedStore set the server keeps
// its queues and messages in that store (cluster mode passes its replicated
// store this way), not in a store of its own in DataDir, and closes it when
// it stops.
func TestInjectedStoreHoldsTheState(t *testing.T) {
	dir := t.TempDir()
	st := memstore.New()
	o := DefaultOptions()
	o.DataDir = dir
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = ""
	o.InjectedStore = st
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c := client(s.SQSAddr())
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("injected")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("kept-in-the-injected-store")}); err != nil {
		t.Fatal(err)
	}
	found := false
	if err := st.Scan(nil, func(_, v []byte) error {
		found = found || bytes.Contains(v, []byte("kept-in-the-injected-store"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("the acknowledged message is not in the injected store")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(new(store.Batch), true); err == nil {
		t.Fatal("the injected store is still open after the server stopped")
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the server opened a store of its own in data_dir: %v %v", ents, err)
	}
}
