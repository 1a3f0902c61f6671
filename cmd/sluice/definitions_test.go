package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/server"
)

const declaredConfig = `
[[queues]]
name = "orders"
dead_letter_queue = "orders-dlq"
max_receive_count = 3
retry_policy = { strategy = "full-jitter", baseSeconds = 1, capSeconds = 30 }
[queues.attributes]
VisibilityTimeout = "45"
[queues.tags]
team = "checkout"

[[queues]]
name = "orders-dlq"
[queues.attributes]
MessageRetentionPeriod = "1209600"

[[queues]]
name = "events.fifo"
[queues.attributes]
FifoQueue = "true"
ContentBasedDeduplication = "true"

[[exchanges]]
name = "jobs-dlx"
type = "fanout"
durable = true

[[amqp_queues]]
name = "jobs"
durable = true
[amqp_queues.arguments]
x-dead-letter-exchange = "jobs-dlx"
x-message-ttl = 60000

[[amqp_queues]]
name = "jobs-dlq"
durable = true

[[bindings]]
source = "jobs-dlx"
destination = "jobs-dlq"
`

// startConfigured runs a real broker with config (TOML, may be "") over
// dir and returns it with a stop function.
func startConfigured(t *testing.T, dir, config string) (*server.Server, func()) {
	t.Helper()
	b := brokertest.Start(t, configured(t, dir, config), nil)
	// Run's error, if any, fails the test in brokertest's cleanup.
	return b.Server, func() { _ = b.Stop() }
}

// configured is the broker options of config (TOML, may be "") with the
// data directory in dir.
func configured(t *testing.T, dir, config string) server.Options {
	t.Helper()
	o := server.DefaultOptions()
	if config != "" {
		path := filepath.Join(dir, "sluice.toml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := o.LoadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	o.DataDir = filepath.Join(dir, "data")
	return o
}

func sqsClient(addr string) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + addr), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
}

// Queues, exchanges and bindings declared in the config exist after the
// start, with their dead-letter, redrive and retry policies, and a restart
// with the same config applies them again without error.
func TestConfigDeclarations(t *testing.T) {
	b := brokertest.Start(t, configured(t, t.TempDir(), declaredConfig), nil)
	check := func(s *server.Server) {
		t.Helper()
		ctx := context.Background()
		c := sqsClient(s.SQSAddr())
		u, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders")})
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		a := out.Attributes
		if a["VisibilityTimeout"] != "45" || !strings.Contains(a["RedrivePolicy"], "orders-dlq") ||
			!strings.Contains(a["RedrivePolicy"], `"maxReceiveCount":3`) || !strings.Contains(a["SluiceRetryPolicy"], "full-jitter") {
			t.Fatalf("orders attributes %v", a)
		}
		ch := amqpChannel(t, s)
		// A client declaring the same queue with the same arguments agrees
		// with the config's declaration.
		if _, err := ch.QueueDeclare("jobs", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "jobs-dlx", "x-message-ttl": int32(60000)}); err != nil {
			t.Fatalf("jobs as declared in the config: %v", err)
		}
		if err := ch.ExchangeDeclarePassive("jobs-dlx", "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	check(b.Server)
	b.Restart()
	check(b.Server)
}

// A broken declaration stops the start with a message naming it.
func TestConfigDeclarationErrors(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{"[[queues]]\nname = \"a\"\ndead_letter_queue = \"nope\"\nmax_receive_count = 3\n", `queues "a"`},
		{"[[queues]]\nname = \"b\"\n[queues.attributes]\nVisibilityTimeout = \"-1\"\n", `queues "b"`},
		{"[[amqp_queues]]\nname = \"c\"\ndurable = true\n[amqp_queues.arguments]\nx-max-length = \"many\"\n", `queue "c"`},
		{"[[bindings]]\nsource = \"no-such-exchange\"\ndestination = \"q\"\n", "no-such-exchange"},
	} {
		o := server.DefaultOptions()
		dir := t.TempDir()
		path := filepath.Join(dir, "sluice.toml")
		if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := o.LoadFile(path); err != nil {
			t.Fatal(err)
		}
		o.DataDir, o.SQSListen, o.AMQPListen = filepath.Join(dir, "data"), "127.0.0.1:0", ""
		s, err := server.New(o, nil, nil)
		if err == nil {
			s.Close()
			t.Errorf("config %q started", tc.config)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %q does not name %q", tc.config, err, tc.want)
		}
	}
}

// sluice definitions export from a configured broker, import into an empty
// one, export again: the two documents are the same, and importing twice
// changes nothing.
func TestDefinitionsRoundTrip(t *testing.T) {
	a, stopA := startConfigured(t, t.TempDir(), declaredConfig)
	defer stopA()
	b, stopB := startConfigured(t, t.TempDir(), "")
	defer stopB()
	// A queue and a binding created over the wire are exported too.
	ch := amqpChannel(t, a)
	if _, err := ch.QueueDeclare("made-live", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("made-live", "#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "defs.json")
	export := func(s *server.Server, args ...string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"definitions", "export", "--endpoint", "http://" + s.SQSAddr()}, args...), &out, &errb); code != 0 {
			t.Fatalf("export: %d %s", code, errb.String())
		}
		return out.Bytes()
	}
	export(a, "--output", file)
	for range 2 {
		var out, errb bytes.Buffer
		if code := run([]string{"definitions", "import", file, "--endpoint", "http://" + b.SQSAddr()}, &out, &errb); code != 0 {
			t.Fatalf("import: %d %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "applied 3 queue(s), 1 exchange(s), 3 AMQP queue(s), 2 binding(s)") {
			t.Fatalf("import said %q", out.String())
		}
	}
	want, _ := os.ReadFile(file)
	got := export(b)
	var dw, dg map[string]any
	if json.Unmarshal(want, &dw) != nil || json.Unmarshal(got, &dg) != nil {
		t.Fatalf("unreadable exports:\n%s\n%s", want, got)
	}
	if !reflect.DeepEqual(dw, dg) {
		t.Fatalf("round trip differs:\nfrom a: %s\nfrom b: %s", want, got)
	}

	// A document with a mistake is refused with the object named, and
	// nothing about the CLI's exit hides it.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"queues":[{"name":"x","attributes":{"DelaySeconds":"9999"}}]}`), 0o600)
	var out, errb bytes.Buffer
	if code := run([]string{"definitions", "import", bad, "--endpoint", "http://" + b.SQSAddr()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `queues \"x\"`) && !strings.Contains(errb.String(), `queues "x"`) {
		t.Fatalf("bad import: %d %q", code, errb.String())
	}
}

// The commented declarations in docs/sluice.example.toml, uncommented,
// start a broker.
func TestExampleConfigDeclarations(t *testing.T) {
	data, err := os.ReadFile("../../docs/sluice.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	start := strings.Index(s, "# --- Declarations")
	end := strings.Index(s[start+1:], "# ---")
	if start < 0 || end < 0 {
		t.Fatal("no declarations section in the example config")
	}
	var conf strings.Builder
	for _, l := range strings.Split(s[start:start+1+end], "\n") {
		if rest, ok := strings.CutPrefix(l, "# "); ok && (strings.HasPrefix(rest, "[") || strings.Contains(rest, " = ")) {
			conf.WriteString(rest + "\n")
		}
	}
	if !strings.Contains(conf.String(), "[[bindings]]") {
		t.Fatalf("extracted %q", conf.String())
	}
	srv, stop := startConfigured(t, t.TempDir(), conf.String())
	defer stop()
	if _, err := srv.Engine().GetQueue("jobs-dlq"); err != nil {
		t.Fatal(err)
	}
}

// An SQS queue that AMQP has only used (a publish through the default
// exchange, a consume, a passive or argument-less declare) stays an SQS
// queue in the export, with its attributes: AMQP's use of it is not a
// declaration, and an export must not depend on whether AMQP touched a
// queue since the last start.
func TestDefinitionsKeepAnSQSQueueAMQPUsed(t *testing.T) {
	dirA := t.TempDir()
	a, stopA := startConfigured(t, dirA, declaredConfig)
	defer func() { stopA() }()
	export := func() map[string]any {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run([]string{"definitions", "export", "--endpoint", "http://" + a.SQSAddr()}, &out, &errb); code != 0 {
			t.Fatalf("export: %d %s", code, errb.String())
		}
		var d map[string]any
		if err := json.Unmarshal(out.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := export()
	ch := amqpChannel(t, a)
	if _, err := ch.QueueDeclarePassive("orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders-dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "orders", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	after := export()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("AMQP's use of SQS queues changed the export:\nbefore: %v\nafter:  %v", before, after)
	}

	// An SQS queue that a declare gave arguments is listed both ways, and
	// an import into an empty broker makes the same queue of it.
	if _, err := sqsClient(a.SQSAddr()).CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("audit"),
		Attributes: map[string]string{"VisibilityTimeout": "45"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("audit", true, false, false, false, amqp091.Table{"x-max-length": int32(10)}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "defs.json")
	var out, errb bytes.Buffer
	if code := run([]string{"definitions", "export", "--endpoint", "http://" + a.SQSAddr(), "--output", file}, &out, &errb); code != 0 {
		t.Fatalf("export: %d %s", code, errb.String())
	}
	data, _ := os.ReadFile(file)
	var d server.Definitions
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	inQueues, inAMQP := false, false
	for _, q := range d.Queues {
		inQueues = inQueues || q.Name == "audit" && q.Attributes["VisibilityTimeout"] == "45"
	}
	for _, q := range d.AMQPQueues {
		inAMQP = inAMQP || q.Name == "audit" && q.Arguments["x-max-length"] == float64(10)
	}
	if !inQueues || !inAMQP {
		t.Fatalf("audit among the SQS queues %v, among the AMQP queues with its argument %v:\n%s", inQueues, inAMQP, data)
	}
	b, stopB := startConfigured(t, t.TempDir(), "")
	defer stopB()
	if code := run([]string{"definitions", "import", file, "--endpoint", "http://" + b.SQSAddr()}, &out, &errb); code != 0 {
		t.Fatalf("import: %d %s", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"definitions", "export", "--endpoint", "http://" + b.SQSAddr()}, &out, &errb); code != 0 {
		t.Fatalf("export: %d %s", code, errb.String())
	}
	var want, got map[string]any
	if json.Unmarshal(data, &want) != nil || json.Unmarshal(out.Bytes(), &got) != nil || !reflect.DeepEqual(want, got) {
		t.Fatalf("round trip differs:\nfrom a: %s\nfrom b: %s", data, out.Bytes())
	}
	// The same after a restart of a (what tells an SQS queue is stored).
	stopA()
	a, stopA = startConfigured(t, dirA, declaredConfig)
	if again := export(); !reflect.DeepEqual(want, again) {
		t.Fatalf("the export changed across a restart:\nbefore: %v\nafter:  %v", want, again)
	}
}
