#!/usr/bin/env bash
# Starts (or reuses) a local cluster on loopback: etcd, kube-apiserver, kube-controller-manager
# (garbage collector included), kube-scheduler and kwok (fake nodes that run pods instantly),
# all from hack/tools builds, plus the Argo Rollouts CRDs and controller.
#
# Idempotent: a running cluster and controller are reused, dead components are restarted.
# Progress goes to stderr; stdout gets exactly one line, the last one: KUBECONFIG=<absolute path>.
# Contract (env vars, paths, ports, logs): hack/cluster/README.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER_NODES=${CLUSTER_NODES:-3}
CLUSTER_NODE_PODS=${CLUSTER_NODE_PODS:-110}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-120}

# The control plane's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler):
# KUBERNETES_VERSION's, or with KUBERNETES_COMPAT=<minor> the compatibility control plane
# (KUBERNETES_COMPAT_VERSION, built into _output/tools/k8s-<minor>/bin).
CONTROL_PLANE_BIN=$TOOLS_BIN
if [[ -n ${KUBERNETES_COMPAT:-} ]]; then
  compat_minor=$(cut -d. -f1,2 <<<"${KUBERNETES_COMPAT_VERSION#v}")
  [[ $KUBERNETES_COMPAT == "$compat_minor" ]] ||
    die "KUBERNETES_COMPAT=$KUBERNETES_COMPAT: the compatibility control plane is $compat_minor (KUBERNETES_COMPAT_VERSION=$KUBERNETES_COMPAT_VERSION in hack/tools/versions.env)"
  CONTROL_PLANE_BIN=$TOOLS_DIR/k8s-$compat_minor/bin
fi
CONTROL_PLANE_FILE=$CLUSTER_DIR/control-plane

start=$(date +%s)

build_tools() {
  if [[ ${SKIP_TOOLS_BUILD:-} == 1 ]]; then
    log "SKIP_TOOLS_BUILD=1: using tools as they are in $TOOLS_BIN"
  else
    "$ROOT/hack/tools/build.sh" >&2
    if [[ -n ${KUBERNETES_COMPAT:-} ]]; then
      "$ROOT/hack/tools/build.sh" kubernetes-compat etcd-compat >&2
    fi
  fi
  local b
  for b in kubectl kwok kwokctl rollouts-controller; do
    [[ -x $TOOLS_BIN/$b ]] || die "$TOOLS_BIN/$b is missing: run hack/tools/build.sh"
  done
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    [[ -x $CONTROL_PLANE_BIN/$b ]] || die "$CONTROL_PLANE_BIN/$b is missing: run hack/tools/build.sh${KUBERNETES_COMPAT:+ kubernetes-compat etcd-compat}"
  done
  [[ -f $CRDS_DIR/rollout-crd.yaml ]] || die "Argo Rollouts CRDs missing in $CRDS_DIR: run hack/tools/build.sh argo-rollouts"
}

create_cluster() {
  # A cluster keeps the binaries it was created with: refuse to pretend another version runs.
  if [[ -f $CONTROL_PLANE_FILE && $(<"$CONTROL_PLANE_FILE") != "$CONTROL_PLANE_BIN" ]]; then
    die "cluster $CLUSTER_NAME runs the control plane of $(<"$CONTROL_PLANE_FILE"), not $CONTROL_PLANE_BIN: delete it first (hack/cluster/down.sh) or choose another CLUSTER_NAME"
  fi
  # `create cluster` on an existing cluster returns at once if every component runs and restarts
  # the stopped ones otherwise. Every binary is a local file, so kwokctl never downloads anything
  # (it would fetch release binaries from the internet for any it is not given).
  # --kubeconfig= keeps kwokctl away from ~/.kube/config: the cluster's own kubeconfig is
  # $CLUSTER_DIR/kubeconfig.yaml.
  log "kwokctl create cluster (workdir $KWOK_WORKDIR)"
  # One create at a time in a workdir: kwokctl takes the free ports it finds at the start, and two
  # clusters created at once (make soak-short's) found the same ones. It returns once the cluster
  # serves, its ports bound.
  mkdir -p "$KWOK_WORKDIR"
  exec 9>"$KWOK_WORKDIR/.create.lock"
  flock 9
  # CLUSTER_KWOKCTL_CONFIG, when set, is merged over kwokctl.yaml (kwokctl merges its --config files).
  kwokctl --config "$ROOT/hack/cluster/kwokctl.yaml" ${CLUSTER_KWOKCTL_CONFIG:+--config "$CLUSTER_KWOKCTL_CONFIG"} create cluster \
    --name "$CLUSTER_NAME" \
    --runtime binary \
    --kubeconfig= \
    --quiet-pull \
    --etcd-binary "$CONTROL_PLANE_BIN/etcd" \
    --kube-apiserver-binary "$CONTROL_PLANE_BIN/kube-apiserver" \
    --kube-controller-manager-binary "$CONTROL_PLANE_BIN/kube-controller-manager" \
    --kube-scheduler-binary "$CONTROL_PLANE_BIN/kube-scheduler" \
    --kwok-controller-binary "$TOOLS_BIN/kwok" \
    --wait "${WAIT_TIMEOUT}s" >&2 9>&- # the cluster's processes must not hold the lock
  exec 9>&-
  [[ -f $KUBECONFIG_PATH ]] || die "kwokctl did not write $KUBECONFIG_PATH"
  echo "$CONTROL_PLANE_BIN" >"$CONTROL_PLANE_FILE"
  mkdir -p "$LOG_DIR"
  wait_until "kube-apiserver /readyz" kctl get --raw /readyz
  wait_until "the garbage collector of kube-controller-manager (see $LOG_DIR/kube-controller-manager.log)" gc_running
}

# create_nodes makes CLUSTER_NODES fake nodes. kwok manages nodes annotated kwok.x-k8s.io/node=fake:
# it marks them Ready, keeps their leases fresh and runs (fakes) every pod bound to them. They
# carry no taint, so ordinary workloads schedule without tolerations.
create_nodes() {
  local i manifest=""
  for ((i = 0; i < CLUSTER_NODES; i++)); do
    manifest+="---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: \"\"
    type: kwok
status:
  allocatable: {cpu: \"32\", memory: 256Gi, pods: \"$CLUSTER_NODE_PODS\"}
  capacity: {cpu: \"32\", memory: 256Gi, pods: \"$CLUSTER_NODE_PODS\"}
"
  done
  log "applying $CLUSTER_NODES kwok nodes"
  # --force-conflicts: on a cluster of more than 100 nodes kube-controller-manager's TTL controller
  # takes node.alpha.kubernetes.io/ttl over (it raises it with the cluster's size), and re-running
  # this script on such a cluster (bench scale -scale-resume) must not fail on it; it sets it again.
  kctl apply --server-side --force-conflicts --field-manager=hack-cluster -f - <<<"$manifest" >&2
  # A node that exists keeps the status it was made with: a re-run asking for another
  # CLUSTER_NODE_PODS (the e2e suite's, on a cluster made with the default) sets it there.
  local pods="{\"status\":{\"allocatable\":{\"pods\":\"$CLUSTER_NODE_PODS\"},\"capacity\":{\"pods\":\"$CLUSTER_NODE_PODS\"}}}"
  for ((i = 0; i < CLUSTER_NODES; i++)); do
    kctl patch node "kwok-node-$i" --subresource=status --type=merge -p "$pods" >/dev/null
  done
  wait_until "$CLUSTER_NODES Ready nodes" nodes_ready
}

nodes_ready() {
  local ready
  ready=$(kctl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$')
  (( ready >= CLUSTER_NODES ))
}

install_rollouts_crds() {
  local hash names
  # Applying these large CRDs costs seconds even when nothing changed: skip it when the very
  # same files were applied to this cluster before and the CRDs are still there.
  hash=$(cat "$CRDS_DIR"/*.yaml | sha256sum | cut -d' ' -f1)
  if [[ -f $ROLLOUTS_CRDS_STAMP && $(<"$ROLLOUTS_CRDS_STAMP") == "$hash" ]] &&
    kctl get crd rollouts.argoproj.io analysisruns.argoproj.io analysistemplates.argoproj.io \
      clusteranalysistemplates.argoproj.io experiments.argoproj.io >/dev/null 2>&1; then
    log "Argo Rollouts CRDs already applied"
  else
    # Server-side apply: the CRDs are too large for client-side apply's last-applied annotation.
    log "applying Argo Rollouts CRDs"
    kctl apply --server-side --force-conflicts --field-manager=hack-cluster -f "$CRDS_DIR" >&2
    names=$(kctl get crd -o name | grep '\.argoproj\.io$')
    # shellcheck disable=SC2086 # one argument per CRD
    kctl wait --for condition=Established --timeout "${WAIT_TIMEOUT}s" $names >/dev/null
    echo "$hash" >"$ROLLOUTS_CRDS_STAMP"
  fi
  kctl get namespace "$ROLLOUTS_NAMESPACE" >/dev/null 2>&1 ||
    kctl create namespace "$ROLLOUTS_NAMESPACE" >&2
}

# gc_running succeeds once kube-controller-manager's garbage collector has synced its monitors and
# collects: the property this project relies on, so fail early and clearly if it is off.
gc_running() {
  grep -q 'Proceeding to collect garbage' "$LOG_DIR/kube-controller-manager.log"
}

# pick_rollouts_ports chooses the controller's metrics and healthz ports: the ones it had before
# when still free, else the first free pair from a base derived from the cluster name, so two
# clusters never fight over Argo's defaults (8090/8080).
pick_rollouts_ports() {
  local metrics healthz base
  if [[ -f $ROLLOUTS_PORTS_FILE ]]; then
    read -r metrics healthz <"$ROLLOUTS_PORTS_FILE" || true
    if [[ ${metrics:-} =~ ^[0-9]+$ && ${healthz:-} =~ ^[0-9]+$ ]] && port_free "$metrics" && port_free "$healthz"; then
      echo "$metrics $healthz"
      return
    fi
  fi
  base=$(( 20000 + ($(cksum <<<"$CLUSTER_NAME" | cut -d' ' -f1) % 4000) * 2 ))
  for ((metrics = base; metrics < 30000; metrics += 2)); do
    healthz=$((metrics + 1))
    if port_free "$metrics" && port_free "$healthz"; then
      echo "$metrics $healthz" >"$ROLLOUTS_PORTS_FILE"
      echo "$metrics $healthz"
      return
    fi
  done
  die "no free port pair for rollouts-controller in $base..30000"
}

start_rollouts_controller() {
  local pid metrics healthz ports
  if pid=$(rollouts_pid); then
    read -r metrics healthz <"$ROLLOUTS_PORTS_FILE"
    log "rollouts-controller already running (pid $pid, metrics :$metrics, healthz :$healthz)"
  else
    ports=$(pick_rollouts_ports)
    read -r metrics healthz <<<"$ports"
    log "starting rollouts-controller (metrics :$metrics, healthz :$healthz, log $ROLLOUTS_LOG)"
    # setsid detaches it from this script's session so it outlives the script and the terminal.
    # The wrapper records its own pid and then execs, so the pid file is the controller's pid.
    # One controller per cluster (the pid file guarantees it), so no leader election: it starts
    # working at once instead of waiting for a lease a dead predecessor may still hold.
    # POD_NAMESPACE is where it keeps its own config (notifications) as in a real install.
    echo "--- $(date -u +%FT%TZ) starting" >>"$ROLLOUTS_LOG"
    POD_NAMESPACE=$ROLLOUTS_NAMESPACE setsid bash -c 'echo $$ >"$0"; exec "$@"' "$ROLLOUTS_PID_FILE" \
      "$TOOLS_BIN/rollouts-controller" --kubeconfig "$KUBECONFIG_PATH" \
      --leader-elect=false --metricsPort "$metrics" --healthzPort "$healthz" \
      --loglevel info --logformat text ${ROLLOUTS_CONTROLLER_ARGS:-} \
      </dev/null >>"$ROLLOUTS_LOG" 2>&1 &
    disown
    local i
    for ((i = 0; i < 50; i++)); do
      [[ -s $ROLLOUTS_PID_FILE ]] && break
      sleep 0.1
    done
  fi
  wait_until "rollouts-controller healthz on :$healthz" http_ok "$healthz" /healthz
  rollouts_pid >/dev/null || die "rollouts-controller exited; see $ROLLOUTS_LOG"
}

build_tools
create_cluster
create_nodes
install_rollouts_crds
start_rollouts_controller
log "cluster ready in $(( $(date +%s) - start ))s: Kubernetes $(kctl version -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | tail -n1) (logs: $LOG_DIR)"
echo "KUBECONFIG=$KUBECONFIG_PATH"
