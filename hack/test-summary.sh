#!/usr/bin/env bash
# Passes `go test -v` output through and ends with a one-line-per-test summary, so a CI log shows at a
# glance what ran and how long it took. The Makefile runs with pipefail, so go test's own exit status
# decides; we also fail on a FAIL line in case the pipe is used elsewhere.
set -uo pipefail
failed=0
summary=()
while IFS= read -r line; do
  printf '%s\n' "$line"
  case "$line" in
    "--- FAIL"*|"FAIL"*) failed=1; summary+=("$line") ;;
    "--- PASS"*|"--- SKIP"*|"ok "*) summary+=("$line") ;;
  esac
done
echo "== e2e summary"
printf '%s\n' "${summary[@]}"
exit $failed
