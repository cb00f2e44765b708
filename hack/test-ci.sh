#!/usr/bin/env bash
# Checks the scripts CI passes its logs through (make test-workflows): each must pass a line on, and keep
# it, when the line comes, not when a buffer fills or the input ends. Otherwise the live CI log lags by
# minutes and comes in bursts (a long build looks hung), and .ci/summary's per-step times, which are the
# seconds the lines were read, are wrong.
#   .ci/stamped FILE      (.ci/run: every line of make tools, make test-unit and make test)
#   hack/test-summary.sh  (make test-e2e: go test -v of the stories), and what it keeps of a failure
# and .ci/summary's phase table.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

fail() { printf 'test-ci: FAILED: %s\n' "$*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# passes_each_line_as_it_comes NAME WATCHED CMD...: writes one line into CMD, then holds its input open
# until that line shows in the file WATCHED (up to 20 s), then ends it. Fails unless it showed. The
# files of an earlier call are removed first, so that a line left there cannot pass this one.
passes_each_line_as_it_comes() {
  local name=$1 watched=$2; shift 2
  rm -f "$work/seen" "$work/stdout" "$work/stamped.tsv"
  {
    echo "=== RUN   TestOneLine"
    for _ in $(seq 200); do
      if grep -q TestOneLine "$watched" 2>/dev/null; then
        : >"$work/seen"
        break
      fi
      sleep 0.1
    done
  } | "$@" >"$work/stdout"
  [[ -f $work/seen ]] ||
    fail "$name: a line written into it did not reach $(basename "$watched") in 20 s while its input stayed open (an awk reading its input in blocks? hack/line-awk)"
  echo "test-ci: $name passes each line on as it comes ($(basename "$watched"))"
}

passes_each_line_as_it_comes .ci/stamped "$work/stdout" .ci/stamped "$work/stamped.tsv"
passes_each_line_as_it_comes .ci/stamped "$work/stamped.tsv" .ci/stamped "$work/stamped.tsv"
grep -q $'^[0-9]\+\t=== RUN   TestOneLine$' "$work/stamped.tsv" ||
  fail ".ci/stamped kept $(head -n 1 "$work/stamped.tsv"), want <epoch><tab>=== RUN   TestOneLine"
passes_each_line_as_it_comes hack/test-summary.sh "$work/stdout" hack/test-summary.sh

# The summary of a failed story keeps what its failure listed (the further lines of that log line), and
# leaves out a process's log dumped on failure, which is whole in the log above it.
summary=$(printf '%s\n' '=== RUN   TestA' '    a_test.go:9: 3 ReplicaSets, want 2:' '        rs-1' '        rs-2' '        rs-3' \
  '    helpers_test.go:112: controller logs:' '        {"msg":"started"}' '--- FAIL: TestA (1.00s)' 'FAIL' | { hack/test-summary.sh || true; } | sed -n '/^== TestA: its last log lines$/,$p')
want=$(printf '%s\n' '== TestA: its last log lines' '    a_test.go:9: 3 ReplicaSets, want 2:' '        rs-1' '        rs-2' '        rs-3' \
  '    helpers_test.go:112: controller logs:')
[[ $summary == "$want" ]] || fail "hack/test-summary.sh, a failed story's last log lines:
$summary
want:
$want"
echo "test-ci: hack/test-summary.sh keeps what a failure listed"

# .ci/summary: each phase's seconds, the share of the machine's CPU time it kept busy and its
# CPU-seconds (3,800 ticks busy and 200 idle in the second phase, 100 ticks a second: 95%, 38
# CPU-seconds; the third's 1,190 busy ticks round to 12); a phases.tsv without CPU columns gives the
# seconds alone.
mkdir -p "$work/ci"
printf '%s\n' $'100\tenvironment\t1000\t5000' $'110\tmake tools\t1010\t5010' $'2110\tmake test\t4810\t5210' \
  $'3266\tend (exit 0)\t6000\t6500' >"$work/ci/phases.tsv"
got=$(CLK_TCK=100 .ci/summary "$work/ci" | sed -n '2,4p')
want=$'      10s  CPU  50%      0 CPU-s  environment\n    2000s  CPU  95%     38 CPU-s  make tools\n    1156s  CPU  47%     12 CPU-s  make test'
[[ $got == "$want" ]] || fail ".ci/summary's phases:
$got
want:
$want"
printf '%s\n' $'100\tenvironment' $'150\tend (exit 0)' >"$work/ci/phases.tsv"
got=$(.ci/summary "$work/ci" | sed -n 2p)
[[ $got == "      50s  environment" ]] || fail ".ci/summary without CPU columns: '$got'"
echo "test-ci: .ci/summary gives each phase's seconds, how busy the cores were and its CPU-seconds"

# .ci/summary's tools, slowest first, from tools.log and unit.log (the unit tests' step builds the
# kubernetes tool), each with its CPU-seconds when its line gives them.
printf '%s\n' $'200\t[tools 10:00:00] kwok: built in 47s, 80 CPU-seconds' $'201\t[tools 10:00:01] helm: up to date' \
  $'300\t[tools 10:01:40] pulumi: built in 1525s' >"$work/ci/tools.log"
printf '%s\n' $'250\t[tools 10:00:50] kubernetes: built in 1167s, 1030 CPU-seconds' >"$work/ci/unit.log"
got=$(.ci/summary "$work/ci" | sed -n '/^== tools built/,/^==/p' | sed '1d;/^==/d')
want=$'    1525s  pulumi\n    1167s    1030 CPU-s  kubernetes\n      47s      80 CPU-s  kwok'
[[ $got == "$want" ]] || fail ".ci/summary's tools:
$got
want:
$want"
echo "test-ci: .ci/summary lists the tools built, slowest first, with their CPU-seconds"
