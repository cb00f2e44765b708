#!/usr/bin/env bash
# Publishes the release in dist/ (make release), on a vX.Y.Z tag: the thin wrapper a release job runs,
# after logging in to the registry (crane auth login / helm registry login). Its pushes are the only
# part of a release that cannot run offline; DRY_RUN=1 (the default without a tag) verifies dist/ and
# prints them instead.
#
#   hack/release/publish.sh
#
#   1. dist/SHA256SUMS verifies, and dist/ is the release of HEAD's tag;
#   2. the image index (both platforms) goes to IMAGE_REPOSITORY:<version> with crane (pushed by
#      digest: the registry's digest must be the one the charts pin, or it stops);
#   3. the charts go to CHART_REPOSITORY with helm push (Helm 3.8+ and 4);
#   4. the files of dist/ are the GitHub release's assets (gh release create, when gh is installed).
#
# Environment: IMAGE_REPOSITORY (default ghcr.io/configmap-attacher/configmap-attacher; must be the one
# make release pinned), CHART_REPOSITORY (default oci://ghcr.io/configmap-attacher/charts), DRY_RUN.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIST=${DIST:-$ROOT/dist}
BIN=${TOOLS_OUT:-$ROOT/_output/tools}/bin
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/configmap-attacher/configmap-attacher}
CHART_REPOSITORY=${CHART_REPOSITORY:-oci://ghcr.io/configmap-attacher/charts}

log() { printf '[publish] %s\n' "$*" >&2; }
die() { printf '[publish] ERROR: %s\n' "$*" >&2; exit 1; }

tag=$(git -C "$ROOT" describe --tags --exact-match --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null || true)
DRY_RUN=${DRY_RUN:-$([[ -n $tag ]] && echo 0 || echo 1)}
run() {
  if [[ $DRY_RUN == 1 ]]; then
    printf '[publish] would run: %s\n' "$*" >&2
  else
    "$@"
  fi
}

[[ -f $DIST/SHA256SUMS ]] || die "no $DIST/SHA256SUMS: run make release first"
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "dist/SHA256SUMS does not verify"
chart=$(cd "$DIST" && ls configmap-attacher-[0-9]*.tgz)
version=${chart#configmap-attacher-}
version=${version%.tgz}
[[ -z $tag || $tag == "v$version" ]] || die "HEAD is tagged $tag but dist/ holds $version: run make release again"
digest=$("$BIN/helm" show values "$DIST/$chart" | sed -n 's/^  digest: "\(sha256:[0-9a-f]*\)"$/\1/p')
[[ -n $digest ]] || die "$chart pins no image digest"
"$BIN/helm" show values "$DIST/$chart" | grep -qx "  repository: \"$IMAGE_REPOSITORY\"" ||
  die "$chart pulls from another repository than $IMAGE_REPOSITORY: run make release with IMAGE_REPOSITORY=$IMAGE_REPOSITORY"
log "release $version (tag ${tag:-none}), image $IMAGE_REPOSITORY@$digest$([[ $DRY_RUN == 1 ]] && echo ', dry run')"

# The image: crane pushes the layout's image index with both platforms, then we check the registry
# serves it under the digest the charts pin.
layout=$(mktemp -d)
trap 'rm -rf "$layout"' EXIT
tar -xf "$DIST/configmap-attacher_${version}_oci-image.tar" -C "$layout"
run "$BIN/crane" push --index "$layout" "$IMAGE_REPOSITORY:$version"
if [[ $DRY_RUN != 1 ]]; then
  got=$("$BIN/crane" digest "$IMAGE_REPOSITORY:$version")
  [[ $got == "$digest" ]] || die "the registry has $IMAGE_REPOSITORY:$version at $got, the charts pin $digest"
fi

for c in "$DIST"/*-"$version".tgz; do
  [[ $c == *helm-plugin* ]] && continue
  run "$BIN/helm" push "$c" "$CHART_REPOSITORY"
done

if command -v gh >/dev/null; then
  run gh release create "v$version" --title "v$version" --notes-file <(sed -n "/^## \[$version\]/,/^## \[/p" "$ROOT/CHANGELOG.md" | sed '$d') "$DIST"/*
else
  log "gh is not installed: upload the files of $DIST to the GitHub release v$version by hand"
fi
log "done"
