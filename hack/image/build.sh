#!/usr/bin/env bash
# Builds the container image with no registry: the static binary from the local Go, then a
# FROM scratch image (hack/image/Containerfile) built by Debian's podman, saved as a docker-archive.
#
#   hack/image/build.sh          (make image)
#
# stdout gets exactly two lines, the last ones: IMAGE=<reference in podman's storage> and
# ARCHIVE=<absolute path of the docker-archive>; progress goes to stderr.
#   IMAGE    localhost/configmap-attacher:<tag>  (podman stores short names under localhost/)
#   ARCHIVE  <repo>/_output/image/configmap-attacher.tar  (`podman save --format docker-archive`:
#            loads with `podman load`, `docker load`, `ctr -n k8s.io images import`, `kind load
#            image-archive`; its RepoTags entry is the IMAGE reference)
#
# Environment (all optional):
#   VERSION       stamped into the binary and the image label; default: git describe, as the Makefile
#   LDFLAGS       go build -ldflags; default: the Makefile's (-s -w and the version stamp)
#   IMAGE_TAG     default: VERSION with characters a tag cannot hold turned into '-'
#   PODMAN_FLAGS  podman's global flags; default: --runtime runc --cgroup-manager cgroupfs (crun and
#                 the systemd cgroup manager fail on this project's machines: cgroup v1, no systemd)
#
# Why not the Dockerfile: its golang and distroless base images come from registries the project's
# machines cannot reach. Both produce the same contract (see the Containerfile's header).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$ROOT/_output/image
CONTEXT=$OUT/context
ARCHIVE=$OUT/configmap-attacher.tar

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[image] ERROR: %s\n' "$*" >&2; exit 1; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
command -v podman >/dev/null ||
  die "podman is not installed (Debian: apt-get install --no-install-recommends podman runc); .ci/run installs it"

VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo devel)}
LDFLAGS=${LDFLAGS:--s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=$VERSION}
# A tag is [A-Za-z0-9_.-]{1,128} and starts with neither '.' nor '-'.
tag=${IMAGE_TAG:-$VERSION}
tag=${tag//[^A-Za-z0-9_.-]/-}
tag=${tag#[.-]}
tag=${tag:0:128}
[[ -n $tag ]] || tag=devel
REF=localhost/configmap-attacher:$tag
read -r -a podman_flags <<<"${PODMAN_FLAGS:---runtime runc --cgroup-manager cgroupfs}"

mkdir -p "$OUT"
# One build at a time (parallel e2e tests and a developer may all ask for it).
exec 9>"$OUT/.lock"
flock 9

start=$(date +%s.%N)
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT"
log "go build (CGO_ENABLED=0, version $VERSION)"
(cd "$ROOT" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "$LDFLAGS" \
  -o "$CONTEXT/configmap-attacher" ./cmd/configmap-attacher)
cp "$ROOT/hack/image/Containerfile" "$ROOT/hack/image/passwd" "$ROOT/hack/image/group" "$CONTEXT/"
built=$(date +%s.%N)

# --pull=never: FROM scratch needs nothing, and nothing may be fetched. --timestamp 0: the same
# binary gives the same image id (no pile of identical images, reproducible archives).
log "podman build $REF"
podman "${podman_flags[@]}" build --quiet --pull=never --timestamp 0 \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.title=configmap-attacher" \
  -f "$CONTEXT/Containerfile" -t "$REF" "$CONTEXT" >/dev/null
rm -f "$ARCHIVE.tmp"
podman "${podman_flags[@]}" save --quiet --format docker-archive -o "$ARCHIVE.tmp" "$REF"
mv -f "$ARCHIVE.tmp" "$ARCHIVE"
end=$(date +%s.%N)

size=$(podman "${podman_flags[@]}" image inspect --format '{{.Size}}' "$REF")
log "built $REF: image $(numfmt --to=iec "$size") ($size bytes), archive $(du -h "$ARCHIVE" | cut -f1);" \
  "go build $(secs "$start" "$built")s, podman build+save $(secs "$built" "$end")s"
echo "IMAGE=$REF"
echo "ARCHIVE=$ARCHIVE"
