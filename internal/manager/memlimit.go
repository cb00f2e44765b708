package manager

import (
	"context"
	"os"

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
