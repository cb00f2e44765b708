package trigger

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// counters are the trigger's own series, on the process's registry (nil without one: unit tests).
type counters struct {
	keyChangedTotal *prometheus.CounterVec
	waitedTooLong   *prometheus.CounterVec
	heldBackTotal   *prometheus.CounterVec
}

func newCounters(m *metrics.Metrics) counters {
	if m == nil {
		return counters{}
	}
	c := counters{
		keyChangedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_hash_key_changed_total",
			Help: "Records of the config trigger found made with another hash key than the controller's (its Secret deleted, replaced, " +
				"or read from another namespace), by workload kind and whether every Secret content was carried over to the new key " +
				"(result=kept) or some could not be and count as changed (result=lost: revisions start for them).",
		}, []string{"kind", "result"}),
		waitedTooLong: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_max_wait_total",
			Help: "Changes the config trigger acted on after -config-max-wait, by workload kind and what kept them waiting " +
				"(settle: the content kept changing; snapshot: the pinning snapshot of the newest revision never came).",
		}, []string{"kind", "waited_for"}),
		heldBackTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_held_back_total",
			Help: "Workloads the config trigger held back because a Secret they read changed while its hash key could not be read, by workload kind.",
		}, []string{"kind"}),
	}
	m.Registry.MustRegister(c.keyChangedTotal, c.waitedTooLong, c.heldBackTotal)
	return c
}

// count adds one to a series of workload w's kind (and the labels after it).
func (c *Controller) count(v *prometheus.CounterVec, w *caches.User, labels ...string) {
	if v != nil {
		v.WithLabelValues(append([]string{string(w.Kind())}, labels...)...).Inc()
	}
}
