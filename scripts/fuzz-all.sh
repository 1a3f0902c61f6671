#!/usr/bin/env bash
# fuzz-all.sh FUZZTIME: run every fuzz target of the module in the current
# directory for FUZZTIME each (`make fuzz` calls it once per module).
#
# Targets are every top-level `func FuzzX(f *testing.F)` in the test files
# `go list` names for each package (so build constraints are respected);
# `go test -list '^Fuzz'` per package linked and ran every package's test
# binary only to list names, about two minutes of CI's fuzz phase. Each
# package's instrumented test binary is built once (`go test -c
# -fuzz=.`) and every target of the package runs from it through
# scripts/fuzz-one.sh, which keeps go test's corpus cache and its
# handling of golang/go#75804. The first failing target stops the run.
set -euo pipefail
fuzztime=${1:?usage: fuzz-all.sh FUZZTIME}
go=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
$go list -f '{{.ImportPath}}|{{.Dir}}|{{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... > "$bin/pkgs"
while IFS='|' read -r pkg dir files; do
  targets=$(for f in $files; do
    sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$dir/$f"
  done | sort -u)
  [ -n "$targets" ] || continue
  $go test -c -fuzz=. -o "$bin/pkg.test" "$pkg"
  for target in $targets; do
    echo "== $pkg $target"
    GO=$go FUZZ_BIN="$bin/pkg.test" FUZZ_DIR="$dir" "$here/fuzz-one.sh" "$pkg" "$target" "$fuzztime" </dev/null
  done
done < "$bin/pkgs"
