#!/usr/bin/env bash
# make soak-short: the webhook soak (seed 14875) and the admission policy soak (seed 2638), each on a
# local cluster of its own and both at once: a soak mostly waits (on rollouts, the garbage collector,
# its faults), so two share the machine's cores. Each line is prefixed with its soak; the exit code is
# the first failure's. With KUBECONFIG they run one after the other on that cluster (their namespaces
# are the same).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}

soaks=(
  "webhook|-steps 35 -seed 14875 -cluster soak"
  "policy|-steps 35 -seed 2638 -pinning-admission=policy -cluster soak-policy"
)

if [[ -n ${KUBECONFIG:-} ]]; then
  for s in "${soaks[@]}"; do
    # shellcheck disable=SC2086 # the flags split on purpose
    $GO run ./test/soak ${s#*|} -kubeconfig "$KUBECONFIG"
  done
  exit 0
fi

mkdir -p _output/soak
$GO build -o _output/soak/soak ./test/soak
pids=()
for s in "${soaks[@]}"; do
  name=${s%%|*}
  # shellcheck disable=SC2086 # the flags split on purpose
  (set -o pipefail; _output/soak/soak ${s#*|} 2>&1 | sed -u "s/^/[$name] /") &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || { r=$?; ((rc)) || rc=$r; }
done
exit "$rc"
