package main

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"testing"

	"github.com/sluicemq/sluice/worker"
)

// The README's example message bodies are good orders for this worker: a
// reader who sends one and then runs the example worker must see it
// processed, not dead-lettered as poison.
func TestReadmeBodiesAreNotPoison(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Every JSON object literal that looks like an order body: one that
	// names a customer (an API body such as the cluster membership
	// request's {"id": 4, "raft": …} is not a message).
	bodies := regexp.MustCompile(`\{"(?:id|order|customer)"[^}\n]*"customer"[^}\n]*\}|\{"customer"[^}\n]*\}`).FindAll(readme, -1)
	if len(bodies) < 4 {
		t.Fatalf("found %d example bodies in README.md, want the AWS CLI, Go, boto3 and AMQP ones", len(bodies))
	}
	h := &handler{log: slog.New(slog.DiscardHandler)}
	for _, b := range bodies {
		if err := h.Handle(context.Background(), &worker.Message{Body: b}); err != nil {
			t.Errorf("README body %s fails the example worker: %v", b, err)
		}
	}
}
