#!/usr/bin/env bash
# A real node for the local cluster (hack/cluster/up.sh): a kubelet (built by hack/tools/build.sh from
# the pinned k8s.io/kubernetes) on containerd and runc from Debian, pods on a CNI bridge, so pods bound
# to it run real containers, unlike kwok's fake nodes.
#
#   hack/cluster/realnode.sh up          start (or reuse) the node; last stdout line: NODE=<name>
#   hack/cluster/realnode.sh down        stop it: its pods, kubelet, containerd, the bridge, the Node
#   hack/cluster/realnode.sh import F..  import docker-archives (podman save) into its containerd
#   hack/cluster/realnode.sh registry HOST:PORT
#                                        let its containerd pull from a plain-HTTP registry at HOST:PORT
#                                        (D/containerd/certs.d/HOST:PORT/hosts.toml; read at each pull)
#   hack/cluster/realnode.sh status      exit 0 when the kubelet and containerd run
#
# The node is tainted and labelled type=real (the kwok nodes carry type=kwok, no taint): only pods
# with `nodeSelector: {type: real}` and a toleration for type=real:NoSchedule land on it. It reaches no
# registry but those `registry` names (a loopback one: the e2e release story pulls the published image
# by digest); its own images are imported archives, pulled never (imagePullPolicy: Never or IfNotPresent):
#   localhost/realnode-pause:1    the pod sandbox (hack/cluster/realnode/pause, static Go, FROM scratch)
#   localhost/realnode-busybox:1  Debian's busybox-static with its applets in /bin, FROM scratch
#
# What runs, all detached (setsid, pid files) like the Rollouts controller, under
# D=$CLUSTER_DIR/realnode, logs in $CLUSTER_DIR/logs/{containerd,kubelet}.log:
#   containerd  own config, root, state and socket in D/containerd (never /run/containerd or
#               /var/lib/containerd), CRI with runc (cgroupfs), CNI config in D/cni (bins /usr/lib/cni),
#               registry hosts in D/containerd/certs.d (config_path: one directory per registry)
#   kubelet     D/kubelet; client certificate system:node:<name> (group system:nodes) signed by the
#               cluster's kwokctl CA, so the Node authorizer applies; cgroupfs driver, failCgroupV1:
#               false (this machine is cgroup v1), failSwapOn: false
#   network     bridge cma-realnode0 with 10.244.0.1/24 (the node's InternalIP; the kubelet listens
#               there); pods get 10.244.0.x with no default route: they reach this host's bridge
#               address and each other, nothing else. hostNetwork pods share the host's loopback, so
#               they reach the API server at 127.0.0.1 (there is no kube-proxy: Service IPs route
#               nowhere, so such pods set KUBERNETES_SERVICE_HOST/PORT themselves).
# The kubelet sets vm.overcommit_memory=1, kernel.panic=10 and kernel.panic_on_oops=1, as on every
# node; `up` saves the previous values in D/sysctl.saved and `down` restores them.
#
# Needs root, and: containerd, ctr, runc, containernetworking-plugins, busybox-static, podman (to
# build the two images), iproute2, openssl (Debian packages; .ci/run installs them), and a cluster
# created with hack/cluster/kwokctl.yaml's kwok and kube-apiserver settings (kwok manages only
# annotated nodes; the API server has a kubelet client certificate for exec and logs).
# Environment: CLUSTER_NAME as for up.sh, REALNODE_NAME (default real-node), WAIT_TIMEOUT (120),
# SKIP_TOOLS_BUILD=1 (use _output/tools/bin/kubelet as it is). One real node per machine: the
# bridge and subnet are fixed.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODE=${REALNODE_NAME:-real-node}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-120}
D=$CLUSTER_DIR/realnode
BRIDGE=cma-realnode0
NODE_IP=10.244.0.1
SUBNET=10.244.0.0/24
SOCK=$D/containerd/containerd.sock
CONTAINERD_PID_FILE=$D/containerd.pid
KUBELET_PID_FILE=$D/kubelet.pid
CONTAINERD_LOG=$LOG_DIR/containerd.log
KUBELET_LOG=$LOG_DIR/kubelet.log
PAUSE_IMAGE=localhost/realnode-pause:1
BUSYBOX_IMAGE=localhost/realnode-busybox:1
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

rlog() { log "realnode: $*"; }
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

# pid_of prints the pid in a pid file if that process is alive and its command line contains $2.
pid_of() {
  local pid cmdline
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$2"* ]] || return 1
  echo "$pid"
}
containerd_pid() { pid_of "$CONTAINERD_PID_FILE" "containerd --config $D/containerd/config.toml"; }
kubelet_pid() { pid_of "$KUBELET_PID_FILE" "kubelet --config $D/kubelet/config.yaml"; }

# start_detached runs a command in its own session, outliving this script; the pid file holds its pid.
start_detached() {
  local pid_file=$1 log_file=$2; shift 2
  echo "--- $(date -u +%FT%TZ) starting" >>"$log_file"
  # shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pid_file" "$@" </dev/null >>"$log_file" 2>&1 &
  disown
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -s $pid_file ]] && return
    sleep 0.1
  done
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

check_prerequisites() {
  [[ $(id -u) == 0 ]] || die "realnode: needs root (containerd, runc, mounts, the bridge)"
  local c missing=()
  for c in containerd ctr runc podman ip openssl busybox setsid; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=("/usr/lib/cni/{bridge,host-local,loopback}")
  ((${#missing[@]} == 0)) || die "realnode: missing ${missing[*]} (Debian: apt-get install containerd runc containernetworking-plugins busybox-static podman iproute2 openssl)"
  [[ $(stat -f -c %T /sys/fs/cgroup) == tmpfs || $(stat -f -c %T /sys/fs/cgroup) == cgroup2fs ]] || die "realnode: /sys/fs/cgroup is not mounted"
  [[ -f $KUBECONFIG_PATH ]] || die "realnode: no cluster $CLUSTER_NAME ($KUBECONFIG_PATH): run hack/cluster/up.sh first"
  kctl get --raw /readyz >/dev/null 2>&1 || die "realnode: the API server of $CLUSTER_NAME does not answer: run hack/cluster/up.sh"
  # kwokctl's binary runtime starts kwok with --manage-all-nodes=true; hack/cluster/kwokctl.yaml
  # limits it to annotated nodes. A cluster created before that would fake this node's status and pods.
  local kwok_pid
  kwok_pid=$(cat "$CLUSTER_DIR/pids/kwok-controller.pid" 2>/dev/null) || true
  if [[ -n $kwok_pid && -r /proc/$kwok_pid/cmdline ]] &&
    [[ $(tr '\0' '\n' <"/proc/$kwok_pid/cmdline" | grep -- '--manage-all-nodes=' | tail -n1) != "--manage-all-nodes=false" ]]; then
    die "realnode: kwok manages every node in $CLUSTER_NAME (created before hack/cluster/kwokctl.yaml limited it): recreate it with hack/cluster/down.sh && hack/cluster/up.sh"
  fi
  # One real node per machine (the bridge and subnet are fixed), whichever checkout or cluster runs it.
  local pid
  for pid in $(pgrep -f -- "kubelet --config .*/realnode/kubelet/config.yaml" || true); do
    [[ $pid == "$(kubelet_pid || true)" ]] && continue
    die "realnode: another real node's kubelet runs (pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-160)); one per machine: stop it with its realnode.sh down"
  done
}

build_kubelet() {
  if [[ ${SKIP_TOOLS_BUILD:-} == 1 ]]; then
    rlog "SKIP_TOOLS_BUILD=1: using $TOOLS_BIN/kubelet as it is"
  else
    "$ROOT/hack/tools/build.sh" kubelet >&2
  fi
  [[ -x $TOOLS_BIN/kubelet ]] || die "realnode: $TOOLS_BIN/kubelet is missing: run hack/tools/build.sh kubelet"
}

save_sysctls() {
  [[ -f $D/sysctl.saved ]] && return
  local k
  for k in "${SYSCTLS[@]}"; do
    echo "$k $(<"/proc/sys/$k")"
  done >"$D/sysctl.saved"
}

restore_sysctls() {
  [[ -f $D/sysctl.saved ]] || return 0
  local k v
  while read -r k v; do
    [[ $(<"/proc/sys/$k") == "$v" ]] || { rlog "restoring $k=$v"; echo "$v" >"/proc/sys/$k" || true; }
  done <"$D/sysctl.saved"
  rm -f "$D/sysctl.saved"
}

setup_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    rlog "creating bridge $BRIDGE ($NODE_IP/24)"
    ip link add name "$BRIDGE" type bridge
  fi
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  mkdir -p "$D/cni/net.d" "$D/cni/ipam"
  # No isGateway/ipMasq: the plugin then touches neither the bridge's address nor ip_forward nor
  # iptables, and pods get no default route (nothing leaves the machine).
  cat >"$D/cni/net.d/10-realnode.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$D/cni/ipam",
        "ranges": [[{"subnet": "$SUBNET", "rangeStart": "10.244.0.10", "rangeEnd": "10.244.0.250"}]]
      }
    }
  ]
}
EOF
}

start_containerd() {
  local pid
  if pid=$(containerd_pid); then
    rlog "containerd already running (pid $pid)"
    return
  fi
  mkdir -p "$D/containerd"
  cat >"$D/containerd/config.toml" <<EOF
# Written by hack/cluster/realnode.sh: the real node's own containerd, nothing shared with the host.
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the kubelet asks -998 for
  # sandboxes: "nsexec: failed to update /proc/self/oom_score_adj: Permission denied"); clamp it to
  # containerd's own, as for rootless containerd.
  restrict_oom_score_adj = true
  # Pod network namespaces under D/containerd/state, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$D/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
  # Registry hosts, one directory per registry (the registry command adds one), read at each pull.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$D/containerd/certs.d"
EOF
  mkdir -p "$D/containerd/certs.d"
  rlog "starting containerd (log $CONTAINERD_LOG)"
  start_detached "$CONTAINERD_PID_FILE" "$CONTAINERD_LOG" containerd --config "$D/containerd/config.toml"
  wait_until "containerd on $SOCK (see $CONTAINERD_LOG)" ctr --address "$SOCK" version
  containerd_pid >/dev/null || die "realnode: containerd exited; see $CONTAINERD_LOG"
}

# node_images builds the sandbox and busybox images with podman (FROM scratch: no registry) and
# imports them into containerd's k8s.io namespace, where the CRI looks.
node_images() {
  local ctx=$D/images pause_ctx bb_ctx a
  pause_ctx=$ctx/pause
  bb_ctx=$ctx/busybox
  rm -rf "$ctx"
  mkdir -p "$pause_ctx" "$bb_ctx/bin"
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$pause_ctx/pause" ./hack/cluster/realnode/pause)
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$pause_ctx/Containerfile"
  cp "$(command -v busybox)" "$bb_ctx/bin/busybox"
  for a in $(busybox --list); do
    [[ $a == busybox ]] || ln -s busybox "$bb_ctx/bin/$a"
  done
  printf 'FROM scratch\nCOPY bin /bin\nENV PATH=/bin\nENTRYPOINT ["/bin/sh"]\n' >"$bb_ctx/Containerfile"
  local name ref
  for name in pause busybox; do
    ref=$PAUSE_IMAGE
    [[ $name == busybox ]] && ref=$BUSYBOX_IMAGE
    podman --runtime runc --cgroup-manager cgroupfs build --quiet --pull=never --timestamp 0 -t "$ref" "$ctx/$name" >/dev/null
    podman --runtime runc --cgroup-manager cgroupfs save --quiet --format docker-archive -o "$ctx/$name.tar" "$ref"
    import_archives "$ctx/$name.tar"
  done
}

import_archives() {
  local f
  for f in "$@"; do
    [[ -f $f ]] || die "realnode: no archive $f"
    ctr_ images import "$f" >&2 || die "realnode: ctr images import $f failed"
  done
}

# plain_http_registry lets containerd pull from host:port over plain HTTP (a registry on loopback has no
# TLS): containerd reads D/containerd/certs.d/<host:port>/hosts.toml at each pull, so no restart.
plain_http_registry() {
  local hostport=$1 dir
  [[ $hostport =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] || die "realnode: registry: want HOST:PORT, got '$hostport'"
  grep -q '^    config_path = ' "$D/containerd/config.toml" ||
    die "realnode: this node's containerd was started without registry hosts (an older realnode.sh): $0 down, then up"
  dir=$D/containerd/certs.d/$hostport
  mkdir -p "$dir"
  cat >"$dir/hosts.toml" <<EOF
# Written by hack/cluster/realnode.sh registry: a plain-HTTP registry.
server = "http://$hostport"

[host."http://$hostport"]
  capabilities = ["pull", "resolve"]
EOF
  rlog "containerd pulls from http://$hostport ($dir/hosts.toml)"
}

kubelet_credentials() {
  local dir=$D/kubelet/pki server
  mkdir -p "$dir"
  if [[ ! -f $dir/client.crt ]]; then
    rlog "signing the kubelet's client certificate (system:node:$NODE) with $CLUSTER_DIR/pki/ca.crt"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/client.key" -out "$dir/client.csr" \
      -subj "/O=system:nodes/CN=system:node:$NODE" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >"$dir/client.ext"
    openssl x509 -req -in "$dir/client.csr" -CA "$CLUSTER_DIR/pki/ca.crt" -CAkey "$CLUSTER_DIR/pki/ca.key" \
      -set_serial "0x$(openssl rand -hex 8)" -days 365 -extfile "$dir/client.ext" -out "$dir/client.crt" 2>/dev/null
  fi
  server=$(kctl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  cat >"$D/kubelet/kubeconfig.yaml" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $server
    certificate-authority: $CLUSTER_DIR/pki/ca.crt
users:
- name: system:node:$NODE
  user:
    client-certificate: $dir/client.crt
    client-key: $dir/client.key
contexts:
- name: kubelet
  context: {cluster: $CLUSTER_NAME, user: "system:node:$NODE"}
current-context: kubelet
EOF
}


start_kubelet() {
  local pid port=10250 healthz=10248
  if pid=$(kubelet_pid); then
    rlog "kubelet already running (pid $pid)"
    return
  fi
  while ! port_free "$port" "$NODE_IP" || ! port_free "$port"; do port=$((port + 1)); done
  while ! port_free "$healthz" || ((healthz == port)); do healthz=$((healthz + 1)); done
  mkdir -p "$D/kubelet/root" "$D/kubelet/pod-logs"
  cat >"$D/kubelet/config.yaml" <<EOF
# Written by hack/cluster/realnode.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CLUSTER_DIR/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
podLogsDir: $D/kubelet/pod-logs
registerWithTaints:
- {key: type, value: real, effect: NoSchedule}
maxPods: 30
serializeImagePulls: false
# The node shares the machine's disk, which other work fills (on a CI machine, 2 GB free of 252 GB
# is under 1%): any disk threshold would taint it node.kubernetes.io/disk-pressure and leave the tests'
# pods Pending. 0% turns the disk signals off, as kind's nodes do.
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%", imagefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
EOF
  echo "$port $healthz" >"$D/kubelet/ports"
  rlog "starting kubelet (node $NODE, $NODE_IP:$port, healthz 127.0.0.1:$healthz, log $KUBELET_LOG)"
  start_detached "$KUBELET_PID_FILE" "$KUBELET_LOG" "$TOOLS_BIN/kubelet" --config "$D/kubelet/config.yaml" \
    --kubeconfig "$D/kubelet/kubeconfig.yaml" --root-dir "$D/kubelet/root" --cert-dir "$D/kubelet/pki" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" --node-labels type=real --v=2
}

node_ready() {
  [[ $(kctl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

kubelet_healthy() {
  local port healthz
  read -r port healthz <"$D/kubelet/ports"
  # shellcheck disable=SC2016 # $1 belongs to the inner shell
  [[ $(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "GET /healthz HTTP/1.0\r\n\r\n" >&3; head -n1 <&3' _ "$healthz" 2>/dev/null) == *" 200"* ]]
}

up() {
  local start
  start=$(date +%s)
  check_prerequisites
  build_kubelet
  mkdir -p "$D" "$LOG_DIR"
  save_sysctls
  setup_bridge
  start_containerd
  node_images
  kubelet_credentials
  start_kubelet
  wait_until "the kubelet's healthz (see $KUBELET_LOG)" kubelet_healthy
  kubelet_pid >/dev/null || die "realnode: kubelet exited; see $KUBELET_LOG"
  wait_until "node $NODE Ready (see $KUBELET_LOG)" node_ready
  rlog "node $NODE ready in $(( $(date +%s) - start ))s"
  echo "NODE=$NODE"
}

# remove_pods force-deletes the node's pods and waits (bounded) until the kubelet has stopped their
# containers, so no container, mount or network namespace outlives the node.
remove_pods() {
  kctl get --raw /readyz >/dev/null 2>&1 && kubelet_pid >/dev/null && containerd_pid >/dev/null || return 0
  local pods
  pods=$(kctl get pods -A --field-selector "spec.nodeName=$NODE" -o name 2>/dev/null | wc -l)
  ((pods > 0)) || return 0
  rlog "deleting the node's $pods pods"
  kctl get pods -A --field-selector "spec.nodeName=$NODE" -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name}{"\n"}{end}' |
    while read -r ns name; do
      kctl delete pod -n "$ns" "$name" --grace-period=1 --wait=false >/dev/null 2>&1 || true
    done
  local deadline=$(( $(date +%s) + 60 ))
  while (( $(date +%s) < deadline )); do
    [[ -z $(ctr_ tasks ls -q 2>/dev/null) ]] && return 0
    sleep 1
  done
  rlog "containers still running after 60s; they are killed below"
}

# kill_leftovers ends what the kubelet left: tasks still running, their shims (they outlive containerd).
kill_leftovers() {
  local id pid
  if containerd_pid >/dev/null; then
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 1
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  for pid in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $SOCK" || true); do
    kill -9 "$pid" 2>/dev/null || true
  done
}

unmount_under() {
  local m
  # Deepest first.
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
}

down() {
  local pid
  remove_pods
  if pid=$(kubelet_pid); then stop_pid "realnode: kubelet" "$pid" 15; fi
  rm -f "$KUBELET_PID_FILE"
  kill_leftovers
  if pid=$(containerd_pid); then stop_pid "realnode: containerd" "$pid" 15; fi
  rm -f "$CONTAINERD_PID_FILE"
  unmount_under "$D"
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    rlog "deleting bridge $BRIDGE"
    ip link delete "$BRIDGE" || true
  fi
  # The kubelet's cgroups (kubepods) are left empty; remove them so the next node starts clean.
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    if [[ -d $c ]]; then
      find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
  done
  # Host paths the kubelet hard-codes whatever its --root-dir (device plugins' socket dir, the
  # container log symlinks): removed when it left them empty.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  [[ -d /var/log/containers ]] && find /var/log/containers -maxdepth 1 -lname "$D/*" -delete
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/log/containers 2>/dev/null || true
  restore_sysctls
  if [[ -f $KUBECONFIG_PATH ]] && kctl get --raw /readyz >/dev/null 2>&1; then
    kctl delete node "$NODE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  # Everything but the saved sysctls is disposable; --one-file-system never crosses a mount left behind.
  [[ -d $D ]] && rm -rf --one-file-system "$D"
  rlog "down"
}

status() {
  kubelet_pid >/dev/null && containerd_pid >/dev/null
}

case ${1:-} in
  up) up ;;
  down) down ;;
  import) shift; containerd_pid >/dev/null || die "realnode: containerd is not running: $0 up"; import_archives "$@" ;;
  registry) [[ $# == 2 ]] || die "usage: $0 registry HOST:PORT"; containerd_pid >/dev/null || die "realnode: containerd is not running: $0 up"; plain_http_registry "$2" ;;
  status) status ;;
  *) echo "usage: $0 up|down|status|import ARCHIVE...|registry HOST:PORT" >&2; exit 2 ;;
esac
