#!/usr/bin/env bash
# Builds the local control plane and tools from pinned Go modules into _output/tools/bin.
#
#   hack/tools/build.sh [tool|binary ...]      (no argument: every tool)
#
# Tools (one Go module each under hack/tools/<tool>, versions in hack/tools/versions.env):
#   kubernetes     kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet
#   etcd           etcd
#   kwok           kwok kwokctl
#   argo-rollouts  rollouts-controller kubectl-argo-rollouts (+ CRDs in _output/tools/crds/argo-rollouts)
#   helm           helm
#   argo-cd        argocd, and argocd-* names linked to it (+ CRDs in _output/tools/crds/argo-cd)
# Built only when named (not part of `make tools`, so CI does not pay for them):
#   peers          configmap-attacher-original configmap-rs-operator reloader (test/bench's peers)
# A binary name selects its tool (e.g. `build.sh kubectl`).
#
# A tool is rebuilt only when one of its inputs changed: its versions.env entries, its module files
# (go.mod, go.sum, *.go), the Go toolchain, or its build function below. The hash of those inputs is
# kept in _output/tools/stamps/<tool>; a warm run only hashes files. Set TOOLS_FORCE=1 to rebuild.
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
# need cgo (static binaries, no C toolchain on CI), never rewrite go.mod during a build.
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
if ! command -v go >/dev/null; then
  export PATH=/usr/local/go/bin:$PATH
fi

ALL_TOOLS=(kubernetes etcd kwok argo-rollouts helm argo-cd)
# Built only when named on the command line.
OPTIONAL_TOOLS=(peers)

# binaries_<tool> list what a tool installs; vars_<tool> the versions.env keys it depends on
# (read through namerefs, hence invisible to shellcheck).
# shellcheck disable=SC2034
{
  binaries_kubernetes=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
  vars_kubernetes=(KUBERNETES_VERSION KUBERNETES_STAGING_VERSION)
  binaries_etcd=(etcd)
  vars_etcd=(ETCD_VERSION)
  binaries_kwok=(kwok kwokctl)
  vars_kwok=(KWOK_VERSION KUBERNETES_VERSION)
  binaries_argo_rollouts=(rollouts-controller kubectl-argo-rollouts)
  vars_argo_rollouts=(ARGO_ROLLOUTS_VERSION ARGO_ROLLOUTS_GOTOOLCHAIN)
  binaries_helm=(helm)
  vars_helm=(HELM_VERSION)
  # argocd is multi-call (it dispatches on its executable name): the argocd-* are symlinks to it.
  # The repo server runs git-verify-wrapper.sh on every Git checkout (gpg-wrapper.sh with GPG on).
  binaries_argo_cd=(argocd argocd-application-controller argocd-repo-server argocd-cmp-server
    argocd-server argocd-commit-server argocd-applicationset-controller argocd-notifications
    argocd-git-ask-pass argocd-k8s-auth git-verify-wrapper.sh gpg-wrapper.sh)
  vars_argo_cd=(ARGOCD_VERSION ARGOCD_GITOPS_ENGINE_VERSION)
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
  local tool=$1 id v f
  id=$(ident "$tool")
  local -n _vars="vars_$id"
  {
    echo "tool=$tool"
    for v in "${_vars[@]}"; do echo "$v=${!v}"; done
    (cd "$TOOLS_SRC/$tool" && go_for "$tool" env GOVERSION GOOS GOARCH)
    declare -f "build_$id"
    for f in "$TOOLS_SRC/$tool"/go.mod "$TOOLS_SRC/$tool"/go.sum "$TOOLS_SRC/$tool"/*.go; do
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

build_kubernetes() {
  check_pin kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION"
  check_pin kubernetes k8s.io/api "$KUBERNETES_STAGING_VERSION"
  go_build kubernetes -ldflags "-s -w $(k8s_version_ldflags "$KUBERNETES_VERSION")" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet
}

build_etcd() {
  check_pin etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  go_build etcd -ldflags "-s -w" .
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

build_helm() {
  local mod=helm.sh/helm/v3 client_go minor ldflags
  check_pin helm "$mod" "$HELM_VERSION"
  # Same ldflags as helm's Makefile: its version, and the Kubernetes version `helm template`
  # assumes (.Capabilities.KubeVersion) derived from the client-go it is built with.
  client_go=$(cd "$TOOLS_SRC/helm" && go_for helm list -m -f '{{.Version}}' k8s.io/client-go)
  minor=$(cut -d. -f2 <<<"$client_go")
  ldflags="-s -w -X $mod/internal/version.version=$HELM_VERSION -X $mod/internal/version.gitTreeState=clean"
  ldflags+=" -X $mod/pkg/lint/rules.k8sVersionMajor=1 -X $mod/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags+=" -X $mod/pkg/chartutil.k8sVersionMajor=1 -X $mod/pkg/chartutil.k8sVersionMinor=$minor"
  go_build helm -ldflags "$ldflags" "$mod/cmd/helm"
}

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

# with_heartbeat runs a command, printing a line every minute so CI logs show a long build is alive.
# The command runs as a background job: there errexit applies inside it (a function called from
# `if`/`||` would run with errexit silently off and carry on after a failed step).
with_heartbeat() {
  local label=$1; shift
  local start pid rc=0 next=60
  start=$(date +%s)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( $(date +%s) - start >= next )); then
      log "    ... $label still building ($(( $(date +%s) - start ))s)"
      next=$(( next + 60 ))
    fi
  done
  wait "$pid" || rc=$?
  return "$rc"
}

# up_to_date succeeds when a tool's stamp matches its inputs and all its binaries exist.
up_to_date() {
  local tool=$1 stamp=$STAMPS/$1 b
  [[ ${TOOLS_FORCE:-} != 1 && -f $stamp && $(<"$stamp") == "$(inputs_hash "$tool")" ]] || return 1
  while read -r b; do
    [[ -x $BIN/$b ]] || return 1
  done < <(tool_binaries "$tool")
}

# prefetch downloads the modules of the given tools in the background: on a fresh machine the
# downloads of later tools then overlap with compiling earlier ones (compiling is CPU bound,
# downloading is not). Failures are ignored here; the build itself reports them.
PREFETCH_PIDS=()
prefetch() {
  local tool
  for tool in "$@"; do
    (cd "$TOOLS_SRC/$tool" && go_for "$tool" mod download) >"$OUT/prefetch-$tool.log" 2>&1 &
    PREFETCH_PIDS+=($!)
  done
}

build_tool() {
  local tool=$1 id hash stamp b start
  id=$(ident "$tool")
  stamp=$STAMPS/$tool
  if up_to_date "$tool"; then
    log "$tool: up to date"
    return
  fi
  hash=$(inputs_hash "$tool")
  log "$tool: building $(tool_binaries "$tool" | tr '\n' ' ')"
  start=$(date +%s)
  rm -f "$stamp"
  if ! with_heartbeat "$tool" "build_$id"; then
    die "$tool: build failed after $(( $(date +%s) - start ))s"
  fi
  while read -r b; do
    [[ -x $BIN/$b ]] || die "$tool: build did not produce $BIN/$b"
  done < <(tool_binaries "$tool")
  echo "$hash" >"$stamp"
  log "$tool: built in $(( $(date +%s) - start ))s"
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
  for t in "${tools[@]}"; do
    build_tool "$t"
  done
  if ((${#PREFETCH_PIDS[@]})); then
    wait "${PREFETCH_PIDS[@]}" 2>/dev/null || true
  fi
  log "done in $(( $(date +%s) - total_start ))s"
}

main "$@"
