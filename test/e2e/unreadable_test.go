//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// unreadableObjects is what a controller's configmap_attacher_unreadable_objects says of kind.
func unreadableObjects(t *testing.T, addr, kind string) float64 {
	t.Helper()
	f, ok := scrape(t, "http://"+addr+"/metrics")["configmap_attacher_unreadable_objects"]
	if !ok {
		return -1
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == kind {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// waitReported waits until the controller reports one unreadable ControllerRevision, in its gauge
// and its log.
func waitReported(t *testing.T, ctl *framework.Process) {
	t.Helper()
	addr := metricsAddress(t, ctl)
	must(t, framework.Eventually(context.Background(), attachWithin, "the unreadable ControllerRevision reported", func(context.Context) (bool, string, error) {
		n := unreadableObjects(t, addr, "ControllerRevision")
		logged := strings.Contains(ctl.Logs(), "skipping an object the caches cannot read")
		return n == 1 && logged, fmt.Sprintf("gauge %v, logged %v", n, logged), nil
	}))
}

// Other controllers (KubeVirt, OpenKruise) write ControllerRevisions of their own shapes. One whose
// data is not a pod template stalls neither the caches nor the deletions of its namespace: the
// controller skips it (it makes no pods), says so, and a deletion there completes; restarted with the
// object present, it syncs.
func TestAnUnreadableControllerRevisionStallsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-unreadable")
	ctl := startController(t, nil, ns)
	cm := configRevision(t, ns, "unused-cm", "v1")
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))

	// Given a ControllerRevision whose data is no pod template, in the namespace,
	odd := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: ns}, Revision: 1,
		Data: runtime.RawExtension{Raw: []byte(`{"spec":"a shape of its own"}`)}}
	_, err := e2e.cluster.Kube.AppsV1().ControllerRevisions(ns).Create(ctx, odd, metav1.CreateOptions{})
	must(t, err)
	// then the controller reports it as skipped.
	waitReported(t, ctl)
	t.Log("then: configmap_attacher_unreadable_objects{kind=\"ControllerRevision\"} is 1 and the log names it")

	// When the protected, unused ConfigMap is deleted,
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, cm, metav1.DeleteOptions{}))
	// then the deletion completes: the live check skips the object instead of failing.
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))

	// When the controller restarts with the object present,
	must(t, ctl.Stop())
	ctl = startController(t, nil, ns)
	// then it syncs, reports the object again, and protects what comes next.
	must(t, ctl.WaitReady(ctx, 2*time.Minute))
	waitReported(t, ctl)
	next := configRevision(t, ns, "next-cm", "v1")
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, next))
}
