#!/usr/bin/env bash
# priority-vs-rabbitmq.sh: the order in which a priority queue hands out
# N messages of random priorities (published first, then taken with
# basic.get), on Sluice and on RabbitMQ (Debian's rabbitmq-server), with
# the same seed; prints both checksums and whether the orders are equal.
# N above the ready window (2,048 by default) exercises Sluice's
# priority records on disk. Needs python3-pika.
#   N=5000 MAXP=9 SEED=1 scripts/priority-vs-rabbitmq.sh
set -euo pipefail
N=${N:-5000} MAXP=${MAXP:-9} SEED=${SEED:-1}
BENCH_DIR=${BENCH_DIR:-$(mktemp -d /var/tmp/prio-vs-rmq.XXXX)}
RMQ_SERVER=${RMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib-rabbitmq.sh"
sluice_pid=""
cleanup_more() { [ -n "$sluice_pid" ] && kill "$sluice_pid" 2>/dev/null || true; }

(cd "$here/.." && go build -o "$BENCH_DIR/sluice" ./cmd/sluice)
"$BENCH_DIR/sluice" server --data-dir "$BENCH_DIR/data" --sqs-listen 127.0.0.1:0 \
  --amqp-listen 127.0.0.1:0 --ready-file "$BENCH_DIR/ready.json" > "$BENCH_DIR/sluice.log" 2>&1 &
sluice_pid=$!
for _ in $(seq 300); do [ -s "$BENCH_DIR/ready.json" ] && break; sleep 0.1; done
amqp=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["amqp"])' "$BENCH_DIR/ready.json")
/usr/bin/python3 "$here/priority_order.py" "amqp://guest:guest@$amqp/" "$N" "$MAXP" "$SEED" > "$BENCH_DIR/sluice.order"
start_rmq
/usr/bin/python3 "$here/priority_order.py" "$URL" "$N" "$MAXP" "$SEED" > "$BENCH_DIR/rabbitmq.order"
for b in sluice rabbitmq; do
  printf '%-9s %s messages, sha256 %s\n' "$b" "$(wc -w < "$BENCH_DIR/$b.order")" "$(sha256sum < "$BENCH_DIR/$b.order" | cut -c1-16)"
done
if cmp -s "$BENCH_DIR/sluice.order" "$BENCH_DIR/rabbitmq.order"; then echo "same order"; else echo "ORDERS DIFFER"; exit 1; fi
