#!/usr/bin/env bash
# bench-vs-rabbitmq.sh: the same AMQP load against RabbitMQ and Sluice in one
# run, with the same tool (sluice bench amqp), and the figures as ratios.
#
#   scripts/bench-vs-rabbitmq.sh                # scenarios below, 10 s each
#   DURATION=20s REPEAT=3 scripts/bench-vs-rabbitmq.sh
#   SCENARIOS="4 4 0;16 16 0" scripts/bench-vs-rabbitmq.sh   # "producers consumers rate"
#   EXTRA="-queue prio -queue-arg x-max-priority=9 -priorities 9" scripts/bench-vs-rabbitmq.sh
#                                               # more sluice bench amqp flags, both brokers
#
# Needs rabbitmq-server (Debian: apt-get install rabbitmq-server; the
# package's own service start is denied in containers, so it is started
# here in its own directories) and a quiet machine: run nothing else. Both
# brokers keep their data in $BENCH_DIR (default /var/tmp/sluice-vs-rmq, on
# disk, not tmpfs). The brokers run one after the other, alternating per
# repeat, each on free ports picked at start. Output: one JSON line per run
# in $BENCH_DIR/runs.jsonl and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10s}"
REPEAT="${REPEAT:-1}"
DRAIN="${DRAIN:-100s}"
SCENARIOS="${SCENARIOS:-4 4 0;16 16 0;1 1 1000}"
BENCH_DIR="${BENCH_DIR:-/var/tmp/sluice-vs-rmq}"
RMQ_SERVER="${RMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}"

[ -x "$RMQ_SERVER" ] || { echo "no $RMQ_SERVER: apt-get install rabbitmq-server" >&2; exit 2; }
rm -rf "$BENCH_DIR" && mkdir -p "$BENCH_DIR"
go build -o "$BENCH_DIR/sluice" ./cmd/sluice
SLUICE="$BENCH_DIR/sluice"
RUNS="$BENCH_DIR/runs.jsonl"


# shellcheck source=scripts/lib-rabbitmq.sh
. scripts/lib-rabbitmq.sh
sluice_pid=""
cleanup_more() { [ -n "$sluice_pid" ] && kill "$sluice_pid" 2>/dev/null || true; }


start_sluice() {
  local d="$BENCH_DIR/sluice-data"
  rm -rf "$d" "$BENCH_DIR/ready.json"
  "$SLUICE" server --data-dir "$d" --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 \
    --ready-file "$BENCH_DIR/ready.json" --log-level warn > "$BENCH_DIR/sluice.log" 2>&1 &
  sluice_pid=$!
  for _ in $(seq 600); do [ -s "$BENCH_DIR/ready.json" ] && break; sleep 0.1; done
  URL="amqp://guest:guest@$(jq -r .amqp "$BENCH_DIR/ready.json")/" PID="$sluice_pid"
}
stop_sluice() { kill "$sluice_pid"; wait "$sluice_pid" 2>/dev/null || true; sluice_pid=""; }

# run BROKER P C RATE: one bench run against the broker started last.
run() {
  local broker=$1 p=$2 c=$3 rate=$4 dur="$DURATION"
  [ "$rate" != 0 ] && dur="${RATE_DURATION:-20s}"
  "$SLUICE" bench amqp -url "$URL" -pid "$PID" -producers "$p" -consumers "$c" -size 1024 \
    -rate "$rate" -duration "$dur" -drain-timeout "$DRAIN" ${EXTRA:-} -json |
    jq -c --arg b "$broker" --arg s "${p}P/${c}C rate $rate" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
      '. + {broker: $b, scenario: $s, loadavg: $load}' >> "$RUNS"
}

IFS=';' read -r -a scen <<< "$SCENARIOS"
for r in $(seq "$REPEAT"); do
  order="rabbitmq sluice"
  [ $((r % 2)) = 0 ] && order="sluice rabbitmq"
  for broker in $order; do
    if [ "$broker" = rabbitmq ]; then start_rmq; else start_sluice; fi
    for s in "${scen[@]}"; do
      read -r p c rate <<< "$s"
      echo "== run $r $broker ${p}P/${c}C rate $rate" >&2
      run "$broker" "$p" "$c" "$rate"
    done
    if [ "$broker" = rabbitmq ]; then stop_rmq; else stop_sluice; fi
  done
done

python3 - "$RUNS" <<'EOF'
import json, sys, collections
runs = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in runs:
    by[(r["scenario"], r["broker"])].append(r)
def med(xs):
    xs = sorted(xs); return xs[len(xs)//2] if xs else float("nan")
def fig(rs):
    f = {}
    f["e2e msg/s"] = med([r["throughput"] for r in rs])
    f["consumed/s while publishing"] = med([r["consume_rate"] for r in rs])
    f["confirmed/s"] = med([r["send_rate"] for r in rs])
    # Backlog when the producers stopped, as a share of what was published.
    f["backlog left %"] = med([100 * max(0, r["confirmed"] - r["consume_rate"] * r["send_elapsed_ns"] / 1e9) / max(1, r["confirmed"]) for r in rs])
    f["p50 ms"] = med([r["latency"]["p50_ns"] / 1e6 for r in rs])
    f["p99 ms"] = med([r["latency"]["p99_ns"] / 1e6 for r in rs])
    f["server CPU-s/100k"] = med([r.get("server_cpu_s_per_100k", float("nan")) for r in rs])
    f["other CPU-s"] = med([r.get("other_cpu_ns", 0) / 1e9 for r in rs])
    return f
print("| scenario | figure | Sluice | RabbitMQ | Sluice ÷ RabbitMQ |")
print("|---|---|---|---|---|")
for scen in sorted({k[0] for k in by}, key=lambda s: [int(x) if x.isdigit() else x for x in s.replace("P/", " ").replace("C", " ").split()]):
    s, q = fig(by[(scen, "sluice")]), fig(by[(scen, "rabbitmq")])
    for k in s:
        ratio = s[k] / q[k] if q[k] else float("nan")
        print(f"| {scen} | {k} | {s[k]:,.2f} | {q[k]:,.2f} | {ratio:.2f} |")
print(f"\n{len(runs)} runs; medians over repeats; raw JSON in {sys.argv[1]}")
EOF
