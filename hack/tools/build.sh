#!/usr/bin/env bash
# Builds the local control plane and tools from pinned Go modules into _output/tools/bin.
#
#   hack/tools/build.sh [tool|binary ...]      (no argument: every tool)
#
# Tools (one Go module each under hack/tools/<tool>, versions in hack/tools/versions.env):
#   kubernetes         kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet
#   etcd               etcd
#   kwok               kwok kwokctl
#   argo-rollouts      rollouts-controller kubectl-argo-rollouts (+ CRDs in _output/tools/crds/argo-rollouts)
#   helm               helm (Helm 4)
#   helm3              helm3 (Helm 3)
#   argo-cd            argocd, and argocd-* names linked to it (+ CRDs in _output/tools/crds/argo-cd)
#   helm-argocd        helm-argocd (the Helm Argo CD ships; its repo server and plugins run it as helm)
#   flux               source-controller helm-controller (+ CRDs in _output/tools/crds/flux)
#   prometheus         promtool (make test-rules)
#   pulumi             pulumi pulumi-language-yaml pulumi-resource-kubernetes (the Pulumi stories)
#   actionlint         actionlint (make test-workflows: lints .github/workflows)
#   helm-docs          helm-docs (make test-docs: the charts' READMEs from their values.yaml)
# Built only when named (not part of `make tools`: what one step needs, it builds):
#   kubernetes-compat  k8s-<minor>/bin/kube-apiserver, kube-controller-manager, kube-scheduler (the
#                      compatibility control plane, KUBERNETES_COMPAT_VERSION: make test-e2e builds it
#                      before its compatibility story, hack/cluster/up.sh when KUBERNETES_COMPAT is set)
#   etcd-compat        k8s-<minor>/bin/etcd (the etcd that version requires; built with kubernetes-compat)
#   peers          configmap-attacher-original configmap-rs-operator reloader (test/bench's peers)
#   release        cyclonedx-gomod release-tool crane cosign (make release builds it; publish.sh pushes
#                  with crane and signs with cosign; the e2e release story runs crane's registry)
# A binary name selects its tool (e.g. `build.sh kubectl`).
#
# A tool is rebuilt only when one of its inputs changed: its versions.env entries, its module files
# (go.mod, go.sum, *.go and */*.go; */go.mod and */go.sum for a tool of several modules), the Go
# toolchain, or its build function below. The hash of those inputs is kept in
# _output/tools/stamps/<tool>; a warm run only hashes files. Set TOOLS_FORCE=1 to rebuild.
#
# Environment: TOOLS_OUT (default <repo>/_output/tools), TOOLS_FORCE, and the usual Go variables
# (GOMODCACHE, GOCACHE, GOPROXY). Progress goes to stdout; any failure exits non-zero.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS_SRC=$ROOT/hack/tools
OUT=${TOOLS_OUT:-$ROOT/_output/tools}
BIN=$OUT/bin
STAMPS=$OUT/stamps
# shellcheck source=versions.env
source "$TOOLS_SRC/versions.env"

# Tool modules are standalone: never let a go.work or the main module's settings leak in, never
# need cgo (static binaries, no C toolchain on CI), never rewrite go.mod during a build. Every tool is
# linked without DWARF (-w), so the compiler makes none either (-dwarf=false): about 6% of a cold
# build's CPU.
NO_DWARF=-gcflags=all=-dwarf=false
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false $NO_DWARF"
# Tools that a few stories run, waiting on their cluster there (Pulumi; the compatibility control
# plane), are compiled without inlining as well: the same behaviour, a slower program, and 13% less
# CPU for a cold build (Helm 4 measured: 211 CPU-seconds, 183 without inlining).
NO_INLINE=(-gcflags "all=-dwarf=false -l")
if ! command -v go >/dev/null; then
  export PATH=/usr/local/go/bin:$PATH
fi

# Longest build first (a cold build on 2 cores: pulumi ~15 min, kubernetes ~10, argo-cd and flux ~6, ...),
# so that the builds run at once (build_all) end together.
ALL_TOOLS=(pulumi kubernetes argo-cd flux argo-rollouts helm kwok prometheus helm-argocd helm3 etcd actionlint helm-docs)
# Built only when named on the command line.
OPTIONAL_TOOLS=(kubernetes-compat etcd-compat peers release)

# The compatibility control plane's directory under $OUT, named for its minor (k8s-1.35).
COMPAT_DIR=k8s-$(cut -d. -f1,2 <<<"${KUBERNETES_COMPAT_VERSION#v}")

# binaries_<tool> list what a tool installs (a bare name is in $BIN, a path with a slash is under
# $OUT); vars_<tool> the versions.env keys it depends on; src_<tool>, when set, the tool directory
# whose *.go it builds (read through namerefs, hence invisible to shellcheck).
# shellcheck disable=SC2034
{
  binaries_kubernetes=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
  vars_kubernetes=(KUBERNETES_VERSION KUBERNETES_STAGING_VERSION)
  binaries_etcd=(etcd)
  vars_etcd=(ETCD_VERSION)
  # Only what a cluster needs: kwok fakes the nodes (no kubelet), our kubectl talks to it.
  binaries_kubernetes_compat=("$COMPAT_DIR/bin/kube-apiserver" "$COMPAT_DIR/bin/kube-controller-manager" "$COMPAT_DIR/bin/kube-scheduler")
  vars_kubernetes_compat=(KUBERNETES_COMPAT_VERSION KUBERNETES_COMPAT_STAGING_VERSION)
  binaries_etcd_compat=("$COMPAT_DIR/bin/etcd")
  vars_etcd_compat=(ETCD_COMPAT_VERSION)
  src_etcd_compat=etcd
  binaries_kwok=(kwok kwokctl)
  vars_kwok=(KWOK_VERSION KUBERNETES_VERSION)
  binaries_argo_rollouts=(rollouts-controller kubectl-argo-rollouts)
  vars_argo_rollouts=(ARGO_ROLLOUTS_VERSION ARGO_ROLLOUTS_GOTOOLCHAIN)
  binaries_helm=(helm)
  vars_helm=(HELM_VERSION)
  binaries_helm3=(helm3)
  vars_helm3=(HELM3_VERSION)
  binaries_helm_argocd=(helm-argocd)
  vars_helm_argocd=(ARGOCD_HELM_VERSION)
  # argocd is multi-call (it dispatches on its executable name): the argocd-* are symlinks to it.
  # The repo server runs git-verify-wrapper.sh on every Git checkout (gpg-wrapper.sh with GPG on).
  binaries_argo_cd=(argocd argocd-application-controller argocd-repo-server argocd-cmp-server
    argocd-server argocd-commit-server argocd-applicationset-controller argocd-notifications
    argocd-git-ask-pass argocd-k8s-auth git-verify-wrapper.sh gpg-wrapper.sh)
  vars_argo_cd=(ARGOCD_VERSION ARGOCD_GITOPS_ENGINE_VERSION)
  binaries_flux=(source-controller helm-controller)
  vars_flux=(FLUX_VERSION FLUX_SOURCE_CONTROLLER_VERSION FLUX_HELM_CONTROLLER_VERSION)
  binaries_prometheus=(promtool)
  vars_prometheus=(PROMETHEUS_VERSION)
  binaries_pulumi=(pulumi pulumi-language-yaml pulumi-resource-kubernetes)
  vars_pulumi=(PULUMI_VERSION PULUMI_YAML_VERSION PULUMI_KUBERNETES_VERSION PULUMI_KUBERNETES_RELEASE PULUMI_KUBERNETES_SDK_VERSION)
  binaries_actionlint=(actionlint)
  vars_actionlint=(ACTIONLINT_VERSION)
  binaries_helm_docs=(helm-docs)
  vars_helm_docs=(HELM_DOCS_VERSION)
  binaries_release=(cyclonedx-gomod release-tool crane cosign)
  vars_release=(CYCLONEDX_GOMOD_VERSION GO_CONTAINERREGISTRY_VERSION HELM_VERSION COSIGN_VERSION)
  binaries_peers=(configmap-attacher-original configmap-rs-operator reloader)
  vars_peers=(ORIGINAL_ATTACHER_COMMIT CONFIGMAP_RS_OPERATOR_COMMIT RELOADER_VERSION RELOADER_COMMIT)
}

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }

# ident turns a tool name into the suffix of its variables/functions (argo-rollouts -> argo_rollouts).
ident() { printf '%s' "${1//-/_}"; }

# tool_binaries prints a tool's binaries, one per line.
tool_binaries() {
  # shellcheck disable=SC2155
  local -n _bins="binaries_$(ident "$1")"
  printf '%s\n' "${_bins[@]}"
}

# bin_path prints where a binary of tool_binaries is installed.
bin_path() {
  if [[ $1 == */* ]]; then
    echo "$OUT/$1"
  else
    echo "$BIN/$1"
  fi
}

# resolve_tool maps a tool or binary name to its tool.
resolve_tool() {
  local t b
  for t in "${ALL_TOOLS[@]}" "${OPTIONAL_TOOLS[@]}"; do
    [[ $1 == "$t" ]] && { echo "$t"; return; }
    while read -r b; do
      [[ $1 == "$b" ]] && { echo "$t"; return; }
    done < <(tool_binaries "$t")
  done
  die "unknown tool or binary '$1' (tools: ${ALL_TOOLS[*]} ${OPTIONAL_TOOLS[*]})"
}

# go_for runs go with the toolchain a tool module needs (only argo-rollouts differs).
go_for() {
  local tool=$1; shift
  if [[ $tool == argo-rollouts ]]; then
    GOTOOLCHAIN=$ARGO_ROLLOUTS_GOTOOLCHAIN go "$@"
  else
    GOTOOLCHAIN=local go "$@"
  fi
}

# inputs_hash hashes everything that decides a tool's binaries.
inputs_hash() {
  local tool=$1 id v f src
  id=$(ident "$tool")
  local -n _vars="vars_$id"
  src="src_$id"
  src=${!src:-$tool}
  {
    echo "tool=$tool"
    for v in "${_vars[@]}"; do echo "$v=${!v}"; done
    (cd "$TOOLS_SRC/$tool" && go_for "$tool" env GOVERSION GOOS GOARCH)
    declare -f "build_$id"
    for f in "$TOOLS_SRC/$tool"/go.mod "$TOOLS_SRC/$tool"/go.sum "$TOOLS_SRC/$tool"/*/go.mod "$TOOLS_SRC/$tool"/*/go.sum \
      "$TOOLS_SRC/$src"/*.go "$TOOLS_SRC/$tool"/*/*.go; do
      [[ -f $f ]] || continue
      echo "file=${f#"$ROOT"/}"
      cat "$f"
    done
  } | sha256sum | cut -d' ' -f1
}

# check_pin fails when a tool module requires another version than versions.env pins, so the
# two can never silently drift apart.
check_pin() {
  local tool=$1 module=$2 want=$3 got
  got=$(cd "$TOOLS_SRC/$tool" && go_for "$tool" list -m -f '{{.Version}}' "$module")
  [[ $got == "$want" ]] || die "hack/tools/$tool/go.mod requires $module $got but versions.env pins $want; run: hack/tools/update-modules.sh $tool"
}

# module_dir prints where a dependency module was extracted (downloading it if needed).
module_dir() {
  local tool=$1 module=$2
  (cd "$TOOLS_SRC/$tool" && go_for "$tool" mod download "$module" && go_for "$tool" list -m -f '{{.Dir}}' "$module")
}

# k8s_version_ldflags stamps the version the way Kubernetes' own build does (hack/lib/version.sh),
# so `kubectl version`, /version and version-skew checks see v1.x.y instead of v0.0.0-master.
k8s_version_ldflags() {
  local v=$1 minor pkg kv=""
  minor=$(cut -d. -f2 <<<"$v")
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kv+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  printf '%s' "$kv"
}

# go_build builds packages of a tool module into $BIN. Arguments after the tool are passed to go build.
go_build() {
  local tool=$1; shift
  (cd "$TOOLS_SRC/$tool" && go_for "$tool" build -trimpath -o "$BIN/" "$@")
}

# k8s_build builds the given cmd/ binaries of a Kubernetes tool module into a directory.
k8s_build() {
  local tool=$1 version=$2 staging=$3 dir=$4 b pkgs=()
  shift 4
  check_pin "$tool" k8s.io/kubernetes "$version"
  check_pin "$tool" k8s.io/api "$staging"
  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  mkdir -p "$dir"
  (cd "$TOOLS_SRC/$tool" && go_for "$tool" build -trimpath -o "$dir/" -ldflags "-s -w $(k8s_version_ldflags "$version")" \
    "${K8S_GCFLAGS[@]}" "${pkgs[@]}")
}

build_kubernetes() {
  local K8S_GCFLAGS=()
  k8s_build kubernetes "$KUBERNETES_VERSION" "$KUBERNETES_STAGING_VERSION" "$BIN" \
    kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet
}

# Its one story only starts it.
build_kubernetes_compat() {
  local K8S_GCFLAGS=("${NO_INLINE[@]}")
  k8s_build kubernetes-compat "$KUBERNETES_COMPAT_VERSION" "$KUBERNETES_COMPAT_STAGING_VERSION" "$OUT/$COMPAT_DIR/bin" \
    kube-apiserver kube-controller-manager kube-scheduler
}

build_etcd() {
  check_pin etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  go_build etcd -ldflags "-s -w" .
}

# The same main.go as etcd's, with the compat module's go.mod.
build_etcd_compat() {
  check_pin etcd-compat go.etcd.io/etcd/server/v3 "$ETCD_COMPAT_VERSION"
  mkdir -p "$OUT/$COMPAT_DIR/bin"
  (cd "$TOOLS_SRC/etcd" && GOTOOLCHAIN=local go build -modfile ../etcd-compat/go.mod -trimpath "${NO_INLINE[@]}" -ldflags "-s -w" -o "$OUT/$COMPAT_DIR/bin/etcd" .)
}

build_kwok() {
  check_pin kwok sigs.k8s.io/kwok "$KWOK_VERSION"
  # kwokctl's defaults (kube version, kwok version) follow these; the binaries themselves are
  # always passed explicitly by hack/cluster/up.sh so nothing is downloaded.
  go_build kwok -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}" \
    sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
}

build_argo_rollouts() {
  local mod=github.com/argoproj/argo-rollouts dir ldflags
  check_pin argo-rollouts "$mod" "$ARGO_ROLLOUTS_VERSION"
  ldflags="-s -w -X $mod/utils/version.version=${ARGO_ROLLOUTS_VERSION#v}"
  go_build argo-rollouts -ldflags "$ldflags" "$mod/cmd/rollouts-controller"

  dir=$(module_dir argo-rollouts "$mod")
  rm -rf "$OUT/crds/argo-rollouts"
  mkdir -p "$OUT/crds/argo-rollouts"
  cp "$dir"/manifests/crds/*-crd.yaml "$OUT/crds/argo-rollouts/"
  chmod u+w "$OUT"/crds/argo-rollouts/*.yaml

  # The kubectl plugin embeds the dashboard's built web UI (server/static/*), which the module zip
  # does not ship (it is built from ui/ by yarn), and the module cache is read-only (go's
  # -overlay refuses files in it). So it builds from a scratch copy of the module that has a
  # placeholder page, through a copy of our go.mod (-modfile) replacing the module by that copy.
  # Everything but `dashboard` (get, promote, abort, set image, ...) is unaffected.
  local src=$OUT/src/argo-rollouts modfile=$OUT/src/argo-rollouts.mod
  rm -rf "$src"
  mkdir -p "$src"
  cp -R "$dir"/. "$src"/
  chmod -R u+w "$src"
  rm -rf "$src"/docs "$src"/ui "$src"/test "$src"/examples
  mkdir -p "$src/server/static"
  echo '<html><body>The Argo Rollouts dashboard UI is not included in this build.</body></html>' >"$src/server/static/index.html"
  cp "$TOOLS_SRC/argo-rollouts/go.mod" "$modfile"
  cp "$TOOLS_SRC/argo-rollouts/go.sum" "${modfile%.mod}.sum"
  printf '\nreplace %s => %s\n' "$mod" "$src" >>"$modfile"
  go_build argo-rollouts -modfile "$modfile" -ldflags "$ldflags" "$mod/cmd/kubectl-argo-rollouts"
}

# helm_build builds cmd/helm of a Helm tool module as $BIN/<name>, with the version ldflags of Helm's
# Makefile (Helm 3's also fix the Kubernetes version `helm template` assumes, .Capabilities.KubeVersion,
# from the client-go it is built with; Helm 4 reads that from its build info).
helm_build() {
  local tool=$1 mod=$2 version=$3 name=$4 client_go minor ldflags
  check_pin "$tool" "$mod" "$version"
  ldflags="-s -w -X $mod/internal/version.version=$version -X $mod/internal/version.gitTreeState=clean"
  if [[ $mod == helm.sh/helm/v3 ]]; then
    client_go=$(cd "$TOOLS_SRC/$tool" && go_for "$tool" list -m -f '{{.Version}}' k8s.io/client-go)
    minor=$(cut -d. -f2 <<<"$client_go")
    ldflags+=" -X $mod/pkg/lint/rules.k8sVersionMajor=1 -X $mod/pkg/lint/rules.k8sVersionMinor=$minor"
    ldflags+=" -X $mod/pkg/chartutil.k8sVersionMajor=1 -X $mod/pkg/chartutil.k8sVersionMinor=$minor"
  fi
  (cd "$TOOLS_SRC/$tool" && go_for "$tool" build -trimpath -ldflags "$ldflags" -o "$BIN/$name" "$mod/cmd/helm")
}

build_helm() { helm_build helm helm.sh/helm/v4 "$HELM_VERSION" helm; }

build_helm3() { helm_build helm3 helm.sh/helm/v3 "$HELM3_VERSION" helm3; }

build_helm_argocd() { helm_build helm-argocd helm.sh/helm/v4 "$ARGOCD_HELM_VERSION" helm-argocd; }

build_argo_cd() {
  local mod=github.com/argoproj/argo-cd/v3 engine=github.com/argoproj/argo-cd/gitops-engine
  local pkg=github.com/argoproj/argo-cd/v3/common dir client_go got b ldflags
  check_pin argo-cd "$mod" "$ARGOCD_VERSION"
  got=$(cd "$TOOLS_SRC/argo-cd" && go_for argo-cd list -m -f '{{with .Replace}}{{.Version}}{{end}}' "$engine")
  [[ $got == "$ARGOCD_GITOPS_ENGINE_VERSION" ]] || die "hack/tools/argo-cd/go.mod replaces $engine by version '$got' but versions.env pins $ARGOCD_GITOPS_ENGINE_VERSION; run: hack/tools/update-modules.sh argo-cd"
  # Argo CD's Makefile stamps these (its release also sets gitCommit, which the module zip does not
  # record, so `argocd version` says v3.x.y+unknown).
  client_go=$(cd "$TOOLS_SRC/argo-cd" && go_for argo-cd list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/client-go)
  ldflags="-s -w -X $pkg.version=${ARGOCD_VERSION#v} -X $pkg.gitTag=$ARGOCD_VERSION -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.kubectlVersion=$client_go -X $pkg.extraBuildInfo=gitops-engine@$ARGOCD_GITOPS_ENGINE_VERSION"
  # One binary (cmd/main.go picks the component from its executable name), like the upstream image.
  (cd "$TOOLS_SRC/argo-cd" && go_for argo-cd build -trimpath -ldflags "$ldflags" -o "$BIN/argocd" "$mod/cmd")
  for b in $(tool_binaries argo-cd); do
    [[ $b != argocd-* ]] || ln -sfn argocd "$BIN/$b"
  done

  # The upstream image puts these scripts on PATH; without git-verify-wrapper.sh a Git source
  # fails with "permission denied" (Helm repository sources do not need it).
  dir=$(module_dir argo-cd "$mod")
  install -m 0755 "$dir"/hack/git-verify-wrapper.sh "$dir"/hack/gpg-wrapper.sh "$BIN/"
  rm -rf "$OUT/crds/argo-cd"
  mkdir -p "$OUT/crds/argo-cd"
  cp "$dir"/manifests/crds/*-crd.yaml "$OUT/crds/argo-cd/"
  chmod u+w "$OUT"/crds/argo-cd/*.yaml
}

build_flux() {
  local sc=github.com/fluxcd/source-controller hc=github.com/fluxcd/helm-controller
  check_pin flux "$sc" "$FLUX_SOURCE_CONTROLLER_VERSION"
  check_pin flux "$hc" "$FLUX_HELM_CONTROLLER_VERSION"
  # Flux's own images build plain `go build -trimpath` (no version stamped in the binaries).
  go_build flux -ldflags "-s -w" "$sc" "$hc"
  # The CRDs the controllers serve (HelmRelease; GitRepository, OCIRepository, HelmRepository,
  # HelmChart, Bucket, ExternalArtifact), from the same module versions as the binaries.
  rm -rf "$OUT/crds/flux"
  mkdir -p "$OUT/crds/flux"
  cp "$(module_dir flux "$sc")"/config/crd/bases/*.yaml "$(module_dir flux "$hc")"/config/crd/bases/*.yaml "$OUT/crds/flux/"
  chmod u+w "$OUT"/crds/flux/*.yaml
}

# promtool without service discovery (rule tests need none: -tags remove_all_sd drops every SD
# plugin and its cloud SDKs), stamped as Prometheus' own build stamps it (v0.3XX.Y is 3.XX.Y).
build_prometheus() {
  local mod=github.com/prometheus/prometheus v minor
  check_pin prometheus "$mod" "$PROMETHEUS_VERSION"
  minor=${PROMETHEUS_VERSION#v0.}
  v="${minor:0:1}.$((10#${minor:1:2})).${minor#*.}"
  go_build prometheus -tags remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v -X github.com/prometheus/common/version.Branch=HEAD" \
    "$mod/cmd/promtool"
}

# actionlint, stamped as its release build stamps it (.goreleaser.yaml: the version without its "v",
# and how it was installed, which `actionlint -version` prints).
build_actionlint() {
  local mod=github.com/rhysd/actionlint
  check_pin actionlint "$mod" "$ACTIONLINT_VERSION"
  go_build actionlint \
    -ldflags "-s -w -X $mod.version=${ACTIONLINT_VERSION#v} -X '$mod.installedFrom=built from $mod@$ACTIONLINT_VERSION by hack/tools/build.sh'" \
    "$mod/cmd/actionlint"
}

# helm-docs, stamped as its release build stamps it (goreleaser's default -X main.version, which
# `helm-docs --version` prints; the READMEs' footer is off, so no version lands in them).
build_helm_docs() {
  local mod=github.com/norwoodj/helm-docs
  check_pin helm-docs "$mod" "$HELM_DOCS_VERSION"
  go_build helm-docs -ldflags "-s -w -X main.version=${HELM_DOCS_VERSION#v}" "$mod/cmd/helm-docs"
}

# The Pulumi CLI (module pulumi/cli), the YAML language host and the Kubernetes provider (module
# pulumi/plugins: they do not compile against the CLI's pkg/v3), each stamped as its release build
# stamps it (the .goreleaser.yml of pulumi/pulumi, pulumi-yaml and pulumi-kubernetes). pulumi finds
# the two plugins on PATH (docs/pulumi.md).
build_pulumi() {
  local cli=github.com/pulumi/pulumi/pkg/v3 yaml=github.com/pulumi/pulumi-yaml
  local k8s=github.com/pulumi/pulumi-kubernetes/provider/v4 dir src modfile
  check_pin pulumi/cli "$cli" "$PULUMI_VERSION"
  check_pin pulumi/plugins "$yaml" "$PULUMI_YAML_VERSION"
  check_pin pulumi/plugins "$k8s" "$PULUMI_KUBERNETES_VERSION"
  check_pin pulumi/plugins github.com/pulumi/pulumi-kubernetes/sdk/v4 "$PULUMI_KUBERNETES_SDK_VERSION"
  go_build pulumi/cli "${NO_INLINE[@]}" -tags osusergo -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
    "$cli/cmd/pulumi"
  go_build pulumi/plugins "${NO_INLINE[@]}" -ldflags "-s -w -X $yaml/pkg/version.Version=$PULUMI_YAML_VERSION" "$yaml/cmd/pulumi-language-yaml"

  # The provider embeds schema-embed.json and terraform-mapping-embed.json, which its release
  # generates (`VERSION=... go generate` runs cmd/pulumi-resource-kubernetes/generate.go: the schema
  # stamped with the version, both minified) and the module zip lacks; go's -overlay refuses files
  # in the module cache. So, as for kubectl-argo-rollouts: a scratch copy of the module, generated
  # there by its own generate.go, built through a copy of our go.mod replacing the module by it.
  dir=$(module_dir pulumi/plugins "$k8s")
  src=$OUT/src/pulumi-kubernetes
  modfile=$OUT/src/pulumi-kubernetes.mod
  rm -rf "$src"
  mkdir -p "$src"
  cp -R "$dir"/. "$src"/
  chmod -R u+w "$src"
  (cd "$TOOLS_SRC/pulumi/plugins" &&
    go_for pulumi build "${NO_INLINE[@]}" -o "$OUT/src/pulumi-kubernetes-generate" "$src/cmd/pulumi-resource-kubernetes/generate.go")
  (cd "$src/cmd/pulumi-resource-kubernetes" && VERSION=${PULUMI_KUBERNETES_RELEASE#v} "$OUT/src/pulumi-kubernetes-generate")
  cp "$TOOLS_SRC/pulumi/plugins/go.mod" "$modfile"
  cp "$TOOLS_SRC/pulumi/plugins/go.sum" "${modfile%.mod}.sum"
  printf '\nreplace %s => %s\n' "$k8s" "$src" >>"$modfile"
  go_build pulumi/plugins -modfile "$modfile" "${NO_INLINE[@]}" -ldflags "-s -w -X $k8s/pkg/version.Version=$PULUMI_KUBERNETES_RELEASE" \
    "$k8s/cmd/pulumi-resource-kubernetes"
}

# The release tools: release-tool (with Helm's pkg/provenance), crane and cosign from our module
# (cosign stamped as its Makefile stamps it, `cosign version`); cyclonedx-gomod as `go install
# module@version`, so that it builds with its own go.mod and the SBOMs it writes name its real
# version (the checksum database verifies the module).
build_release() {
  check_pin release github.com/google/go-containerregistry "$GO_CONTAINERREGISTRY_VERSION"
  check_pin release helm.sh/helm/v4 "$HELM_VERSION"
  check_pin release github.com/sigstore/cosign/v3 "$COSIGN_VERSION"
  go_build release -ldflags "-s -w" ./release-tool github.com/google/go-containerregistry/cmd/crane
  go_build release -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
    github.com/sigstore/cosign/v3/cmd/cosign
  (cd "$TOOLS_SRC/release" && GOBIN=$BIN GOFLAGS="-buildvcs=false $NO_DWARF" GOTOOLCHAIN=local \
    go install -trimpath -ldflags "-s -w" "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$CYCLONEDX_GOMOD_VERSION")
}

# peer_source extracts a GitHub repository at a commit into $OUT/src/peers/<name> (the tree only).
# The source, first found wins:
#   1. a bare mirror $PEERS_GIT_DIR/<owner>+<repo>/repo holding the commit (only when PEERS_GIT_DIR is set);
#   2. a shallow fetch of the commit from https://github.com/<owner>/<repo> into $OUT/src/peers/git;
#   3. the Go module proxy, as module <module>@<commit> (none of the pinned peers is served today, but
#      a proxy that serves one makes GitHub unnecessary).
peer_source() {
  local repo=$1 commit=$2 name=$3 module=$4 git_dir mod_dir dest
  dest=$OUT/src/peers/$name
  rm -rf "$dest"
  mkdir -p "$dest"
  if [[ -n ${PEERS_GIT_DIR:-} ]]; then
    git_dir=$PEERS_GIT_DIR/${repo/\//+}/repo
    if git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
      log "peers: $repo@${commit:0:7} from the mirror $git_dir"
      git --git-dir="$git_dir" archive "$commit" | tar -x -C "$dest"
      return
    fi
    log "peers: $git_dir does not hold $repo@${commit:0:7}; trying GitHub"
  fi
  git_dir=$OUT/src/peers/git/${repo/\//+}
  [[ -d $git_dir ]] || git init -q --bare "$git_dir"
  if git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null ||
    git --git-dir="$git_dir" fetch -q --depth 1 "https://github.com/$repo" "$commit" 2>/dev/null; then
    log "peers: $repo@${commit:0:7} from GitHub"
    git --git-dir="$git_dir" archive "$commit" | tar -x -C "$dest"
    return
  fi
  log "peers: GitHub unreachable for $repo; trying the Go module proxy ($module@${commit:0:12})"
  if mod_dir=$(cd "$dest" && GOTOOLCHAIN=local go mod download -json "$module@$commit" 2>/dev/null |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') && [[ -n $mod_dir && -d $mod_dir ]]; then
    cp -R "$mod_dir"/. "$dest"/
    chmod -R u+w "$dest"
    return
  fi
  die "peers: cannot get $repo@$commit: no mirror (set PEERS_GIT_DIR=<dir> holding <dir>/${repo/\//+}/repo, a bare clone with that commit), GitHub unreachable (git fetch https://github.com/$repo failed), and the Go module proxy does not serve $module@$commit"
}

# peer_build runs go build in an extracted peer, with its own go.mod and go.sum (-mod=readonly).
peer_build() {
  local name=$1; shift
  (cd "$OUT/src/peers/$name" && GOTOOLCHAIN=local go build -trimpath "$@")
}

# The benchmark peers: never part of the project, only measured beside it (test/bench). Their
# modules are not on the proxy; each builds as its upstream does (same go.mod, same ldflags).
build_peers() {
  peer_source liorfranko/configmap-attacher "$ORIGINAL_ATTACHER_COMMIT" configmap-attacher-original github.com/liorfranko/configmap-attacher
  peer_build configmap-attacher-original -ldflags "-s -w" -o "$BIN/configmap-attacher-original" .
  peer_source matanbaruch/configmap-rs-operator "$CONFIGMAP_RS_OPERATOR_COMMIT" configmap-rs-operator github.com/matanbaruch/configmap-rs-operator
  peer_build configmap-rs-operator -ldflags "-s -w" -o "$BIN/configmap-rs-operator" ./cmd
  peer_source stakater/Reloader "$RELOADER_COMMIT" reloader github.com/stakater/Reloader
  [[ $(<"$OUT/src/peers/reloader/VERSION") == "${RELOADER_VERSION#v}" ]] ||
    die "peers: Reloader $RELOADER_COMMIT has VERSION $(<"$OUT/src/peers/reloader/VERSION"), versions.env says $RELOADER_VERSION"
  local pkg=github.com/stakater/Reloader/pkg/common
  peer_build reloader -ldflags "-s -w -X $pkg.Version=${RELOADER_VERSION#v} -X $pkg.Commit=$RELOADER_COMMIT" -o "$BIN/reloader" .
}

# with_heartbeat runs a command, printing a line every minute so CI logs show a long build is alive,
# and exits the script when it fails. It must be called as a plain statement, never from
# `if`/`!`/`||`/`&&`: bash ignores errexit in everything such a condition runs, background jobs and
# functions included, so a build function would carry on after a failed step (and a stale binary
# from an earlier build would pass the check that follows).
# It keeps the CPU-seconds the command's processes used (user and system, bash's `times` for the
# children of its subshell) in $STAMPS/<label>.cpu: for the same build they are its work times the
# machine's slowness, so two runs' figures compare the machines where wall seconds, which depend on
# what builds beside it, cannot.
with_heartbeat() {
  local label=$1; shift
  local start pid rc=0 next=60 cpu=$STAMPS/$label.cpu
  start=$(date +%s)
  # Not `times | ...`: a pipeline's first command runs in a subshell of its own, with no children.
  ("$@"; times >"$cpu") &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( $(date +%s) - start >= next )); then
      log "    ... $label still building ($(( $(date +%s) - start ))s)"
      next=$(( next + 60 ))
    fi
  done
  wait "$pid" || rc=$?
  (( rc == 0 )) || die "$label: build failed after $(( $(date +%s) - start ))s"
  # The second line of `times`: the children's user and system time, as <minutes>m<seconds>s.
  local seconds
  seconds=$(awk 'function s(t) { split(t, a, "m"); return a[1] * 60 + a[2] } NR == 2 { printf "%.0f", s($1) + s($2) }' "$cpu")
  echo "$seconds" >"$cpu"
}

# up_to_date succeeds when a tool's stamp matches its inputs and all its binaries exist.
up_to_date() {
  local tool=$1 stamp=$STAMPS/$1 b
  [[ ${TOOLS_FORCE:-} != 1 && -f $stamp && $(<"$stamp") == "$(inputs_hash "$tool")" ]] || return 1
  while read -r b; do
    [[ -x $(bin_path "$b") ]] || return 1
  done < <(tool_binaries "$tool")
}

# prefetch downloads the modules of the given tools in the background: on a fresh machine the
# downloads of later tools then overlap with compiling earlier ones (compiling is CPU bound,
# downloading is not). Failures are ignored here; the build itself reports them.
PREFETCH_PIDS=()
prefetch() {
  local tool mod
  for tool in "$@"; do
    : >"$OUT/prefetch-$tool.log"
    for mod in "$TOOLS_SRC/$tool"/go.mod "$TOOLS_SRC/$tool"/*/go.mod; do
      [[ -f $mod ]] || continue
      (cd "$(dirname "$mod")" && go_for "$tool" mod download) >>"$OUT/prefetch-$tool.log" 2>&1 &
      PREFETCH_PIDS+=($!)
    done
  done
}

# lock_tool waits until no other build.sh builds a tool, and keeps it from starting one until the
# caller's process ends or lock_tool's descriptor ($TOOL_LOCK) is closed: two builds of a tool at once
# would race on its binaries and stamp, and the second to come finds it up to date instead (CI's
# unit tests wait so on the kubernetes tool, whose compiled client-go they reuse).
lock_tool() {
  command -v flock >/dev/null || return 0
  exec {TOOL_LOCK}>"$STAMPS/$1.lock"
  if ! flock -n "$TOOL_LOCK"; then
    log "$1: waiting for another build of it to end"
    flock "$TOOL_LOCK"
  fi
}

unlock_tool() {
  [[ -z ${TOOL_LOCK:-} ]] || exec {TOOL_LOCK}>&-
  TOOL_LOCK=
}

build_tool() {
  local tool=$1 id hash stamp b start
  id=$(ident "$tool")
  stamp=$STAMPS/$tool
  lock_tool "$tool"
  if up_to_date "$tool"; then
    log "$tool: up to date"
    unlock_tool
    return
  fi
  hash=$(inputs_hash "$tool")
  log "$tool: building $(tool_binaries "$tool" | tr '\n' ' ')"
  start=$(date +%s)
  rm -f "$stamp"
  with_heartbeat "$tool" "build_$id"
  while read -r b; do
    [[ -x $(bin_path "$b") ]] || die "$tool: build did not produce $(bin_path "$b")"
  done < <(tool_binaries "$tool")
  echo "$hash" >"$stamp"
  log "$tool: built in $(( $(date +%s) - start ))s, $(<"$STAMPS/$tool.cpu") CPU-seconds"
  unlock_tool
}

# build_all builds the given tools, TOOLS_JOBS (default 2) at once. One go build keeps both cores busy
# only part of the time (a large package compiled alone while the rest wait for it, a link, loading
# a module graph, generating code): a second build fills those gaps. They are started longest first
# (the order of the list), so the longest is not left running alone at the end. The first failure
# stops the others and the script.
# kill_tree stops a process and everything it started (a build's go commands and compilers).
kill_tree() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}

build_all() {
  local jobs=${TOOLS_JOBS:-2} t done_pid rc=0 active=() p
  [[ $jobs =~ ^[1-9][0-9]*$ ]] || die "TOOLS_JOBS=$jobs: want a number of builds at once (1 or more)"
  for t in "$@"; do
    if ((jobs == 1)); then
      build_tool "$t"
      continue
    fi
    if ((${#active[@]} == jobs)); then
      wait -n -p done_pid "${active[@]}" || rc=$?
      ((rc == 0)) || break
      for p in "${!active[@]}"; do [[ ${active[p]} != "$done_pid" ]] || unset 'active[p]'; done
      active=("${active[@]}")
    fi
    build_tool "$t" &
    active+=($!)
  done
  while ((rc == 0 && ${#active[@]} > 0)); do
    wait -n -p done_pid "${active[@]}" || rc=$?
    for p in "${!active[@]}"; do [[ ${active[p]} != "$done_pid" ]] || unset 'active[p]'; done
    active=("${active[@]}")
  done
  if ((rc != 0)); then
    for p in "${active[@]}"; do kill_tree "$p"; done
    wait "${active[@]}" 2>/dev/null || true
    die "a tool failed to build (its lines above say which)"
  fi
}

main() {
  local tools=() t total_start
  if (($# == 0)); then
    tools=("${ALL_TOOLS[@]}")
  else
    for t in "$@"; do
      t=$(resolve_tool "$t")
      [[ " ${tools[*]-} " == *" $t "* ]] || tools+=("$t")
    done
  fi
  mkdir -p "$BIN" "$STAMPS"
  total_start=$(date +%s)
  log "building ${tools[*]} into ${BIN#"$ROOT"/} ($(go env GOVERSION), $(nproc) cores)"
  local stale=()
  for t in "${tools[@]}"; do
    up_to_date "$t" || stale+=("$t")
  done
  if ((${#stale[@]} > 1)); then
    prefetch "${stale[@]:1}"
  fi
  build_all "${tools[@]}"
  if ((${#PREFETCH_PIDS[@]})); then
    wait "${PREFETCH_PIDS[@]}" 2>/dev/null || true
  fi
  log "done in $(( $(date +%s) - total_start ))s"
}

main "$@"
