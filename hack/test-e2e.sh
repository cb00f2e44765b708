#!/usr/bin/env bash
# make test-e2e: the release tools, every e2e story on the local control plane (or the cluster
# KUBECONFIG names), then the compatibility story alone on a local cluster of the oldest supported
# minor.
#
# The compatibility control plane (kube-apiserver, kube-controller-manager, kube-scheduler and etcd of
# that minor: ~4 minutes of both cores when cold) builds beside the stories, at the lowest CPU and I/O
# priority: the stories spend most of their time waiting on their control plane and leave part of a
# core idle, and nice 19 gives them back whatever CPU they ask for. What is left of the build after
# the stories shows as its own step.
#
# Environment: GO (default go), E2E_PARALLEL (stories at once, default 6). The compatibility minor is
# KUBERNETES_COMPAT_VERSION's in hack/tools/versions.env.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
parallel=${E2E_PARALLEL:-6}
compat=$(sed -n 's/^KUBERNETES_COMPAT_VERSION=v\([0-9]*\.[0-9]*\).*/\1/p' hack/tools/versions.env)

echo "== make test-e2e: the release tools"
hack/tools/build.sh release

echo "== make test-e2e: the stories"
mkdir -p _output
compat_log=_output/compat-build.log
# A session of its own, so that a failure of the stories stops the whole build.
setsid nice -n 19 ionice -c 3 hack/tools/build.sh kubernetes-compat etcd-compat >"$compat_log" 2>&1 &
compat_pid=$!
stop_compat_build() { kill -- -"$compat_pid" 2>/dev/null || true; }
trap stop_compat_build EXIT
echo "(building the compatibility control plane ($compat) beside them, niced: $compat_log)"
$GO test -tags e2e -count=1 -timeout 45m -parallel "$parallel" -v ./test/e2e/ 2>&1 | hack/test-summary.sh

echo "== make test-e2e: the compatibility control plane ($compat), which only its story needs (what was left of its build)"
if ! wait "$compat_pid"; then
  cat "$compat_log"
  echo "the compatibility control plane ($compat) did not build" >&2
  exit 1
fi
trap - EXIT
cat "$compat_log"

echo "== make test-e2e: the compatibility story on $compat"
env -u KUBECONFIG KUBERNETES_COMPAT="$compat" "$GO" test -tags e2e -count=1 -timeout 15m -v -run '^TestCompat' ./test/e2e/ 2>&1 |
  hack/test-summary.sh
