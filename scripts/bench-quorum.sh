#!/usr/bin/env bash
# bench-quorum.sh: issue #14's speed comparison. The same `sluice bench amqp`
# (persistent 1 KiB bodies, publisher confirms, manual acks; the queue
# declared with x-queue-type=quorum) against
#
#   rabbitmq   RabbitMQ (Debian's rabbitmq-server) with a one-node quorum
#              queue (it replicates nowhere),
#   rabbitmq3  three clustered RabbitMQ nodes on this machine, the bench on
#              node 1 (where the quorum queue is declared, so node 1 leads
#              it; its three members are checked),
#   cluster    a 3-node Sluice cluster on 127.0.0.1, through the leader's
#              public AMQP listener (the leader's CPU is the server CPU;
#              the whole cluster's is reported too),
#   single     one Sluice node,
#   clusterbase
#              the 3-node cluster again with the build SLUICE_BASE names (a
#              sluice binary built at another commit), for an A/B of a
#              change: BROKERS="clusterbase cluster" alternates the two
#              builds run by run and prints this build ÷ the base,
#   cluster5f3, cluster5f5
#              a 5-node Sluice cluster with replication_factor 3 (three
#              voters, two standby learners) or 5 (five voters), through
#              the leader (not in the default BROKERS: the cost of the
#              factor, not a comparison with RabbitMQ),
#
# one broker at a time, on free ports picked at start, and prints consumed/s
# while publishing, end to end msg/s, p50/p99 latency and server CPU per
# 100k messages for each, with the ratios the issue asks for (replicated
# Sluice ÷ RabbitMQ quorum; 3-node ÷ 1-node cost per message).
#
#   scripts/bench-quorum.sh                        # 4P/4C 10 s; 1P/1C at 1,000 msg/s 20 s
#   DURATION=20s RATE_DURATION=30s REPEAT=3 scripts/bench-quorum.sh
#   SCENARIOS="4 4 0;16 16 0;1 1 1000" BROKERS="cluster rabbitmq" scripts/bench-quorum.sh
#   SLUICE_BASE=/tmp/sluice-base BROKERS="clusterbase cluster" SCENARIOS="1 1 1000" REPEAT=3 scripts/bench-quorum.sh
#
# SLUICE_CONFIG: a TOML file every Sluice node reads (see sluice_node).
# SCENARIOS: "producers consumers rate" (rate 0: as fast as confirms allow;
# a rated scenario runs RATE_DURATION). REPEAT alternates the brokers'
# order per repeat; figures are medians over repeats. Data in $BENCH_DIR
# (default /var/tmp/sluice-vs-quorum, on disk, not tmpfs): one JSON line per
# run in runs.jsonl. Needs rabbitmq-server (apt-get install
# rabbitmq-server; started here in its own directories, as
# scripts/bench-vs-rabbitmq.sh does), python3, jq and curl, and a quiet
# machine: run nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10s}"
RATE_DURATION="${RATE_DURATION:-20s}"
REPEAT="${REPEAT:-1}"
DRAIN="${DRAIN:-100s}"
SCENARIOS="${SCENARIOS:-4 4 0;1 1 1000}"
BROKERS="${BROKERS:-rabbitmq rabbitmq3 cluster single}"
BENCH_DIR="${BENCH_DIR:-/var/tmp/sluice-vs-quorum}"
RMQ_SERVER="${RMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}"
QUEUE=bench-quorum

for b in $BROKERS; do
  case $b in rabbitmq|rabbitmq3|cluster|single|cluster5f3|cluster5f5) ;;
    clusterbase) [ -x "${SLUICE_BASE:-}" ] || { echo "BROKERS: clusterbase needs SLUICE_BASE, a sluice binary" >&2; exit 2; } ;;
    *) echo "BROKERS: unknown broker $b (rabbitmq, rabbitmq3, cluster, single, clusterbase, cluster5f3, cluster5f5)" >&2; exit 2;; esac
done
if [[ " $BROKERS " == *" rabbitmq "* || " $BROKERS " == *" rabbitmq3 "* ]]; then
  [ -x "$RMQ_SERVER" ] || { echo "no $RMQ_SERVER: apt-get install rabbitmq-server" >&2; exit 2; }
fi
rm -rf "$BENCH_DIR" && mkdir -p "$BENCH_DIR"
go build -o "$BENCH_DIR/sluice" ./cmd/sluice
SLUICE="$BENCH_DIR/sluice"
RUNS="$BENCH_DIR/runs.jsonl"
: > "$RUNS"
TCK=$(getconf CLK_TCK)


# cpu_ticks PID...: user+system clock ticks of the processes so far.
cpu_ticks() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# shellcheck source=scripts/lib-rabbitmq.sh
. scripts/lib-rabbitmq.sh
sluice_pids=()
cleanup_more() { for p in "${sluice_pids[@]}"; do kill "$p" 2>/dev/null || true; done; }

# Each start_* sets URL (the AMQP endpoint the bench drives), PID (the
# server whose CPU the bench reports) and ALL_PIDS (every server process).
start_rabbitmq() { start_rmq; ALL_PIDS="$rmq_pid"; }
# rmq_queue_type: the type RabbitMQ gives the bench queue (quorum, once the
# first run declared it).
rmq_queue_type() { rmqctl list_queues name type 2>/dev/null | awk -v q="$QUEUE" '$1 == q {print $2}'; }
stop_rabbitmq() { stop_rmq; }
start_rabbitmq3() { start_rmq3; ALL_PIDS="${rmq3_pids[*]}"; }
stop_rabbitmq3() { stop_rmq3; }
# rmq3_queue_members: how many members the 3-node cluster gave the bench
# queue (its quorum type checked too).
rmq3_queue_members() {
  rmq3ctl 1 list_queues name type members 2>/dev/null |
    awk -v q="$QUEUE" '$1 == q && $2 == "quorum" {print gsub(/@/, "@")}'
}

# sluice_node DIR [FLAGS...]: start one sluice server on free public ports;
# its pid is appended to sluice_pids. SLUICE_CONFIG, when set, names a
# TOML file every Sluice node reads (-config; for experiments with a
# setting, e.g. a [cluster] section's log_compact_entries).
sluice_node() {
  local d=$1; shift
  mkdir -p "$d"
  "${NODE_BIN:-$SLUICE}" server ${SLUICE_CONFIG:+-config "$SLUICE_CONFIG"} --data-dir "$d/data" --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 \
    --ready-file "$d/ready.json" --log-level warn "$@" > "$d/server.log" 2>&1 &
  sluice_pids+=("$!")
}

# wait_ready DIR: until DIR/ready.json names the node's addresses (60 s).
wait_ready() {
  for _ in $(seq 600); do [ -s "$1/ready.json" ] && return 0; sleep 0.1; done
  echo "no ready file in $1; log:" >&2; tail -20 "$1/server.log" >&2; return 1
}

start_single() {
  local d="$BENCH_DIR/single"
  rm -rf "$d"
  sluice_pids=()
  sluice_node "$d"
  wait_ready "$d"
  URL="amqp://guest:guest@$(jq -r .amqp "$d/ready.json")/" PID="${sluice_pids[0]}" ALL_PIDS="${sluice_pids[*]}"
}

# start_cluster [SIZE [FACTOR]]: SIZE nodes (default 3; Raft ports
# reserved by bind and close, as scripts/bench-cluster.sh does) with
# replication_factor FACTOR (default 3), then wait until every node
# answers /health (each node its own: 200 once it knows a leader that
# serves), find the leader, and wait until it has FACTOR voters.
start_cluster() {
  local i peers="" r
  CLUSTER_N=${1:-3}
  local factor=${2:-3}
  rm -rf "$BENCH_DIR/cluster"
  sluice_pids=()
  for i in $(seq "$CLUSTER_N"); do
    r=$(freeport)
    peers="$peers${peers:+,}$i=127.0.0.1:$r"
    eval "raft$i=$r"
  done
  for i in $(seq "$CLUSTER_N"); do
    eval "r=\$raft$i"
    sluice_node "$BENCH_DIR/cluster/n$i" --node-id "$i" --raft-listen "127.0.0.1:$r" --peers "$peers" --replication-factor "$factor"
  done
  for i in $(seq "$CLUSTER_N"); do wait_ready "$BENCH_DIR/cluster/n$i"; done
  LEADER=""
  for _ in $(seq 600); do
    LEADER=$(cluster_leader) && [ -n "$LEADER" ] && break
    sleep 0.1
  done
  [ -n "$LEADER" ] || { echo "the cluster elected no ready leader in 60 s" >&2; return 1; }
  local ld="$BENCH_DIR/cluster/n$LEADER" voters=""
  for _ in $(seq 600); do
    voters=$(curl -sf --max-time 1 "http://$(jq -r .sqs "$ld/ready.json")/sluice/v1/cluster" | jq '[.view.members[] | select(.membership == "voter")] | length')
    [ "$voters" = "$factor" ] && break
    sleep 0.1
  done
  [ "$voters" = "$factor" ] || { echo "the leader has $voters voters, not $factor" >&2; return 1; }
  URL="amqp://guest:guest@$(jq -r .amqp "$ld/ready.json")/" PID="${sluice_pids[$((LEADER - 1))]}" ALL_PIDS="${sluice_pids[*]}"
  echo "== cluster leader: node $LEADER (pid $PID), $CLUSTER_N nodes, $voters voters" >&2
}
# start_clusterbase: start_cluster with the nodes running SLUICE_BASE.
start_clusterbase() { local NODE_BIN="$SLUICE_BASE"; start_cluster; }
start_cluster5f3() { start_cluster 5 3; }
start_cluster5f5() { start_cluster 5 5; }

# cluster_leader: the id of the node whose own status says it leads, once
# every node answers /health (its own); empty otherwise.
cluster_leader() {
  local i http leader=""
  for i in $(seq "$CLUSTER_N"); do
    http=$(jq -r .sqs "$BENCH_DIR/cluster/n$i/ready.json")
    curl -sf -o /dev/null --max-time 1 "http://$http/health" || return 0
    if [ "$(curl -sf --max-time 1 "http://$http/sluice/v1/cluster" | jq -r .node.role)" = leader ]; then leader=$i; fi
  done
  echo "$leader"
}

stop_single() {
  kill "${sluice_pids[@]}" 2>/dev/null || true
  wait "${sluice_pids[@]}" 2>/dev/null || true
  sluice_pids=()
}
stop_cluster() {
  # The leader last would be kinder, but the run is over: stop them all.
  stop_single
}
stop_clusterbase() { stop_cluster; }
stop_cluster5f3() { stop_cluster; }
stop_cluster5f5() { stop_cluster; }

# run BROKER P C RATE: one bench run against the broker started last. The
# JSON line gets the broker, the scenario, the load average and, for every
# server process of the broker, their CPU seconds during the run.
run() {
  local broker=$1 p=$2 c=$3 rate=$4 dur="$DURATION" before after
  [ "$rate" != 0 ] && dur="$RATE_DURATION"
  # shellcheck disable=SC2086 # ALL_PIDS is a list
  before=$(cpu_ticks $ALL_PIDS)
  "$SLUICE" bench amqp -url "$URL" -pid "$PID" -queue "$QUEUE" -queue-arg x-queue-type=quorum \
    -producers "$p" -consumers "$c" -size 1024 -persistent \
    -rate "$rate" -duration "$dur" -drain-timeout "$DRAIN" -json > "$BENCH_DIR/last.json"
  # shellcheck disable=SC2086
  after=$(cpu_ticks $ALL_PIDS)
  jq -c --arg b "$broker" --arg s "${p}P/${c}C rate $rate" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
    --argjson all "$(python3 -c "print(($after - $before) / $TCK)")" \
    '. + {broker: $b, scenario: $s, loadavg: $load, all_servers_cpu_s: $all}' "$BENCH_DIR/last.json" >> "$RUNS"
}

IFS=';' read -r -a scen <<< "$SCENARIOS"
read -r -a brokers <<< "$BROKERS"
for r in $(seq "$REPEAT"); do
  # Rotate the order per repeat, so that no broker always runs first.
  n=${#brokers[@]} order=()
  for i in $(seq 0 $((n - 1))); do order+=("${brokers[$(((i + r - 1) % n))]}"); done
  for broker in "${order[@]}"; do
    "start_$broker"
    for s in "${scen[@]}"; do
      read -r p c rate <<< "$s"
      echo "== run $r $broker ${p}P/${c}C rate $rate" >&2
      run "$broker" "$p" "$c" "$rate"
    done
    if [ "$broker" = rabbitmq ] && [ "$(rmq_queue_type)" != quorum ]; then
      echo "RabbitMQ's $QUEUE is not a quorum queue (rabbitmqctl list_queues: '$(rmq_queue_type)')" >&2
      exit 1
    fi
    if [ "$broker" = rabbitmq3 ] && [ "$(rmq3_queue_members)" != 3 ]; then
      echo "RabbitMQ's 3-node $QUEUE is not a quorum queue of three members: $(rmq3ctl 1 list_queues name type members 2>&1)" >&2
      exit 1
    fi
    if [[ "$broker" == cluster* ]] && [ "$(cluster_leader)" != "$LEADER" ]; then
      echo "warning: the cluster's leader changed during the runs (was node $LEADER): discard them" >&2
    fi
    "stop_$broker"
  done
done

python3 - "$RUNS" <<'EOF'
import json, sys, collections
runs = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in runs:
    by[(r["scenario"], r["broker"])].append(r)
def med(xs):
    xs = sorted(x for x in xs if x == x)
    return xs[len(xs)//2] if xs else float("nan")
def per100k(r, cpu):
    return cpu / max(1, r["acked"]) * 1e5
def fig(rs):
    return {
        "consumed/s while publishing": med([r["consume_rate"] for r in rs]),
        "e2e msg/s": med([r["throughput"] for r in rs]),
        "confirmed/s": med([r["send_rate"] for r in rs]),
        "p50 ms": med([r["latency"]["p50_ns"] / 1e6 for r in rs]),
        "p99 ms": med([r["latency"]["p99_ns"] / 1e6 for r in rs]),
        "server CPU-s/100k": med([r.get("server_cpu_s_per_100k", float("nan")) for r in rs]),
        "all servers CPU-s/100k": med([per100k(r, r["all_servers_cpu_s"]) for r in rs]),
    }
names = {"cluster": "Sluice 3-node", "single": "Sluice 1-node", "rabbitmq": "RabbitMQ quorum 1-node", "rabbitmq3": "RabbitMQ quorum 3-node",
         "clusterbase": "Sluice 3-node, base build", "cluster5f3": "Sluice 5-node factor 3", "cluster5f5": "Sluice 5-node factor 5"}
present = [b for b in ("cluster", "clusterbase", "single", "rabbitmq", "rabbitmq3", "cluster5f3", "cluster5f5") if any(k[1] == b for k in by)]
ratios = [(a, b) for a, b in (("cluster", "clusterbase"), ("cluster", "rabbitmq3"), ("cluster", "rabbitmq"), ("single", "rabbitmq"), ("cluster", "single"), ("cluster5f3", "cluster5f5"))
          if a in present and b in present]
head = [names[b] for b in present] + [f"{names[a]} ÷ {names[b]}" for a, b in ratios]
print("| scenario | figure | " + " | ".join(head) + " |")
print("|---" * (2 + len(head)) + "|")
def fmt(x):
    return "n/a" if x != x else f"{x:,.2f}"
for scen in sorted({k[0] for k in by}, key=lambda s: [int(x) if x.isdigit() else x for x in s.replace("P/", " ").replace("C", " ").split()]):
    f = {b: fig(by[(scen, b)]) for b in present if (scen, b) in by}
    for k in next(iter(f.values())):
        cells = [fmt(f[b][k]) if b in f else "n/a" for b in present]
        for a, b in ratios:
            x, y = f.get(a, {}).get(k, float("nan")), f.get(b, {}).get(k, float("nan"))
            cells.append(fmt(x / y) if y else "n/a")
        print(f"| {scen} | {k} | " + " | ".join(cells) + " |")
print(f"\n{len(runs)} runs; medians over repeats; server CPU = the leader's (Sluice cluster), node 1's (RabbitMQ 3-node) or the broker's;"
      f" all servers = every node; raw JSON in {sys.argv[1]}")
errs = [(r["broker"], r["scenario"], r["errors"]) for r in runs if r.get("errors")]
for b, s, e in errs:
    print(f"errors: {b} {s}: {e}")
EOF
