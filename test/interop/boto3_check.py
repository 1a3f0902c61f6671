"""Drives a live Sluice with boto3, as an application would.

Usage: python3 boto3_check.py ENDPOINT
botocore verifies MD5OfBody and MD5OfMessageAttributes on every receive and
send, so a wrong digest fails here. Which wire protocol is used depends on
the botocore version: >= 1.31.81 speaks AWS JSON 1.0, older ones Query.
Prints one line per check and exits non-zero on the first failure.
"""
import sys
import uuid

import boto3
import botocore
from botocore.exceptions import ClientError

endpoint = sys.argv[1]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="x")
proto = sqs.meta.service_model.protocol
print(f"botocore {botocore.__version__} protocol {proto}")
suffix = uuid.uuid4().hex[:8]


def check(name, cond):
    if not cond:
        print(f"FAIL {name}")
        sys.exit(1)
    print(f"ok {name}")


dlq = sqs.create_queue(QueueName=f"dlq-{suffix}")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
q = sqs.create_queue(QueueName=f"work-{suffix}", Attributes={
    "RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}',
    "VisibilityTimeout": "1"})["QueueUrl"]
check("create queues", q.endswith(f"/work-{suffix}"))

attrs = {"tenant": {"DataType": "String", "StringValue": "acme"},
         "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},
         "n": {"DataType": "Number", "StringValue": "42"}}
sent = sqs.send_message(QueueUrl=q, MessageBody="héllo \u2603", MessageAttributes=attrs)
check("send with attributes (MD5s verified by botocore)", "MessageId" in sent)

got = sqs.receive_message(QueueUrl=q, WaitTimeSeconds=5, MessageAttributeNames=["All"],
                          AttributeNames=["All"])["Messages"]
check("receive (MD5s verified)", got[0]["MessageId"] == sent["MessageId"] and got[0]["Body"] == "héllo \u2603")
check("binary attribute round trip", got[0]["MessageAttributes"]["blob"]["BinaryValue"] == b"\x00\x01\x02")
check("receive count", got[0]["Attributes"]["ApproximateReceiveCount"] == "1")

# Lease ends after 1 s; the next receive moves it to the DLQ (maxReceiveCount 1).
moved = []
for _ in range(20):
    sqs.receive_message(QueueUrl=q, WaitTimeSeconds=1)
    moved = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, AttributeNames=["All"],
                                MessageAttributeNames=["All"]).get("Messages", [])
    if moved:
        break
check("dead-lettered with the same MessageId", moved and moved[0]["MessageId"] == sent["MessageId"])
check("DeadLetterQueueSourceArn", moved[0]["Attributes"].get("DeadLetterQueueSourceArn", "").endswith(f":work-{suffix}"))
check("receive count carries over (SQS: 2 on the first DLQ receive)", moved[0]["Attributes"]["ApproximateReceiveCount"] == "2")
sqs.delete_message(QueueUrl=dlq, ReceiptHandle=moved[0]["ReceiptHandle"])

batch = sqs.send_message_batch(QueueUrl=dlq, Entries=[
    {"Id": f"e{i}", "MessageBody": f"m{i}"} for i in range(10)] + [])
check("send batch", len(batch["Successful"]) == 10)
bad = sqs.send_message_batch(QueueUrl=dlq, Entries=[
    {"Id": "ok", "MessageBody": "fine"}, {"Id": "bad", "MessageBody": "\x01"}])
check("batch entry failure is per entry", len(bad["Successful"]) == 1 and bad["Failed"][0]["Id"] == "bad")

fifo = sqs.create_queue(QueueName=f"orders-{suffix}.fifo", Attributes={
    "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
for i in range(3):
    sqs.send_message(QueueUrl=fifo, MessageBody=f"step{i}", MessageGroupId="g")
sqs.send_message(QueueUrl=fifo, MessageBody="step0", MessageGroupId="g")  # duplicate
msgs = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]
check("FIFO order and dedup", [m["Body"] for m in msgs] == ["step0", "step1", "step2"])

try:
    sqs.get_queue_url(QueueName=f"missing-{suffix}")
    check("missing queue raises", False)
except ClientError as e:
    code = e.response["Error"]["Code"]
    check(f"missing queue error code ({code})", code in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"))
    check("modeled exception class", isinstance(e, sqs.exceptions.QueueDoesNotExist))

sqs.purge_queue(QueueUrl=dlq)
try:
    sqs.purge_queue(QueueUrl=dlq)
    check("second purge refused", False)
except ClientError as e:
    check("second purge refused (PurgeQueueInProgress, 403)", e.response["ResponseMetadata"]["HTTPStatusCode"] == 403)

urls = sqs.list_queues(QueueNamePrefix="work-" + suffix).get("QueueUrls", [])
check("list queues", urls == [q])
for u in (q, dlq, fifo):
    sqs.delete_queue(QueueUrl=u)
print("all checks passed")
