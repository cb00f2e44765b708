// Package metrics holds the Prometheus series of the controller process, on a registry of its own (no
// global state): internal/manager serves it, the controllers record into it.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Metrics are the series.
type Metrics struct {
	Registry  *prometheus.Registry
	attaches  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	reconcile *prometheus.HistogramVec
	attachAge prometheus.Histogram
	isLeader  prometheus.Gauge
	admission *prometheus.HistogramVec
	apiCalls  *prometheus.CounterVec
}

// New registers the series plus the Go and process collectors (process_resident_memory_bytes is what
// the benchmark reads for RSS).
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		attaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_attach_total", Help: "ownerReferences written, by config kind.",
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_sync_errors_total", Help: "Failed syncs, by controller and whether they are retried.",
		}, []string{"controller", "retry"}),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "configmap_attacher_reconcile_duration_seconds", Help: "Time to sync one key, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"controller"}),
		attachAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "configmap_attacher_attach_delay_seconds", Help: "Revision creation to ownerReference written.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "configmap_attacher_leader", Help: "1 while this replica holds the leader Lease.",
		}),
		admission: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "configmap_attacher_webhook_admission_duration_seconds", Help: "Time to decide one pod admission, by outcome (pinned, unchanged, error: undecided, the failurePolicy applies).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"outcome"}),
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_webhook_api_calls_total", Help: "API requests made while admitting a pod (the pod path reads caches; these are the exceptions), by call.",
		}, []string{"call"}),
	}
	reg.MustRegister(m.attaches, m.errors, m.reconcile, m.attachAge, m.isLeader, m.admission, m.apiCalls,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gauge registers a gauge read from value at scrape time (queue depths, held objects).
func (m *Metrics) Gauge(name, help string, value func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// Synced records one sync of a controller: its duration and, on error, whether it is retried.
func (m *Metrics) Synced(controller string, d time.Duration, err error, retried bool) {
	m.reconcile.WithLabelValues(controller).Observe(d.Seconds())
	if err == nil {
		return
	}
	retry := "false"
	if retried {
		retry = "true"
	}
	m.errors.WithLabelValues(controller, retry).Inc()
}

// Attached records an ownerReference written, and how long after its revision appeared.
func (m *Metrics) Attached(kind refs.Kind, sinceCreation time.Duration) {
	m.attaches.WithLabelValues(string(kind)).Inc()
	m.attachAge.Observe(sinceCreation.Seconds())
}

// Leading records whether this replica holds the Lease.
func (m *Metrics) Leading(yes bool) {
	if yes {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
	}
}

// Admitted records one pod admission decided by the pinning webhook.
func (m *Metrics) Admitted(outcome string, d time.Duration) {
	m.admission.WithLabelValues(outcome).Observe(d.Seconds())
}

// WebhookAPICall records an API request made on the pod path (a cache miss, a snapshot taken there).
func (m *Metrics) WebhookAPICall(call string) { m.apiCalls.WithLabelValues(call).Inc() }
