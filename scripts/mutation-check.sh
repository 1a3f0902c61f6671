#!/usr/bin/env bash
# Mutation check: proves the power-loss tests can fail. It builds the store
# with fsync turned into a no-op (build tags sluice_nofsync: every sync;
# sluice_nofsync_wal: only the write-ahead log's, see
# internal/store/pebblestore/nofsync_on.go) and runs the power-loss tests
# against each mutant. Every test must FAIL (a "--- FAIL" from the test
# itself, not a build error); if one passes, the harness cannot see lost
# fsyncs and this script fails CI. The same tests without the tag run in
# `make test` and must pass there.
#
# SIGKILL tests (test/crash, TestSIGKILL) are not in the list on purpose: a
# killed process's unsynced writes stay in the page cache, so they pass
# without fsync; only a simulated power cut (pebble's crash clone) drops
# unsynced data.
#
# MUTATION_BUDGET (default 10s) is SLUICE_FAULTS_BUDGET for the fault tests;
# each must fail within it.
set -uo pipefail
cd "$(dirname "$0")/.."

budget="${MUTATION_BUDGET:-10s}"
# package|test regex
checks=(
  "./internal/store/pebblestore/|^TestPowerLoss$"
  "./test/faults/|^TestPowerLoss$"
  "./test/faults/|^TestFrontEndPowerLoss$"
)
tags=(sluice_nofsync sluice_nofsync_wal)

# A run that neither passes nor fails (it hit the per-run timeout) proves
# nothing either way: it is retried up to MUTATION_ATTEMPTS times, and the
# test goroutines it was stuck in are printed so the hang can be diagnosed.
# A mutant that never yields a "--- FAIL" fails the check.
timeout="${MUTATION_TIMEOUT:-4m}"
attempts="${MUTATION_ATTEMPTS:-3}"

# stuck prints, from a timed-out run, which tests were running and the
# stacks of the goroutines that sat in test code (not pebble's own idle
# background goroutines).
stuck() {
  sed -n '/running tests:/,/^$/p' <<<"$1" | head -20 | sed 's/^/       /'
  awk 'BEGIN{RS=""} /_test\.go/' <<<"$1" | head -60 | sed 's/^/       /'
}

status=0
for tag in "${tags[@]}"; do
  for c in "${checks[@]}"; do
    pkg="${c%%|*}" run="${c#*|}"
    verdict=""
    for attempt in $(seq 1 "$attempts"); do
      out=$(SLUICE_FAULTS_BUDGET="$budget" SLUICE_BIN=/nonexistent-not-needed \
        go test -tags "$tag" -count=1 -timeout "$timeout" -run "$run" "$pkg" 2>&1)
      if grep -q -- '--- FAIL' <<<"$out"; then
        verdict=failed
        echo "ok   mutant $tag: $pkg $run failed, as it must:"
        grep -m3 -E 'lost|Lost|reopen|does not exist|acknowledged|violat' <<<"$out" | cut -c1-200 | sed 's/^/       /'
        break
      elif grep -q -E '^(ok|PASS)' <<<"$out"; then
        verdict=passed
        echo "FAIL mutant $tag: $pkg $run PASSED without fsync: the harness cannot see lost writes"
        break
      elif grep -q 'panic: test timed out' <<<"$out"; then
        echo "warn mutant $tag: $pkg $run hung past $timeout (attempt $attempt of $attempts); stuck in:"
        stuck "$out"
      else
        verdict=broken
        echo "FAIL mutant $tag: $pkg $run did not run (build error?):"
        tail -20 <<<"$out"
        break
      fi
    done
    case "$verdict" in
      failed) ;;
      "") echo "FAIL mutant $tag: $pkg $run never finished in $attempts attempts"; status=1 ;;
      *) status=1 ;;
    esac
  done
done
exit $status
