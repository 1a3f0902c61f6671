#!/usr/bin/env bash
# fuzz-targets.sh: print "IMPORTPATH TARGET" for every fuzz target of the
# module in the current directory, one per line.
#
# It reads the test files `go list` names for each package (so build
# constraints are respected) and takes every top-level `func FuzzX(f
# *testing.F)`. This replaces `go test -list '^Fuzz'` per package, which
# linked and ran every package's test binary only to list names: about
# two minutes of CI's fuzz phase that fuzzed nothing.
set -euo pipefail
go=${GO:-go}
$go list -f '{{.ImportPath}}|{{.Dir}}|{{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... |
  while IFS='|' read -r pkg dir files; do
    for f in $files; do
      sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$dir/$f"
    done | sort -u | sed "s|^|$pkg |"
  done
