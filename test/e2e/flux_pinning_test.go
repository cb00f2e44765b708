//go:build e2e

package e2e

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// pinLabelPatch is the docs/flux.md zero-touch recipe's post-renderer: a kustomize patch adding only
// the pin label to the chart's ConfigMap (Flux runs no executable post-renderer, so `render` cannot
// rename anything there; pinning needs no renaming).
func pinLabelPatch(configMap string) []any {
	return []any{map[string]any{"kustomize": map[string]any{"patches": []any{map[string]any{
		"target": map[string]any{"kind": "ConfigMap", "name": configMap},
		"patch":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + configMap + "\n  labels:\n    " + api.PinLabel + `: "true"` + "\n",
	}}}}}
}

// grafanaFluxValues are the public grafana chart's values for the Flux stories: its Deployment scaled
// to zero, and an Argo Rollout (the write-up's canary) running its pod template through workloadRef,
// added with the chart's own extraObjects. Nothing of grafana is renamed or changed.
func grafanaFluxValues(logLevel string) map[string]any {
	return map[string]any{
		"adminPassword": "kwok-test-only",
		"rbac":          map[string]any{"create": false},
		"testFramework": map[string]any{"enabled": false},
		"replicas":      int64(0),
		"grafana.ini":   map[string]any{"log": map[string]any{"level": logLevel}},
		"extraObjects": []any{map[string]any{
			"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
			"metadata": map[string]any{"name": "grafana"},
			"spec": map[string]any{
				"replicas": int64(3), "revisionHistoryLimit": int64(1),
				"selector":    map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "grafana", "app.kubernetes.io/instance": "graf"}},
				"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "graf-grafana"},
				"strategy": map[string]any{"canary": map[string]any{
					"maxSurge": int64(0), "maxUnavailable": int64(1),
					"steps": []any{map[string]any{"setWeight": int64(1)}, map[string]any{"pause": map[string]any{}}},
				}},
			},
		}},
	}
}

// pinnedGrafana is the public grafana chart installed by a HelmRelease with the zero-touch recipe, its
// Rollout running revision 1 at 3 pods, each reading revision 1's snapshot of graf-grafana.
type pinnedGrafana struct {
	ns    string
	hr    framework.HelmRelease
	story *helmStory
	r     pinnedRollout
	live  func() map[string]string // graf-grafana's data now (failing if it lost the pin label)
	rs1   *appsv1.ReplicaSet
	v1    map[string]string
}

func givenPinnedGrafana(t *testing.T, a admission, namespace string) pinnedGrafana {
	t.Helper()
	ctx := context.Background()
	ns := givenNamespace(t, a.ns(namespace))
	useFlux(t)
	a.start(t, "Fail", nil, ns)
	versions := fluxRepository(t, ns, "charts/grafana")
	g := pinnedGrafana{ns: ns, story: &helmStory{t: t, ns: ns, rollout: "grafana"}, r: pinnedRollout{t: t, ns: ns, config: "graf-grafana"}}
	g.hr = framework.HelmRelease{Name: "graf", Namespace: ns, Repository: ns, Chart: "grafana", Version: versions["grafana"],
		Values: grafanaFluxValues("info"),
		Spec: map[string]any{
			"postRenderers":    pinLabelPatch("graf-grafana"),
			"driftDetection":   map[string]any{"mode": "enabled"},
			"healthCheckExprs": rolloutHealth,
		}}
	g.live = func() map[string]string {
		cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "graf-grafana", metav1.GetOptions{})
		must(t, err)
		if !api.Pinned(cm.Labels) {
			t.Fatalf("graf-grafana has labels %v: the post-renderer did not add %s", cm.Labels, api.PinLabel)
		}
		return maps.Clone(cm.Data)
	}

	t.Log("given: grafana installed by the HelmRelease (post-renderer: the pin label on graf-grafana), its Rollout at 3 pods")
	givenHelmRelease(t, g.hr)
	st, err := e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, ns, g.hr.Name)
	must(t, err)
	g.v1 = g.live()
	g.rs1 = g.story.waitNewRevision(nil, 3).rs
	g.r.expectReads(g.rs1, g.v1)
	t.Logf("then: %s", describeFlux(st))
	return g
}

// The public grafana chart through Flux with zero-touch pinning: no renaming, the namespace labelled
// for pinning and the HelmRelease's kustomize post-renderer adding only the pin label to graf-grafana.
// Flux changes graf-grafana in place (the chart's checksum annotation starts the canary); each
// revision's pods read the snapshot of their revision, a spot-replaced old pod included, while
// graf-grafana itself never gets an ownerReference or a finalizer and Flux sees no drift.
func TestFluxZeroTouchPinningOnAPublicChart(t *testing.T) {
	t.Parallel()
	eachAdmission(t, fluxZeroTouchPinningOnAPublicChart)
}

// fluxZeroTouchPinningOnAPublicChart is the story of TestFluxZeroTouchPinningOnAPublicChart in one
// admission mode.
func fluxZeroTouchPinningOnAPublicChart(t *testing.T, a admission) {
	ctx := context.Background()
	g := givenPinnedGrafana(t, a, "e2e-flux-pinning")
	ns, hr, story, r, live, rs1, v1 := g.ns, g.hr, g.story, g.r, g.live, g.rs1, g.v1

	t.Log("when: grafana.ini changes in the HelmRelease (log.level debug): Flux changes graf-grafana in place and the canary pauses")
	must(t, e2e.cluster.SetHelmReleaseValues(ctx, ns, hr.Name, grafanaFluxValues("debug")))
	rs2 := story.waitNewRevision(rs1, 1).rs
	must(t, story.waitPaused())
	v2 := live()
	if !strings.Contains(v2["grafana.ini"], "level = debug") {
		t.Fatalf("graf-grafana's grafana.ini after the upgrade:\n%s", v2["grafana.ini"])
	}
	r.expectReads(rs2, v2)
	r.expectReads(rs1, v1)

	t.Log("when: a spot node takes a pod of the old revision")
	r.spotKill(rs1, 2)
	r.expectReads(rs1, v1)
	t.Log("then: its replacement reads the old revision's snapshot, though graf-grafana (as Flux applied it) holds the new content")

	t.Log("when: the canary is promoted")
	promotePaused(t, ns, "grafana")
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rs2, 3))
	st, err := e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, ns, hr.Name)
	must(t, err)
	r.expectReads(rs2, v2)
	t.Logf("then: %s", describeFlux(st))

	meta, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, "graf-grafana")
	must(t, err)
	if len(meta.OwnerReferences) > 0 || len(meta.Finalizers) > 0 {
		t.Fatalf("graf-grafana got ownerReferences %v and finalizers %v: the chart's object is Flux's, untouched", meta.OwnerReferences, meta.Finalizers)
	}
	snaps, err := e2e.cluster.Snapshots(ctx, ns, "graf-grafana")
	must(t, err)
	for _, s := range snaps {
		for k := range s.Labels {
			if strings.HasPrefix(k, "helm.toolkit.fluxcd.io/") || strings.HasPrefix(k, "app.kubernetes.io/") {
				t.Fatalf("snapshot %s carries the chart's or Flux's label %s: Helm or Flux would claim it", s.Name, k)
			}
		}
	}
	t.Logf("then: graf-grafana has no ownerReference and no finalizer; its %d snapshots carry none of Helm's or Flux's metadata", len(snaps))
	// The Rollout may change between helm-controller's read and its dry run: Argo Rollouts writes its
	// revision annotation with each new ReplicaSet, and in policy mode the pinning controller wakes the
	// Rollout's controller with an annotation of ours in its metadata. Such a race names the Rollout
	// alone; the Drifted condition (False from a later check) shows nothing was left to correct.
	expectNoDriftBut(t, ns, hr.Name, "Rollout/"+ns+"/grafana")
}

// Bad input: a commit adds a post-renderer patch that removes the pin label (e.g. a later patch
// rewriting the labels), together with a config change. Flux applies both: graf-grafana loses the
// label and gets the new content in place. What we do about it: the new revision, which nothing pinned,
// reads graf-grafana as it is and gets a PinRemoved Warning naming the object and the snapshots the
// earlier revisions read; the earlier revision keeps its snapshot (the pin is the ownership), so its
// spot-replaced pod still reads the old content, not the new one graf-grafana now holds.
func TestFluxPostRendererDroppingThePinLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := givenPinnedGrafana(t, byWebhook, "e2e-flux-pin-dropped")
	s1, err := e2e.cluster.SnapshotOf(ctx, g.ns, "graf-grafana", g.rs1.UID)
	must(t, err)

	t.Log("when: one commit sets log.level debug and appends a post-renderer patch removing the pin label from graf-grafana")
	drop := map[string]any{"kustomize": map[string]any{"patches": []any{map[string]any{
		"target": map[string]any{"kind": "ConfigMap", "name": "graf-grafana"},
		"patch":  "- op: remove\n  path: /metadata/labels/" + strings.ReplaceAll(api.PinLabel, "/", "~1") + "\n",
	}}}}
	hr := g.hr
	hr.Values = grafanaFluxValues("debug")
	hr.Spec["postRenderers"] = append(pinLabelPatch("graf-grafana"), drop)
	must(t, e2e.cluster.ApplyHelmRelease(ctx, hr))
	rs2 := g.story.waitNewRevision(g.rs1, 1).rs
	must(t, g.story.waitPaused())
	cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(g.ns).Get(ctx, "graf-grafana", metav1.GetOptions{})
	must(t, err)
	if api.Pinned(cm.Labels) || !strings.Contains(cm.Data["grafana.ini"], "level = debug") {
		t.Fatalf("graf-grafana after the upgrade: labels %v, grafana.ini\n%s", cm.Labels, cm.Data["grafana.ini"])
	}
	t.Logf("then: Flux applied graf-grafana without %s and with the new content", api.PinLabel)

	pods, err := e2e.cluster.PodsOf(ctx, rs2)
	must(t, err)
	for i := range pods {
		if got := framework.ReadsConfigMaps(&pods[i]); !slices.Contains(got, "graf-grafana") {
			t.Fatalf("pod %s of the new revision reads %v: want graf-grafana itself (nothing pinned it)", pods[i].Name, got)
		}
	}
	var warned []string
	must(t, framework.Eventually(ctx, fluxWait, "a PinRemoved Warning on ReplicaSet "+rs2.Name, func(ctx context.Context) (bool, string, error) {
		warned, err = e2e.cluster.Events(ctx, g.ns, refs.Kind("ReplicaSet"), rs2.Name, "PinRemoved")
		return len(warned) > 0, "no event", err
	}))
	if !strings.Contains(warned[0], "configmap/graf-grafana") || !strings.Contains(warned[0], s1.Name) {
		t.Fatalf("PinRemoved on %s says %q: want it to name configmap/graf-grafana and the snapshot %s", rs2.Name, warned[0], s1.Name)
	}
	t.Logf("then: the new revision %s reads graf-grafana unpinned, and says so: Warning PinRemoved %q", rs2.Name, warned[0])

	t.Log("when: a spot node takes a pod of the old revision")
	g.r.spotKill(g.rs1, 2)
	g.r.expectReads(g.rs1, g.v1)
	t.Logf("then: its replacement still reads its revision's snapshot %s, not graf-grafana's new content", s1.Name)

	t.Log("when: the canary is promoted")
	promotePaused(t, g.ns, "grafana")
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rs2, 3))
	st, err := e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, g.ns, hr.Name)
	must(t, err)
	t.Logf("then: %s; revision 2 runs unpinned, as its Warning says", describeFlux(st))
}
