#!/usr/bin/env bash
# Runs Flux's source-controller and helm-controller against a local cluster made by hack/cluster/up.sh
# (same CLUSTER_NAME):
#
#   hack/cluster/flux.sh up       apply the CRDs, start (or reuse) both controllers
#   hack/cluster/flux.sh down     stop them (the CRDs, sources and HelmReleases stay)
#   hack/cluster/flux.sh status   show which run, on which ports
#
# What a HelmRelease needs and nothing more: source-controller turns HelmRepository/GitRepository/
# OCIRepository sources into chart artifacts it serves over HTTP on loopback, helm-controller installs,
# upgrades, tests, remediates and uninstalls the releases (Helm 4, as Flux links it). No
# kustomize-controller, notification-controller or image automation; HelmReleases and sources are
# created through the Kubernetes API (kubectl, client-go; test/framework/flux.go). Both run detached
# with setsid, with the cluster's admin kubeconfig (KUBECONFIG) and leader election off (one of each
# per cluster, guarded by the pid files), on loopback only.
#
# `up` is idempotent: live controllers are reused, dead ones restarted. Its progress goes to stderr;
# stdout gets one line, FLUX_NAMESPACE=<namespace>. A watchdog stops the controllers when the
# cluster's kubeconfig disappears (hack/cluster/down.sh). Contract (paths, ports, logs):
# hack/cluster/README.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WAIT_TIMEOUT=${WAIT_TIMEOUT:-120}
# Where the controllers keep their own state (leader election is off, so only Events) and where
# the HelmRepository, GitRepository and OCIRepository objects usually live; any namespace works.
FLUX_NAMESPACE=flux-system
FLUX_DIR=$CLUSTER_DIR/flux
FLUX_CRDS_DIR=${TOOLS_OUT:-$ROOT/_output/tools}/crds/flux
FLUX_PORTS_FILE=$FLUX_DIR/ports
FLUX_CRDS_STAMP=$FLUX_DIR/crds.sha256
COMPONENTS=(source-controller helm-controller)
COMPONENT_DIR=$FLUX_DIR
COMPONENT_LABEL=flux

check_prerequisites() {
  if [[ ${SKIP_TOOLS_BUILD:-} == 1 ]]; then
    log "SKIP_TOOLS_BUILD=1: using tools as they are in $TOOLS_BIN"
  else
    "$ROOT/hack/tools/build.sh" flux kubectl >&2
  fi
  local b
  for b in "${COMPONENTS[@]}" kubectl; do
    [[ -x $TOOLS_BIN/$b ]] || die "$TOOLS_BIN/$b is missing: run hack/tools/build.sh flux"
  done
  [[ -f $FLUX_CRDS_DIR/helm.toolkit.fluxcd.io_helmreleases.yaml ]] || die "Flux CRDs missing in $FLUX_CRDS_DIR: run hack/tools/build.sh flux"
  if [[ ! -f $KUBECONFIG_PATH ]] || ! kctl get --raw /readyz >/dev/null 2>&1; then
    die "cluster $CLUSTER_NAME is not running (no $KUBECONFIG_PATH or kube-apiserver not ready): run hack/cluster/up.sh"
  fi
  mkdir -p "$FLUX_DIR/storage" "$FLUX_DIR/tmp" "$LOG_DIR"
}

install_crds() {
  apply_crds Flux "$FLUX_CRDS_DIR" "$FLUX_CRDS_STAMP" \
    helmreleases.helm.toolkit.fluxcd.io helmrepositories.source.toolkit.fluxcd.io helmcharts.source.toolkit.fluxcd.io \
    gitrepositories.source.toolkit.fluxcd.io ocirepositories.source.toolkit.fluxcd.io
  kctl get namespace "$FLUX_NAMESPACE" >/dev/null 2>&1 || kctl create namespace "$FLUX_NAMESPACE" >&2
}

# pick_ports: source-controller's metrics, health and artifact server, helm-controller's metrics and
# health; from 30000 + 5*(cksum(CLUSTER_NAME) % 500) upwards (below Linux's ephemeral ports, above
# the Rollouts controller's range), kept in $FLUX_PORTS_FILE while free.
pick_ports() {
  pick_component_ports "$FLUX_PORTS_FILE" $(( 30000 + ($(cksum <<<"$CLUSTER_NAME" | cut -d' ' -f1) % 500) * 5 )) 32768 \
    source-controller source-controller source-controller helm-controller helm-controller
}

# run_controller starts one controller unless it runs, and waits for its readiness probe.
# Both read the cluster through KUBECONFIG (controller-runtime's lookup), keep their temporary files
# (chart downloads, Helm caches) in $FLUX_DIR/tmp, and record Events in the cluster only (no
# --events-addr: there is no notification-controller).
run_controller() {
  local name=$1 health=$2 pid; shift 2
  if pid=$(component_pid "$name"); then
    log "flux $name already running (pid $pid, health :$health)"
  else
    start_component "$name" env KUBECONFIG="$KUBECONFIG_PATH" RUNTIME_NAMESPACE="$FLUX_NAMESPACE" TMPDIR="$FLUX_DIR/tmp" \
      "$TOOLS_BIN/$name" --health-addr "127.0.0.1:$health" --log-level info --log-encoding console "$@"
  fi
  wait_until "flux $name readyz on :$health" http_ok "$health" /readyz
  component_pid "$name" >/dev/null || die "flux $name exited; see $LOG_DIR/flux-$name.log"
}

up() {
  local start ports sc_metrics sc_health storage hc_metrics hc_health
  start=$(date +%s)
  check_prerequisites
  install_crds
  ports=$(pick_ports)
  read -r sc_metrics sc_health storage hc_metrics hc_health <<<"$ports"
  # The artifact server serves chart tarballs to helm-controller at the advertised address.
  run_controller source-controller "$sc_health" --metrics-addr "127.0.0.1:$sc_metrics" \
    --storage-path "$FLUX_DIR/storage" --storage-addr "127.0.0.1:$storage" --storage-adv-addr "127.0.0.1:$storage"
  # A release in progress delays helm-controller's shutdown by up to this long (Flux's default is 600 s).
  run_controller helm-controller "$hc_health" --metrics-addr "127.0.0.1:$hc_metrics" --graceful-shutdown-timeout 5s
  start_watchdog
  log "Flux ready in $(( $(date +%s) - start ))s (artifacts :$storage, logs: $LOG_DIR/flux-*.log)"
  echo "FLUX_NAMESPACE=$FLUX_NAMESPACE"
}

down() {
  stop_components
  log "Flux stopped (CRDs, sources and HelmReleases stay in the cluster)"
}

status() {
  echo "ports (source-controller metrics health artifacts, helm-controller metrics health): $(cat "$FLUX_PORTS_FILE" 2>/dev/null || echo none)"
  component_status
}

dispatch "$@"
