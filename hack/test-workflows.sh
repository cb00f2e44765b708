#!/usr/bin/env bash
# Lints the GitHub Actions workflows (make test-workflows), then proves the lint fails when it should.
#
#   1. every .github/workflows/*.yml and *.yaml passes actionlint (ACTIONLINT_VERSION, built by make
#      tools): syntax, permissions, expressions and their types, untrusted input in scripts, runner
#      labels, with shellcheck on every `run:` script (Debian's shellcheck: .ci/run installs it; pyflakes
#      is off: no workflow runs Python) — and our own rule, which actionlint has not: every action from
#      another repository is pinned by a full commit SHA with its version in a comment
#      (`uses: owner/repo@<40 hex> # vX.Y.Z`), a container action by digest;
#   2. each mistake below, made in a copy of release.yml, is refused with the rule that catches it: a
#      linter that passes everything would pass step 1 too.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TOOLS_OUT:-$ROOT/_output/tools}/bin
ACTIONLINT=$BIN/actionlint
SHELLCHECK=${SHELLCHECK:-$(command -v shellcheck || true)}

fail() { printf 'test-workflows: FAILED: %s\n' "$*" >&2; exit 1; }
[[ -x $ACTIONLINT ]] || fail "no $ACTIONLINT: run make tools"
# actionlint skips shellcheck silently when it cannot find it: require it, so no script goes unchecked.
[[ -n $SHELLCHECK && -x $SHELLCHECK ]] || fail "shellcheck is not installed (apt-get install shellcheck; .ci/run installs it)"

# check_pins prints `file:line:col: ... [pin]` for each `uses:` not pinned as above; fails if any.
check_pins() {
  awk '
    match($0, /^[[:space:]]*(-[[:space:]]+)?uses:[[:space:]]*/) {
      rest = substr($0, RLENGTH + 1)
      ref = rest; sub(/[[:space:]].*/, "", ref); gsub(/["\047]/, "", ref)
      comment = rest; if (!sub(/^[^#]*#[[:space:]]*/, "", comment)) comment = ""
      if (ref ~ /^\.\//) next                                   # an action of this repository
      pin = ref; if (!sub(/^[^@]*@/, "", pin)) pin = ""             # (no {n}: mawk has no intervals)
      if (ref ~ /^docker:\/\//) { ok = pin ~ /^sha256:[0-9a-f]+$/ && length(pin) == 71; why = "a container action: pin it by digest (docker://image@sha256:...)" }
      else { ok = pin ~ /^[0-9a-f]+$/ && length(pin) == 40 && comment ~ /^v[0-9]/; why = "pin it by full commit SHA with its version in a comment: uses: owner/repo@<40 hex> # vX.Y.Z" }
      if (!ok) { printf "%s:%d:%d: action %s is not pinned: %s [pin]\n", FILENAME, FNR, RLENGTH + 1, ref, why; bad = 1 }
    }
    END { exit bad }' "$@"
}

# lint runs actionlint and check_pins on the given files; the findings go to stdout.
lint() {
  local rc=0
  "$ACTIONLINT" -no-color -shellcheck="$SHELLCHECK" -pyflakes= "$@" || rc=1
  check_pins "$@" || rc=1
  return "$rc"
}

cd "$ROOT"
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
((${#workflows[@]})) || fail "no workflow in .github/workflows"
lint "${workflows[@]}" || fail "actionlint or the pin rule refused the workflows above"
echo "test-workflows: ${workflows[*]} pass $("$ACTIONLINT" -version | head -n 1 | sed 's/^/actionlint /') (shellcheck $("$SHELLCHECK" --version | sed -n 's/^version: //p')) and the pin rule"

# Each line: the rule that must refuse it | a sed expression making one mistake in release.yml.
# shellcheck disable=SC2016 # the $ and ${{ }} are the workflow's, not ours
mistakes=(
  'permissions|s/id-token: write/id-token: wirte/'
  'expression|s/github[.]workflow_ref }}/github.workflow_reff }}/'
  'expression|s/version=\${GITHUB_REF_NAME#v}/version=${{ github.event.head_commit.message }}/'
  'shellcheck|s/run: make release$/run: make release $BUILDER_ID/'
  'runner-label|s/runs-on: ubuntu-24[.]04$/runs-on: ubuntu-24.4/'
  'pin|s/actions\/checkout@[0-9a-f]\{40\}/actions\/checkout@v7.0.1/'
  'syntax-check|s/^    permissions:$/    permission:/'
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/.github/workflows"
broken=$work/.github/workflows/release.yml
for m in "${mistakes[@]}"; do
  rule=${m%%|*} expr=${m#*|}
  sed "$expr" .github/workflows/release.yml >"$broken"
  ! cmp -s .github/workflows/release.yml "$broken" ||
    fail "'$expr' changes nothing in .github/workflows/release.yml: make this mistake in today's file"
  if out=$(cd "$work" && lint .github/workflows/release.yml 2>&1); then
    fail "the lint passed release.yml with '$expr'"
  fi
  grep -q "\[$rule\]" <<<"$out" || fail "release.yml with '$expr' was refused, but not by [$rule]:"$'\n'"$out"
  echo "test-workflows: refused as [$rule]: $(grep -m1 "\[$rule\]" <<<"$out" | sed 's/^[^ ]* //' | cut -c1-140)"
done
echo "test-workflows: ${#mistakes[@]} mistakes in release.yml, each refused by its rule"
