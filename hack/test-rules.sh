#!/usr/bin/env bash
# Tests the alert rules the chart ships (make test-rules): renders the chart's PrometheusRule with the
# real helm (release configmap-attacher in kube-system, pinning and the config trigger on, so every alert is in it), keeps its
# spec (a Prometheus rule file: `groups:`) in _output/rules/configmap-attacher.rules.yaml, checks it
# with promtool and runs test/rules/configmap-attacher.test.yaml, which fires every alert.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TOOLS_OUT:-$ROOT/_output/tools}/bin
OUT=$ROOT/_output/rules
mkdir -p "$OUT"
rules=$OUT/configmap-attacher.rules.yaml

# The spec's lines, two spaces less indented: the template keeps `spec:` last and unindented.
"$BIN/helm" template configmap-attacher "$ROOT/charts/configmap-attacher" -n kube-system \
  --set metrics.prometheusRule.enabled=true --set pinning.enabled=true --set reloaderAnnotations=true \
  --show-only templates/prometheusrule.yaml |
  awk 'found { sub(/^  /, ""); print } /^spec:$/ { found = 1 }' >"$rules.tmp"
grep -q '^groups:' "$rules.tmp" || { echo "test-rules: no groups in the rendered PrometheusRule" >&2; exit 1; }
mv "$rules.tmp" "$rules"

"$BIN/promtool" check rules "$rules"
"$BIN/promtool" test rules "$ROOT/test/rules/configmap-attacher.test.yaml"
