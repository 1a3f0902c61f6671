// Drives a real Sluice with amqplib (Node's AMQP 0-9-1 client) as a
// RabbitMQ application would: only the URL differs.
//
// Usage: node check.js AMQP_URL
// Prints "all checks passed" and exits 0 when every check holds; otherwise
// prints the failed check and exits 1.
'use strict';

const amqp = require('amqplib');
const crypto = require('node:crypto');

const URL = process.argv[2];
const RUN = crypto.randomBytes(4).toString('hex');
const name = (s) => `amqplib-${RUN}-${s}`;

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// getOne polls basic.get until a message comes or the time runs out.
async function getOne(ch, queue, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const m = await ch.get(queue, { noAck: false });
    if (m) return m;
    await sleep(50);
  }
  throw new Error(`no message on ${queue} within ${timeoutMs} ms`);
}

// waitFor polls fn until it returns true or the time runs out.
async function waitFor(fn, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await fn()) return;
    await sleep(50);
  }
  throw new Error(`timed out: ${what}`);
}

// Confirmed publishes, a worker that nacks a poison message without
// requeue into the DLX (x-death), and a retried one that succeeds.
async function deadLettering(conn) {
  const ch = await conn.createConfirmChannel();
  const dlx = name('dlx'), dlq = name('dlq'), work = name('work');
  await ch.assertExchange(dlx, 'direct', { durable: true });
  await ch.assertQueue(dlq, { durable: true });
  await ch.bindQueue(dlq, dlx, 'failed');
  await ch.assertQueue(work, { durable: true, deadLetterExchange: dlx, deadLetterRoutingKey: 'failed' });
  const opts = { persistent: true, contentType: 'application/json', messageId: 'm-1', headers: { tenant: 'acme' } };
  ch.sendToQueue(work, Buffer.from(JSON.stringify({ ok: true })), opts);
  ch.sendToQueue(work, Buffer.from(JSON.stringify({ poison: true })), { ...opts, messageId: 'm-2' });
  await ch.waitForConfirms();
  console.log('ok: publishes confirmed');

  await ch.prefetch(10);
  const done = [];
  let tries = 0;
  const { consumerTag } = await ch.consume(work, (msg) => {
    const body = JSON.parse(msg.content.toString());
    if (body.poison) {
      ch.nack(msg, false, false); // terminal: to the DLX
      return;
    }
    tries++;
    if (tries === 1) {
      ch.nack(msg, false, true); // transient: requeue
      return;
    }
    done.push({ body, redelivered: msg.fields.redelivered, props: msg.properties });
    ch.ack(msg);
  });
  await waitFor(async () => done.length === 1, 10000, 'the good message processed');
  await ch.cancel(consumerTag);
  check(done[0].redelivered === true && tries === 2, 'a requeued message comes back with redelivered');
  check(done[0].props.messageId === 'm-1' && done[0].props.contentType === 'application/json'
    && done[0].props.headers.tenant === 'acme', 'properties and headers round-trip');
  const dead = await getOne(ch, dlq);
  const deaths = dead.properties.headers['x-death'];
  check(JSON.parse(dead.content.toString()).poison === true, 'poison message in the DLQ');
  check(Array.isArray(deaths) && deaths.length === 1 && deaths[0].reason === 'rejected'
    && deaths[0].queue === work && Number(deaths[0].count) === 1,
  `x-death: reason rejected, queue, count 1 (${JSON.stringify(deaths)})`);
  check(dead.properties.headers['x-first-death-reason'] === 'rejected', 'x-first-death-reason');
  ch.ack(dead);
  await waitFor(async () => (await ch.checkQueue(work)).messageCount === 0, 10000, 'work queue empty');
  await ch.deleteQueue(work);
  await ch.deleteQueue(dlq);
  await ch.deleteExchange(dlx);
  await ch.close();
}

// Many messages through a prefetch-limited consumer, each once, in order.
async function throughPrefetch(conn) {
  const ch = await conn.createConfirmChannel();
  const q = name('bulk');
  await ch.assertQueue(q, { durable: true });
  const n = 200;
  for (let i = 0; i < n; i++) ch.sendToQueue(q, Buffer.from(`m${i}`), { persistent: true });
  await ch.waitForConfirms();
  await ch.prefetch(20);
  const seen = [];
  let unacked = 0, maxUnacked = 0;
  const pending = [];
  const { consumerTag } = await ch.consume(q, (msg) => {
    seen.push(msg.content.toString());
    unacked++;
    maxUnacked = Math.max(maxUnacked, unacked);
    pending.push(msg);
    // Ack in a later turn, as a worker finishing asynchronously does.
    setImmediate(() => { ch.ack(pending.shift()); unacked--; });
  });
  await waitFor(async () => seen.length >= n, 20000, `all ${n} delivered (${seen.length})`);
  await ch.cancel(consumerTag);
  check(seen.length === n && seen.every((b, i) => b === `m${i}`), `${n} messages once, in order`);
  check(maxUnacked <= 20, `prefetch 20 respected (max unacked ${maxUnacked})`);
  await waitFor(async () => (await ch.checkQueue(q)).messageCount === 0, 10000, 'queue drained');
  await ch.deleteQueue(q);
  await ch.close();
}

// Fanout and topic routing, a returned mandatory publish, a channel error
// that closes only the channel.
async function routing(conn) {
  const ch = await conn.createConfirmChannel();
  const fan = name('fan'), a = name('a'), b = name('b');
  await ch.assertExchange(fan, 'fanout', { durable: true });
  await ch.assertQueue(a, { durable: true });
  await ch.assertQueue(b, { durable: true });
  await ch.bindQueue(a, fan, '');
  await ch.bindQueue(b, fan, '');
  ch.publish(fan, 'any', Buffer.from('both'), { persistent: true });
  await ch.waitForConfirms();
  check((await ch.checkQueue(a)).messageCount === 1 && (await ch.checkQueue(b)).messageCount === 1,
    'fanout reaches both queues');
  let returned = null;
  ch.on('return', (msg) => { returned = msg; });
  ch.publish('', name('nowhere'), Buffer.from('lost?'), { mandatory: true });
  await ch.waitForConfirms();
  await waitFor(async () => returned !== null, 5000, 'basic.return of a mandatory unroutable publish');
  check(returned.fields.replyCode === 312 && returned.fields.replyText === 'NO_ROUTE', 'returned with 312 NO_ROUTE');
  await ch.purgeQueue(a);
  await ch.deleteQueue(a);
  await ch.deleteQueue(b);
  await ch.deleteExchange(fan);
  await ch.close();

  const bad = await conn.createChannel();
  const closed = new Promise((resolve) => bad.on('error', resolve));
  await bad.checkQueue(name('missing')).catch(() => {});
  const err = await closed;
  check(err.code === 404, `a missing queue closes the channel with 404 (${err.message})`);
  const still = await conn.createChannel();
  await still.checkExchange('amq.direct');
  console.log('ok: the connection outlives the channel error');
  await still.close();
}

// Queue arguments as amqplib spells them: TTL, max length, a delivery
// limit on a quorum-type queue.
async function queueArguments(conn) {
  const ch = await conn.createConfirmChannel();
  const dlq = name('lim-dlq'), q = name('lim');
  await ch.assertQueue(dlq, { durable: true });
  await ch.assertQueue(q, {
    durable: true, deadLetterExchange: '', deadLetterRoutingKey: dlq,
    arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 2 },
  });
  ch.sendToQueue(q, Buffer.from('flaky'), { persistent: true });
  await ch.waitForConfirms();
  // Requeued again and again: the delivery limit dead-letters it.
  for (let i = 0; i < 3; i++) {
    const m = await getOne(ch, q);
    ch.nack(m, false, true);
  }
  const dead = await getOne(ch, dlq);
  check(dead.content.toString() === 'flaky', 'delivery limit dead-letters a message requeued too often');
  check(dead.properties.headers['x-death'][0].reason === 'delivery_limit', 'x-death reason delivery_limit');
  ch.ack(dead);
  const t = name('ttl');
  await ch.assertQueue(t, { durable: true, messageTtl: 60000, maxLength: 1 });
  ch.sendToQueue(t, Buffer.from('old'), { persistent: true });
  ch.sendToQueue(t, Buffer.from('new'), { persistent: true });
  await ch.waitForConfirms();
  const m = await getOne(ch, t);
  check(m.content.toString() === 'new', 'maxLength 1 keeps the newest');
  ch.ack(m);
  // Redeclaring with different arguments is a 406, as on RabbitMQ.
  const other = await conn.createChannel();
  const closed = new Promise((resolve) => other.on('error', resolve));
  await other.assertQueue(t, { durable: true, messageTtl: 5000 }).catch(() => {});
  const err = await closed;
  check(err.code === 406, `redeclare with other arguments: 406 (${err.message})`);
  for (const x of [dlq, q, t]) await ch.deleteQueue(x);
  await ch.close();
}

// Consumer priorities: while the higher-priority consumer has prefetch
// credit, the lower one gets nothing.
async function consumerPriority(conn) {
  const setup = await conn.createConfirmChannel();
  const q = name('prio');
  await setup.assertQueue(q, { durable: true });
  const hi = await conn.createChannel();
  const lo = await conn.createChannel();
  await hi.prefetch(50);
  await lo.prefetch(50);
  const got = { hi: 0, lo: 0 };
  await hi.consume(q, (m) => { got.hi++; hi.ack(m); }, { priority: 10 });
  await lo.consume(q, (m) => { got.lo++; lo.ack(m); }, { priority: 1 });
  for (let i = 0; i < 20; i++) setup.sendToQueue(q, Buffer.from(`p${i}`), { persistent: true });
  await setup.waitForConfirms();
  await waitFor(async () => got.hi + got.lo === 20, 10000, `20 consumed (${got.hi} + ${got.lo})`);
  check(got.hi === 20 && got.lo === 0, `x-priority: the higher consumer got all 20 (${got.hi} / ${got.lo})`);
  await hi.close();
  await lo.close();
  await setup.deleteQueue(q);
  await setup.close();
}

// Queue priorities (maxPriority, x-max-priority): a prefetch-1 consumer
// that holds one message gets the highest priority published meanwhile
// next, then the rest by priority, publish order within one.
async function queuePriority(conn) {
  const ch = await conn.createConfirmChannel();
  const q = name('pq');
  await ch.assertQueue(q, { durable: true, maxPriority: 4 });
  ch.sendToQueue(q, Buffer.from('first'), { persistent: true });
  await ch.waitForConfirms();
  const cons = await conn.createChannel();
  await cons.prefetch(1);
  const got = [];
  let held = null;
  await cons.consume(q, (m) => {
    got.push(`${m.content.toString()}/${m.properties.priority}`);
    if (held === null) { held = m; return; } // hold the first: no credit
    cons.ack(m);
  });
  await waitFor(async () => held !== null, 10000, 'the first delivery');
  const sends = [['a', 1], ['b', 0], ['c', 7], ['d', 1], ['e', 3]];
  for (const [b, p] of sends) ch.sendToQueue(q, Buffer.from(b), { persistent: true, priority: p });
  await ch.waitForConfirms();
  cons.ack(held);
  await waitFor(async () => got.length === 6, 10000, `6 consumed (${got})`);
  check(got.join(' ') === 'first/undefined c/7 e/3 a/1 d/1 b/0',
    `maxPriority: by priority, then publish order (${got.join(' ')})`);
  await cons.close();
  await ch.deleteQueue(q);
  await ch.close();
}

async function main() {
  const conn = await amqp.connect(URL, { heartbeat: 10 });
  conn.on('error', (e) => { console.error('connection error:', e); });
  try {
    await deadLettering(conn);
    await throughPrefetch(conn);
    await routing(conn);
    await queueArguments(conn);
    await consumerPriority(conn);
    await queuePriority(conn);
  } finally {
    await conn.close();
  }
  console.log('all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
