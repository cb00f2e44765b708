package manager

import (
	"context"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// setMemoryLimit gives the Go runtime a soft memory limit (GOMEMLIMIT) of ratio × the container's
// memory limit, read from its cgroup, as Prometheus's --auto-gomemlimit does: the heap is collected
// before the container reaches its limit, instead of growing to twice what the caches hold. Not the
// whole limit: what the runtime does not manage, the binary's mapped pages first, counts towards the
// container's limit too. The scale benchmark measured ours 24-34 MiB above its soft limit wherever it
// bound, about the same at every size: more than the tenth Prometheus's ratio (0.9) leaves of a limit
// under ~340Mi, where a start that fills the soft limit would reach the container's limit; the
// default -memory-limit-ratio (0.8) leaves 64 MiB of a 320Mi limit.
// GOMEMLIMIT in the environment wins; no cgroup limit, no soft limit.
func setMemoryLimit(ctx context.Context, ratio float64) {
	if ratio <= 0 {
		return
	}
	log := logging.FromContext(ctx)
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		log.Info("soft memory limit from the environment", "GOMEMLIMIT", v)
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Info("no soft memory limit: the container's memory limit could not be read", "err", err)
	case limit < 1<<62: // no cgroup limit: no soft limit either
		log.Info("soft memory limit (GOMEMLIMIT) from the container's memory limit", "bytes", limit, "ratio", ratio)
	}
}

// gcPercents decides the Go GC's targets (GOGC): during the start (the caches filling, a leader's
// first pass) and after it. A start never collects less often than the process will after it.
//
//	GOGC in the environment   -start-gc-percent s   -gc-percent g   during the start   after it
//	set (the operator's)      any                   any             GOGC's             GOGC's (nothing set)
//	not set                   0                     0               100                100 (nothing set)
//	not set                   0                     g               g                  g
//	not set                   s                     0               min(s, 100)        100
//	not set                   s                     g               min(s, g)          g
func gcPercents(envSet bool, start, steady int) (during, after int, set bool) {
	if envSet || (start <= 0 && steady <= 0) {
		return 0, 0, false
	}
	after = steady
	if after <= 0 {
		after = 100 // Go's default
	}
	during = after
	if start > 0 && start < after {
		during = start
	}
	return during, after, true
}

// startGC sets the GC's target for the start, and returns what ends the start: the target for after
// it, and the start's garbage returned to the operating system at once. Run calls it once the caches
// synced and then either the leader's loops queued their first pass and its sweep listed, or the
// replica stands by: with the target back at the caches' sync, that pass and sweep took a start at
// 150,014 Pods 24-40 MiB beyond its peak so far. A start marks far more than the caches keep (at
// 150,000 Pods ~150 MiB for 87 MiB live: objects being decoded, client-go's watch-list stores), and
// GOGC=100 lets the heap grow to twice what was marked: the process's peak, reached once per start and
// then mostly free but not yet released (the scavenger returns it over minutes). Measured at 150,014
// Pods (docs/benchmarks.md, "fifth run"): 50 took the peak from 342-363 to 270-288 MiB for ~2 s more
// CPU; 25 held no lower (279-281) for 25 s more; 75 reached 309; held to the start's end ("sixth
// run"), 240-253. After the start the same doubling applies to every event the watch brings: at
// 150,000 Pods arriving at once, a live heap of ~110 MiB peaked at 286 MiB at GOGC=100 ("eleventh
// run"), which is what -gc-percent lowers where no container limit gives a soft one.
func startGC(ctx context.Context, start, steady int) (done func()) {
	_, envSet := os.LookupEnv("GOGC")
	during, after, ok := gcPercents(envSet, start, steady)
	if !ok {
		return func() {}
	}
	debug.SetGCPercent(during)
	return func() {
		debug.SetGCPercent(after)
		debug.FreeOSMemory()
		logging.FromContext(ctx).Info("the start is done: the GC's target from now on", "GOGC", after, "start", during)
	}
}
