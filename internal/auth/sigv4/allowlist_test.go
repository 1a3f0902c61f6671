package sigv4_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
)

const (
	limitedID     = "AKIDLIMITED"
	limitedSecret = "limited-secret"
)

func allowListEnv(t *testing.T) (*env, *sqs.Client, *sqs.Client) {
	e := newEnv(t, realBroker(t), sigv4.Options{Credentials: []sigv4.Credentials{
		{AccessKeyID: akid, SecretAccessKey: secret},
		{AccessKeyID: limitedID, SecretAccessKey: limitedSecret, Queues: []string{"orders-*", "audit"}},
	}})
	admin, limited := e.client(akid, secret), e.client(limitedID, limitedSecret)
	for _, q := range []string{"orders-1", "audit", "private", "private-dlq"} {
		if _, err := admin.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(q)}); err != nil {
			t.Fatal(err)
		}
	}
	return e, admin, limited
}

func (e *env) qurl(name string) *string { return aws.String(e.srv.URL + "/" + account + "/" + name) }
func arn(name string) *string {
	return aws.String("arn:aws:sqs:" + region + ":" + account + ":" + name)
}

func TestAllowListSDK(t *testing.T) {
	e, _, cli := allowListEnv(t)
	ctx := e.ctx
	// Allowed.
	if _, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: e.qurl("orders-1"), MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders-2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: e.qurl("audit")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatal(err)
	}
	// Refused.
	for name, call := range map[string]func() error{
		"Send": func() error {
			_, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: e.qurl("private"), MessageBody: aws.String("x")})
			return err
		},
		"Create": func() error {
			_, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("auditx")})
			return err
		},
		"GetQueueUrl": func() error {
			_, err := cli.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("private")})
			return err
		},
		"Purge": func() error {
			_, err := cli.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: e.qurl("private")})
			return err
		},
		"RedriveIntoOtherQueue": func() error {
			_, err := cli.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: e.qurl("orders-1"), Attributes: map[string]string{
				"RedrivePolicy": `{"maxReceiveCount":"1","deadLetterTargetArn":"` + *arn("private-dlq") + `"}`}})
			return err
		},
		"MoveFromOtherQueue": func() error {
			_, err := cli.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: arn("private-dlq"), DestinationArn: arn("orders-1")})
			return err
		},
		"MoveToOtherQueue": func() error {
			_, err := cli.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: arn("audit"), DestinationArn: arn("private")})
			return err
		},
		"MoveBackToSources": func() error {
			_, err := cli.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: arn("audit")})
			return err
		},
		"CancelOtherQueuesTask": func() error {
			h := base64.StdEncoding.EncodeToString([]byte(`{"taskId":"t","sourceArn":"` + *arn("private-dlq") + `"}`))
			_, err := cli.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(h)})
			return err
		},
		"ListTasksOfOtherQueue": func() error {
			_, err := cli.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: arn("private-dlq")})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) { wantCode(t, call(), "AccessDenied", 403) })
	}
}

// signedJSON sends a raw AWS JSON request signed as the limited key.
func signedJSON(t *testing.T, e *env, path, target, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+target)
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: limitedID, SecretAccessKey: limitedSecret},
		req, hex.EncodeToString(sum[:]), "sqs", region, time.Now()); err != nil {
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

// depth is a queue's ApproximateNumberOfMessages, read with the
// unrestricted key.
func depth(t *testing.T, e *env, admin *sqs.Client, name string) string {
	t.Helper()
	out, err := admin.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: e.qurl(name),
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "RedrivePolicy"}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["ApproximateNumberOfMessages"] + " " + out.Attributes["RedrivePolicy"]
}

// TestAllowListSmuggling: duplicate, re-cased or escaped members, and a
// queue path, cannot make the handler act on a queue outside the list.
// The allow-list is checked on the request the handler decoded, so each
// attempt is either refused or acts on the allowed queue; either way the
// private queues are unchanged.
func TestAllowListSmuggling(t *testing.T) {
	e, admin, _ := allowListEnv(t)
	ok := *e.qurl("orders-1")
	bad := *e.qurl("private")
	before := depth(t, e, admin, "private")
	for name, c := range map[string]struct{ path, target, body string }{
		"Duplicate":      {"/", "SendMessage", `{"QueueUrl":"` + ok + `","MessageBody":"x","QueueUrl":"` + bad + `"}`},
		"DuplicateFirst": {"/", "SendMessage", `{"QueueUrl":"` + bad + `","MessageBody":"x","QueueUrl":"` + ok + `"}`},
		"Recased":        {"/", "SendMessage", `{"QueueUrl":"` + ok + `","queueurl":"` + bad + `","MessageBody":"x"}`},
		"Escaped":        {"/", "SendMessage", `{"QueueUrl":"` + ok + `","Queue\u0055rl":"` + bad + `","MessageBody":"x"}`},
		"QueuePath":      {"/" + account + "/private", "SendMessage", `{"MessageBody":"x"}`},
		"NotJSON":        {"/", "SendMessage", `{"QueueUrl":"` + bad + `",`},
		"RedriveRecased": {"/", "SetQueueAttributes", `{"QueueUrl":"` + ok + `","Attributes":{"redrivepolicy":"{\"DeadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:private\"}"}}`},
		"Redrive":        {"/", "SetQueueAttributes", `{"QueueUrl":"` + ok + `","Attributes":{"RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:private\",\"maxReceiveCount\":1}"}}`},
		"RedriveGarbage": {"/", "SetQueueAttributes", `{"QueueUrl":"` + ok + `","Attributes":{"RedrivePolicy":"{not json"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			st, b := signedJSON(t, e, c.path, c.target, c.body)
			if st == 403 && !strings.Contains(b, "AccessDenied") {
				t.Fatalf("%d %s", st, b)
			}
			if st >= 500 {
				t.Fatalf("%d %s", st, b)
			}
		})
	}
	// Query protocol: re-cased and repeated form members.
	for name, form := range map[string]string{
		"Repeated":      "Action=SendMessage&MessageBody=x&QueueUrl=" + ok + "&QueueUrl=" + bad,
		"RepeatedFirst": "Action=SendMessage&MessageBody=x&QueueUrl=" + bad + "&QueueUrl=" + ok,
		"Recased":       "Action=SendMessage&MessageBody=x&QueueUrl=" + ok + "&queueUrl=" + bad,
		"InQuery":       "Action=SendMessage&MessageBody=x&QueueUrl=" + ok,
		"Redrive":       "Action=SetQueueAttributes&QueueUrl=" + ok + "&Attribute.1.Name=RedrivePolicy&Attribute.1.Value=" + `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:private","maxReceiveCount":"1"}`,
		"Malformed":     "Action=SendMessage&QueueUrl=" + bad + "&x=%zz",
	} {
		t.Run("Query"+name, func(t *testing.T) {
			target := e.srv.URL + "/"
			if name == "InQuery" {
				target += "?QueueUrl=" + bad
			}
			resp, err := http.DefaultClient.Do(signedQuery(t, target, form, limitedID, limitedSecret, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 403 && !bytes.Contains(b, []byte("<Code>AccessDenied</Code>")) || resp.StatusCode >= 500 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
	if after := depth(t, e, admin, "private"); after != before {
		t.Fatalf("private queue changed: %q -> %q", before, after)
	}
	if rp := depth(t, e, admin, "orders-1"); strings.Contains(rp, "private") {
		t.Fatalf("orders-1 dead-letters into private: %s", rp)
	}
	// The refusals name the queue, and the allowed forms still work.
	if st, b := signedJSON(t, e, "/", "SendMessage", `{"QueueUrl":"`+bad+`","MessageBody":"x"}`); st != 403 || !strings.Contains(b, "AccessDeniedException") {
		t.Fatalf("%d %s", st, b)
	}
	if st, b := signedJSON(t, e, "/", "SendMessage", `{"QueueUrl":"`+ok+`","MessageBody":"x"}`); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if st, b := signedJSON(t, e, "/"+account+"/audit", "SendMessage", `{"MessageBody":"x"}`); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
}

// TestMoveTaskDestinationSmuggling is the security issue's finding: a
// StartMessageMoveTask whose DestinationArn the old allow-list saw (a
// differently-cased Query key, or a JSON member repeated with an empty
// last copy) while the handler saw none, and so moved the messages "back
// to their sources": into a queue outside the key's list. Now the check
// runs on the request the handler decoded, so "private" never gets them.
func TestMoveTaskDestinationSmuggling(t *testing.T) {
	e, admin, _ := allowListEnv(t)
	// "private" dead-letters into "audit", which the limited key may use.
	if _, err := admin.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: e.qurl("private"), Attributes: map[string]string{
		"RedrivePolicy": `{"maxReceiveCount":"1","deadLetterTargetArn":"` + *arn("audit") + `"}`, "VisibilityTimeout": "0"}}); err != nil {
		t.Fatal(err)
	}
	src, ok := *arn("audit"), *arn("orders-1")
	attempt := func(t *testing.T, send func() (int, string)) {
		deadLetter(t, e, admin)
		st, b := send()
		if st >= 500 || st == 403 && !strings.Contains(b, "AccessDenied") {
			t.Fatalf("%d %s", st, b)
		}
		waitNoMoveRunning(t, e, admin)
		if d := depth(t, e, admin, "private"); !strings.HasPrefix(d, "0 ") {
			t.Fatalf("messages moved into private (%s) by a key limited to orders-*, audit: %d %s", d, st, b)
		}
	}
	for name, body := range map[string]string{
		"JSONEmptyLastCopy": `{"SourceArn":"` + src + `","DestinationArn":"` + ok + `","DestinationArn":""}`,
		"JSONNullLastCopy":  `{"SourceArn":"` + src + `","DestinationArn":"` + ok + `","DestinationArn":null}`,
		"JSONRecased":       `{"SourceArn":"` + src + `","destinationArn":"` + ok + `","DestinationArn":""}`,
	} {
		t.Run(name, func(t *testing.T) {
			attempt(t, func() (int, string) { return signedJSON(t, e, "/", "StartMessageMoveTask", body) })
		})
	}
	for name, form := range map[string]string{
		"QueryRecased":    "Action=StartMessageMoveTask&SourceArn=" + src + "&destinationArn=" + ok,
		"QueryEmptyFirst": "Action=StartMessageMoveTask&SourceArn=" + src + "&DestinationArn=&DestinationArn=" + ok,
	} {
		t.Run(name, func(t *testing.T) {
			attempt(t, func() (int, string) {
				resp, err := http.DefaultClient.Do(signedQuery(t, e.srv.URL+"/", form, limitedID, limitedSecret, time.Now()))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			})
		})
	}
}

// deadLetter puts one message into "audit" by dead-lettering it from
// "private" (its original source, whose visibility timeout is 0), and
// returns once private is empty again.
func deadLetter(t *testing.T, e *env, admin *sqs.Client) {
	t.Helper()
	before := depth(t, e, admin, "audit")
	if _, err := admin.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: e.qurl("private"), MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for depth(t, e, admin, "audit") == before || !strings.HasPrefix(depth(t, e, admin, "private"), "0 ") {
		if _, err := admin.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: e.qurl("private")}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("message not dead-lettered: audit %s", depth(t, e, admin, "audit"))
		}
	}
}

// waitNoMoveRunning polls until audit's move tasks have all finished.
func waitNoMoveRunning(t *testing.T, e *env, admin *sqs.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := admin.ListMessageMoveTasks(e.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: arn("audit"), MaxResults: aws.Int32(10)})
		if err != nil {
			t.Fatal(err)
		}
		running := false
		for _, r := range out.Results {
			running = running || aws.ToString(r.Status) == "RUNNING"
		}
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("move task still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAccountBinding: a key bound to another account than the server's
// reads and changes nothing (it used to read account 000000000000's
// queues); a key bound to the server's account, or to none, works.
func TestAccountBinding(t *testing.T) {
	e := newEnv(t, realBroker(t), sigv4.Options{Credentials: []sigv4.Credentials{
		{AccessKeyID: akid, SecretAccessKey: secret, Account: account},
		{AccessKeyID: "AKIDOTHERACCT", SecretAccessKey: "other-secret", Account: "111111111111"},
	}})
	own, other := e.client(akid, secret), e.client("AKIDOTHERACCT", "other-secret")
	if _, err := own.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("mine")}); err != nil {
		t.Fatal(err)
	}
	_, err := other.ListQueues(e.ctx, &sqs.ListQueuesInput{})
	wantCode(t, err, "AccessDenied", 403)
	_, err = other.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: e.qurl("mine"), MessageBody: aws.String("x")})
	wantCode(t, err, "AccessDenied", 403)
	_, err = other.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("theirs")})
	wantCode(t, err, "AccessDenied", 403)
	out, err := own.ListQueues(e.ctx, &sqs.ListQueuesInput{})
	if err != nil || len(out.QueueUrls) != 1 {
		t.Fatalf("%v %v", out, err)
	}
}
