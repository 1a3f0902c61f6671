"""Publish N messages of random priorities (seeded) to a fresh queue with
x-max-priority, with confirms, then take them all with basic.get and
print the order as one line of "priority-index" tokens. Run against two
brokers, the outputs compare the orders (scripts/priority-vs-rabbitmq.sh).

Usage: priority_order.py AMQP_URL N MAX_PRIORITY SEED
"""
import random
import sys
import uuid

import pika

url, n, maxp, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
q = "prio-order-" + uuid.uuid4().hex[:8]
ch.queue_declare(q, durable=True, arguments={"x-max-priority": maxp})
for i in range(n):
    p = rng.randrange(maxp + 3)  # some above the maximum
    ch.basic_publish("", q, b"%d-%d" % (p, i), pika.BasicProperties(delivery_mode=2, priority=p))
out = []
while True:
    method, _, body = ch.basic_get(q, auto_ack=True)
    if method is None:
        break
    out.append(body.decode())
ch.queue_delete(q)
conn.close()
print(" ".join(out))
