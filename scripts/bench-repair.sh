#!/bin/bash
# bench-repair.sh: how long a node added to a cluster takes to catch up
# with a large backlog, which it receives as a Raft snapshot (the
# leader's state store streamed in chunks, raftstore/snapshot.go), and
# what that costs the cluster meanwhile. On 127.0.0.1, in one run. Build
# first: go build -o sluice ./cmd/sluice (or set SLUICE_BIN). Needs
# python3 and curl.
#
# Three nodes (SHARDS shards, the default placement) take MESSAGES
# messages of SIZE bytes into queue "backlog" (`sluice bench sqs
# -consumers 0`: nobody receives them). Then a steady load of RATE msg/s
# (four producers and eight consumers, one message per request) runs on queue "steady" for BASELINE with
# the three nodes alone, and again while a fourth node is started with
# --join and added with `sluice cluster add --wait`, which returns once
# the new node has caught up every shard and is a voter or a caught-up
# learner. Reported: the backlog's send rate and size on disk, the add's
# wall time, the steady load's send and end-to-end latency without and
# during the repair, each process's peak resident memory during the
# repair (VmHWM, reset before it), and the new node's data directory.
#
# Environment: MESSAGES (1000000), SIZE (1024), SHARDS (1), RATE (1000),
# BASELINE (20s), KEEP (1: leave the directory and logs), SERVER_FLAGS
# (more flags for every node, e.g. "--snapshot-rate -1" to copy without
# the default 64 MiB/s limit).
set -u
bin="${SLUICE_BIN:-./sluice}"
MESSAGES="${MESSAGES:-1000000}" SIZE="${SIZE:-1024}" SHARDS="${SHARDS:-1}" RATE="${RATE:-1000}" BASELINE="${BASELINE:-20s}"
read -r -a extra <<< "${SERVER_FLAGS:-}"
W="${BENCH_DIR:-/var/tmp/sluice-repair-bench}"
# shellcheck source=scripts/lib-ports.sh
. "$(dirname "$0")/lib-ports.sh"
hwm() { awk '/VmHWM/{printf "%.0f MiB", $2/1024}' /proc/$1/status; }
lat() { # a bench's JSON: its send round trip and end-to-end p50/p99/max
  python3 -c 'import sys,json
d=json.load(open(sys.argv[1])); s=d["send_rtt"]; l=d["latency"]
ms=lambda v: "%.1f" % (v/1e6)
print("sent %d deleted %d errors %d; send p50 %s p99 %s max %s ms; end-to-end p50 %s p99 %s max %s ms" % (d["sent"], d["deleted"], sum((d.get("errors") or {}).values()),
  ms(s["p50_ns"]), ms(s["p99_ns"]), ms(s["max_ns"]), ms(l["p50_ns"]), ms(l["p99_ns"]), ms(l["max_ns"])))' "$1"; }

rm -rf $W; mkdir -p $W
P=($(ports 12)); R=(${P[@]:0:4}) S=(${P[@]:4:4}) A=(${P[@]:8:4})
peers="1=127.0.0.1:${R[0]},2=127.0.0.1:${R[1]},3=127.0.0.1:${R[2]}"
pids=()
for i in 1 2 3; do
  $bin server --data-dir $W/n$i --sqs-listen 127.0.0.1:${S[$((i-1))]} --amqp-listen 127.0.0.1:${A[$((i-1))]} --node-id $i --shards $SHARDS \
    --peers $peers "${extra[@]}" > $W/n$i.log 2>&1 &
  pids+=($!)
done
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; [ "${KEEP:-}" = 1 ] || rm -rf $W' EXIT
for i in 0 1 2; do
  for _ in $(seq 1 300); do curl -sf http://127.0.0.1:${S[$i]}/health > /dev/null && break; sleep 0.2; done
done
echo "bench-repair: MESSAGES=$MESSAGES SIZE=$SIZE SHARDS=$SHARDS RATE=$RATE SERVER_FLAGS='${SERVER_FLAGS:-}' on $(nproc) CPUs, $($bin version 2>/dev/null | head -1)"

$bin bench sqs -endpoint http://127.0.0.1:${S[0]} -queue backlog -producers 8 -consumers 0 -size $SIZE -messages $MESSAGES -json > $W/fill.json 2> $W/fill.err
python3 -c 'import sys,json
d=json.load(open(sys.argv[1])); print("backlog: %d messages of %s B sent in %.1f s (%.0f msg/s), errors %d" % (d["sent"], sys.argv[2], d["send_elapsed_ns"]/1e9, d["send_rate"], sum((d.get("errors") or {}).values())))' $W/fill.json $SIZE
echo "  on disk: $(for i in 1 2 3; do du -sm $W/n$i | awk -v i=$i '{printf "n%d %d MiB  ", i, $1}'; done)"

steady() { # duration, output
  $bin bench sqs -endpoint http://127.0.0.1:${S[1]} -queue steady -producers 4 -consumers 8 -batch 1 -size $SIZE -rate $RATE -duration $1 -json > $2 2> $2.err
}
steady $BASELINE $W/baseline.json
echo "steady $RATE msg/s, three nodes:      $(lat $W/baseline.json)"

for p in "${pids[@]}"; do echo 5 > /proc/$p/clear_refs; done
$bin server --data-dir $W/n4 --sqs-listen 127.0.0.1:${S[3]} --amqp-listen 127.0.0.1:${A[3]} --node-id 4 --shards $SHARDS \
  --peers $peers,4=127.0.0.1:${R[3]} --join "${extra[@]}" > $W/n4.log 2>&1 &
pids+=($!)
$bin bench sqs -endpoint http://127.0.0.1:${S[1]} -queue steady -producers 4 -consumers 8 -batch 1 -size $SIZE -rate $RATE -duration 600s -json > $W/during.json 2> $W/during.json.err &
spid=$!
t0=$(date +%s.%N)
$bin cluster add 4 127.0.0.1:${R[3]} --endpoint http://127.0.0.1:${S[0]} --wait --wait-timeout 30m > $W/add.out 2>&1
rc=$?
t1=$(date +%s.%N)
kill -TERM $spid 2>/dev/null; wait $spid
echo "cluster add 4 --wait: rc $rc after $(python3 -c "print('%.1f' % ($t1 - $t0))") s ($(tail -1 $W/add.out))"
echo "steady $RATE msg/s, during the add:   $(lat $W/during.json 2>/dev/null || echo unreadable: $(tail -2 $W/during.json.err))"
echo "  peak RSS during the add: n1 $(hwm ${pids[0]}), n2 $(hwm ${pids[1]}), n3 $(hwm ${pids[2]}), n4 $(hwm ${pids[3]})"
echo "  n4 on disk: $(du -sm $W/n4 | awk '{print $1}') MiB"
grep -h "snapshot" $W/n4.log | head -5
