#!/usr/bin/env bash
# bench-cluster-ab.sh: A/B of two sluice binaries as three-node clusters on
# 127.0.0.1, the same `sluice bench amqp` through the leader (a quorum-type
# queue, persistent 1 KiB bodies, confirms, manual acks), the two builds
# alternated run by run (A B B A A B ...). Prints one line per run: the
# build, consumed/s, the leader's CPU-s per 100k, every node's CPU-s per
# 100k, p50 and p99 publish -> deliver. Quiet machine: run nothing else.
#
#   go build -o /tmp/sluice-a ./cmd/sluice   # at the base commit
#   go build -o /tmp/sluice-b ./cmd/sluice   # at the change
#   REPEAT=3 P=1 C=1 RATE=1000 scripts/bench-cluster-ab.sh /tmp/sluice-a /tmp/sluice-b
#   REPEAT=2 scripts/bench-cluster-ab.sh /tmp/sluice-a /tmp/sluice-b     # 4P/4C unthrottled
#
# P, C: producers and consumers (4, 4); RATE: msg/s (0: as fast as confirms
# allow); DURATION (25s); REPEAT (3); BENCH_DIR (/var/tmp/sluice-cluster-ab).
# Needs python3, jq and curl.
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 BIN_A BIN_B" >&2; exit 2; }
A=$1 B=$2
P=${P:-4} C=${C:-4} RATE=${RATE:-0} DURATION=${DURATION:-25s} REPEAT=${REPEAT:-3}
D=${BENCH_DIR:-/var/tmp/sluice-cluster-ab}
HZ=$(getconf CLK_TCK)
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
cputicks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# one BIN LABEL: start three nodes, bench through the leader, stop them.
one() {
  local bin=$1 label=$2 i peers="" leader="" pids=() raft=()
  rm -rf "$D/c" && mkdir -p "$D/c"
  for i in 1 2 3; do raft[i]=127.0.0.1:$(freeport); peers="$peers${peers:+,}$i=${raft[i]}"; done
  for i in 1 2 3; do
    mkdir -p "$D/c/n$i"
    "$bin" server --data-dir "$D/c/n$i/data" --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 \
      --ready-file "$D/c/n$i/ready.json" --log-level warn --node-id "$i" \
      --raft-listen "${raft[i]}" --peers "$peers" > "$D/c/n$i/log" 2>&1 &
    pids+=($!)
  done
  for i in 1 2 3; do for _ in $(seq 600); do [ -s "$D/c/n$i/ready.json" ] && break; sleep 0.1; done; done
  for _ in $(seq 600); do
    for i in 1 2 3; do
      h=$(jq -r .sqs "$D/c/n$i/ready.json")
      [ "$(curl -sf --max-time 1 "http://$h/sluice/v1/cluster" | jq -r .node.role 2>/dev/null)" = leader ] && leader=$i
    done
    [ -n "$leader" ] && curl -sf -o /dev/null --max-time 1 "http://$(jq -r .sqs "$D/c/n$leader/ready.json")/health" && break
    leader=""; sleep 0.1
  done
  [ -n "$leader" ] || { echo "no leader in 60 s" >&2; kill "${pids[@]}"; return 1; }
  local before=0 after=0 p
  for p in "${pids[@]}"; do before=$((before + $(cputicks "$p"))); done
  "$bin" bench amqp -url "amqp://guest:guest@$(jq -r .amqp "$D/c/n$leader/ready.json")/" -pid "${pids[$((leader - 1))]}" \
    -producers "$P" -consumers "$C" -rate "$RATE" -size 1024 -duration "$DURATION" \
    -queue bench-ab -queue-arg x-queue-type=quorum -json > "$D/bench.json"
  for p in "${pids[@]}"; do after=$((after + $(cputicks "$p"))); done
  kill "${pids[@]}"; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  jq -r --arg b "$label" --argjson all "$(( after - before ))" --argjson hz "$HZ" \
    '"\($b)\tconsumed/s \(.consume_rate|floor)\tleader CPU-s/100k \(.server_cpu_s_per_100k*100|round/100)\tall nodes CPU-s/100k \(($all/$hz)/.received*100000*100|round/100)\tp50 \(.latency.p50_ns/1e4|round/100) ms\tp99 \(.latency.p99_ns/1e4|round/100) ms"' "$D/bench.json"
}

mkdir -p "$D"
for r in $(seq "$REPEAT"); do
  if [ $((r % 2)) = 1 ]; then one "$A" A; one "$B" B; else one "$B" B; one "$A" A; fi
done
