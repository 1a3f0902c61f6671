#!/usr/bin/env bash
# fuzz-one.sh PKG TARGET FUZZTIME: run one fuzz target for FUZZTIME.
#
# Go 1.26's fuzz coordinator can fail a target that found nothing with a
# bare "context deadline exceeded" at the -fuzztime boundary, when a worker
# is mid-call as the deadline fires (golang/go#75804, fixed in Go 1.27).
# A real finding always writes a reproducer ("Failing input written to").
# So: a failure whose output has that race's line and no reproducer is
# run once more; any other failure, or the same flake twice, fails.
set -uo pipefail
pkg=$1 target=$2 fuzztime=$3
go=${GO:-go}
for attempt in 1 2; do
  log=$(mktemp)
  $go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then rm -f "$log"; exit 0; fi
  if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log" && ! grep -qE '^\s+panic:|--- FAIL:.*\n\s+\S+_test\.go' "$log" && [ "$attempt" -eq 1 ]; then
    echo "fuzz-one: $target hit the -fuzztime deadline race (golang/go#75804; no failing input was written); running it once more"
    rm -f "$log"
    continue
  fi
  rm -f "$log"
  exit "$rc"
done
