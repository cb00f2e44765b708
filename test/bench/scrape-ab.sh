#!/usr/bin/env bash
# scrape-ab.sh BIN...: each build of configmap-attacher started against $KUBECONFIG (one at a time, in
# the order given) and, once synced and settled 20 s, scraped N times in a row (default 50): it prints
# the build's CPU and wall time per scrape and its RSS before and after. Alternate the builds (old new
# old new) on a shared machine. Used for docs/benchmarks.md, "eighth run": a scrape at 50,034 Pods.
set -euo pipefail
n=${N:-50}
logs=$(mktemp -d)
for bin in "$@"; do
  metrics=127.0.0.1:$((20000 + RANDOM % 10000))
  probe=127.0.0.1:$((30000 + RANDOM % 10000))
  IS_IN_CLUSTER=false LOG_LEVEL=error "$bin" controller -leader-elect=false \
    -metrics-bind-address "$metrics" -health-probe-bind-address "$probe" >"$logs/$(basename "$bin").log" 2>&1 &
  pid=$!
  t0=$(date +%s.%N)
  until curl -sf "http://$probe/readyz" >/dev/null; do sleep 0.2; done
  synced=$(echo "$(date +%s.%N) - $t0" | bc -l)
  sleep 20
  cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # clock ticks (1/100 s)
  rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status"; }
  r0=$(rss) c0=$(cpu) w0=$(date +%s.%N)
  for _ in $(seq "$n"); do curl -s -o /dev/null "http://$metrics/metrics"; done
  w1=$(date +%s.%N) c1=$(cpu) r1=$(rss)
  protected=$(curl -s "http://$metrics/metrics" | awk '/^configmap_attacher_protected_objects / {print $2}')
  printf '%s: synced %.1f s; %d scrapes: CPU %.1f ms each, wall %.1f ms each; RSS %d -> %d MiB; protected objects %s; load %s\n' \
    "$(basename "$bin")" "$synced" "$n" "$(echo "($c1 - $c0) * 10 / $n" | bc -l)" "$(echo "($w1 - $w0) * 1000 / $n" | bc -l)" \
    "$r0" "$r1" "$protected" "$(cut -d' ' -f1 /proc/loadavg)"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
