#!/usr/bin/env bash
# Publishes the release in dist/ (make release): pushes, signs and attests it. The thin wrapper a
# release job runs after logging in to the registry (crane auth login / helm registry login), and what
# the e2e release story runs against a registry on 127.0.0.1.
#
#   hack/release/publish.sh
#
#   1. dist/SHA256SUMS verifies (and, when HEAD carries a vX.Y.Z tag, dist/ is that release);
#   2. the image index (its linux platforms) goes to IMAGE_REPOSITORY:<version> with crane, which must then
#      serve it at the digest the charts pin, or it stops;
#   3. the charts go to CHART_REPOSITORY with helm push: <CHART_REPOSITORY>/configmap-attacher:<version>
#      and <CHART_REPOSITORY>/base-app:<version> (Helm 3.8+ and 4 install them from there);
#   4. the Helm 4 plugin, one package per platform, is signed with an OpenPGP key (Helm's .prov, which
#      `helm plugin install` verifies) and goes to PLUGIN_REPOSITORY:<version>-<os>-<arch> as Helm 4
#      pulls plugins; each package's .prov is written next to it in dist/ (for the GitHub release);
#   5. cosign signs the image index and both charts, by digest, and attests on each the CycloneDX SBOM
#      (the image: each linux binary's; a chart: its own, naming the image it pins) and the SLSA v1
#      provenance of the build (dist/configmap-attacher_<version>.provenance.json);
#   6. on a tag, the files of dist/ become the GitHub release's assets (gh release create, when gh is
#      installed).
#
# Environment:
#   DRY_RUN            1 (the default unless HEAD carries a vX.Y.Z tag) verifies dist/ and prints the
#                      commands instead; 0 runs them, tag or not
#   IMAGE_REPOSITORY   default ghcr.io/configmap-attacher/configmap-attacher; must be the one make
#                      release pinned the charts to
#   CHART_REPOSITORY   default oci://ghcr.io/configmap-attacher/charts
#   PLUGIN_REPOSITORY  default <CHART_REPOSITORY's parent>/helm-plugins/configmap-attacher (Helm takes
#                      the plugin's name from the repository's last path element)
#   PLAIN_HTTP=1       the registry speaks plain HTTP (a loopback registry): crane --insecure, helm
#                      --plain-http, cosign --allow-http-registry
#   COSIGN_KEY         a cosign private key (cosign generate-key-pair; COSIGN_PASSWORD is its password):
#                      signs offline, nothing uploaded to a transparency log. Unset: keyless signing
#                      (the release job, .github/workflows/release.yml: a Fulcio certificate for its
#                      OIDC identity, the signatures logged in Rekor; docs/operations.md, Releases).
#                      Keyless needs an OIDC token cosign finds without a browser: GitHub Actions'
#                      (the job's `permissions: id-token: write`) or SIGSTORE_ID_TOKEN; without one it
#                      stops before pushing anything
#   HELM_PLUGIN_KEYRING, HELM_PLUGIN_KEY, HELM_PLUGIN_PASSPHRASE_FILE
#                      the OpenPGP secret keyring, key name and passphrase file that sign the Helm
#                      plugin (what `helm plugin package --sign` takes as --keyring, --key,
#                      --passphrase-file). Required on a tag; without it, an untagged publish leaves
#                      the plugin out (an unsigned plugin would need --verify=false to install).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIST=${DIST:-$ROOT/dist}
BIN=${TOOLS_OUT:-$ROOT/_output/tools}/bin
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/configmap-attacher/configmap-attacher}
CHART_REPOSITORY=${CHART_REPOSITORY:-oci://ghcr.io/configmap-attacher/charts}
CHART_REPOSITORY=${CHART_REPOSITORY%/}
PLUGIN_REPOSITORY=${PLUGIN_REPOSITORY:-${CHART_REPOSITORY%/*}/helm-plugins/configmap-attacher}
PLAIN_HTTP=${PLAIN_HTTP:-0}
NAME=configmap-attacher

log() { printf '[publish] %s\n' "$*" >&2; }
die() { printf '[publish] ERROR: %s\n' "$*" >&2; exit 1; }

tag=$(git -C "$ROOT" describe --tags --exact-match --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null || true)
# In GitHub Actions, a job started by a tag publishes that tag's release or nothing (a checkout that
# lost the tag would otherwise make this a dry run that succeeds, or publish a -dev version).
if [[ ${GITHUB_ACTIONS:-} == true && ${GITHUB_REF_TYPE:-} == tag && $tag != "${GITHUB_REF_NAME:-}" ]]; then
  die "the job runs for tag ${GITHUB_REF_NAME:-?} but HEAD carries '${tag}': check out the tag (with its history: fetch-depth: 0)"
fi
DRY_RUN=${DRY_RUN:-$([[ -n $tag ]] && echo 0 || echo 1)}
run() {
  if [[ $DRY_RUN == 1 ]]; then
    printf '[publish] would run: %s\n' "$*" >&2
  else
    "$@"
  fi
}

[[ $CHART_REPOSITORY == oci://* ]] || die "CHART_REPOSITORY=$CHART_REPOSITORY: want oci://<registry>/<path>"
[[ $PLUGIN_REPOSITORY == oci://*/$NAME ]] || die "PLUGIN_REPOSITORY=$PLUGIN_REPOSITORY: want oci://<registry>/<path>/$NAME (Helm names the plugin after the last element)"
[[ -f $DIST/SHA256SUMS ]] || die "no $DIST/SHA256SUMS: run make release first"
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "dist/SHA256SUMS does not verify"
chart=$(cd "$DIST" && ls $NAME-[0-9]*.tgz)
version=${chart#"$NAME"-}
version=${version%.tgz}
[[ -z $tag || $tag == "v$version" ]] || die "HEAD is tagged $tag but dist/ holds $version: run make release again"
digest=$("$BIN/helm" show values "$DIST/$chart" | sed -n 's/^  digest: "\(sha256:[0-9a-f]*\)"$/\1/p')
[[ -n $digest ]] || die "$chart pins no image digest"
"$BIN/helm" show values "$DIST/$chart" | grep -qx "  repository: \"$IMAGE_REPOSITORY\"" ||
  die "$chart pulls from another repository than $IMAGE_REPOSITORY: run make release with IMAGE_REPOSITORY=$IMAGE_REPOSITORY"
provenance=$DIST/${NAME}_$version.provenance.json
for f in "$provenance" "$DIST"/*-"$version".sbom.cdx.json "$DIST"/"${NAME}"_linux_*.sbom.cdx.json; do
  [[ -f $f ]] || die "no $f: run make release again"
done

plugin_key=()
if [[ -n ${HELM_PLUGIN_KEYRING:-} ]]; then
  plugin_key=(-keyring "$HELM_PLUGIN_KEYRING" -key "${HELM_PLUGIN_KEY:-}" -passphrase-file "${HELM_PLUGIN_PASSPHRASE_FILE:-}")
elif [[ -n $tag && $DRY_RUN != 1 ]]; then
  die "HELM_PLUGIN_KEYRING is not set: a release's Helm plugin must be signed (helm plugin install verifies it)"
fi

crane_flags=() helm_flags=() cosign_flags=()
if [[ $PLAIN_HTTP == 1 ]]; then
  crane_flags=(--insecure) helm_flags=(--plain-http) cosign_flags=(--allow-http-registry --allow-insecure-registry)
fi
# With a key: offline, as `cosign sign --key` does without a Sigstore instance (no signing config from
# TUF, nothing uploaded to Rekor; verify then with --insecure-ignore-tlog). Without: keyless, the
# public-good Fulcio and Rekor named by the TUF signing config, the OIDC identity of the job.
if [[ -n ${COSIGN_KEY:-} ]]; then
  [[ -f $COSIGN_KEY ]] || die "COSIGN_KEY=$COSIGN_KEY is no file"
  cosign_flags+=(--key "$COSIGN_KEY" --use-signing-config=false --tlog-upload=false)
  signing="cosign key $COSIGN_KEY, no transparency log"
else
  # cosign's keyless providers that need no browser: GitHub Actions' OIDC token (the two variables
  # the runner sets only with `permissions: id-token: write`) or SIGSTORE_ID_TOKEN. Without one,
  # cosign would start an interactive login that a job cannot finish, after the pushes.
  if [[ $DRY_RUN != 1 && -z ${SIGSTORE_ID_TOKEN:-} && ( -z ${ACTIONS_ID_TOKEN_REQUEST_URL:-} || -z ${ACTIONS_ID_TOKEN_REQUEST_TOKEN:-} ) ]]; then
    die "keyless signing needs an OIDC token: run in the release job (GitHub Actions, permissions: id-token: write), set SIGSTORE_ID_TOKEN, or sign with COSIGN_KEY"
  fi
  signing="cosign keyless (Fulcio, Rekor)"
fi
# The release job makes the GitHub release: know before the first push that it can.
if [[ ${GITHUB_ACTIONS:-} == true && -n $tag && $DRY_RUN != 1 ]] && ! command -v gh >/dev/null; then
  die "gh is not installed: the release job could not make the GitHub release $tag"
fi
log "release $version (tag ${tag:-none}), image $IMAGE_REPOSITORY@$digest; $signing$([[ $DRY_RUN == 1 ]] && echo '; dry run')"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The image: crane pushes the layout's one entry, the image index with its platforms (not with
# --index, which would push the layout's own index.json wrapping it), then we check the registry
# serves it under the digest the charts pin.
mkdir "$WORK/image"
tar -xf "$DIST/${NAME}_${version}_oci-image.tar" -C "$WORK/image"
run "$BIN/crane" push "${crane_flags[@]}" "$WORK/image" "$IMAGE_REPOSITORY:$version" >/dev/null
if [[ $DRY_RUN != 1 ]]; then
  got=$("$BIN/crane" digest "${crane_flags[@]}" "$IMAGE_REPOSITORY:$version")
  [[ $got == "$digest" ]] || die "the registry has $IMAGE_REPOSITORY:$version at $got, the charts pin $digest"
  log "pushed $IMAGE_REPOSITORY:$version ($digest)"
fi

# The charts: helm push names the repository after the chart; its digest is what gets signed.
declare -A chart_digest=()
for c in configmap-attacher base-app; do
  chart_digest[$c]="<digest of $c:$version>"
  [[ $DRY_RUN == 1 ]] && { run "$BIN/helm" push "$DIST/$c-$version.tgz" "$CHART_REPOSITORY" "${helm_flags[@]}"; continue; }
  out=$("$BIN/helm" push "$DIST/$c-$version.tgz" "$CHART_REPOSITORY" "${helm_flags[@]}" 2>&1) || die "helm push $c: $out"
  d=$(sed -n 's/^Digest: \(sha256:[0-9a-f]\{64\}\)$/\1/p' <<<"$out")
  got=$("$BIN/crane" digest "${crane_flags[@]}" "${CHART_REPOSITORY#oci://}/$c:$version")
  [[ -n $d && $got == "$d" ]] || die "helm push $c said digest '$d', the registry serves ${CHART_REPOSITORY#oci://}/$c:$version at $got:\n$out"
  chart_digest[$c]=$d
  log "pushed $CHART_REPOSITORY/$c:$version ($d)"
done

# The Helm 4 plugin: each package's .prov (written beside it in dist/) signs it under the name Helm
# checks, <plugin>-<version>.tgz: Helm installs from a registry under that name, and from a file only
# if the file has that name (it takes the plugin's directory from it); then the package and its .prov
# as Helm's plugin artifact.
for p in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${p%/*} arch=${p#*/}
  pkg=$DIST/${NAME}-helm-plugin_${version}_${os}_${arch}.tgz
  [[ -f $pkg ]] || continue
  if ((${#plugin_key[@]} == 0)); then
    log "HELM_PLUGIN_KEYRING is not set: the Helm plugin is not published (it must be signed)"
    break
  fi
  run "$BIN/release-tool" sign-helm-plugin -in "$pkg" -name "$NAME-$version.tgz" -out "$pkg.prov" "${plugin_key[@]}"
  run "$BIN/release-tool" helm-plugin-artifact -tgz "$pkg" -prov "$pkg.prov" -out "$WORK/plugin-$os-$arch"
  run "$BIN/crane" push "${crane_flags[@]}" "$WORK/plugin-$os-$arch" "${PLUGIN_REPOSITORY#oci://}:$version-$os-$arch" >/dev/null
  [[ $DRY_RUN == 1 ]] || log "pushed $PLUGIN_REPOSITORY:$version-$os-$arch, signed ($(basename "$pkg").prov)"
done

# Signatures and attestations, by digest (a tag can move; a digest cannot).
image_ref=$IMAGE_REPOSITORY@$digest
run "$BIN/cosign" sign --yes "${cosign_flags[@]}" "$image_ref"
attested=()
for sbom in "$DIST"/"${NAME}"_linux_*.sbom.cdx.json; do
  run "$BIN/cosign" attest --yes "${cosign_flags[@]}" --type cyclonedx --predicate "$sbom" "$image_ref"
  attested+=("$(basename "$sbom" .sbom.cdx.json)")
done
run "$BIN/cosign" attest --yes "${cosign_flags[@]}" --type slsaprovenance1 --predicate "$provenance" "$image_ref"
[[ $DRY_RUN == 1 ]] || log "signed $image_ref; attested its SBOMs (${attested[*]}) and provenance"
for c in configmap-attacher base-app; do
  ref=${CHART_REPOSITORY#oci://}/$c@${chart_digest[$c]}
  run "$BIN/cosign" sign --yes "${cosign_flags[@]}" "$ref"
  run "$BIN/cosign" attest --yes "${cosign_flags[@]}" --type cyclonedx --predicate "$DIST/$c-$version.sbom.cdx.json" "$ref"
  run "$BIN/cosign" attest --yes "${cosign_flags[@]}" --type slsaprovenance1 --predicate "$provenance" "$ref"
  [[ $DRY_RUN == 1 ]] || log "signed $ref; attested its SBOM and provenance"
done

if [[ -z $tag ]]; then
  log "no tag on HEAD: no GitHub release"
elif command -v gh >/dev/null; then
  # --verify-tag: the release is made for the tag pushed, never a new tag gh would create.
  run gh release create "v$version" --verify-tag --title "v$version" --notes-file <(sed -n "/^## \[$version\]/,/^## \[/p" "$ROOT/CHANGELOG.md" | sed '$d') "$DIST"/*
else
  log "gh is not installed: upload the files of $DIST to the GitHub release v$version by hand"
fi
log "done"
