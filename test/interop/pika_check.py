"""Drive a real Sluice with pika (Python's AMQP 0-9-1 client) as a
RabbitMQ application would: only the URL differs.

Usage: pika_check.py AMQP_URL
Prints "all checks passed" and exits 0 when every check holds; otherwise
raises (a traceback names the check) or exits 1.
"""
import sys
import time
import uuid

import pika
import pika.exceptions

URL = sys.argv[1]
RUN = uuid.uuid4().hex[:8]


def name(s):
    return "pika-%s-%s" % (RUN, s)


def connect():
    params = pika.URLParameters(URL)
    params.heartbeat = 10
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def get_one(ch, queue, timeout=10.0):
    """basic.get until a message comes or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is not None:
            return method, props, body
        ch.connection.sleep(0.05)
    raise AssertionError("no message on %s within %.0f s" % (queue, timeout))


def dead_lettering(conn):
    """Confirmed publishes with properties; reject without requeue sends
    the message to the DLX with x-death; nack with requeue redelivers."""
    ch = conn.channel()
    ch.confirm_delivery()
    dlx, dlq, work = name("dlx"), name("dlq"), name("work")
    ch.exchange_declare(dlx, exchange_type="fanout", durable=True)
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": dlx})
    props = pika.BasicProperties(
        delivery_mode=2,
        content_type="application/json",
        correlation_id="corr-1",
        message_id="msg-1",
        headers={"tenant": "acme", "attempt": 1},
    )
    # A confirmed publish: BlockingChannel raises on a nack.
    ch.basic_publish("", work, b'{"order": 42}', props, mandatory=True)
    ch.basic_publish("", work, b"poison", pika.BasicProperties(delivery_mode=2), mandatory=True)

    method, got, body = get_one(ch, work)
    check(body == b'{"order": 42}', "basic.get returns the first message")
    check(got.content_type == "application/json" and got.correlation_id == "corr-1"
          and got.message_id == "msg-1", "properties round-trip")
    check(got.headers.get("tenant") == "acme" and got.headers.get("attempt") == 1,
          "headers round-trip")
    check(not method.redelivered, "first delivery not redelivered")
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = get_one(ch, work)
    check(body == b'{"order": 42}' and method.redelivered, "nack(requeue) redelivers with redelivered set")
    ch.basic_ack(method.delivery_tag)

    method, _, body = get_one(ch, work)
    check(body == b"poison", "second message")
    ch.basic_reject(method.delivery_tag, requeue=False)
    method, props, body = get_one(ch, dlq)
    check(body == b"poison", "rejected message reaches the DLX's queue")
    deaths = (props.headers or {}).get("x-death")
    check(isinstance(deaths, list) and len(deaths) == 1, "x-death is a list with one entry")
    d = deaths[0]
    check(d.get("reason") == "rejected" and d.get("queue") == work and d.get("count") == 1,
          "x-death names reason rejected, the queue and count 1: %r" % (d,))
    ch.basic_ack(method.delivery_tag)
    check(ch.queue_declare(work, passive=True).method.message_count == 0, "work queue empty")
    ch.queue_delete(work)
    ch.queue_delete(dlq)
    ch.exchange_delete(dlx)
    ch.close()


def consumer_and_prefetch(conn):
    """A push consumer with prefetch: never more unacked than the limit,
    every message delivered once and acked."""
    ch = conn.channel()
    ch.confirm_delivery()
    q = name("consume")
    ch.queue_declare(q, durable=True)
    n = 50
    for i in range(n):
        ch.basic_publish("", q, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    ch.basic_qos(prefetch_count=5)
    seen, unacked, max_unacked = [], [], [0]

    def on_message(c, method, props, body):
        seen.append(body)
        unacked.append(method.delivery_tag)
        max_unacked[0] = max(max_unacked[0], len(unacked))
        if len(unacked) == 5 or len(seen) == n:
            c.basic_ack(unacked[-1], multiple=True)
            del unacked[:]

    tag = ch.basic_consume(q, on_message)
    deadline = time.monotonic() + 20
    while len(seen) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    ch.basic_cancel(tag)
    check(len(seen) == n and sorted(seen) == sorted(b"m%d" % i for i in range(n)),
          "consumer got all %d messages once (got %d)" % (n, len(seen)))
    check(seen == [b"m%d" % i for i in range(n)], "in publish order")
    check(max_unacked[0] <= 5, "prefetch 5 respected (max unacked %d)" % max_unacked[0])
    # Acks are asynchronous: poll until the queue shows nothing left.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = ch.queue_declare(q, passive=True).method
        if r.message_count == 0:
            break
        conn.sleep(0.05)
    check(r.message_count == 0 and r.consumer_count == 0, "queue drained, consumer gone")
    ch.queue_delete(q)
    ch.close()


def routing(conn):
    """Topic and headers exchanges; mandatory unroutable publishes come
    back; a passive declare of a missing queue is a 404 channel error."""
    ch = conn.channel()
    ch.confirm_delivery()
    ex, eu, all_ = name("topic"), name("eu"), name("all")
    ch.exchange_declare(ex, exchange_type="topic", durable=True)
    ch.queue_declare(eu, durable=True)
    ch.queue_declare(all_, durable=True)
    ch.queue_bind(eu, ex, routing_key="orders.eu.*")
    ch.queue_bind(all_, ex, routing_key="orders.#")
    ch.basic_publish(ex, "orders.eu.created", b"eu", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish(ex, "orders.us.created", b"us", pika.BasicProperties(delivery_mode=2))
    check(ch.queue_declare(eu, passive=True).method.message_count == 1, "topic: orders.eu.* matched once")
    check(ch.queue_declare(all_, passive=True).method.message_count == 2, "topic: orders.# matched both")
    try:
        ch.basic_publish(ex, "invoices.x", b"lost?", mandatory=True)
        raise AssertionError("a mandatory unroutable publish was accepted silently")
    except pika.exceptions.UnroutableError:
        print("ok: mandatory unroutable publish returned")
    check(ch.queue_purge(eu).method.message_count == 1, "purge reports one message")

    hx, hq = name("headers"), name("hq")
    ch.exchange_declare(hx, exchange_type="headers")
    ch.queue_declare(hq, durable=True)
    ch.queue_bind(hq, hx, arguments={"x-match": "all", "kind": "invoice", "region": "eu"})
    ch.basic_publish(hx, "", b"match", pika.BasicProperties(headers={"kind": "invoice", "region": "eu"}))
    ch.basic_publish(hx, "", b"nomatch", pika.BasicProperties(headers={"kind": "invoice", "region": "us"}))
    _, _, body = get_one(ch, hq)
    check(body == b"match", "headers exchange x-match all")
    check(ch.queue_declare(hq, passive=True).method.message_count == 0, "headers: non-matching not routed")
    for q in (eu, all_, hq):
        ch.queue_delete(q)
    ch.exchange_delete(ex)
    ch.exchange_delete(hx)
    try:
        ch.queue_declare(name("missing"), passive=True)
        raise AssertionError("passive declare of a missing queue succeeded")
    except pika.exceptions.ChannelClosedByBroker as e:
        check(e.reply_code == 404, "passive declare of a missing queue: 404 (%s)" % e.reply_text)


def rpc(conn):
    """RPC over an exclusive server-named reply queue and over direct
    reply-to."""
    ch = conn.channel()
    srvq = name("rpc")
    ch.queue_declare(srvq, durable=False, auto_delete=True)
    reply = ch.queue_declare("", exclusive=True).method.queue
    check(reply.startswith("amq.gen-"), "server-named queue: %s" % reply)
    replies = {}

    def serve(c, method, props, body):
        c.basic_publish("", props.reply_to, body.upper(),
                        pika.BasicProperties(correlation_id=props.correlation_id))
        c.basic_ack(method.delivery_tag)

    def on_reply(c, method, props, body):
        replies[props.correlation_id] = body

    ch.basic_consume(srvq, serve)
    ch.basic_consume(reply, on_reply, auto_ack=True)
    ch.basic_consume("amq.rabbitmq.reply-to", on_reply, auto_ack=True)
    ch.basic_publish("", srvq, b"ping", pika.BasicProperties(reply_to=reply, correlation_id="a"))
    ch.basic_publish("", srvq, b"pong", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="b"))
    deadline = time.monotonic() + 10
    while len(replies) < 2 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    check(replies.get("a") == b"PING", "RPC reply through the exclusive queue")
    check(replies.get("b") == b"PONG", "RPC reply through direct reply-to")
    ch.close()


def ttl_and_limits(conn):
    """Per-message and per-queue TTL dead-letter as expired; x-max-length
    drops from the head."""
    ch = conn.channel()
    ch.confirm_delivery()
    dlq, q = name("ttl-dlq"), name("ttl")
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(q, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, "x-message-ttl": 60000})
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50", delivery_mode=2))
    _, props, body = get_one(ch, dlq)
    check(body == b"short", "expired message dead-lettered")
    d = props.headers["x-death"][0]
    check(d.get("reason") == "expired" and d.get("queue") == q, "x-death reason expired: %r" % (d,))
    check(d.get("original-expiration") == "50", "x-death keeps original-expiration")
    lq = name("maxlen")
    ch.queue_declare(lq, durable=True, arguments={"x-max-length": 2})
    for b in (b"1", b"2", b"3"):
        ch.basic_publish("", lq, b, pika.BasicProperties(delivery_mode=2))
    _, _, body = get_one(ch, lq)
    check(body == b"2", "x-max-length 2 dropped the oldest")
    check(ch.queue_declare(lq, passive=True).method.message_count == 1, "one left after a get")
    for x in (dlq, q, lq):
        ch.queue_delete(x)
    ch.close()


def single_active_consumer(conn):
    """x-single-active-consumer: the first consumer gets everything; when
    it cancels, the second takes over."""
    ch1, ch2 = conn.channel(), conn.channel()
    ch1.confirm_delivery()
    q = name("sac")
    ch1.queue_declare(q, durable=True, arguments={"x-single-active-consumer": True})
    got = {"first": [], "second": []}

    def on(who):
        def cb(c, method, props, body):
            got[who].append(body)
            c.basic_ack(method.delivery_tag)
        return cb

    t1 = ch1.basic_consume(q, on("first"))
    ch2.basic_consume(q, on("second"))
    for i in range(10):
        ch1.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 10
    while len(got["first"]) + len(got["second"]) < 10 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    check(got["first"] == [b"%d" % i for i in range(10)] and not got["second"],
          "single active consumer: the first gets all, in order (%d / %d)" % (len(got["first"]), len(got["second"])))
    ch1.basic_cancel(t1)
    for i in range(10, 15):
        ch1.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 10
    while len(got["second"]) < 5 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    check(got["second"] == [b"%d" % i for i in range(10, 15)], "after a cancel the next consumer takes over")
    ch1.queue_delete(q)
    ch1.close()
    ch2.close()


def priority_queue(conn):
    """x-max-priority: ready messages come highest priority first (above the
    maximum counts as the maximum), in publish order within a priority."""
    ch = conn.channel()
    ch.confirm_delivery()
    q = name("prio")
    ch.queue_declare(q, durable=True, arguments={"x-max-priority": 5})
    for i, p in enumerate((0, 3, 9, 3, 1)):
        ch.basic_publish("", q, b"%d-%d" % (p, i), pika.BasicProperties(delivery_mode=2, priority=p))
    got = []
    for _ in range(5):
        method, props, body = get_one(ch, q)
        got.append((body, props.priority))
        ch.basic_ack(method.delivery_tag)
    check([b for b, _ in got] == [b"9-2", b"3-1", b"3-3", b"1-4", b"0-0"],
          "priority queue: highest first, publish order within one (%r)" % ([b for b, _ in got],))
    check(got[0][1] == 9, "the priority property as published")
    try:
        ch.queue_declare(name("prio-bad"), durable=True, arguments={"x-max-priority": 256})
        check(False, "x-max-priority 256 refused")
    except pika.exceptions.ChannelClosedByBroker as e:
        check(e.reply_code == 406, "x-max-priority 256 refused with 406 (%s)" % (e.reply_text,))
    ch = conn.channel()
    ch.queue_delete(q)
    ch.close()


def main():
    conn = connect()
    try:
        dead_lettering(conn)
        consumer_and_prefetch(conn)
        routing(conn)
        rpc(conn)
        ttl_and_limits(conn)
        single_active_consumer(conn)
        priority_queue(conn)
    finally:
        if conn.is_open:
            conn.close()
    print("all checks passed")


if __name__ == "__main__":
    main()
