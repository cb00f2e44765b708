# shellcheck shell=bash disable=SC2034 # variables used by the scripts that source this file
# Shared settings for hack/cluster/*.sh (sourced, not run). See hack/cluster/README.md.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../tools/versions.env
source "$ROOT/hack/tools/versions.env"

CLUSTER_NAME=${CLUSTER_NAME:-configmap-attacher}
# kwokctl keeps every cluster under $KWOK_WORKDIR/clusters/<name>; keep it in the repo's
# gitignored _output so nothing lands in ~/.kwok and `make clean` removes it.
KWOK_WORKDIR=${KWOK_WORKDIR:-$ROOT/_output/kwok}
# Absolute, so the printed KUBECONFIG path and the pid-file checks hold from any directory.
mkdir -p "$KWOK_WORKDIR"
KWOK_WORKDIR=$(cd "$KWOK_WORKDIR" && pwd)
export KWOK_WORKDIR
TOOLS_DIR=${TOOLS_OUT:-$ROOT/_output/tools}
TOOLS_BIN=$TOOLS_DIR/bin
CRDS_DIR=$TOOLS_DIR/crds/argo-rollouts

CLUSTER_DIR=$KWOK_WORKDIR/clusters/$CLUSTER_NAME
KUBECONFIG_PATH=$CLUSTER_DIR/kubeconfig.yaml
LOG_DIR=$CLUSTER_DIR/logs
ROLLOUTS_PID_FILE=$CLUSTER_DIR/rollouts-controller.pid
ROLLOUTS_PORTS_FILE=$CLUSTER_DIR/rollouts-controller.ports
ROLLOUTS_LOG=$LOG_DIR/rollouts-controller.log
ROLLOUTS_NAMESPACE=argo-rollouts
ROLLOUTS_CRDS_STAMP=$CLUSTER_DIR/rollouts-crds.sha256

# Our binaries first, so kwokctl (which looks kubectl up on PATH and would otherwise download it)
# and anything we run use the pinned builds. kubectl in PATH here is ours, never /usr/bin's.
export PATH=$TOOLS_BIN:$PATH
# kwokctl would otherwise fetch kubectl from the internet for `kwokctl kubectl` and friends.
export KWOK_KUBECTL_BINARY=$TOOLS_BIN/kubectl

log() { printf '[cluster %s %s] %s\n' "$CLUSTER_NAME" "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[cluster %s] ERROR: %s\n' "$CLUSTER_NAME" "$*" >&2; exit 1; }

# wait_until runs a command every half second until it succeeds or WAIT_TIMEOUT (default 120) seconds
# pass.
wait_until() {
  local what=$1; shift
  local deadline=$(( $(date +%s) + ${WAIT_TIMEOUT:-120} ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "timed out after ${WAIT_TIMEOUT:-120}s waiting for $what"
    sleep 0.5
  done
}

# port_free succeeds when nothing accepts connections on ${2:-127.0.0.1}:$1 (our components listen on
# all interfaces, so a listener anywhere shows up on loopback).
port_free() {
  ! (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
}

# stop_pid asks process $2 (described as $1) to stop, and kills it after ${3:-10} seconds.
stop_pid() {
  local what=$1 pid=$2 grace=${3:-10} i
  log "stopping $what (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$what did not stop in ${grace}s, killing it"
  kill -9 "$pid" 2>/dev/null || true
}

# http_ok succeeds when GET http://127.0.0.1:$1$2 answers 200 (bash only: curl may be absent).
http_ok() {
  local status
  # shellcheck disable=SC2016 # $1 and $2 belong to the inner shell
  status=$(timeout 2 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
    head -n1 <&3' _ "$1" "$2" 2>/dev/null) || return 1
  [[ $status == *" 200"* ]]
}

[[ $CLUSTER_NAME =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
  die "CLUSTER_NAME '$CLUSTER_NAME' must be a DNS label (lowercase letters, digits, '-')"

kctl() { "$TOOLS_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# rollouts_pid prints the pid of this cluster's Rollouts controller if it is alive. The command line
# is checked too, so a recycled pid of another process never counts as our controller.
rollouts_pid() {
  local pid
  [[ -f $ROLLOUTS_PID_FILE ]] || return 1
  pid=$(<"$ROLLOUTS_PID_FILE")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *rollouts-controller*" --kubeconfig $KUBECONFIG_PATH "* ]] || return 1
  echo "$pid"
}

# stop_rollouts_controller stops this cluster's Rollouts controller, if running.
stop_rollouts_controller() {
  local pid
  if pid=$(rollouts_pid); then
    stop_pid rollouts-controller "$pid"
  fi
  rm -f "$ROLLOUTS_PID_FILE"
}
