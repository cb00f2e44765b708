//go:build e2e

package e2e

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Flux with a chart whose config change reaches no pod by itself (docs/flux.md, recipe 3): the public
// grafana chart checksums its own config, but not a ConfigMap added through its values
// (extraObjects) and mounted with extraConfigmapMounts, the usual place for a team's own files. A
// values change that edits only that ConfigMap makes Flux change it in place and nothing else.

var (
	customV1 = map[string]string{"custom.ini": "[feature_toggles]\nenable = publicDashboards\n"}
	customV2 = map[string]string{"custom.ini": "[feature_toggles]\nenable = publicDashboards,faultyToggle\n"}
)

// grafanaCustomValues are grafanaFluxValues (grafana's pod template run by the write-up's Rollout
// through workloadRef) plus the ConfigMap grafana-custom, pinned, holding custom, mounted into
// grafana's container.
func grafanaCustomValues(custom map[string]string) map[string]any {
	v := grafanaFluxValues("info")
	data := map[string]any{}
	for k, s := range custom {
		data[k] = s
	}
	v["extraObjects"] = append(v["extraObjects"].([]any), map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "grafana-custom", "labels": map[string]any{api.PinLabel: api.PinValue}},
		"data":     data,
	})
	v["extraConfigmapMounts"] = []any{map[string]any{
		"name": "custom", "configMap": "grafana-custom", "mountPath": "/etc/grafana/custom", "readOnly": true,
	}}
	return v
}

// reloaderAutoPatch is the recipe's post-renderer: a kustomize patch adding Reloader's annotation to
// the metadata of the chart's workload (here the Rollout; for a chart's Deployment: kind Deployment).
func reloaderAutoPatch(kind, apiVersion, name string) []any {
	return []any{map[string]any{"kustomize": map[string]any{"patches": []any{map[string]any{
		"target": map[string]any{"kind": kind, "name": name},
		"patch": "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata:\n  name: " + name +
			"\n  annotations:\n    " + api.ReloaderAuto + `: "true"` + "\n",
	}}}}}
}

// The canary starts by itself through Flux, without drift: a HelmRelease with drift detection enabled
// (checked every 10 s) and a post-renderer adding Reloader's annotation to the Rollout; the controller
// runs with -pinning alone. A values change edits only grafana-custom. Flux's upgrade changes that
// ConfigMap and nothing else, the controller writes its config-hash on the template (the chart's
// Deployment graf-grafana, which the Rollout runs through workloadRef), the canary starts and pauses,
// and a spot-replaced stable pod reads the old content. For two minutes, reconciliation after
// reconciliation, Flux reports no drift and corrects nothing: the template changes exactly once, ours.
func TestFluxConfigStartsTheCanaryWithoutDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-flux-config-starts")
	useFlux(t)
	startTriggerController(t, ns)
	versions := fluxRepository(t, ns, "charts/grafana")
	hr := framework.HelmRelease{Name: "graf", Namespace: ns, Repository: ns, Chart: "grafana", Version: versions["grafana"],
		Values: grafanaCustomValues(customV1), Interval: 10 * time.Second,
		Spec: map[string]any{
			"postRenderers":    reloaderAutoPatch("Rollout", "argoproj.io/v1alpha1", "grafana"),
			"driftDetection":   map[string]any{"mode": "enabled"},
			"healthCheckExprs": rolloutHealth,
		}}
	r := pinnedRollout{t: t, ns: ns, config: "grafana-custom", others: []string{"graf-grafana"}}
	ref := workload.Ref{Kind: workload.Rollout, Namespace: ns, Name: "grafana"}

	t.Logf("given: grafana installed by HelmRelease %s (drift detection enabled, every %s; a post-renderer adds %s to the Rollout), "+
		"grafana-custom pinned, the Rollout at 3 pods", hr.Name, hr.Interval, api.ReloaderAuto)
	givenHelmRelease(t, hr)
	st, err := e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, ns, hr.Name)
	must(t, err)
	rs1 := waitCurrentRevision(t, ref, nil, 3, true)
	r.expectReads(rs1, customV1)
	ro, err := e2e.cluster.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, "grafana", metav1.GetOptions{})
	must(t, err)
	if ro.GetAnnotations()[api.ReloaderAuto] != "true" {
		t.Fatalf("the Rollout's annotations are %v: the post-renderer did not add %s", ro.GetAnnotations(), api.ReloaderAuto)
	}
	generation := ro.GetGeneration() // its spec, which nothing may change: the template is the Deployment's
	if v, has, err := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "graf-grafana", api.ConfigHashAnnotation); err != nil || has {
		t.Fatalf("graf-grafana's template carries %s=%q (%v) before any config change: opting in starts nothing", api.ConfigHashAnnotation, v, err)
	}
	t.Logf("then: %s", describeFlux(st))
	tw, err := e2e.cluster.WatchTemplate(ctx, framework.DeploymentGVR, ns, "graf-grafana")
	must(t, err)

	t.Log("when: a values change edits only grafana-custom (the chart's checksum annotations do not cover it)")
	before, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "graf-grafana", metav1.GetOptions{})
	must(t, err)
	must(t, e2e.cluster.SetHelmReleaseValues(ctx, ns, hr.Name, grafanaCustomValues(customV2)))
	st, err = e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, ns, hr.Name)
	if err != nil {
		t.Fatalf("%v\n(did the upgrade's wait see our canary? Flux's wait on a config-only upgrade must end before the settle window does)", err)
	}
	t.Logf("then: %s", describeFlux(st))
	cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "grafana-custom", metav1.GetOptions{})
	must(t, err)
	if !maps.Equal(cm.Data, customV2) {
		t.Fatalf("grafana-custom after the upgrade holds %v, want %v", cm.Data, customV2)
	}
	rs2 := waitCurrentRevision(t, ref, rs1, 1, false)
	if hashOf(rs2) == "" {
		t.Fatalf("canary %s carries no %s: the chart's own template did not change, so only our annotation can have started it", rs2.Name, api.ConfigHashAnnotation)
	}
	if got := rs2.Spec.Template.Annotations["checksum/config"]; got != before.Spec.Template.Annotations["checksum/config"] {
		t.Fatalf("the chart's checksum/config changed (%s -> %s): the values change was not config-only", before.Spec.Template.Annotations["checksum/config"], got)
	}
	r.expectReads(rs2, customV2)
	must(t, e2e.cluster.WaitPaused(ctx, fluxWait, ns, "grafana"))
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rs1, 2))
	expectEvents(t, ns, "Rollout", "grafana", trigger.ReasonStarted, "ConfigMap/grafana-custom changed", api.ConfigHashAnnotation)
	expectOnlyOurAnnotation(t, framework.DeploymentGVR, ns, "graf-grafana")
	t.Logf("then: canary %s started by the controller (%s=%s on graf-grafana's template), paused at one pod", rs2.Name, api.ConfigHashAnnotation, hashOf(rs2))

	t.Log("when: a spot node takes a pod of the stable revision")
	r.spotKill(rs1, 2)
	r.expectReads(rs1, customV1)
	t.Log("then: its replacement reads the stable revision's snapshot, though grafana-custom (as Flux applied it) holds the new content")

	t.Logf("then, for %s: Flux reconciles (every %s, and on request) and finds no drift", watchFor, hr.Interval)
	rounds := fluxReconcilesWithoutDrift(t, ns, hr.Name, "Rollout/"+ns+"/grafana", watchFor)
	changes := tw.Stop()
	if len(changes) != 1 {
		t.Fatalf("graf-grafana's template changed %d times after the values change, want exactly 1 (ours): Flux corrected it or we fought:\n%s",
			len(changes), strings.Join(changes, "\n"))
	}
	if v, _, err := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "graf-grafana", api.ConfigHashAnnotation); err != nil || v != hashOf(rs2) {
		t.Fatalf("graf-grafana's %s is %q (%v), want %q: the template was reverted", api.ConfigHashAnnotation, v, err, hashOf(rs2))
	}
	expectOnlyOurAnnotation(t, framework.DeploymentGVR, ns, "graf-grafana")
	ro, err = e2e.cluster.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, "grafana", metav1.GetOptions{})
	must(t, err)
	if _, found, _ := unstructured.NestedFieldNoCopy(ro.Object, "spec", "template"); found {
		t.Fatal("the Rollout got a spec.template: with workloadRef the template is the Deployment's")
	}
	if ro.GetGeneration() != generation {
		t.Fatalf("the Rollout's generation went %d -> %d: something changed its spec (Flux corrected it?)", generation, ro.GetGeneration())
	}
	t.Logf("then: %d reconciliations with drift detection, exactly one template change in %s (%s), the annotation kept", rounds, watchFor, changes[0][:strings.Index(changes[0], ":")])

	t.Log("when: the canary is promoted")
	promotePaused(t, ns, "grafana")
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rs2, 3))
	r.expectReads(rs2, customV2)
	expectNoDriftBut(t, ns, hr.Name, "Rollout/"+ns+"/grafana")

	// The control: drift detection does look at graf-grafana's spec, and corrects what Flux applied.
	t.Log("when: another tool changes a field of graf-grafana's spec that Flux applied (revisionHistoryLimit 10 -> 3)")
	tw, err = e2e.cluster.WatchTemplate(ctx, framework.DeploymentGVR, ns, "graf-grafana")
	must(t, err)
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "graf-grafana", types.MergePatchType,
		[]byte(`{"spec":{"revisionHistoryLimit":3}}`), metav1.PatchOptions{FieldManager: "some-tool"})
	must(t, err)
	_, err = e2e.cluster.RequestReconcile(ctx, ns, hr.Name)
	must(t, err)
	var corrected []string
	must(t, framework.Eventually(ctx, fluxWait, "Flux to correct graf-grafana's revisionHistoryLimit", func(ctx context.Context) (bool, string, error) {
		corrected, err = e2e.cluster.Events(ctx, ns, refs.Kind("HelmRelease"), hr.Name, "DriftCorrected")
		if err != nil || len(corrected) == 0 {
			return false, "no DriftCorrected Event", err
		}
		d, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "graf-grafana", metav1.GetOptions{})
		return err == nil && d.Spec.RevisionHistoryLimit != nil && *d.Spec.RevisionHistoryLimit == 10, "not restored", err
	}))
	detected, err := e2e.cluster.Events(ctx, ns, refs.Kind("HelmRelease"), hr.Name, "DriftDetected")
	must(t, err)
	for _, m := range append(detected, corrected...) {
		if strings.Contains(m, api.ConfigHashAnnotation) || strings.Contains(m, "template") {
			t.Fatalf("Flux's drift report names the pod template: %q", m)
		}
	}
	time.Sleep(15 * time.Second) // a reconciliation or two after the correction
	if changes := tw.Stop(); len(changes) != 0 {
		t.Fatalf("graf-grafana's template changed during Flux's drift correction:\n%s", strings.Join(changes, "\n"))
	}
	if v, _, err := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "graf-grafana", api.ConfigHashAnnotation); err != nil || v != hashOf(rs2) {
		t.Fatalf("graf-grafana's %s is %q (%v) after Flux's drift correction, want %q", api.ConfigHashAnnotation, v, err, hashOf(rs2))
	}
	t.Logf("then: Flux detected and corrected it (DriftDetected %q; DriftCorrected %q); the template, our annotation included, did not change", detected, corrected)
}

// fluxReconcilesWithoutDrift asks Flux to reconcile the HelmRelease (as `flux reconcile helmrelease`
// does) again and again for the duration, besides its own interval, and fails at the first sign of
// drift: a Drifted condition, or a DriftDetected or DriftCorrected Event. It returns the number of
// requested reconciliations Flux handled.
func fluxReconcilesWithoutDrift(t *testing.T, ns, name, raced string, d time.Duration) int {
	t.Helper()
	ctx := context.Background()
	rounds := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); rounds++ {
		token, err := e2e.cluster.RequestReconcile(ctx, ns, name)
		must(t, err)
		_, err = e2e.cluster.WaitHelmRelease(ctx, fluxWait, ns, name, "to handle reconcile request "+token, func(st framework.FluxStatus) bool {
			return st.HandledAt == token && st.Ready()
		})
		must(t, err)
		expectNoDriftBut(t, ns, name, raced)
		time.Sleep(10 * time.Second)
	}
	return rounds
}
