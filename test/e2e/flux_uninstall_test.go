//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Flux's drift detection and an uninstall by Flux against what we write on the chart's ConfigMaps
// (ownerReferences to their ReplicaSets, the in-use finalizer): reconciliation after reconciliation,
// Flux sees no drift and corrects nothing, and our references stay; deleting the HelmRelease uninstalls
// the release, which leaves the ConfigMaps to Helm's keep policy, and the garbage collector deletes them
// with their ReplicaSets once no pod uses them. Nothing in use is lost on the way, nothing leaks.
func TestFluxDriftDetectionAndUninstallKeepOurReferences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// drift detection runs on every reconciliation
	s, rev0 := givenFluxBaseApp(t, "e2e-flux-uninstall", 10*time.Second)
	ns, hr := s.ns, s.hr
	t.Log("given: then a config change, promoted")
	rev1 := s.deploy(1, rev0)
	s.spotReplacement(rev0, rev1)
	s.promote(rev1, rev0)

	before := map[string]*metav1.ObjectMeta{}
	for _, cm := range []string{rev0.cm, rev1.cm} {
		m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, cm)
		must(t, err)
		before[cm] = m
	}
	const rounds = 3
	t.Logf("when: Flux reconciles the release %d more times (flux reconcile helmrelease), checking for drift each time", rounds)
	for i := 0; i < rounds; i++ {
		token, err := e2e.cluster.RequestReconcile(ctx, ns, hr.Name)
		must(t, err)
		_, err = e2e.cluster.WaitHelmRelease(ctx, fluxWait, ns, hr.Name, "to handle reconcile request "+token, func(st framework.FluxStatus) bool {
			return st.HandledAt == token && st.Ready()
		})
		must(t, err)
	}
	expectNoDrift(t, ns, hr.Name)
	for cm, m := range before {
		now, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, cm)
		must(t, err)
		if !sameOwners(m.OwnerReferences, now.OwnerReferences) || !slices.Equal(m.Finalizers, now.Finalizers) {
			t.Fatalf("%s changed under Flux: ownerReferences %v -> %v, finalizers %v -> %v", cm, m.OwnerReferences, now.OwnerReferences, m.Finalizers, now.Finalizers)
		}
		if !api.HasFinalizer(now.Finalizers, api.InUseFinalizer) {
			t.Fatalf("%s lost %s", cm, api.InUseFinalizer)
		}
	}
	t.Logf("then: %s and %s keep their ownerReferences and the in-use finalizer, exactly as before", rev0.cm, rev1.cm)

	t.Log("when: the HelmRelease is deleted (Flux uninstalls the release)")
	start := time.Now()
	must(t, e2e.cluster.DeleteHelmRelease(ctx, fluxWait, ns, hr.Name))
	t.Logf("then: the uninstall completed in %s", time.Since(start).Round(100*time.Millisecond))
	must(t, framework.Eventually(ctx, fluxWait, "the Rollout and its ReplicaSets to be gone", func(ctx context.Context) (bool, string, error) {
		rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(rss.Items) == 0, fmt.Sprintf("%d ReplicaSets", len(rss.Items)), nil
	}))
	for _, cm := range []string{rev0.cm, rev1.cm} {
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
	}
	held, err := e2e.cluster.Events(ctx, ns, refs.ConfigMap, rev1.cm, "DeletionHeld")
	must(t, err)
	t.Logf("then: Helm kept %s and %s (helm.sh/resource-policy: keep); the garbage collector deleted them with their ReplicaSets "+
		"(in-use protection held %s %d time(s) while pods still read it)", rev0.cm, rev1.cm, rev1.cm, len(held))
	must(t, framework.Eventually(ctx, freedWithin, "no revisioned ConfigMap left", func(ctx context.Context) (bool, string, error) {
		got, err := s.revisionedConfigMaps(ctx)
		return len(got) == 0, fmt.Sprint(got), err
	}))
	t.Log("then: no revisioned ConfigMap is left in the namespace")
}

// sameOwners reports whether two ownerReference lists name the same owners (by uid), in any order.
func sameOwners(a, b []metav1.OwnerReference) bool {
	uids := func(l []metav1.OwnerReference) []string {
		var out []string
		for _, o := range l {
			out = append(out, string(o.UID))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(uids(a), uids(b))
}
