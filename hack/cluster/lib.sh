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

# --- components: processes a script runs next to the cluster (argocd.sh, flux.sh) ---
# A script sets COMPONENT_DIR (its state directory, D), COMPONENT_LABEL (a word for logs) and
# COMPONENTS (names, in start order). Each component runs detached (setsid, outliving the script)
# with D as its working directory, its pid in D/<name>.pid and its log in
# $LOG_DIR/<label>-<name>.log. A pid counts only while that process runs in D, so a recycled pid of
# another process never counts as a component.

# component_pid prints the pid of a live component.
component_pid() {
  local name=$1 pid cwd
  [[ -f $COMPONENT_DIR/$name.pid ]] || return 1
  pid=$(<"$COMPONENT_DIR/$name.pid")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || return 1
  [[ $cwd == "$COMPONENT_DIR" || $cwd == "$COMPONENT_DIR"/* ]] || return 1
  echo "$pid"
}

stop_component() {
  local name=$1 pid
  if pid=$(component_pid "$name"); then
    stop_pid "$COMPONENT_LABEL $name" "$pid"
  fi
  rm -f "$COMPONENT_DIR/$name.pid"
}

# stop_components stops the watchdog, then every component in reverse start order.
stop_components() {
  local i
  stop_component watchdog
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_component "${COMPONENTS[i]}"
  done
}

# start_component runs a command detached in COMPONENT_DIR, appending to its log; the wrapper
# writes its own pid and then execs, so the pid file is the component's pid.
start_component() {
  local name=$1 i; shift
  local logf=$LOG_DIR/$COMPONENT_LABEL-$name.log
  log "starting $COMPONENT_LABEL $name (log $logf)"
  echo "--- $(date -u +%FT%TZ) starting" >>"$logf"
  rm -f "$COMPONENT_DIR/$name.pid"
  # shellcheck disable=SC2016 # $0 and $$ belong to the inner shell
  (cd "$COMPONENT_DIR" && exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$COMPONENT_DIR/$name.pid" "$@") \
    </dev/null >>"$logf" 2>&1 &
  disown
  for ((i = 0; i < 50; i++)); do
    [[ -s $COMPONENT_DIR/$name.pid ]] && break
    sleep 0.1
  done
}

# pick_component_ports FILE BASE END OWNER...: one port per OWNER (a component), the ones kept in FILE
# if each is still free or held by its live component, else the first free ones from BASE up to END.
# A component whose port moved is stopped (all of them, in fact), so it starts again on the new one.
pick_component_ports() {
  local file=$1 base=$2 end=$3; shift 3
  local owners=("$@") ports=() i ok=1 p
  if [[ -f $file ]]; then
    read -r -a ports <"$file" || true
    ((${#ports[@]} == ${#owners[@]})) || ok=0
    for ((i = 0; ok && i < ${#owners[@]}; i++)); do
      [[ ${ports[i]} =~ ^[0-9]+$ ]] || { ok=0; break; }
      component_pid "${owners[i]}" >/dev/null || port_free "${ports[i]}" || ok=0
    done
    if ((ok)); then
      echo "${ports[*]}"
      return
    fi
    log "$COMPONENT_LABEL's ports are taken by something else: restarting it on new ones"
    stop_components
  fi
  ports=()
  for ((p = base; p < end && ${#ports[@]} < ${#owners[@]}; p++)); do
    port_free "$p" && ports+=("$p")
  done
  ((${#ports[@]} == ${#owners[@]})) || die "no ${#owners[@]} free ports for $COMPONENT_LABEL in $base..$end"
  echo "${ports[*]}" >"$file"
  echo "${ports[*]}"
}

# start_watchdog runs a small loop that stops the components once the cluster's kubeconfig is gone
# (down.sh deletes the cluster directory, pid files included, so it remembers the pids).
start_watchdog() {
  component_pid watchdog >/dev/null && return
  # shellcheck disable=SC2016 # the loop expands its own arguments
  start_component watchdog bash -c '
    kubeconfig=$1 dir=$2 pids=""
    while [[ -e $kubeconfig ]]; do
      pids=$(cat $(ls "$dir"/*.pid | grep -v /watchdog.pid) 2>/dev/null || true)
      sleep 2
    done
    echo "$(date -u +%FT%TZ) $kubeconfig is gone: stopping the components ($(echo $pids))"
    for p in $pids; do
      [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$dir"* ]] && kill "$p" 2>/dev/null
    done
    exit 0' "$COMPONENT_LABEL-watchdog" "$KUBECONFIG_PATH" "$COMPONENT_DIR"
}

# component_status prints whether each component (and the watchdog) runs.
component_status() {
  local name pid
  for name in "${COMPONENTS[@]}" watchdog; do
    if pid=$(component_pid "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: not running"
    fi
  done
}

# apply_crds WHAT DIR STAMP CRD...: applies the CRD files of DIR (server-side: some are far too large
# for client-side apply's annotation) and waits until the named CRDs are Established. Skipped when
# the very same files were applied before (their hash is in STAMP) and the CRDs are still there.
apply_crds() {
  local what=$1 dir=$2 stamp=$3 hash; shift 3
  hash=$(cat "$dir"/*.yaml | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(<"$stamp") == "$hash" ]] && kctl get crd "$@" >/dev/null 2>&1; then
    log "$what CRDs already applied"
    return
  fi
  log "applying $what CRDs"
  kctl apply --server-side --force-conflicts --field-manager=hack-cluster -f "$dir" >&2
  # Retried: `kubectl wait` fails outright ("accessor error") while a new CRD has no conditions yet.
  wait_until "the $what CRDs to be Established" kctl wait --for condition=Established --timeout 10s "${@/#/crd/}"
  echo "$hash" >"$stamp"
}

# dispatch runs the script's up, down or status function, as its first argument says.
dispatch() {
  case ${1:-} in
    up | down | status) "$1" ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
  esac
}
