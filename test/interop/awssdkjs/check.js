// Drives a real Sluice with @aws-sdk/client-sqs (the AWS SDK for
// JavaScript v3) as an application would: only the endpoint differs. The
// SDK checks the body MD5 of every send, batch entry and received message,
// so a wrong digest fails here.
//
// Usage: node check.js ENDPOINT
// Prints "all checks passed" and exits 0 when every check holds; otherwise
// prints the failed check and exits 1.
'use strict';

const crypto = require('node:crypto');
const {
  SQSClient, CreateQueueCommand, GetQueueUrlCommand, GetQueueAttributesCommand,
  SetQueueAttributesCommand, SendMessageCommand, SendMessageBatchCommand,
  ReceiveMessageCommand, DeleteMessageCommand, DeleteMessageBatchCommand,
  ChangeMessageVisibilityCommand, ListQueuesCommand, TagQueueCommand,
  ListQueueTagsCommand, PurgeQueueCommand, DeleteQueueCommand,
  ListDeadLetterSourceQueuesCommand, StartMessageMoveTaskCommand,
  ListMessageMoveTasksCommand, QueueDoesNotExist,
} = require('@aws-sdk/client-sqs');

const endpoint = process.argv[2];
process.removeAllListeners('warning'); // the SDK's Node-version notice is not a result
const sqs = new SQSClient({
  endpoint, region: 'us-east-1',
  credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
});
const RUN = crypto.randomBytes(4).toString('hex');
const name = (s) => `js-${RUN}-${s}`;

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function attrs(url, ...names) {
  return (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: names }))).Attributes;
}

async function main() {
  const dlq = (await sqs.send(new CreateQueueCommand({ QueueName: name('dlq') }))).QueueUrl;
  const dlqArn = (await attrs(dlq, 'QueueArn')).QueueArn;
  const q = (await sqs.send(new CreateQueueCommand({
    QueueName: name('work'),
    Attributes: {
      VisibilityTimeout: '30',
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }),
    },
  }))).QueueUrl;
  check(q.endsWith(`/${name('work')}`), 'create queues with a redrive policy');
  const again = (await sqs.send(new GetQueueUrlCommand({ QueueName: name('work') }))).QueueUrl;
  check(again === q, 'GetQueueUrl');

  // Attributes of every type; the SDK verifies the body MD5 it gets back.
  const sent = await sqs.send(new SendMessageCommand({
    QueueUrl: q, MessageBody: 'héllo ☃',
    MessageAttributes: {
      tenant: { DataType: 'String', StringValue: 'acme' },
      n: { DataType: 'Number', StringValue: '42' },
      blob: { DataType: 'Binary', BinaryValue: Uint8Array.from([0, 1, 2]) },
    },
  }));
  check(sent.MessageId && sent.MD5OfMessageAttributes, 'send with attributes (body MD5 verified by the SDK)');
  const batch = await sqs.send(new SendMessageBatchCommand({
    QueueUrl: q,
    Entries: Array.from({ length: 10 }, (_, i) => ({ Id: `e${i}`, MessageBody: `batch-${i}` })),
  }));
  check(batch.Successful.length === 10 && !(batch.Failed || []).length, 'SendMessageBatch of 10');

  let got = [];
  for (let i = 0; i < 10 && got.length < 11; i++) {
    const r = await sqs.send(new ReceiveMessageCommand({
      QueueUrl: q, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
      MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'],
    }));
    got = got.concat(r.Messages || []);
  }
  check(got.length === 11, `received all 11 (body MD5 verified by the SDK): ${got.length}`);
  const first = got.find((m) => m.MessageId === sent.MessageId);
  check(first && first.Body === 'héllo ☃', 'body round-trips');
  check(Buffer.from(first.MessageAttributes.blob.BinaryValue).equals(Buffer.from([0, 1, 2])), 'binary attribute round-trips');
  check(first.Attributes.ApproximateReceiveCount === '1', 'ApproximateReceiveCount 1');

  const del = await sqs.send(new DeleteMessageBatchCommand({
    QueueUrl: q,
    Entries: got.filter((m) => m !== first).map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
  }));
  check(del.Successful.length === 10, 'DeleteMessageBatch of 10');

  // The poison message: its lease ended twice, the next receive moves it.
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: q, ReceiptHandle: first.ReceiptHandle, VisibilityTimeout: 0 }));
  let moved = [];
  for (let i = 0; i < 20 && moved.length === 0; i++) {
    const r = await sqs.send(new ReceiveMessageCommand({ QueueUrl: q, WaitTimeSeconds: 1, VisibilityTimeout: 1 }));
    for (const m of r.Messages || []) {
      await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: q, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }));
    }
    moved = (await sqs.send(new ReceiveMessageCommand({
      QueueUrl: dlq, WaitTimeSeconds: 0, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
    }))).Messages || [];
  }
  check(moved.length === 1 && moved[0].MessageId === sent.MessageId, 'dead-lettered after maxReceiveCount, same MessageId');
  check((moved[0].Attributes.DeadLetterQueueSourceArn || '').endsWith(`:${name('work')}`), 'DeadLetterQueueSourceArn');
  check(moved[0].MessageAttributes.tenant.StringValue === 'acme', 'attributes kept in the DLQ');
  const sources = await sqs.send(new ListDeadLetterSourceQueuesCommand({ QueueUrl: dlq }));
  check(sources.queueUrls.includes(q), 'ListDeadLetterSourceQueues');
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: dlq, ReceiptHandle: moved[0].ReceiptHandle, VisibilityTimeout: 0 }));

  // Redrive back to the source.
  const task = await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn }));
  check(task.TaskHandle, 'StartMessageMoveTask');
  let status = '';
  for (let i = 0; i < 100 && status !== 'COMPLETED'; i++) {
    const t = await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }));
    status = t.Results[0].Status;
    if (status !== 'COMPLETED') await sleep(100);
  }
  check(status === 'COMPLETED', 'move task completed');
  const back = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: q, WaitTimeSeconds: 5 }))).Messages || [];
  check(back.length === 1 && back[0].Body === 'héllo ☃', 'redriven message back in the source queue');
  await sqs.send(new DeleteMessageCommand({ QueueUrl: q, ReceiptHandle: back[0].ReceiptHandle }));

  // FIFO: order per group, deduplication.
  const fifo = (await sqs.send(new CreateQueueCommand({
    QueueName: name('orders.fifo'), Attributes: { FifoQueue: 'true' },
  }))).QueueUrl;
  for (let i = 0; i < 5; i++) {
    await sqs.send(new SendMessageCommand({
      QueueUrl: fifo, MessageBody: `o${i}`, MessageGroupId: 'g', MessageDeduplicationId: `d${i}`,
    }));
  }
  const dup = await sqs.send(new SendMessageCommand({
    QueueUrl: fifo, MessageBody: 'o0 again', MessageGroupId: 'g', MessageDeduplicationId: 'd0',
  }));
  check(dup.SequenceNumber, 'a duplicate send is answered with its sequence number');
  const fr = await sqs.send(new ReceiveMessageCommand({ QueueUrl: fifo, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }));
  check((fr.Messages || []).map((m) => m.Body).join(',') === 'o0,o1,o2,o3,o4', 'FIFO order, duplicate dropped');

  // Administration and errors.
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl: q, Attributes: { DelaySeconds: '0', MessageRetentionPeriod: '3600' } }));
  check((await attrs(q, 'MessageRetentionPeriod')).MessageRetentionPeriod === '3600', 'SetQueueAttributes');
  await sqs.send(new TagQueueCommand({ QueueUrl: q, Tags: { team: 'payments' } }));
  check((await sqs.send(new ListQueueTagsCommand({ QueueUrl: q }))).Tags.team === 'payments', 'tags');
  const listed = await sqs.send(new ListQueuesCommand({ QueueNamePrefix: `js-${RUN}-` }));
  check(listed.QueueUrls.length === 3, `ListQueues by prefix: ${listed.QueueUrls.length}`);
  await sqs.send(new SendMessageCommand({ QueueUrl: q, MessageBody: 'purge me' }));
  await sqs.send(new PurgeQueueCommand({ QueueUrl: q }));
  check((await attrs(q, 'ApproximateNumberOfMessages')).ApproximateNumberOfMessages === '0', 'purged');
  try {
    await sqs.send(new GetQueueUrlCommand({ QueueName: name('missing') }));
    check(false, 'GetQueueUrl of a missing queue fails');
  } catch (e) {
    check(e instanceof QueueDoesNotExist || e.name === 'QueueDoesNotExist' || e.name === 'AWS.SimpleQueueService.NonExistentQueue',
      `a missing queue is QueueDoesNotExist (${e.name})`);
  }
  for (const u of [q, dlq, fifo]) await sqs.send(new DeleteQueueCommand({ QueueUrl: u }));
  console.log('all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
