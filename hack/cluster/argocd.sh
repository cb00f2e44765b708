#!/usr/bin/env bash
# Runs Argo CD against a local cluster made by hack/cluster/up.sh (same CLUSTER_NAME):
#
#   hack/cluster/argocd.sh up       apply the CRDs and settings, start (or reuse) the components
#   hack/cluster/argocd.sh down     stop the components (the CRDs and Applications stay)
#   hack/cluster/argocd.sh status   show which components run, on which ports
#
# Only what syncs Applications runs, on loopback, detached with setsid like the Rollouts controller:
# redis (Debian's redis-server), argocd-repo-server and argocd-application-controller. No API server,
# no UI, no Dex: Applications are created and synced through the Kubernetes API (kubectl, client-go).
# The controller reaches the in-cluster destination https://kubernetes.default.svc through the
# cluster's kubeconfig (ARGOCD_FAKE_IN_CLUSTER=true, Argo CD's own switch for local runs).
#
# `up` is idempotent: live components are reused, dead ones restarted. Its progress goes to stderr;
# stdout gets one line, ARGOCD_NAMESPACE=<namespace>. A watchdog stops the components when the
# cluster's kubeconfig disappears (hack/cluster/down.sh), so deleting the cluster never leaves them
# behind. Contract (paths, ports, logs): hack/cluster/README.md.
# shellcheck disable=SC2016 # single-quoted `bash -c` scripts expand their own arguments
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WAIT_TIMEOUT=${WAIT_TIMEOUT:-120}
# How often the controller re-reads every Application's source even when nothing changed (a new
# chart version in a repo is only noticed then); Argo CD's default is 120 s.
ARGOCD_APP_RESYNC=${ARGOCD_APP_RESYNC:-60}
ARGOCD_NAMESPACE=argocd
ARGOCD_DIR=$CLUSTER_DIR/argocd
ARGOCD_CRDS_DIR=${TOOLS_OUT:-$ROOT/_output/tools}/crds/argo-cd
ARGOCD_PORTS_FILE=$ARGOCD_DIR/ports
ARGOCD_CRDS_STAMP=$ARGOCD_DIR/crds.sha256
# Components in start order; each has $ARGOCD_DIR/<name>.pid and $LOG_DIR/argocd-<name>.log (lib.sh's
# component helpers; redis runs in $ARGOCD_DIR/redis).
COMPONENTS=(redis repo-server application-controller)
COMPONENT_DIR=$ARGOCD_DIR
COMPONENT_LABEL=argocd

# --- helpers (wait_until, port_free, stop_pid, http_ok and the component helpers are lib.sh's) ---

redis_ok() {
  local reply
  reply=$(timeout 2 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "PING\r\n" >&3
    head -c5 <&3' _ "$1" 2>/dev/null) || return 1
  [[ $reply == +PONG ]]
}

# --- up ---

check_prerequisites() {
  if [[ ${SKIP_TOOLS_BUILD:-} == 1 ]]; then
    log "SKIP_TOOLS_BUILD=1: using tools as they are in $TOOLS_BIN"
  else
    "$ROOT/hack/tools/build.sh" argo-cd helm-argocd kubectl >&2
  fi
  local b
  for b in argocd argocd-repo-server argocd-application-controller helm-argocd kubectl; do
    [[ -x $TOOLS_BIN/$b ]] || die "$TOOLS_BIN/$b is missing: run hack/tools/build.sh argo-cd helm-argocd"
  done
  [[ -f $ARGOCD_CRDS_DIR/application-crd.yaml ]] || die "Argo CD CRDs missing in $ARGOCD_CRDS_DIR: run hack/tools/build.sh argo-cd"
  command -v redis-server >/dev/null || die "redis-server is missing: apt-get install redis-server"
  if [[ ! -f $KUBECONFIG_PATH ]] || ! kctl get --raw /readyz >/dev/null 2>&1; then
    die "cluster $CLUSTER_NAME is not running (no $KUBECONFIG_PATH or kube-apiserver not ready): run hack/cluster/up.sh"
  fi
  mkdir -p "$ARGOCD_DIR"/{bin,tmp,redis,config/tls,config/ssh,config/gpg/source,config/gpg/keys,plugins} "$LOG_DIR"
  # The repo server runs `helm` from its PATH: the one Argo CD's image ships (ARGOCD_HELM_VERSION).
  ln -sfn "$TOOLS_BIN/helm-argocd" "$ARGOCD_DIR/bin/helm"
}

install_crds() {
  apply_crds "Argo CD" "$ARGOCD_CRDS_DIR" "$ARGOCD_CRDS_STAMP" \
    applications.argoproj.io appprojects.argoproj.io applicationsets.argoproj.io
}

# install_settings creates what the controller reads: argocd-cm and argocd-secret (it finds both by
# the part-of=argocd label and reports incomplete settings without server.secretkey), and the
# `default` AppProject, which argocd-server would otherwise create on its first start.
# argocd-cmd-params-cm and argocd-rbac-cm are not needed: the former only feeds the upstream
# Deployments' environment (here: flags below), the latter only argocd-server.
install_settings() {
  log "applying namespace $ARGOCD_NAMESPACE, argocd-cm and the default AppProject"
  kctl apply --server-side --force-conflicts --field-manager=hack-cluster -f - >&2 <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ARGOCD_NAMESPACE
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: $ARGOCD_NAMESPACE
  labels: {app.kubernetes.io/name: argocd-cm, app.kubernetes.io/part-of: argocd}
data:
  # The v3 default, spelled out: the controller tracks what it applied by an annotation.
  application.resourceTrackingMethod: annotation
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: $ARGOCD_NAMESPACE
spec:
  sourceRepos: ["*"]
  destinations: [{server: "*", namespace: "*"}]
  clusterResourceWhitelist: [{group: "*", kind: "*"}]
EOF
  if ! kctl -n "$ARGOCD_NAMESPACE" get secret argocd-secret >/dev/null 2>&1; then
    log "creating argocd-secret"
    kctl -n "$ARGOCD_NAMESPACE" create -f - >&2 <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: argocd-secret
  labels: {app.kubernetes.io/name: argocd-secret, app.kubernetes.io/part-of: argocd}
type: Opaque
data:
  server.secretkey: $(head -c 32 /dev/urandom | base64 -w0)
EOF
  fi
}

# pick_ports chooses redis, repo-server (gRPC), repo-server metrics and controller metrics ports: the
# ones from before if each is still free or held by its live component, else four free ports from a
# base derived from the cluster name (10000..19999, below the Rollouts controller's range). Prints
# them, and restarts nothing itself: a component whose port moved is stopped so it starts again.
pick_ports() {
  pick_component_ports "$ARGOCD_PORTS_FILE" $(( 10000 + ($(cksum <<<"$CLUSTER_NAME" | cut -d' ' -f1) % 2000) * 5 )) 20000 \
    redis repo-server repo-server application-controller
}

start_redis() {
  local port=$1 pid
  if pid=$(component_pid redis); then
    log "argocd redis already running (pid $pid, :$port)"
  else
    # A cache only: no persistence, loopback only, no password (nothing else can reach it).
    start_component redis redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
      --dir "$ARGOCD_DIR/redis" --daemonize no --logfile ''
  fi
  wait_until "argocd redis on :$port" redis_ok "$port"
  component_pid redis >/dev/null || die "argocd redis exited; see $LOG_DIR/argocd-redis.log"
}

# The repo server renders manifests (helm template, ...) and never talks to Kubernetes. Everything
# it would read from /app/config in the upstream image and its temporary files live in $ARGOCD_DIR.
start_repo_server() {
  local redis=$1 port=$2 metrics=$3 pid sock=$ARGOCD_DIR/askpass.sock
  if pid=$(component_pid repo-server); then
    log "argocd repo-server already running (pid $pid, :$port, metrics :$metrics)"
  else
    # A unix socket path must fit in 108 bytes.
    ((${#sock} < 100)) || sock=/tmp/argocd-askpass-$(cksum <<<"$ARGOCD_DIR" | cut -d' ' -f1).sock
    start_component repo-server env \
      PATH="$ARGOCD_DIR/bin:$PATH" \
      TMPDIR="$ARGOCD_DIR/tmp" \
      ARGOCD_ASK_PASS_SOCK="$sock" \
      ARGOCD_APP_CONFIG_PATH="$ARGOCD_DIR/config" \
      ARGOCD_TLS_DATA_PATH="$ARGOCD_DIR/config/tls" \
      ARGOCD_SSH_DATA_PATH="$ARGOCD_DIR/config/ssh" \
      ARGOCD_GPG_ENABLED=false \
      ARGOCD_GNUPGHOME="$ARGOCD_DIR/config/gpg/keys" \
      ARGOCD_GPG_DATA_PATH="$ARGOCD_DIR/config/gpg/source" \
      ARGOCD_PLUGINSOCKFILEPATH="$ARGOCD_DIR/plugins" \
      "$TOOLS_BIN/argocd-repo-server" \
      --address 127.0.0.1 --port "$port" \
      --metrics-address 127.0.0.1 --metrics-port "$metrics" \
      --redis "127.0.0.1:$redis" \
      --disable-tls --client-ca-path= \
      --loglevel info --logformat text
  fi
  wait_until "argocd repo-server healthz on :$metrics" http_ok "$metrics" /healthz
  component_pid repo-server >/dev/null || die "argocd repo-server exited; see $LOG_DIR/argocd-repo-server.log"
}

start_application_controller() {
  local redis=$1 repo=$2 metrics=$3 pid
  if pid=$(component_pid application-controller); then
    log "argocd application-controller already running (pid $pid, metrics :$metrics)"
  else
    # The metrics/healthz server listens on all interfaces (Argo CD hard-codes 0.0.0.0).
    start_component application-controller env \
      KUBECONFIG="$KUBECONFIG_PATH" \
      ARGOCD_FAKE_IN_CLUSTER=true \
      ARGOCD_APP_CONFIG_PATH="$ARGOCD_DIR/config" \
      ARGOCD_TLS_DATA_PATH="$ARGOCD_DIR/config/tls" \
      ARGOCD_SSH_DATA_PATH="$ARGOCD_DIR/config/ssh" \
      TMPDIR="$ARGOCD_DIR/tmp" \
      "$TOOLS_BIN/argocd-application-controller" \
      --kubeconfig "$KUBECONFIG_PATH" --namespace "$ARGOCD_NAMESPACE" \
      --redis "127.0.0.1:$redis" \
      --repo-server "127.0.0.1:$repo" --repo-server-plaintext \
      --metrics-port "$metrics" \
      --app-resync "$ARGOCD_APP_RESYNC" \
      --loglevel info --logformat text
  fi
  wait_until "argocd application-controller healthz on :$metrics" http_ok "$metrics" /healthz
  component_pid application-controller >/dev/null || die "argocd application-controller exited; see $LOG_DIR/argocd-application-controller.log"
}

up() {
  local start ports redis repo repo_metrics ctrl_metrics
  start=$(date +%s)
  check_prerequisites
  install_crds
  install_settings
  ports=$(pick_ports)
  read -r redis repo repo_metrics ctrl_metrics <<<"$ports"
  start_redis "$redis"
  start_repo_server "$redis" "$repo" "$repo_metrics"
  start_application_controller "$redis" "$repo" "$ctrl_metrics"
  start_watchdog
  log "Argo CD ready in $(( $(date +%s) - start ))s (redis :$redis, repo-server :$repo, logs: $LOG_DIR/argocd-*.log)"
  echo "ARGOCD_NAMESPACE=$ARGOCD_NAMESPACE"
}

down() {
  stop_components
  log "Argo CD stopped (CRDs, settings and Applications stay in the cluster)"
}

status() {
  echo "ports (redis repo-server repo-server-metrics controller-metrics): $(cat "$ARGOCD_PORTS_FILE" 2>/dev/null || echo none)"
  component_status
}

dispatch "$@"
