package amqp

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp091 "github.com/rabbitmq/amqp091-go"

	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
)

func sqsClient(t *testing.T, b *broker) (*sqs.Client, string) {
	srv := httptest.NewServer(sluicesqs.New(b.eng, sluicesqs.Options{}))
	t.Cleanup(srv.Close)
	cli := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}, nil
		}),
		Retryer: aws.NopRetryer{},
	})
	return cli, srv.URL + "/000000000000/"
}

func TestInteropAMQPToSQS(t *testing.T) {
	b := startBroker(t)
	cli, base := sqsClient(t, b)
	ctx := context.Background()
	_, ch := b.channel()
	_, err := ch.QueueDeclare("shared", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Publish("", "shared", false, false, amqp091.Publishing{Body: []byte("from amqp"),
		Headers: amqp091.Table{"order-id": "42", "qty": int32(3), "ok": true, "x.bad name": "skipped", "bin": []byte{1}}}))
	out, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(base + "shared"),
		MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 5})
	must(t, err)
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages", len(out.Messages))
	}
	m := out.Messages[0]
	if aws.ToString(m.Body) != "from amqp" {
		t.Fatal(aws.ToString(m.Body))
	}
	want := map[string][2]string{"order-id": {"String", "42"}, "qty": {"Number", "3"}, "ok": {"String", "true"}}
	if len(m.MessageAttributes) != len(want) {
		t.Fatalf("attributes %v", m.MessageAttributes)
	}
	for k, w := range want {
		a := m.MessageAttributes[k]
		if aws.ToString(a.DataType) != w[0] || aws.ToString(a.StringValue) != w[1] {
			t.Errorf("%s = %s %s", k, aws.ToString(a.DataType), aws.ToString(a.StringValue))
		}
	}
}

func TestInteropSQSToAMQP(t *testing.T) {
	b := startBroker(t)
	cli, base := sqsClient(t, b)
	ctx := context.Background()
	_, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("from-sqs")})
	must(t, err)
	sent, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(base + "from-sqs"), MessageBody: aws.String("hello amqp"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
			"n":      {DataType: aws.String("Number"), StringValue: aws.String("7")},
			"f":      {DataType: aws.String("Number"), StringValue: aws.String("1.5")},
			"b":      {DataType: aws.String("Binary"), BinaryValue: []byte{9, 8}},
		}})
	must(t, err)
	_, ch := b.channel()
	msgs, err := ch.Consume("from-sqs", "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, msgs)
	if string(d.Body) != "hello amqp" || d.Exchange != "" || d.RoutingKey != "from-sqs" || d.MessageId != aws.ToString(sent.MessageId) || d.DeliveryMode != 2 {
		t.Fatalf("%+v", d)
	}
	if d.Headers["tenant"] != "acme" || d.Headers["n"] != int64(7) || d.Headers["f"] != 1.5 || string(d.Headers["b"].([]byte)) != "\x09\x08" {
		t.Fatalf("headers %#v", d.Headers)
	}
	must(t, d.Ack(false))
	must(t, ch.Cancel(d.ConsumerTag, false))
	// Publishing through the default exchange reaches the SQS queue too.
	publish(t, ch, "", "from-sqs", "back")
	out, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(base + "from-sqs"), WaitTimeSeconds: 5})
	must(t, err)
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "back" {
		t.Fatalf("%+v", out.Messages)
	}
}
