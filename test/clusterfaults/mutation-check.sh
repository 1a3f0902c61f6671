#!/usr/bin/env bash
# Mutation check for the cluster fault harness: proves TestClusterFaults can
# fail on a broken broker. For each mutant it builds `sluice` (with the
# faultclock tag, as the harness's own build) from a mutated copy of one
# source file (go build -overlay: the source tree is not touched), runs
# TestClusterFaults against that binary (SLUICE_BIN) for MUTATION_DURATION
# of faults (default 30s; every run starts with kill-leader and a
# partition of the leader), and succeeds only if the test FAILS with the
# verdict the mutant must cause. A mutant that passes means the harness
# cannot see that bug.
#
#   ack-before-commit  internal/cluster/raftstore/store.go: the leader's
#                      Pending.Wait returns nil at once, so writes are
#                      acknowledged before Raft commits them; must fail
#                      with lost messages or resurrected ones (an
#                      acknowledged delete undone).
#   own-clock          internal/cluster/timeline.go: a new leader runs its
#                      engine on its own wall clock, not the cluster's. The
#                      harness runs node 3 20 s ahead, and every fault after
#                      the first two is a handover (a graceful stop of the
#                      leader, steered to node 3 when another node leads),
#                      so node 3 leads within seconds; must fail with
#                      SentTimestamps 20 s off the true time (clock), early
#                      deliveries, or leases stuck 20 s in the future once
#                      node 3 hands back (undrained, poison kept from the
#                      DLQ).
#   end-before-import  internal/server/transfer.go: the mover ends a
#                      transfer (a dead letter on its way to a DLQ on
#                      another shard, ADR 0015 step 5) without having the
#                      DLQ's shard import it. Run with 3 shards, where one
#                      workload's source and DLQ live on two shards; must
#                      fail with lost messages (or poison never
#                      dead-lettered) on that workload.
#   route-drops        internal/engine/routed.go: shard 0's import of
#                      AMQP dead letters to route (ADR 0016 decision 6)
#                      writes no transfer for a target on another shard.
#                      Run with 3 nodes, 3 shards, placement subset, where
#                      the dlx load's source and dead-letter queue live on
#                      shards 1 and 2; must fail with confirmed bodies not
#                      in the dead-letter queue. Not in CI's list (.ci/run
#                      names the three above, for time); `make
#                      cluster-mutation` runs all four.
#
# SLUICE_FAULT_SEED defaults to a seed whose schedule makes the leader lose
# leadership early and often (any schedule with such faults catches them).
# About a minute per run: a mutant may never drain, so the drain is cut to
# 20 s (SLUICE_CLUSTER_FAULTS_DRAIN); a run that does not show the verdict
# (passing, or failing another way) is repeated, up to MUTATION_ATTEMPTS
# (3) runs per mutant.
set -uo pipefail
cd "$(dirname "$0")/../.."

duration="${MUTATION_DURATION:-30s}"
export SLUICE_FAULT_SEED="${SLUICE_FAULT_SEED:-1795559054065886045}"
attempts="${MUTATION_ATTEMPTS:-3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# mutate NAME SRC OLD NEW: builds $work/NAME/sluice from SRC with OLD
# replaced by NEW (OLD must occur exactly once).
mutate() {
  local name=$1 src=$2 old=$3 new=$4
  mkdir -p "$work/$name"
  python3 - "$src" "$work/$name" "$old" "$new" <<'EOF' || return 1
import json, os, sys
src, dir, old, new = sys.argv[1:5]
text = open(src).read()
if text.count(old) != 1:
    sys.exit("mutation-check: %s has %d copies of %r, want 1; update the mutant" % (src, text.count(old), old))
open(os.path.join(dir, os.path.basename(src)), "w").write(text.replace(old, new))
json.dump({"Replace": {os.path.abspath(src): os.path.join(dir, os.path.basename(src))}},
          open(os.path.join(dir, "overlay.json"), "w"))
EOF
  if ! go build -tags faultclock -overlay "$work/$name/overlay.json" -o "$work/$name/sluice" ./cmd/sluice; then
    echo "FAIL mutant $name did not build"
    return 1
  fi
}

# check NAME VERDICT_REGEX [ENV...]: runs TestClusterFaults against the
# mutant up to $attempts times, with ENV added; passes as soon as a run
# FAILS with its SQS or AMQP summary matching VERDICT_REGEX.
check() {
  local name=$1 verdict=$2 out summary amqp
  shift 2
  for attempt in $(seq "$attempts"); do
    out=$(env "$@" SLUICE_BIN="$work/$name/sluice" SLUICE_CLUSTER_FAULTS_DURATION="$duration" SLUICE_CLUSTER_FAULTS_DRAIN=20s \
      go test -count=1 -timeout 15m -run '^TestClusterFaults$' -v ./test/clusterfaults/ 2>&1)
    summary=$(grep -m1 -E 'ops: sends attempted' <<<"$out" | sed 's/^ *//' | cut -c1-400)
    amqp=$(grep -m1 -E 'AMQP queue cf-amqp' <<<"$out" | sed 's/^ *//' | cut -c1-400)
    # With shards, the workload whose dead letters cross shards reports
    # on a line of its own.
    cross=$(grep -m1 -E 'dead letters cross shards' <<<"$out" | sed 's/^ *//' | cut -c1-400)
    # So does the AMQP dead-letter load of a subset placement.
    # (two: a source off shard 0 and one on it).
    dlx=$(grep -E 'dlx \(source' <<<"$out" | sed 's/^ *//' | cut -c1-600)
    [[ -n $dlx ]] && cross="$cross"$'\n'"$dlx"
    # The verdict may show in the SQS workload's summary or the AMQP
    # queue's (an ack-before-commit leader loses AMQP confirms too).
    if grep -q -- '--- FAIL' <<<"$out" && grep -q -E "$verdict" <<<"$summary"$'\n'"$amqp"$'\n'"$cross"; then
      echo "ok   $name mutant failed TestClusterFaults, as it must (run $attempt of at most $attempts):"
      echo "       $summary"
      echo "       $amqp"
      [[ -n $cross ]] && echo "       $cross"
      grep -m1 -E 'cluster clock:' <<<"$out" | sed 's/^ */       /' | cut -c1-400
      return 0
    fi
    if grep -q -E '^(ok|PASS)' <<<"$out"; then
      echo "     $name run $attempt: the mutant passed (this schedule's timing did not show it)"
      echo "       $summary"
      continue
    fi
    # A mutant may also break the run another way (a verdict it was not
    # checked for, a cluster that does not recover in time): not the
    # proof asked for, so it counts as a run that did not show it.
    echo "     $name run $attempt: the mutant failed the test without /$verdict/:"
    echo "       $summary"
    echo "       $amqp"
    grep -m3 -E -- '--- FAIL|awaitStable|no leader|did not' <<<"$out" | sed 's/^ */       /' | cut -c1-300
  done
  echo "FAIL $name mutant PASSED TestClusterFaults $attempts times: the harness cannot see it"
  return 1
}

# MUTANTS picks which to run (default all four).
mutants=" ${MUTANTS:-ack-before-commit own-clock end-before-import route-drops} "
rc=0
[[ $mutants == *" ack-before-commit "* ]] && { mutate ack-before-commit internal/cluster/raftstore/store.go \
  $'func (p *pending) Wait() error {\n\terr := p.w.Wait()' \
  $'func (p *pending) Wait() error {\n\tif p != nil {\n\t\treturn nil // MUTANT: acknowledged before commit\n\t}\n\terr := p.w.Wait()' &&
  check ack-before-commit 'lost [1-9]|resurrected [1-9]' || rc=1; }
[[ $mutants == *" own-clock "* ]] && { mutate own-clock internal/cluster/timeline.go \
  $'\treturn newTimeline(clock.NewSteady(n.clk), adj, target)\n}' \
  $'\t_ = target\n\treturn newTimeline(clock.NewSteady(n.clk), 0, 0) // MUTANT: a new leader on its own clock\n}' &&
  check own-clock 'clock [1-9]|early [1-9]|undrained[^,]* [1-9]|dlq [1-9]' SLUICE_CLUSTER_FAULTS_KINDS=handover || rc=1; }
[[ $mutants == *" end-before-import "* ]] && { mutate end-before-import internal/server/transfer.go \
  $'\t\terr = s.transferCall(cctx, engineCall{Op: opImport, Queue: target, Transfers: chunk})' \
  $'\t\t_ = cctx // MUTANT: the transfers end without their import' &&
  check end-before-import 'cross shards.*(lost [1-9]|dlq [1-9])' SLUICE_CLUSTER_FAULTS_SHARDS=3 || rc=1; }
[[ $mutants == *" route-drops "* ]] && { mutate route-drops internal/engine/routed.go \
  $'\t\t\t\tb.Set(transferKey(t.ID), encodeTransfer(t))' \
  $'\t\t\t\t_ = t // MUTANT: no transfer for a target on another shard' &&
  check route-drops 'dlx \(source.*confirmed and not deleted [1-9]' SLUICE_CLUSTER_FAULTS_SHARDS=3 SLUICE_CLUSTER_FAULTS_PLACEMENT=subset || rc=1; }
exit $rc
