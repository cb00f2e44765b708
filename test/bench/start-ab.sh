#!/usr/bin/env bash
# start-ab.sh BIN...: each build of configmap-attacher started anew against $KUBECONFIG (a kwokctl
# cluster: kube-apiserver's pid file beside it), one at a time, in the order given (repeat a build to
# start it again; alternate builds on a shared machine). For each start it prints the load average
# when it started, the time to caches synced (/readyz), its CPU and kube-apiserver's meanwhile, its
# peak RSS (VmHWM) at ready and AFTER seconds later (default 60), and its RSS then. With PROFILES=DIR
# it also keeps a CPU profile of each start's first PROFILE_SECONDS (default 30) from both sides, ours
# (started with -profiling) and kube-apiserver's (/debug/pprof through the kubeconfig), as
# DIR/<start>-<build>-{ours,apiserver}.cpu.pprof, and ours' heap profile every 2 s until ready
# (DIR/<start>-<build>-heap-NNN.pprof: what the last collection marked). The environment is the
# builds' (GOMEMLIMIT, GODEBUG, ...), not kubectl's. Used for docs/benchmarks.md, "ninth run" and
# "tenth run": starts at 150,014 Pods.
set -euo pipefail
after=${AFTER:-60}
apiserver=$(cat "$(dirname "$KUBECONFIG")/pids/kube-apiserver.pid")
logs=$(mktemp -d)
echo "each start's output (e.g. GODEBUG=gctrace=1's lines): $logs/<start>.log" >&2
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks (1/100 s)
kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
profiles=${PROFILES:-}
seconds=${PROFILE_SECONDS:-30}
kubectl=$(dirname "$0")/../../_output/tools/bin/kubectl
[[ -z $profiles ]] || mkdir -p "$profiles"
i=0
for bin in "$@"; do
  i=$((i + 1))
  metrics=127.0.0.1:$((20000 + RANDOM % 10000))
  probe=127.0.0.1:$((30000 + RANDOM % 10000))
  load=$(cut -d' ' -f1 /proc/loadavg)
  a0=$(cpu "$apiserver")
  t0=$(date +%s.%N)
  IS_IN_CLUSTER=false LOG_LEVEL=error "$bin" controller -leader-elect=false ${profiles:+-profiling} \
    -metrics-bind-address "$metrics" -health-probe-bind-address "$probe" >"$logs/$i.log" 2>&1 &
  pid=$!
  profiling=()
  if [[ -n $profiles ]]; then
    name="$profiles/$i-$(basename "$bin")"
    env -u GODEBUG -u GOMEMLIMIT -u GOGC -u GOMAXPROCS "$kubectl" get --raw "/debug/pprof/profile?seconds=$seconds" >"$name-apiserver.cpu.pprof" &
    profiling+=($!)
    (until curl -sf -o "$name-ours.cpu.pprof" "http://$metrics/debug/pprof/profile?seconds=$seconds"; do sleep 0.1; done) &
    profiling+=($!)
    # the heap as the last collection marked it, every 2 s until ready: where the start's peak is
    (n=0; while kill -0 "$pid" 2>/dev/null && ! curl -sf "http://$probe/readyz" >/dev/null; do
      curl -sf -o "$name-heap-$(printf %03d $n).pprof" "http://$metrics/debug/pprof/heap" && n=$((n + 1)); sleep 2
    done) &
    profiling+=($!)
  fi
  until curl -sf "http://$probe/readyz" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "$bin exited before ready:" >&2; tail -20 "$logs/$i.log" >&2; exit 1; }
    sleep 0.2
  done
  synced=$(echo "$(date +%s.%N) - $t0" | bc -l)
  c1=$(cpu "$pid") a1=$(cpu "$apiserver") hwm1=$(kib "$pid" VmHWM)
  sleep "$after"
  hwm2=$(kib "$pid" VmHWM) rss2=$(kib "$pid" VmRSS)
  printf '%s (start %d, load %s): synced %.1f s; CPU to synced: ours %.1f s, kube-apiserver %.1f s; peak RSS at ready %.1f MiB, %d s after %.1f MiB; RSS then %.1f MiB\n' \
    "$(basename "$bin")" "$i" "$load" "$synced" "$(echo "$c1 / 100" | bc -l)" "$(echo "($a1 - $a0) / 100" | bc -l)" \
    "$(echo "$hwm1 / 1024" | bc -l)" "$after" "$(echo "$hwm2 / 1024" | bc -l)" "$(echo "$rss2 / 1024" | bc -l)"
  ((${#profiling[@]} == 0)) || wait "${profiling[@]}" 2>/dev/null || true
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
