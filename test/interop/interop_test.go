// Package interop drives a real Sluice with other languages' real
// clients: over SQS boto3 (Python) and the AWS CLI, over whichever
// protocol their version speaks (old botocore: Query; botocore >= 1.31.81:
// JSON 1.0); over AMQP pika (Python) and amqplib (Node).
//
// The clients come from the machine (Debian's python3-boto3, awscli,
// python3-pika, nodejs and npm, which .ci/run installs; amqplib from npm,
// installed by TestAmqplib at the version its lock file pins). When one
// is missing the test skips, unless
// SLUICE_REQUIRE_INTEROP=1 (set by .ci/run), which turns a missing client
// into a failure so CI cannot pass without running these.
package interop

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/brokertest"
)

// startServer starts a real broker for the test and returns its SQS
// endpoint.
func startServer(t *testing.T) string {
	t.Helper()
	return brokertest.Start(t, brokertest.Options(t), nil).SQSURL()
}

func need(t *testing.T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
		t.Fatalf("%s is not installed but SLUICE_REQUIRE_INTEROP=1", what)
	}
	t.Skipf("%s is not installed", what)
}

func TestBoto3(t *testing.T) {
	py := Pythons("boto3")
	need(t, "python3 with boto3", len(py) > 0)
	endpoint := startServer(t)
	for _, p := range py {
		t.Run(p, func(t *testing.T) {
			out, err := exec.Command(p, "boto3_check.py", endpoint).CombinedOutput()
			t.Logf("%s", out)
			if err != nil || !strings.Contains(string(out), "all checks passed") {
				t.Fatalf("boto3 checks failed: %v", err)
			}
		})
	}
}

// TestAWSCLIReadmeExample runs the README's AWS CLI commands verbatim
// (against a server on a free port instead of 9324).
func TestAWSCLIReadmeExample(t *testing.T) {
	var clis []string
	for _, c := range []string{"/usr/bin/aws", "aws"} {
		if p, err := exec.LookPath(c); err == nil && exec.Command(p, "--version").Run() == nil {
			clis = append(clis, p)
		}
	}
	need(t, "the AWS CLI", len(clis) > 0)
	endpoint := startServer(t)
	env := append(os.Environ(), "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x", "AWS_DEFAULT_REGION=us-east-1", "AWS_PAGER=")
	for i, cli := range clis {
		t.Run(cli, func(t *testing.T) {
			q := "orders" + string(rune('a'+i))
			run := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(cli, append([]string{"--endpoint-url", endpoint, "sqs"}, args...)...)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			run("create-queue", "--queue-name", q+"-dlq")
			run("create-queue", "--queue-name", q, "--attributes",
				`{"RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:`+q+`-dlq\",\"maxReceiveCount\":\"3\"}"}`)
			url := endpoint + "/000000000000/" + q
			run("send-message", "--queue-url", url, "--message-body", `{"id":"o-42","customer":"c-1","amount":420}`)
			out := run("receive-message", "--queue-url", url, "--attribute-names", "All", "--wait-time-seconds", "5")
			if !strings.Contains(out, `{\"id\":\"o-42\",\"customer\":\"c-1\",\"amount\":420}`) || !strings.Contains(out, "ApproximateReceiveCount") {
				t.Fatalf("receive-message output:\n%s", out)
			}
		})
	}
}

// TestAWSSDKJS runs awssdkjs/check.js, @aws-sdk/client-sqs at the version
// its lock file pins (npm ci), against a real server: queues with a
// redrive policy, attributes of every type, batches, the body MD5s the SDK
// checks, dead-lettering, a redrive move task, FIFO order and
// deduplication, tags, purge, and QueueDoesNotExist. The SDK needs node
// 20 or later; an older node (Debian 12 ships 18) skips the test even
// with SLUICE_REQUIRE_INTEROP=1, saying so.
func TestAWSSDKJS(t *testing.T) {
	if node, err := exec.LookPath("node"); err == nil {
		if have, need := NodeMajor(node), NodeNeeds(t, "awssdkjs"); have < need {
			t.Skipf("@aws-sdk/client-sqs needs node >= %d; this machine's is %d", need, have)
		}
	}
	dir := Node(t, "awssdkjs")
	need(t, "node and npm with @aws-sdk/client-sqs (npm ci)", dir != "")
	runScript(t, dir, "node", "check.js", startServer(t))
}
