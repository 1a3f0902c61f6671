#!/usr/bin/env bash
# bench-sqs-floor.sh: `sluice bench sqs` against the transport-floor server
# (internal/bench floor_test.go: net/http and the bytes, no broker) and
# against a fresh `sluice server`, one after the other, ROUNDS times, so the
# two CPU figures per 100k messages come from the same minutes of the same
# machine (docs/benchmarks.md, "The transport's floor"). Run it on a quiet
# machine. Needs jq and curl. After each Sluice run it prints how many WAL
# syncs the server made per 100k messages and what they cost in CPU on
# this disk (internal/bench TestSyncCost).
#
#   P=4 DURATION=15s ROUNDS=2 scripts/bench-sqs-floor.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
P="${P:-4}"; DURATION="${DURATION:-15s}"; ROUNDS="${ROUNDS:-2}"
W="$(mktemp -d "${TMPDIR:-/tmp}/sluice-floor.XXXXXX")"
trap 'kill -TERM $(jobs -p) 2>/dev/null || true; wait; rm -rf "$W"' EXIT
cd "$ROOT"
go test -c -o "$W/bench.test" ./internal/bench
go build -o "$W/sluice" ./cmd/sluice

wait_ready() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no ready file $1" >&2; return 1; }
bench() { # label endpoint pid
  "$W/sluice" bench sqs -endpoint "http://$2" -pid "$3" -producers "$P" -consumers "$P" -duration "$DURATION" 2>&1 |
    grep -E "deleted|server cpu|not the broker|errors" | sed "s/^/$1 ${P}P\/${P}C: /"
}
syncs() { # the server's WAL syncs so far, from /metrics
  curl -s "http://$1/metrics" | awk '/^sluice_store_wal_sync_seconds_count/ {print $2}'
}
for r in $(seq "$ROUNDS"); do
  d="$W/floor$r"; mkdir -p "$d"
  SLUICE_FLOOR_SERVER="$d" "$W/bench.test" -test.run TestTransportFloorServer >"$d/log" 2>&1 &
  pid=$!
  wait_ready "$d/ready.json"
  bench floor "$(jq -r .sqs "$d/ready.json")" "$pid"
  kill -TERM "$pid"; wait "$pid" || true

  d="$W/sluice$r"; mkdir -p "$d"
  "$W/sluice" server --data-dir "$d/data" --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 \
    --ready-file "$d/ready.json" >"$d/log" 2>&1 &
  pid=$!
  wait_ready "$d/ready.json"
  addr=$(jq -r .sqs "$d/ready.json")
  s0=$(syncs "$addr")
  bench sluice "$addr" "$pid" | tee "$d/bench"
  s1=$(syncs "$addr")
  kill -TERM "$pid"; wait "$pid" || true
  # What durability costs on this disk: the syncs the server made per
  # 100k messages, times one fdatasync's CPU (TestSyncCost, same disk).
  msgs=$(awk '/deleted/ {print $4; exit}' "$d/bench")
  cost=$(SLUICE_SYNC_COST="$d" "$W/bench.test" -test.run '^TestSyncCost$' | awk '/^sync cost:/ {print $8}')
  awk -v s=$((s1 - s0)) -v m="$msgs" -v c="$cost" -v p="$P" 'BEGIN {
    printf "sluice %dP/%dC:   syncs %d (%.0f per 100k messages) x %.1f us CPU each = %.2f CPU-s per 100k for fdatasync\n",
      p, p, s, s * 100000 / m, c, s * 100000 / m * c / 1e6 }'
done
