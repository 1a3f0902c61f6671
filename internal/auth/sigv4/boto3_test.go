package sigv4_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
)

// boto3Script runs against the endpoint in argv[1]: with the right key it
// creates a queue, sends, receives and uses a presigned URL; with a wrong
// secret and an unknown key it prints the error codes botocore parsed.
const boto3Script = `
import sys, urllib.request, urllib.error
import boto3, botocore
from botocore.config import Config

endpoint, akid, secret = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = Config(retries={"max_attempts": 1})

def client(key, sec):
    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=sec, config=cfg)

ok = client(akid, secret)
url = ok.create_queue(QueueName="boto")["QueueUrl"]
ok.send_message(QueueUrl=url, MessageBody="hello  from\tboto3 & co")
msgs = ok.receive_message(QueueUrl=url).get("Messages", [])
assert len(msgs) == 1 and msgs[0]["Body"] == "hello  from\tboto3 & co", msgs
print("ok", botocore.__version__)

presigned = ok.generate_presigned_url("list_queues", Params={}, ExpiresIn=60)
for method in ("GET", "POST"):
    try:
        body = urllib.request.urlopen(urllib.request.Request(presigned, method=method)).read()
        print("presigned", method, "ok" if b"boto" in body else "nobody")
    except urllib.error.HTTPError as e:
        print("presigned", method, e.code)

for key, sec in ((akid, "wrong"), ("AKIDUNKNOWN", secret)):
    try:
        client(key, sec).list_queues()
        print("error none")
    except botocore.exceptions.ClientError as e:
        print("error", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
`

func TestBoto3(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import boto3").Run(); err != nil {
		t.Skip("python3 with boto3 not installed")
	}
	e := newEnv(t, realBroker(t), sigv4.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", boto3Script, e.srv.URL, akid, secret).CombinedOutput()
	t.Logf("boto3:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	// botocore presigns a Query action for POST: the same URL sent as a
	// GET must fail, as the method is signed.
	for _, want := range []string{"ok ", "presigned POST ok", "presigned GET 403", "error SignatureDoesNotMatch 403", "error InvalidClientTokenId 403"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Errorf("log contains the secret")
	}
}
