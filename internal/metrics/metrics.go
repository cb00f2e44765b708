// Package metrics holds the Prometheus series of the controller process, on a registry of its own (no
// global state): internal/manager serves it, the controllers record into it.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Admission outcomes of the pinning webhook: the values of the outcome label.
const (
	OutcomePinned    = "pinned"
	OutcomeUnchanged = "unchanged"
	OutcomeError     = "error"
)

// API requests the pinning webhook makes on the pod path: the values of the call label.
const (
	CallTakeSnapshot          = "take_snapshot"
	CallGetControllerRevision = "get_controllerrevision"
	CallGetReplicaSet         = "get_replicaset"
	CallGetNamespace          = "get_namespace"
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
	started   *prometheus.CounterVec
	overruled *prometheus.CounterVec
	notKept   *prometheus.CounterVec
	queueWait *prometheus.HistogramVec
	longest   *prometheus.GaugeVec
	retries   *prometheus.CounterVec
	skipped   *prometheus.CounterVec
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
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_revisions_total",
			Help: "Revisions the config trigger started by writing the config-hash annotation, by workload kind and action (new: a new revision; back: back to an existing one).",
		}, []string{"kind", "action"}),
		overruled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_overruled_total",
			Help: "Times someone else changed a triggered workload's template back (a tool or user reverting the config-hash annotation, a rollback) or owned the annotation, by workload kind: the trigger then waits for the next content change.",
		}, []string{"kind"}),
		notKept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_config_record_not_kept_total",
			Help: "Times the config trigger could not write a workload's record (a quota, an admission policy, RBAC, a foreign object at its name), by workload kind: it decides from what it holds in memory, and a restart loses that.",
		}, []string{"kind"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "configmap_attacher_queue_wait_seconds", Help: "Time a key waited in a controller's queue before a worker took it, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"controller"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "configmap_attacher_queue_longest_running_sync_seconds", Help: "How long the oldest sync still running has been running, by controller (a stuck worker grows it).",
		}, []string{"controller"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_queue_retries_total", Help: "Keys put back into a controller's queue to be retried with backoff, by controller.",
		}, []string{"controller"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "configmap_attacher_live_check_unreadable_total",
			Help: "Objects in-use protection's live check skipped because they cannot be read as a pod template (they make no pods), by kind.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.attaches, m.errors, m.reconcile, m.attachAge, m.isLeader, m.admission, m.apiCalls, m.started, m.overruled, m.notKept,
		m.queueWait, m.longest, m.retries, m.skipped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series an alert divides or compares exist from the start, at zero: a rate over a series that
	// appears only with its first error is no rate at all, and an alert on it never fires.
	for _, k := range refs.Kinds() {
		m.attaches.WithLabelValues(string(k))
	}
	for _, o := range []string{OutcomePinned, OutcomeUnchanged, OutcomeError} {
		m.admission.WithLabelValues(o)
	}
	for _, c := range []string{CallTakeSnapshot, CallGetControllerRevision, CallGetReplicaSet, CallGetNamespace} {
		m.apiCalls.WithLabelValues(c)
	}
	return m
}

// Controller makes a controller's series exist at zero before its first sync, error or retry (see New).
func (m *Metrics) Controller(name string) {
	m.reconcile.WithLabelValues(name)
	for _, retry := range []string{"true", "false"} {
		m.errors.WithLabelValues(name, retry)
	}
	m.retries.WithLabelValues(name)
	m.queueWait.WithLabelValues(name)
	m.longest.WithLabelValues(name)
}

// Queues returns the provider of a controller queue's metrics (client-go's workqueue calls it with the
// queue's name, which is the controller's): how long keys wait, the longest sync still running, and
// retries. Depth has gauges of its own.
func (m *Metrics) Queues() workqueue.MetricsProvider { return queueMetrics{m} }

type queueMetrics struct{ m *Metrics }

type noop struct{}

func (noop) Inc()            {}
func (noop) Dec()            {}
func (noop) Set(float64)     {}
func (noop) Observe(float64) {}

func (q queueMetrics) NewDepthMetric(string) workqueue.GaugeMetric            { return noop{} }
func (q queueMetrics) NewAddsMetric(string) workqueue.CounterMetric           { return noop{} }
func (q queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noop{} }
func (q queueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noop{}
}

func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.m.queueWait.WithLabelValues(name)
}

func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.m.longest.WithLabelValues(name)
}

func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.m.retries.WithLabelValues(name)
}

// Gauge registers a gauge read from value at scrape time (queue depths, held objects).
func (m *Metrics) Gauge(name, help string, value func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// GaugeByLabel registers a gauge read at scrape time with one series per value of label, each there
// from the start (at zero, as an alert needs it).
func (m *Metrics) GaugeByLabel(name, help, label string, values []string, value func(string) float64) {
	for _, v := range values {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: v}},
			func() float64 { return value(v) }))
	}
}

// LiveCheckSkipped records n objects of kind the live check skipped because they cannot be read.
func (m *Metrics) LiveCheckSkipped(kind string, n int) {
	m.skipped.WithLabelValues(kind).Add(float64(n))
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

// RevisionStarted records a config-hash write; back is true when it returns to an existing revision.
func (m *Metrics) RevisionStarted(kind string, back bool) {
	action := "new"
	if back {
		action = "back"
	}
	m.started.WithLabelValues(kind, action).Inc()
}

// Overruled records that someone else changed a triggered workload's template back, or owns the
// annotation.
func (m *Metrics) Overruled(kind string) { m.overruled.WithLabelValues(kind).Inc() }

// RecordNotKept records that a triggered workload's record could not be written.
func (m *Metrics) RecordNotKept(kind string) { m.notKept.WithLabelValues(kind).Inc() }
