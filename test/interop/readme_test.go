package interop

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/server"
)

// TestBoto3ReadmeSnippet runs the README's boto3 example as written, with
// only its endpoint pointed at a server on a free port, and checks that
// it sent, received and deleted the message.
func TestBoto3ReadmeSnippet(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "**boto3**\n\n```python\n")
	snippet, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(snippet, "delete_message") {
		t.Fatal("README.md has no boto3 snippet")
	}
	py := Pythons("boto3")
	need(t, "python3 with boto3", len(py) > 0)
	// The README shows the default endpoint; the test's server listens on
	// 127.0.0.1:0. The snippet must not keep any fixed port: it would
	// reach whatever else listens there while several servers run.
	def := server.DefaultOptions()
	readmeEndpoint := "http://" + def.SQSListen
	if !strings.Contains(snippet, readmeEndpoint) {
		t.Fatalf("the README's boto3 snippet no longer uses %s; update this test", readmeEndpoint)
	}
	endpoint := startServer(t)
	code := strings.ReplaceAll(snippet, readmeEndpoint, endpoint)
	_, sqsPort, _ := net.SplitHostPort(def.SQSListen)
	_, amqpPort, _ := net.SplitHostPort(def.AMQPListen)
	if strings.Contains(code, ":"+sqsPort) || strings.Contains(code, ":"+amqpPort) {
		t.Fatalf("the README's boto3 snippet names a fixed port besides %s:\n%s", readmeEndpoint, snippet)
	}
	code +=
		"\nassert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes']['ApproximateNumberOfMessages'] == '0'\nprint('snippet ok')\n"
	for _, p := range py {
		t.Run(p, func(t *testing.T) {
			out, err := exec.Command(p, "-c", code).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "snippet ok") {
				t.Fatalf("the README's boto3 snippet failed: %v\n%s", err, out)
			}
		})
	}
}
