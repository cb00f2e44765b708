#!/usr/bin/env bash
# Prints the version of the checked-out commit (SemVer 2.0.0, no "v"; git tags add the "v"):
#   - RELEASE_VERSION when set (make release RELEASE_VERSION=0.1.0);
#   - X.Y.Z when HEAD is tagged vX.Y.Z;
#   - otherwise the coming release (the first "## [X.Y.Z]" heading of CHANGELOG.md) as a
#     pre-release: X.Y.Z-dev.<commits>.g<short commit>, with ".dirty" for uncommitted changes.
# The same commit always gives the same version, so a release build can be repeated byte for byte.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'

if [[ -n ${RELEASE_VERSION:-} ]]; then
  v=${RELEASE_VERSION#v}
elif tag=$(git -C "$ROOT" describe --tags --exact-match --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null); then
  v=${tag#v}
else
  next=$(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' "$ROOT/CHANGELOG.md" | head -n 1)
  [[ -n $next ]] || { echo "version.sh: no '## [X.Y.Z]' heading in CHANGELOG.md" >&2; exit 1; }
  if count=$(git -C "$ROOT" rev-list --count HEAD 2>/dev/null); then
    v="$next-dev.$count.g$(git -C "$ROOT" rev-parse --short=7 HEAD)"
    [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] || v+=.dirty
  else
    v="$next-dev" # not a git checkout
  fi
fi
[[ $v =~ $semver ]] || { echo "version.sh: '$v' is not a semantic version (X.Y.Z[-pre-release])" >&2; exit 1; }
echo "$v"
