#!/usr/bin/env bash
# Proves a release build (make release-check): clones the committed HEAD twice into different
# directories, runs make release in each, and checks
#   - dist/SHA256SUMS verifies (sha256sum -c, in dist/) and lists every artifact;
#   - each binary is for its platform (`file`), and runs here when it is linux/amd64;
#   - the image's OCI index lists linux/amd64 and linux/arm64, and the charts pin it by that digest;
#   - the packaged chart's version and appVersion are the release's; the charts' SBOMs name the image
#     and the SLSA provenance names the commit and each go build;
#   - the second build is byte-identical to the first.
# Tools come from this checkout's _output/tools (TOOLS_OUT), built as make release builds them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TOOLS_OUT=${TOOLS_OUT:-$ROOT/_output/tools}
BIN=$TOOLS_OUT/bin
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

log() { printf '[release-check %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { printf '[release-check] FAILED: %s\n' "$*" >&2; exit 1; }

commit=$(git -C "$ROOT" rev-parse HEAD)
for build in first second; do
  git clone -q "$ROOT" "$WORK/$build/configmap-attacher"
  git -C "$WORK/$build/configmap-attacher" checkout -q --detach "$commit"
  start=$(date +%s)
  log "$build build of $commit in $WORK/$build"
  make -s -C "$WORK/$build/configmap-attacher" release >"$WORK/$build.out"
  log "$build build: $(( $(date +%s) - start ))s"
done
dist=$WORK/first/configmap-attacher/dist
version=$(sed -n 's/^VERSION=//p' "$WORK/first.out")
digest=$(sed -n 's/^DIGEST=//p' "$WORK/first.out")

(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "sha256sum -c SHA256SUMS"
listed=$(awk '{ print $2 }' "$dist/SHA256SUMS" | sort)
present=$(cd "$dist" && ls | grep -vx SHA256SUMS | sort)
[[ $listed == "$present" ]] || fail "SHA256SUMS lists $(echo $listed) but dist/ holds $(echo $present)"
log "SHA256SUMS verifies and covers all $(wc -l <"$dist/SHA256SUMS") artifacts"

for p in linux_amd64:"ELF 64-bit LSB executable, x86-64" linux_arm64:"ELF 64-bit LSB executable, ARM aarch64" \
  darwin_amd64:"Mach-O 64-bit x86_64 executable" darwin_arm64:"Mach-O 64-bit arm64 executable"; do
  f=$dist/configmap-attacher_${p%%:*}
  desc=$(file -b "$f")
  [[ $desc == "${p#*:}"* ]] || fail "$f: file says '$desc', want '${p#*:}'"
  [[ -s $f.sbom.cdx.json ]] && grep -q '"bomFormat": "CycloneDX"' "$f.sbom.cdx.json" || fail "$f.sbom.cdx.json is no CycloneDX SBOM"
  log "configmap-attacher_${p%%:*}: $desc"
done
got=$("$dist/configmap-attacher_linux_amd64" version)
[[ $got == *"$version"* ]] || fail "the linux/amd64 binary says version '$got', want $version"

image=$dist/configmap-attacher_${version}_oci-image.tar
tar -xOf "$image" oci-layout | grep -q imageLayoutVersion || fail "$image has no oci-layout"
top=$(tar -xOf "$image" index.json | tr -d ' \n')
[[ $top == *"\"digest\":\"$digest\""* && $top == *"\"org.opencontainers.image.ref.name\":\"$version\""* ]] ||
  fail "index.json does not name the image index $digest as $version: $top"
idx=$(tar -xOf "$image" "blobs/sha256/${digest#sha256:}" | tr -d ' \n')
for arch in amd64 arm64; do
  [[ $idx == *"\"architecture\":\"$arch\",\"os\":\"linux\""* ]] || fail "the image index lists no linux/$arch: $idx"
done
log "image index $digest lists linux/amd64 and linux/arm64"

for chart in configmap-attacher base-app; do
  meta=$("$BIN/helm" show chart "$dist/$chart-$version.tgz")
  grep -qx "version: $version" <<<"$meta" && grep -qx "appVersion: $version" <<<"$meta" ||
    fail "$chart-$version.tgz: version/appVersion are not $version:\n$meta"
  "$BIN/helm" show values "$dist/$chart-$version.tgz" | grep -qF "digest: \"$digest\"" || fail "$chart-$version.tgz: the image is not pinned to $digest"
done
log "charts: version and appVersion $version, image pinned to $digest"

for chart in configmap-attacher base-app; do
  grep -q '"bomFormat": "CycloneDX"' "$dist/$chart-$version.sbom.cdx.json" && grep -qF "sha256%3A${digest#sha256:}" "$dist/$chart-$version.sbom.cdx.json" ||
    fail "$chart-$version.sbom.cdx.json is no CycloneDX SBOM naming the image $digest"
done
provenance=$dist/configmap-attacher_$version.provenance.json
grep -qF "\"gitCommit\": \"$commit\"" "$provenance" && [[ $(grep -c '"args": \[' "$provenance") == 4 ]] ||
  fail "$provenance does not name commit $commit with the four go builds"
log "charts' SBOMs name the image; the provenance names commit $commit and the four go builds"

diff -r "$dist" "$WORK/second/configmap-attacher/dist" >/dev/null || fail "the second build differs: $(diff -rq "$dist" "$WORK/second/configmap-attacher/dist" | head -5)"
log "the second build is byte-identical ($(cd "$dist" && du -sh . | cut -f1) in dist/)"
(cd "$dist" && LC_ALL=C ls -l | awk 'NR > 1 { printf "  %12d  %s\n", $5, $9 }')
