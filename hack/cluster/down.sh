#!/usr/bin/env bash
# Stops the Argo Rollouts controller and deletes the local cluster CLUSTER_NAME (components,
# etcd data, kubeconfig, logs). Idempotent: fine when nothing runs. See hack/cluster/README.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop_rollouts_controller

# A real node (realnode.sh) first: its containers, mounts and bridge must not outlive the cluster.
if [[ -d $CLUSTER_DIR/realnode ]]; then
  CLUSTER_NAME=$CLUSTER_NAME "$ROOT/hack/cluster/realnode.sh" down
fi

if [[ -d $CLUSTER_DIR ]]; then
  [[ -x $TOOLS_BIN/kwokctl ]] || die "$TOOLS_BIN/kwokctl is missing (needed to stop the cluster's processes): run hack/tools/build.sh kwok"
  log "kwokctl delete cluster"
  # kwokctl removes the cluster's context from --kubeconfig (default ~/.kube/config, which up.sh
  # never touched, and it rejects an empty value): point it at the cluster's own kubeconfig, which
  # goes away with the cluster anyway.
  kwokctl delete cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_PATH" >&2
  # kwokctl leaves the directory behind when something in it is not its own; nothing in it is
  # worth keeping.
  rm -rf "$CLUSTER_DIR"
else
  log "no cluster at $CLUSTER_DIR: nothing to delete"
fi
