package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// TestWorkerReportsFailuresWithItsSQSKey: with auth on, a worker reports
// failures (POST /sluice/v1/failures) signed with its own SQS key, as the
// worker SDK does, for the queues that key may use, without holding an
// operator token. A report for another queue, or unsigned, is refused.
func TestWorkerReportsFailuresWithItsSQSKey(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	s := startWith(t, func(o *Options) {
		o.SQSCredentials = []SQSCredential{
			{AccessKeyID: "AKIDADMIN", SecretAccessKey: "admin-secret"},
			{AccessKeyID: "AKIDWORKER", SecretAccessKey: "worker-secret", Queues: []string{"jobs", "jobs-dlq"}},
		}
		o.HTTPAuth.Tokens = []string{token}
	})
	ctx := context.Background()
	newClient := func(id, secret string) *sqs.Client {
		return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + s.SQSAddr()), Region: "us-east-1",
			Credentials: credentials.NewStaticCredentialsProvider(id, secret, "")})
	}
	adm, wk := newClient("AKIDADMIN", "admin-secret"), newClient("AKIDWORKER", "worker-secret")
	urls := map[string]string{}
	for _, q := range []string{"jobs-dlq", "other-dlq"} {
		out, err := adm.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q)})
		if err != nil {
			t.Fatal(err)
		}
		urls[q] = *out.QueueUrl
	}
	for _, q := range []string{"jobs", "other"} {
		out, err := adm.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q), Attributes: map[string]string{
			"RedrivePolicy": `{"maxReceiveCount":"5","deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + q + `-dlq"}`}})
		if err != nil {
			t.Fatal(err)
		}
		urls[q] = *out.QueueUrl
		if _, err := adm.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String("job")}); err != nil {
			t.Fatal(err)
		}
	}

	// The worker SDK (its own module) sends exactly this: the report,
	// SigV4-signed with the worker's SQS key.
	report := func(queueURL, handle string) (int, string) {
		body := `{"queueUrl":"` + queueURL + `","receiptHandle":"` + handle + `","errorClass":"Poison","errorMessage":"cannot parse","terminal":true}`
		req, _ := http.NewRequest("POST", "http://"+s.SQSAddr()+"/sluice/v1/failures", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		sum := sha256.Sum256([]byte(body))
		if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: "AKIDWORKER", SecretAccessKey: "worker-secret"},
			req, hex.EncodeToString(sum[:]), "sqs", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	mine, err := wk.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls["jobs"]), WaitTimeSeconds: 1})
	if err != nil || len(mine.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if code, b := report(urls["jobs"], *mine.Messages[0].ReceiptHandle); code != http.StatusOK ||
		!strings.Contains(b, `"deadLettered":true`) || !strings.Contains(b, `"target":"jobs-dlq"`) {
		t.Fatalf("worker failure report: %d %s", code, b)
	}

	// The same key cannot report on a queue outside its list, and an
	// unsigned report still needs the operator token.
	recv, err := adm.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls["other"])})
	if err != nil || len(recv.Messages) != 1 {
		t.Fatalf("receive other: %v", err)
	}
	if code, b := report(urls["other"], *recv.Messages[0].ReceiptHandle); code != http.StatusForbidden || !strings.Contains(b, "AccessDenied") {
		t.Fatalf("report on another queue: %d %s", code, b)
	}
	body := `{"queueUrl":"` + urls["other"] + `","receiptHandle":"` + *recv.Messages[0].ReceiptHandle + `","terminal":true}`
	resp, err := http.Post("http://"+s.SQSAddr()+"/sluice/v1/failures", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned report: %d", resp.StatusCode)
	}
	if info, err := s.Engine().GetQueue("other-dlq"); err != nil || info.Visible != 0 {
		t.Fatalf("other-dlq changed: %+v %v", info, err)
	}
}
