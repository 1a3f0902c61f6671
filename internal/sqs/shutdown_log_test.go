package sqs_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/testlog"
)

// A long poll parked when the broker shuts down ends with 503
// ServiceUnavailable, as before, but is not logged as an ERROR: every
// shutdown ends parked polls, and an operator reading the log must not
// take that for a fault.
func TestShutdownEndsLongPollWithoutErrorLog(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := httptest.NewServer(sluicesqs.New(eng, sluicesqs.Options{Clock: clk, Logger: log}))
	defer srv.Close()
	cli := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}, nil
		})})
	ctx := context.Background()
	q, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q")})
	if err != nil {
		t.Fatal(err)
	}
	timers := clk.Timers()
	done := make(chan error, 1)
	go func() {
		_, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 20})
		done <- err
	}()
	poll.Parked(t, clk, timers+1) // the long poll's timer: it is parked
	eng.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "ServiceUnavailable") {
		t.Fatalf("parked receive at shutdown: %v", err)
	}
	if out := logs.String(); strings.Contains(out, "level=ERROR") || !strings.Contains(out, "request ended by shutdown") {
		t.Fatalf("logs:\n%s", out)
	}
}
