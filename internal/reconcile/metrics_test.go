package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
)

// The series the alerts read exist at zero before anything happened, and a key that waited, failed
// and was retried shows in them under its controller's name.
func TestLoopReportsWaitErrorsAndRetries(t *testing.T) {
	m := metrics.New()
	fails := true
	l := &Loop{Name: "attach", Queue: NewQueue("attach", m), Metrics: m, Sync: func(context.Context, string) (Result, error) {
		if fails {
			fails = false
			return Result{}, errors.New("conflict")
		}
		return Result{}, nil
	}}
	defer l.Queue.ShutDown()

	before := `
# HELP configmap_attacher_queue_retries_total Keys put back into a controller's queue to be retried with backoff, by controller.
# TYPE configmap_attacher_queue_retries_total counter
configmap_attacher_queue_retries_total{controller="attach"} 0
# HELP configmap_attacher_sync_errors_total Failed syncs, by controller and whether they are retried.
# TYPE configmap_attacher_sync_errors_total counter
configmap_attacher_sync_errors_total{controller="attach",retry="false"} 0
configmap_attacher_sync_errors_total{controller="attach",retry="true"} 0
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(before),
		"configmap_attacher_queue_retries_total", "configmap_attacher_sync_errors_total"); err != nil {
		t.Fatalf("before any sync: %v", err)
	}
	if n, err := testutil.GatherAndCount(m.Registry, "configmap_attacher_queue_wait_seconds", "configmap_attacher_queue_longest_running_sync_seconds"); err != nil || n != 2 {
		t.Fatalf("wait and longest-running series before any sync: %d, %v; want one each", n, err)
	}

	l.Queue.Add("ConfigMap/ns/a")
	time.Sleep(20 * time.Millisecond)
	l.ProcessNext(context.Background()) // fails: retried with backoff
	l.ProcessNext(context.Background()) // the retry succeeds

	after := `
# HELP configmap_attacher_queue_retries_total Keys put back into a controller's queue to be retried with backoff, by controller.
# TYPE configmap_attacher_queue_retries_total counter
configmap_attacher_queue_retries_total{controller="attach"} 1
# HELP configmap_attacher_sync_errors_total Failed syncs, by controller and whether they are retried.
# TYPE configmap_attacher_sync_errors_total counter
configmap_attacher_sync_errors_total{controller="attach",retry="false"} 0
configmap_attacher_sync_errors_total{controller="attach",retry="true"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(after),
		"configmap_attacher_queue_retries_total", "configmap_attacher_sync_errors_total"); err != nil {
		t.Fatalf("after a failed sync and its retry: %v", err)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "configmap_attacher_queue_wait_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		// The first wait was at least the 20 ms sleep (a retry waits from when its backoff ends).
		if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.020 {
			t.Fatalf("queue wait: %d samples summing %.3fs; want 2 summing at least 20 ms", h.GetSampleCount(), h.GetSampleSum())
		}
		return
	}
	t.Fatal("no configmap_attacher_queue_wait_seconds")
}
