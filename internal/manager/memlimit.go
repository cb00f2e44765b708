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

// startGCPercent decides the Go GC's target (GOGC) while the caches fill at start:
//
//	GOGC in the environment          -start-gc-percent   target during the start
//	set (the operator's choice)      any                 none: GOGC throughout
//	not set                          0, or 100 and over  none: GOGC's default (100) throughout
//	not set                          p (1-99)            p, then 100 once the caches synced
func startGCPercent(envSet bool, flag int) (int, bool) {
	if envSet || flag <= 0 || flag >= 100 {
		return 0, false
	}
	return flag, true
}

// startGC lowers the GC's target while the first lists stream in and the leader's first pass is made,
// and returns what ends the start: the default target back, and the start's garbage returned to the
// operating system at once. Run calls it once the caches synced and then either the leader's loops
// queued their first pass and its sweep listed, or the replica stands by: with the target back at the
// caches' sync, that pass and sweep took a start at 150,014 Pods 24-40 MiB beyond its peak so far. A
// start marks far more than the caches keep (at 150,000 Pods ~150 MiB for 87 MiB live: objects being
// decoded, client-go's watch-list stores), and GOGC=100 lets the heap grow to twice what was marked:
// the process's peak, reached once per start and then mostly free but not yet released (the scavenger
// returns it over minutes). Measured at 150,014 Pods (docs/benchmarks.md, "fifth run"): 50 took the
// peak from 342-363 to 270-288 MiB for ~2 s more CPU; 25 held no lower (279-281) for 25 s more; 75
// reached 309; held to the start's end ("sixth run"), 240-253.
func startGC(ctx context.Context, percent int) (done func()) {
	_, envSet := os.LookupEnv("GOGC")
	p, ok := startGCPercent(envSet, percent)
	if !ok {
		return func() {}
	}
	prev := debug.SetGCPercent(p)
	return func() {
		debug.SetGCPercent(prev)
		debug.FreeOSMemory()
		logging.FromContext(ctx).Info("the start is done: the GC's target back from the start's", "GOGC", prev, "start", p)
	}
}
