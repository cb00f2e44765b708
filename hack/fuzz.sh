#!/usr/bin/env bash
# Runs every fuzz target for a while (make fuzz; FUZZTIME, default 1m each), one after the other, at
# low priority. `go test` (make test-unit) runs each target's seed corpus only. A finding is written to
# the package's testdata/fuzz/<target>/ and fails the run: commit it with the fix, it then stays a
# regression test.
#
#   hack/fuzz.sh [duration]          e.g. hack/fuzz.sh 10m
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZTIME=${1:-${FUZZTIME:-1m}}
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

# package target: what `render` reads from a chart, the reference table's walk of a pod spec, and
# the pinning webhook's AdmissionReview handling.
targets=(
  "./internal/render FuzzRender"
  "./internal/refs FuzzUses"
  "./internal/pinning FuzzAdmissionReview"
)
cd "$ROOT"
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  printf '[fuzz %s] %s %s for %s\n' "$(date +%H:%M:%S)" "$pkg" "$name" "$FUZZTIME"
  nice -n 10 go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"
done
