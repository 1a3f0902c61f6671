#!/usr/bin/env bash
# Runs amqp091-go's own integration tests (the "peer suite") against a real
# `sluice server`, as upstream runs them against RabbitMQ:
#
#   go test -tags integration -count=1 -run . -skip '<management-API tests>' ./...
#
# with AMQP_URL pointing at a Sluice started here on a free port with a
# throw-away data directory (guest/guest from loopback is the default user).
# The amqp091-go version is the one in go.mod; its module source (which
# ships its test files) is copied out of the read-only module cache.
#
# Exits non-zero on any failing test, on a goroutine leak reported by the
# suite's goleak TestMain, or when the server cannot be started. The server is
# always stopped (trap). See docs/amqp-compat.md, "Peer test suite", for
# what is skipped and why.
#
# Environment:
#   AMQP_PEER_RUN         -run pattern (default ".": every test and example)
#   AMQP_PEER_EXTRA_SKIP  more -skip alternatives, '|'-separated (e.g. to
#                         quarantine a test while a Sluice fix is pending)
#   AMQP_PEER_RACE=1      run the suite under -race (needs cgo; slower)
#   AMQP_PEER_KEEP=1      keep the work directory (server log, test output)
#   AMQP_PEER_CLUSTER=1   run the suite against a three-node cluster on
#                         127.0.0.1 instead, through a follower's AMQP
#                         listener (every connection relayed to the leader)
#   AMQP_PEER_SHARDS=N    with AMQP_PEER_CLUSTER=1: [cluster] shards (default 1)
#   GO                    go command (default: go)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
GO="${GO:-go}"
MODULE=github.com/rabbitmq/amqp091-go

# Tests that need more than an AMQP 0-9-1 broker. Keep in sync with
# docs/amqp-compat.md ("Peer test suite").
#
# The 16 TestConnectionRecovery* tests below drop the client's connection
# through RabbitMQ's management HTTP API (GET/DELETE /api/connections on a
# hard-coded localhost:15672), which Sluice does not have.
# TestConnectionRecoverySkipAndContinueNoInfiniteLoop does not use it and runs.
SKIP_MGMT=(
  TestConnectionRecoveryPublish
  TestConnectionRecoveryConsume
  TestConnectionRecoveryChannelIDReservation
  TestConnectionRecoveryLifeCycleNotifyStateChange
  TestConnectionRecoveryCancelInterrupt
  TestConnectionRecoveryExclusiveQueue
  TestConnectionRecoveryDeletedQueueSkip
  TestConnectionRecoveryTopologyOnlyTransient
  TestConnectionRecoveryMultiChannelTopology
  TestConnectionRecoveryTopologyAllEnabled
  TestConnectionRecoveryTopologyDisabled
  TestConnectionRecoveryExhaustionDoesNotPanic
  TestConnectionRecoveryAutoDeleteTopologyForgotten
  TestConnectionRecoveryAutoDeleteExchangeCascade
  TestConnectionRecoverySkipAndContinue
  TestConnectionRecoveryConsumerNotForgottenAfterFailedResubscribe
)
# Three tests (TestRabbitMQQueueTTLGet, TestRabbitMQQueueNackMultipleRequeue,
# TestIntegrationRecoverNotImplemented) test something only when
# server-properties.product is "RabbitMQ", and otherwise leave their
# connection open, which the suite's goleak TestMain reports. The server is
# started with --amqp-product RabbitMQ so that they run for real.
# TestConnection_Close_WhenMemoryAlarmIsActive needs rabbitmqctl
# (RABBITMQ_RABBITMQCTL_PATH) to raise a memory alarm; with that variable
# unset it skips itself, so it is not listed here. We unset it below.

# Client-only tests with millisecond timers: they speak to an in-memory
# fake server (the suite's newSession pipe), never to the broker, and wait
# 1 ms for the client's own goroutines, which a loaded 2-core CI machine
# misses now and then (TestNotifyClosesAllChansAfterConnectionClose failed
# a CI run on 2026-12-05 that way, client_test.go:660). They run after the
# main run, on their own, with one retry; a failure on both tries fails
# the script.
CLIENT_TIMING=(
  TestNotifyClosesAllChansAfterConnectionClose
)

skip="^($(IFS='|'; echo "${SKIP_MGMT[*]}|${CLIENT_TIMING[*]}"))\$"
if [ -n "${AMQP_PEER_EXTRA_SKIP:-}" ]; then
  skip="${skip}|^(${AMQP_PEER_EXTRA_SKIP})\$"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-amqp-peer.XXXXXX")"
SERVER_PID=""
NODE_PIDS=()
stop_pid() {
  local pid=$1
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    # Wait up to 10 s for a clean shutdown, then SIGKILL.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
cleanup() {
  local rc=$?
  stop_pid "$SERVER_PID"
  for pid in "${NODE_PIDS[@]}"; do stop_pid "$pid"; done
  if [ "${AMQP_PEER_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
    echo "amqp-peer: work directory kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
echo "== amqp-peer: build sluice"
"$GO" build -o "$WORK/sluice" ./cmd/sluice

version="$("$GO" list -m -f '{{.Version}}' "$MODULE")"
echo "== amqp-peer: $MODULE@$version"
dir="$(cd "$WORK" && GO111MODULE=on GOWORK=off "$GO" mod download -json "$MODULE@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [ -z "$dir" ] || [ ! -f "$dir/integration_test.go" ]; then
  echo "amqp-peer: go mod download gave no usable Dir for $MODULE@$version" >&2
  exit 1
fi
cp -r "$dir" "$WORK/amqp091-go"
chmod -R u+w "$WORK/amqp091-go"

# ready_addr FILE PID: the AMQP address in ready file FILE once it is
# written (up to 30 s), empty if PID ended first or it never was.
ready_addr() {
  local addr=""
  for _ in $(seq 300); do
    if [ -s "$1" ]; then
      addr="$(sed -n 's/.*"amqp":"\([^"]*\)".*/\1/p' "$1")"
      break
    fi
    if ! kill -0 "$2" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "$addr"
}

amqp_addr=""
if [ "${AMQP_PEER_CLUSTER:-0}" = 1 ]; then
  echo "== amqp-peer: start a three-node cluster (shards: ${AMQP_PEER_SHARDS:-1})"
  # Raft ports: reserved by binding port 0 and closing it (the peer list
  # must name them before the nodes start); everything else on port 0.
  # python3 (which .ci/run installs with boto3) also reads the leader.
  port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
  peers="1=127.0.0.1:$(port),2=127.0.0.1:$(port),3=127.0.0.1:$(port)"
  declare -A AMQP_OF HTTP_OF
  for id in 1 2 3; do
    "$WORK/sluice" server --node-id "$id" --peers "$peers" --shards "${AMQP_PEER_SHARDS:-1}" \
      --data-dir "$WORK/data$id" --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 --amqp-product RabbitMQ \
      --ready-file "$WORK/ready$id.json" >"$WORK/server$id.log" 2>&1 &
    NODE_PIDS+=($!)
  done
  for id in 1 2 3; do
    AMQP_OF[$id]="$(ready_addr "$WORK/ready$id.json" "${NODE_PIDS[$((id-1))]}")"
    HTTP_OF[$id]="$(sed -n 's/.*"sqs":"\([^"]*\)".*/\1/p' "$WORK/ready$id.json" 2>/dev/null)"
    if [ -z "${AMQP_OF[$id]}" ]; then
      echo "amqp-peer: node $id did not become ready" >&2
      tail -n 30 "$WORK/server$id.log" >&2 || true
      exit 1
    fi
  done
  leader=""
  for _ in $(seq 300); do # up to 30 s for a leader (of shard 0: AMQP's)
    leader="$(python3 - "http://${HTTP_OF[1]}/sluice/v1/cluster" 2>/dev/null <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    l = json.load(r)["node"].get("leader", 0)
print(l if l else "")
PY
)"
    [ -n "$leader" ] && break
    sleep 0.1
  done
  if [ -z "$leader" ]; then
    echo "amqp-peer: the cluster elected no leader in 30 s" >&2
    exit 1
  fi
  via=$(( leader % 3 + 1 ))
  amqp_addr="${AMQP_OF[$via]}"
  echo "   leader node $leader; the suite connects through follower node $via, AMQP on $amqp_addr"
else
  echo "== amqp-peer: start sluice"
  "$WORK/sluice" server --data-dir "$WORK/data" \
    --sqs-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 --amqp-product RabbitMQ \
    --ready-file "$WORK/ready.json" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  amqp_addr="$(ready_addr "$WORK/ready.json" "$SERVER_PID")"
  if [ -z "$amqp_addr" ]; then
    echo "amqp-peer: sluice did not become ready; ready file: $(cat "$WORK/ready.json" 2>/dev/null)" >&2
    tail -n 30 "$WORK/server.log" >&2 || true
    exit 1
  fi
  echo "   sluice pid $SERVER_PID, AMQP on $amqp_addr"
fi

race=()
if [ "${AMQP_PEER_RACE:-0}" = 1 ]; then race=(-race); fi

echo "== amqp-peer: go test -tags integration (not running ${#SKIP_MGMT[@]} management-API tests)"
out="$WORK/go-test.txt"
set +e
(
  cd "$WORK/amqp091-go"
  unset RABBITMQ_RABBITMQCTL_PATH
  AMQP_URL="amqp://guest:guest@${amqp_addr}/" GOWORK=off GOFLAGS=-mod=mod \
    "$GO" test "${race[@]}" -tags integration -count=1 -timeout 5m -v \
    -run "${AMQP_PEER_RUN:-.}" -skip "$skip" ./...
) >"$out" 2>&1
rc=$?
set -e

# Summary: top-level tests and examples only (subtests are indented).
passed=$(grep -c '^--- PASS' "$out" || true)
failed=$(grep -c '^--- FAIL' "$out" || true)
skipped=$(grep -c '^--- SKIP' "$out" || true)
echo "== amqp-peer: result"
grep -E '^(ok|FAIL|---)[[:space:]]' "$out" | grep -E '^(ok|FAIL)[[:space:]]' || true
echo "   passed $passed, failed $failed, skipped at run time $skipped, not run: ${#SKIP_MGMT[@]} (management API)"
if [ "$skipped" -gt 0 ]; then
  echo "   skipped at run time:"; grep '^--- SKIP' "$out" | sed 's/^/     /'
fi
if [ "$failed" -gt 0 ]; then
  echo "   FAILED:"
  grep -A12 '^--- FAIL' "$out" | sed 's/^/     /'
fi
if grep -q '^goleak: ' "$out"; then
  echo "   the suite's goleak check found goroutines left running:"
  sed -n '/^goleak: /,$p' "$out" | grep -E 'Goroutine|created by' | sed 's/^/     /'
fi
if [ "$rc" -ne 0 ]; then
  if [ "$failed" -eq 0 ] && ! grep -q '^goleak: ' "$out"; then
    tail -n 40 "$out" | sed 's/^/     /'
  fi
  echo "amqp-peer: FAIL (go test exit $rc; full output and server log in $WORK)" >&2
  exit 1
fi

client_run="^($(IFS='|'; echo "${CLIENT_TIMING[*]}"))\$"
echo "== amqp-peer: ${#CLIENT_TIMING[@]} client-only timing test(s), one retry allowed"
for try in 1 2; do
  cout="$WORK/go-test-client-$try.txt"
  set +e
  (
    cd "$WORK/amqp091-go"
    GOWORK=off GOFLAGS=-mod=mod "$GO" test -tags integration -count=1 -timeout 2m -v -run "$client_run" ./...
  ) >"$cout" 2>&1
  crc=$?
  set -e
  if [ "$crc" -eq 0 ]; then
    echo "   passed $(grep -c '^--- PASS' "$cout" || true) on try $try"
    break
  fi
  echo "   try $try failed:"; grep -A6 '^--- FAIL' "$cout" | sed 's/^/     /' || tail -n 20 "$cout" | sed 's/^/     /'
  if [ "$try" -eq 2 ]; then
    echo "amqp-peer: FAIL (a client-only test failed twice; output in $WORK)" >&2
    exit 1
  fi
done
echo "amqp-peer: PASS"
