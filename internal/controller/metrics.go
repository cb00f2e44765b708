package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Metrics are the controller's Prometheus series, on a registry of their own (no global state).
type Metrics struct {
	Registry   *prometheus.Registry
	attaches   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	reconcile  prometheus.Histogram
	attachAge  prometheus.Histogram
	isLeader   prometheus.Gauge
	queueDepth func(func() int)
}

// NewMetrics registers the series plus the Go and process collectors (process_resident_memory_bytes
// is what the benchmark reads for RSS).
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		attaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_attach_total", Help: "ownerReferences written, by config kind.",
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_sync_errors_total", Help: "Failed ReplicaSet syncs, by whether they are retried.",
		}, []string{"retry"}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "configmap_attacher_reconcile_duration_seconds", Help: "Time to sync one ReplicaSet.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		attachAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "configmap_attacher_attach_delay_seconds", Help: "ReplicaSet creation to ownerReference written.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "configmap_attacher_leader", Help: "1 while this replica holds the leader Lease.",
		}),
	}
	reg.MustRegister(m.attaches, m.errors, m.reconcile, m.attachAge, m.isLeader,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.queueDepth = func(length func() int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "configmap_attacher_queue_depth", Help: "ReplicaSet keys waiting to be synced.",
		}, func() float64 { return float64(length()) }))
	}
	return m
}

func (m *Metrics) observeSync(d time.Duration, err error) {
	m.reconcile.Observe(d.Seconds())
	switch {
	case err == nil:
	case errors.Is(err, attach.ErrInvalid):
		m.errors.WithLabelValues("false").Inc()
	default:
		m.errors.WithLabelValues("true").Inc()
	}
}

func (m *Metrics) attached(kind refs.Kind, sinceCreation time.Duration) {
	m.attaches.WithLabelValues(string(kind)).Inc()
	m.attachAge.Observe(sinceCreation.Seconds())
}

func (m *Metrics) leading(yes bool) {
	if yes {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
	}
}
