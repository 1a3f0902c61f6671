#!/bin/bash
# bench-remote-amqp.sh: what an AMQP client costs on a queue of another
# shard, against one on shard 0, on 127.0.0.1. For each binary given (in
# turn, REPEAT times: alternate builds to compare them), a fresh cluster of
# three nodes with --shards 3, six SQS queues created (spread over the
# shards), then `sluice bench amqp` through shard 0's leader (the node that
# serves AMQP) on the first queue of another shard ("remote": every call
# crosses to that shard's leader) and on the first queue of shard 0
# ("local"). Reported per run: acked msg/s, p99 publish-to-deliver, and the
# CPU of each node per 100,000 messages acked (from /proc).
#
# Usage: scripts/bench-remote-amqp.sh BIN [BIN...]
# Environment: REPEAT (1), PRODUCERS (2), CONSUMERS (2), DURATION (10s),
# BENCH_BIN (the load tool; default the first BIN), BENCH_DIR.
set -u
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
REPEAT="${REPEAT:-1}" PRODUCERS="${PRODUCERS:-2}" CONSUMERS="${CONSUMERS:-2}" DURATION="${DURATION:-10s}"
load="${BENCH_BIN:-$1}"
W="${BENCH_DIR:-/var/tmp/sluice-remote-amqp-bench}"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; pids=(); }
trap cleanup EXIT
# shellcheck source=scripts/lib-ports.sh
. "$(dirname "$0")/lib-ports.sh"
ticks() { for p in "$@"; do awk '{printf "%d ", $14+$15}' /proc/$p/stat; done; }
shard_of() { # sqs-port queue
  curl -s -D - -o /dev/null -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.GetQueueAttributes' \
    -d "{\"QueueUrl\":\"http://127.0.0.1:$1/000000000000/$2\"}" http://127.0.0.1:$1/ | tr -d '\r' | awk -F': ' 'tolower($1)=="x-sluice-shard"{print $2}'; }
hz=$(getconf CLK_TCK)

run() { # bin
  local bin=$1
  rm -rf "$W"; mkdir -p "$W"
  local P=($(ports 9))
  local peers="1=127.0.0.1:${P[0]},2=127.0.0.1:${P[1]},3=127.0.0.1:${P[2]}"
  for i in 1 2 3; do
    "$bin" server --data-dir "$W/n$i" --sqs-listen 127.0.0.1:${P[$((2+i))]} --amqp-listen 127.0.0.1:${P[$((5+i))]} \
      --node-id $i --peers "$peers" --shards 3 > "$W/n$i.log" 2>&1 &
    pids+=($!)
  done
  local lead=""
  for _ in $(seq 1 300); do
    lead=$(curl -s http://127.0.0.1:${P[3]}/sluice/v1/cluster | python3 -c 'import sys,json
d=json.load(sys.stdin); s=d.get("shards",[])
print(s[0]["leader"] if len({x["leader"] for x in s if x["leader"]})==3 else "")' 2> /dev/null)
    [ -n "$lead" ] && break
    sleep 0.2
  done
  [ -n "$lead" ] || { echo "$bin: no leaders"; cleanup; return; }
  local loc="" rem=""
  for q in 0 1 2 3 4 5; do
    curl -s -o /dev/null -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.CreateQueue' \
      -d "{\"QueueName\":\"rq$q\"}" http://127.0.0.1:${P[3]}/
    if [ "$(shard_of ${P[3]} rq$q)" = 0 ]; then loc=${loc:-rq$q}; else rem=${rem:-rq$q}; fi
  done
  for q in $rem $loc; do
    local a b out n rate p99 per="" tot=0
    a=($(ticks "${pids[@]}"))
    out=$("$load" bench amqp -url amqp://guest:guest@127.0.0.1:${P[$((5+lead))]}/ -queue $q \
      -producers $PRODUCERS -consumers $CONSUMERS -duration $DURATION 2>&1)
    b=($(ticks "${pids[@]}"))
    n=$(echo "$out" | awk '/^ *acked/{print $2}'); rate=$(echo "$out" | awk '/^ *acked/{print $3}')
    p99=$(echo "$out" | awk '/^ *latency/{print $5}')
    [ -n "$n" ] && [ "$n" -gt 0 ] || { echo "$bin $q: no result"; echo "$out" | tail -3; continue; }
    for i in 0 1 2; do
      local c=$(( ${b[$i]} - ${a[$i]} )); tot=$((tot + c))
      per="$per $(echo "scale=2; $c * 100000 / $hz / $n" | bc)"
    done
    local kind=remote; [ "$q" = "$loc" ] && kind=local
    echo "$(basename $bin) $kind: acked $rate msg/s, p99 $p99, CPU-s per 100k: all $(echo "scale=2; $tot * 100000 / $hz / $n" | bc), nodes 1-3$per (shard 0's leader: node $lead)"
  done
  cleanup
  sleep 1
}

for _ in $(seq 1 "$REPEAT"); do
  for bin in "$@"; do run "$bin"; done
done
