#!/usr/bin/env bash
# Builds a release into dist/ (make release), offline but for Go modules, from the checked-out commit:
#
#   configmap-attacher_<os>_<arch>                 the binary: linux/darwin, amd64/arm64
#   configmap-attacher_<os>_<arch>.sbom.cdx.json   its CycloneDX SBOM (the modules linked into it)
#   configmap-attacher_<version>_oci-image.tar     the image for linux/amd64 and linux/arm64: an OCI
#                                                  layout (index.json) in a tar, FROM scratch
#   configmap-attacher-<version>.tgz               the controller chart, image pinned by digest
#   base-app-<version>.tgz                         the example application chart, its Job's image too
#   <chart>-<version>.sbom.cdx.json                each chart's CycloneDX SBOM: the chart and the image
#                                                  it pins
#   configmap-attacher_<version>.provenance.json   the SLSA v1 provenance predicate of the whole build:
#                                                  source commit, each `go build` exactly as it ran,
#                                                  the modules linked (publish.sh attests it)
#   configmap-attacher-dashboard.json              the Grafana dashboard (also in the chart)
#   SHA256SUMS                                     sha256sum -c of everything above, run in dist/
#
# Reproducible: the same commit gives the same bytes on any machine with the same Go (-trimpath, the
# commit's time for every timestamp, no random serials); hack/release/check.sh proves it on a clean
# clone. The version comes from hack/release/version.sh (RELEASE_VERSION, a vX.Y.Z tag on HEAD, or
# CHANGELOG.md's coming release as a pre-release). hack/release/publish.sh pushes a release.
#
# Environment: RELEASE_VERSION, DIST (default <repo>/dist), IMAGE_REPOSITORY (default
# ghcr.io/configmap-attacher/configmap-attacher: the repository the charts pull from), BUILDER_ID (the
# provenance's builder: the release job's workflow URI; default urn:configmap-attacher:builder:local),
# RELEASE_PLATFORMS (default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64": a release has them
# all; the e2e release story asks for linux/amd64 alone, the one its node runs, since each other
# platform is a cold compile of everything; the image holds the linux ones), TOOLS_OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIST=${DIST:-$ROOT/dist}
BIN=${TOOLS_OUT:-$ROOT/_output/tools}/bin
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/configmap-attacher/configmap-attacher}
BUILDER_ID=${BUILDER_ID:-urn:configmap-attacher:builder:local}
NAME=configmap-attacher

log() { printf '[release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[release] ERROR: %s\n' "$*" >&2; exit 1; }
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

read -r -a PLATFORMS <<<"${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
IMAGE_PLATFORMS=()
for p in "${PLATFORMS[@]}"; do
  case $p in
    linux/amd64 | linux/arm64) IMAGE_PLATFORMS+=("$p") ;;
    darwin/amd64 | darwin/arm64) ;;
    *) die "RELEASE_PLATFORMS: unknown platform $p (linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)" ;;
  esac
done
((${#IMAGE_PLATFORMS[@]})) || die "RELEASE_PLATFORMS=${RELEASE_PLATFORMS:-}: the image needs linux/amd64 or linux/arm64"

VERSION=$("$ROOT/hack/release/version.sh")
# Every timestamp is the commit's: the binaries' VCS stamp, the image's creation and file times.
SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct)
export SOURCE_DATE_EPOCH
log "version $VERSION, commit $(git -C "$ROOT" rev-parse --short HEAD) of $(date -u -d "@$SOURCE_DATE_EPOCH" +%FT%TZ)"

# helm packages the charts; release-tool, cyclonedx-gomod, crane and cosign are the release tools
# (hack/tools/release; publish.sh pushes with crane and signs with cosign).
"$ROOT/hack/tools/build.sh" helm release >&2
# shellcheck source=../tools/versions.env
source "$ROOT/hack/tools/versions.env"

rm -rf "$DIST"
mkdir -p "$DIST"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# binaries: static, -trimpath, no DWARF (linked with -w, so none is compiled either: make test's
# settings, whose compiled packages a release then reuses), the version stamped; the commit and its
# time recorded by Go's VCS stamp (go version -m), which the SBOM and the provenance read too. Each `go build` is recorded
# word for word for the provenance (-o as the file's name in dist/: it runs from the source root).
ldflags="-s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=$VERSION"
mkdir -p "$WORK/invocations"
for p in "${PLATFORMS[@]}"; do
  os=${p%/*} arch=${p#*/}
  out=$DIST/${NAME}_${os}_${arch}
  env=(CGO_ENABLED=0 "GOOS=$os" "GOARCH=$arch" GOFLAGS=-buildvcs=true)
  build=(go build -trimpath -gcflags=all=-dwarf=false -ldflags "$ldflags")
  log "go build $p"
  (cd "$ROOT" && env "${env[@]}" "${build[@]}" -o "$out" ./cmd/configmap-attacher)
  printf '%s\0' "${env[@]}" "${build[@]}" -o "${out##*/}" ./cmd/configmap-attacher >"$WORK/invocations/$os-$arch"
  # The SBOM of the modules linked into that binary (go version -m), without the serial number and
  # timestamp that would make two builds differ.
  "$BIN/cyclonedx-gomod" bin -json -noserial -notimestamp -version "v$VERSION" -output "$out.sbom.cdx.json" "$out"
done

# The image, from the linux binaries above (the same bytes), and its digest for the charts.
img_args=()
for p in "${IMAGE_PLATFORMS[@]}"; do
  img_args+=(-binary "$p=$DIST/${NAME}_${p%/*}_${p#*/}")
done
image=$DIST/${NAME}_${VERSION}_oci-image.tar
log "image ${IMAGE_PLATFORMS[*]}"
digest=$("$BIN/release-tool" oci-image -out "$image" -version "$VERSION" -source-date-epoch "$SOURCE_DATE_EPOCH" \
  -etc "$ROOT/hack/image" "${img_args[@]}" | sed -n 's/^DIGEST=//p')
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "release-tool oci-image printed no digest"

# set_value replaces the one line `<indent><key>: ...` that must exist in a values file.
set_value() {
  local file=$1 line=$2 value=$3
  grep -qxF "$line" "$file" || die "$file: no line '$line' to set"
  sed -i "s|^${line}\$|${line%%:*}: \"$value\"|" "$file"
}

# Charts: version and appVersion are the release's, the image is pinned by the index digest (the tag
# stays, to name the version). helm package works alike on Helm 3 and 4.
cp -R "$ROOT/charts" "$WORK/charts"
set_value "$WORK/charts/configmap-attacher/values.yaml" '  repository: ghcr.io/configmap-attacher/configmap-attacher' "$IMAGE_REPOSITORY"
set_value "$WORK/charts/configmap-attacher/values.yaml" '  tag: ""' "$VERSION"
set_value "$WORK/charts/configmap-attacher/values.yaml" '  digest: ""' "$digest"
set_value "$WORK/charts/base-app/values.yaml" '    repository: ghcr.io/configmap-attacher/configmap-attacher' "$IMAGE_REPOSITORY"
set_value "$WORK/charts/base-app/values.yaml" '    tag: "0.1.0"' "$VERSION"
set_value "$WORK/charts/base-app/values.yaml" '    digest: ""' "$digest"
for chart in configmap-attacher base-app; do
  log "helm package $chart"
  "$BIN/helm" package "$WORK/charts/$chart" --version "$VERSION" --app-version "$VERSION" -d "$WORK/packaged" >&2
  # Helm stamps the current time on the archive's entries: rewrite them at the commit's time.
  "$BIN/release-tool" retime-tgz -in "$WORK/packaged/$chart-$VERSION.tgz" -source-date-epoch "$SOURCE_DATE_EPOCH" \
    -out "$DIST/$chart-$VERSION.tgz"
done
# The packaged chart renders the pinned image.
"$BIN/helm" template "$NAME" "$DIST/$NAME-$VERSION.tgz" --kube-version 1.36.0 | grep -qF "image: $IMAGE_REPOSITORY@$digest" ||
  die "the packaged chart does not render image $IMAGE_REPOSITORY@$digest"
for chart in configmap-attacher base-app; do
  "$BIN/release-tool" chart-sbom -chart "$DIST/$chart-$VERSION.tgz" -name "$chart" -version "$VERSION" \
    -image "$IMAGE_REPOSITORY@$digest" -out "$DIST/$chart-$VERSION.sbom.cdx.json"
done

# The provenance of everything above: what was built, from which commit, by which commands.
invocations=()
for f in "$WORK"/invocations/*; do invocations+=(-invocation "$f"); done
"$BIN/release-tool" provenance -dist "$DIST" "${invocations[@]}" -version "$VERSION" -image-repository "$IMAGE_REPOSITORY" \
  -commit "$(git -C "$ROOT" rev-parse HEAD)" -modified="$([[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no) ]] && echo true || echo false)" \
  -builder-id "$BUILDER_ID" -source-date-epoch "$SOURCE_DATE_EPOCH" \
  -tool-versions "helm=$HELM_VERSION,cyclonedx-gomod=$CYCLONEDX_GOMOD_VERSION,go-containerregistry=$GO_CONTAINERREGISTRY_VERSION" \
  -out "$DIST/${NAME}_$VERSION.provenance.json"

cp "$ROOT/charts/configmap-attacher/files/dashboard.json" "$DIST/$NAME-dashboard.json"

# The Helm 4 post-renderer plugin, per platform, when the tree has it (deploy/helm-plugin): one
# package per binary above. hack/helm-plugin must be told the version: it cannot run a binary built
# for another platform to ask it.
if [[ -d $ROOT/deploy/helm-plugin ]]; then
  for p in "${PLATFORMS[@]}"; do
    os=${p%/*} arch=${p#*/}
    log "helm plugin $p"
    pkg=$(cd "$ROOT" && go run ./hack/helm-plugin -plugin deploy/helm-plugin -binary "$DIST/${NAME}_${os}_${arch}" \
      -version "$VERSION" -out "$WORK/plugin-$os-$arch")
    mv "$pkg" "$DIST/${NAME}-helm-plugin_${VERSION}_${os}_${arch}.tgz"
  done
fi

(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
log "dist/ ($VERSION, image $digest):"
(cd "$DIST" && LC_ALL=C ls -l | awk 'NR > 1 { printf "  %12d  %s\n", $5, $9 }') >&2
echo "VERSION=$VERSION"
echo "DIGEST=$digest"
