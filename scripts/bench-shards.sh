#!/bin/bash
# bench-shards.sh: SQS throughput over several queues on one node, on three
# nodes with one Raft group, and on three nodes with three shards (ADR 0015
# step 6), in one run, on 127.0.0.1. Build first: go build -o sluice
# ./cmd/sluice (or set SLUICE_BIN). Needs python3 and curl.
#
# Each layout gets QUEUES concurrent `sluice bench sqs` processes, bench i on
# its own queue "shq-<i>" through node (i mod nodes) + 1, each with
# PRODUCERS/CONSUMERS and DURATION. Reported per layout: the sum of the
# benches' end-to-end rates (deleted/s), the CPU of every server process
# of the layout per 100,000 messages deleted (from /proc, before and after),
# and each node's own share of it. On one machine the nodes share its cores
# with each other and the load tool: this says what the layouts cost, not
# what three machines give. The busiest node's CPU per message is what
# would bound a cluster whose nodes had cores of their own (each node's
# CPU-s per 100k is 100,000 messages' worth of one of its cores), so the
# ratio of the busiest nodes' figures between two layouts is the ratio of
# those bounds; the script prints it, a projection, not a measurement of
# three machines.
#
# PROTO=amqp runs `sluice bench amqp` instead (persistent 1 KiB, confirms,
# manual acks), each bench declaring its own queue (durable, no arguments)
# through node (i mod nodes) + 1's AMQP port, which relays to shard 0's
# leader; where each queue was placed is printed after the run.
#
# Environment: PROTO (sqs), QUEUES (6), PRODUCERS (2), CONSUMERS (2), DURATION (20s),
# ENTRY ("spread", or "leader": each bench through its queue's leader),
# KEEP (1: leave the last layout's directory, logs and bench outputs),
# REPEAT (1), LAYOUTS ("single cluster1 shards3"; also nNsS: N nodes with S
# shards, e.g. n5s5, at the default replication factor of 3; nNsSsub,
# the same with --placement subset, each shard above 0 on three nodes
# only, ADR 0016; and nNsSsubgM, that cluster grown to M nodes before the
# load: nodes N+1..M started with --join and added with `sluice cluster
# add`, and the placement controller's moves waited for).
set -u
bin="${SLUICE_BIN:-./sluice}"
QUEUES="${QUEUES:-6}" PRODUCERS="${PRODUCERS:-2}" CONSUMERS="${CONSUMERS:-2}" DURATION="${DURATION:-20s}"
REPEAT="${REPEAT:-1}" LAYOUTS="${LAYOUTS:-single cluster1 shards3}"
W="${BENCH_DIR:-/var/tmp/sluice-shards-bench}"
# shellcheck source=scripts/lib-ports.sh
. "$(dirname "$0")/lib-ports.sh"
cpu() { # total utime+stime ticks of the given pids
  local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }

run_layout() { # layout
  local layout=$1 nodes=3 shards=1 placement=all boot=0
  case $layout in
    single) nodes=1;; cluster1) shards=1;; shards3) shards=3;;
    n[0-9]*s[0-9]*subg[0-9]*) boot=${layout#n}; boot=${boot%%s*}; shards=${layout#*s}; shards=${shards%sub*}; nodes=${layout##*g}; placement=subset;;
    n[0-9]*s[0-9]*sub) nodes=${layout#n}; nodes=${nodes%%s*}; shards=${layout#*s}; shards=${shards%sub}; placement=subset;;
    n[0-9]*s[0-9]*) nodes=${layout#n}; nodes=${nodes%%s*}; shards=${layout#*s};; # e.g. n5s5: 5 nodes, 5 shards
    *) echo "unknown layout $layout"; return 1;;
  esac
  rm -rf $W; mkdir -p $W
  local R=() S=() A=() pids=()
  local P=($(ports $((3 * nodes))))
  for i in $(seq 0 $((nodes - 1))); do R+=(${P[$i]}); S+=(${P[$((nodes + i))]}); A+=(${P[$((2 * nodes + i))]}); done
  [ $boot -gt 0 ] || boot=$nodes
  local peers=""
  for i in $(seq 1 $boot); do peers="$peers${peers:+,}$i=127.0.0.1:${R[$((i-1))]}"; done
  for i in $(seq 1 $nodes); do
    local args=(server --data-dir $W/n$i --sqs-listen 127.0.0.1:${S[$((i-1))]} --amqp-listen 127.0.0.1:${A[$((i-1))]})
    if [ $i -gt $boot ]; then
      args+=(--node-id $i --peers $peers,$i=127.0.0.1:${R[$((i-1))]} --join --shards $shards --placement $placement)
    elif [ $nodes -gt 1 ]; then
      args+=(--node-id $i --peers $peers --shards $shards --placement $placement)
    fi
    $bin "${args[@]}" > $W/n$i.log 2>&1 &
    pids+=($!)
  done
  if [ $boot -lt $nodes ]; then
    # Grow: once the boot nodes serve, add the others; then wait until
    # every shard above 0 is on three voters and no learner, as node 1
    # reports it, and has stayed so for 25 s (the controller moves one
    # member per shard per 10 s round).
    for _ in $(seq 1 300); do curl -sf http://127.0.0.1:${S[0]}/health > /dev/null && break; sleep 0.2; done
    for i in $(seq $((boot + 1)) $nodes); do
      $bin cluster add $i 127.0.0.1:${R[$((i-1))]} --endpoint http://127.0.0.1:${S[0]} > /dev/null || echo "  cluster add $i failed"
    done
    local shape="" since=$SECONDS
    for _ in $(seq 1 1500); do
      local now
      now=$(curl -s http://127.0.0.1:${S[0]}/sluice/v1/cluster | python3 -c 'import sys,json
r=json.load(sys.stdin); sh=[s for s in r.get("shards",[]) if s["shard"]>0]
ok=all(len(s.get("voters") or [])==3 and not s.get("learners") for s in sh)
print(("ok " if ok else "moving ") + " ".join("%d:%s" % (s["shard"], ",".join(map(str, s.get("voters") or []))) for s in sh))' 2>/dev/null)
      [ "$now" = "$shape" ] || { shape=$now; since=$SECONDS; }
      [ "${shape%% *}" = ok ] && [ $((SECONDS - since)) -ge 25 ] && break
      sleep 0.2
    done
    echo "  grown from $boot to $nodes nodes: shards on ${shape#* } (after $SECONDS s of the script)"
  fi
  # Ready: every node answers /health; with shards, every node leads one
  # (all), or the shards' leaders have not changed for 25 s (subset,
  # always: the balancer moves one leadership every other 10 s round at
  # most). With a subset a node lists only its own shards: the leaders
  # are the union over the nodes.
  local last="" since=$SECONDS
  for _ in $(seq 1 600); do
    local ok=1
    for i in $(seq 1 $nodes); do curl -sf http://127.0.0.1:${S[$((i-1))]}/health > /dev/null || ok=0; done
    if [ $ok = 1 ] && [ $shards -gt 1 ]; then
      local led
      led=$(for i in $(seq 1 $nodes); do curl -s http://127.0.0.1:${S[$((i-1))]}/sluice/v1/cluster; echo; done | python3 -c 'import sys,json
l={}
for line in sys.stdin:
    if line.strip():
        for s in json.loads(line).get("shards",[]):
            if s["leader"]: l[s["shard"]]=s["leader"]
print(len(set(l.values())) if len(l)>0 else 0, ",".join("%d:%d" % kv for kv in sorted(l.items())))')
      # Every node leads one, or the leaders have stood still for 25 s
      # (with five nodes and a factor of 3 a shard's three voters may all
      # lead another shard already).
      [ "$led" = "$last" ] || { last=$led; since=$SECONDS; }
      if [ $placement = subset ] || [ "${led%% *}" != "$(( shards < nodes ? shards : nodes ))" ]; then
        [ $((SECONDS - since)) -ge 25 ] || ok=0
      fi
    fi
    [ $ok = 1 ] && break
    sleep 0.2
  done
  if [ $shards -gt 1 ]; then echo "  leaders (shard:node): ${led#* }"; fi
  # Create the queues, and say where each lives (X-Sluice-Shard, X-Sluice-Node).
  local entry=()
  where_is() { # queue, SQS port: "shard K, leader N"
    curl -s -D - -o /dev/null -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.GetQueueAttributes' \
      -d "{\"QueueUrl\":\"http://127.0.0.1:$2/000000000000/$1\"}" http://127.0.0.1:$2/ | tr -d '\r' | awk -F': ' 'tolower($1)=="x-sluice-shard"{s=$2} tolower($1)=="x-sluice-node"{n=$2} END{print "shard " (s==""?"-":s) ", leader " (n==""?"-":n)}'
  }
  for q in $(seq 0 $((QUEUES-1))); do
    if [ "${PROTO:-sqs}" = amqp ]; then
      entry+=(${A[$((q % nodes))]}) # the bench declares it
      continue
    fi
    local sp=${S[$((q % nodes))]}
    curl -s -o /dev/null -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.CreateQueue' \
      -d "{\"QueueName\":\"shq-$q\"}" http://127.0.0.1:$sp/
    local where
    where=$(where_is shq-$q $sp)
    # ENTRY=leader: each bench through the node leading its queue (no
    # forwards, so each node's CPU is its leading and replicating alone).
    local through=$((q % nodes + 1)) lead=${where##*leader }
    if [ "${ENTRY:-spread}" = leader ] && [ "$lead" != - ]; then through=$lead; fi
    entry+=(${S[$((through - 1))]})
    echo "  shq-$q through node $through: $where"
  done
  sleep 1
  local before; before=$(cpu "${pids[@]}")
  local nbefore=(); for p in "${pids[@]}"; do nbefore+=($(cpu $p)); done
  local outs=()
  for q in $(seq 0 $((QUEUES-1))); do
    if [ "${PROTO:-sqs}" = amqp ]; then
      $bin bench amqp -url amqp://guest:guest@127.0.0.1:${entry[$q]}/ -queue shq-$q -producers $PRODUCERS -consumers $CONSUMERS \
        -duration $DURATION -json > $W/bench-$q.json 2> $W/bench-$q.err &
    else
      $bin bench sqs -endpoint http://127.0.0.1:${entry[$q]} -queue shq-$q -producers $PRODUCERS -consumers $CONSUMERS \
        -duration $DURATION -json > $W/bench-$q.json 2> $W/bench-$q.err &
    fi
    outs+=($!)
  done
  wait "${outs[@]}"
  local after; after=$(cpu "${pids[@]}")
  if [ "${PROTO:-sqs}" = amqp ]; then
    for q in $(seq 0 $((QUEUES-1))); do echo "  shq-$q through node $((q % nodes + 1)) (AMQP): $(where_is shq-$q ${S[0]})"; done
  fi
  local nticks=""; local k=0
  for p in "${pids[@]}"; do nticks="$nticks${nticks:+,}$(( $(cpu $p) - ${nbefore[$k]} ))"; k=$((k+1)); done
  python3 - "$layout" "$nodes" "$shards" "$before" "$after" "$(getconf CLK_TCK)" "$nticks" $W/bench-*.json <<'PY'
import sys, json
layout, nodes, shards, before, after, tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
per_node = [int(x) / tck for x in sys.argv[7].split(",")]
rate = deleted = errors = 0
for f in sys.argv[8:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print("  %s: unreadable (%s)" % (f, e)); continue
    rate += d.get("throughput", 0); deleted += d.get("deleted", d.get("acked", 0)); errors += sum((d.get("errors") or {}).values())
cpu = (after - before) / tck
print("%-9s nodes %d shards %d: %d benches, end to end %.0f msg/s (sum), deleted %d, errors %d; servers' CPU %.1f s = %.2f CPU-s per 100k" %
      (layout, nodes, shards, len(sys.argv) - 8, rate, deleted, errors, cpu, cpu / max(deleted, 1) * 1e5))
each = [c / max(deleted, 1) * 1e5 for c in per_node]
print("%-9s per node: %s CPU-s per 100k; busiest %.2f" % (layout, ", ".join("n%d %.2f" % (i + 1, c) for i, c in enumerate(each)), max(each)))
PY
  for p in "${pids[@]}"; do kill -TERM $p 2>/dev/null; done
  wait "${pids[@]}" 2>/dev/null
  [ "${KEEP:-}" = 1 ] || rm -rf $W # KEEP=1: the last layout's logs and bench outputs stay in $W
}

echo "bench-shards: QUEUES=$QUEUES PRODUCERS=$PRODUCERS CONSUMERS=$CONSUMERS DURATION=$DURATION on $(nproc) CPUs, $($bin version 2>/dev/null | head -1)"
for r in $(seq 1 $REPEAT); do
  for layout in $LAYOUTS; do
    echo "== run $r: $layout"
    run_layout $layout
  done
done
