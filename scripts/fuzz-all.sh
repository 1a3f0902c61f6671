#!/usr/bin/env bash
# fuzz-all.sh FUZZTIME: run every fuzz target of the module in the current
# directory for FUZZTIME each (`make fuzz` calls it once per module).
#
# Targets come from scripts/fuzz-targets.sh. Each package's instrumented
# test binary is built once (`go test -c -fuzz=.`) and every target of the
# package runs from it through scripts/fuzz-one.sh, which keeps go test's
# corpus cache and its handling of golang/go#75804. The first failing
# target stops the run.
set -euo pipefail
fuzztime=${1:?usage: fuzz-all.sh FUZZTIME}
go=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
built=
GO=$go "$here/fuzz-targets.sh" > "$bin/targets"
while read -r pkg target; do
  if [ "$pkg" != "$built" ]; then
    $go test -c -fuzz=. -o "$bin/pkg.test" "$pkg"
    dir=$($go list -f '{{.Dir}}' "$pkg")
    built=$pkg
  fi
  echo "== $pkg $target"
  GO=$go FUZZ_BIN="$bin/pkg.test" FUZZ_DIR="$dir" "$here/fuzz-one.sh" "$pkg" "$target" "$fuzztime" </dev/null
done < "$bin/targets"
