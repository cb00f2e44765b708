//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Zero-touch pinning under Argo CD: the chart keeps its static app-config (no renaming, no plugin),
// Argo CD syncs it in place, and each revision's pods still read the content their revision was
// created with. What Argo CD compares (app-config, the Rollout) is never written by us, and the
// snapshots carry none of its tracking metadata: the diff stays clean throughout.
func TestArgoCDZeroTouchPinningKeepsTheDiffClean(t *testing.T) {
	t.Parallel()
	eachAdmission(t, argoCDZeroTouchPinningKeepsTheDiffClean)
}

// argoCDZeroTouchPinningKeepsTheDiffClean is the story of TestArgoCDZeroTouchPinningKeepsTheDiffClean in one admission mode.
func argoCDZeroTouchPinningKeepsTheDiffClean(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("argocd-pinning"))
	useArgoCD(t)
	a.start(t, "Fail", nil, ns)
	r := pinnedRollout{t: t, ns: ns}
	// The chart's checksum is over its rendered template, so revisions are told apart by ReplicaSet.
	story := &helmStory{t: t, ns: ns, rollout: "demo"}

	repo, err := framework.ServeChartRepo(helmCLI(t), "")
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	version, err := repo.Add(ctx, testdataPath("charts/pinned-rollout"), "")
	must(t, err)
	// Applications live in Argo CD's namespace: one per mode, named after the story's own namespace.
	app := framework.HelmApp{Name: ns, RepoURL: repo.URL, Chart: "pinned-rollout", Version: version, Namespace: ns,
		Values: map[string]any{"config": toAny(pinV1)}}
	must(t, e2e.cluster.DeleteApplication(ctx, argoWait, app.Name))
	t.Cleanup(func() { _ = e2e.cluster.DeleteApplication(context.Background(), argoWait, app.Name) })

	t.Log("given: chart pinned-rollout (static app-config labelled pin, Rollout demo with the checksum annotation) synced by Argo CD")
	must(t, e2e.cluster.ApplyApplication(ctx, app))
	must(t, e2e.cluster.SyncApplication(ctx, app.Name, true, nil))
	st, err := e2e.cluster.WaitSynced(ctx, argoWait, app.Name)
	must(t, err)
	expectResources(t, st, "ConfigMap/app-config", "Rollout/demo")
	rs1 := story.waitNewRevision(nil, 3).rs
	r.expectReads(rs1, pinV1)

	t.Log("when: the config changes in Git (values) and Argo CD syncs app-config in place: a canary starts and pauses")
	must(t, e2e.cluster.SetApplicationValues(ctx, app.Name, map[string]any{"config": toAny(pinV2)}))
	must(t, e2e.cluster.SyncApplication(ctx, app.Name, true, nil))
	st, err = e2e.cluster.WaitApplication(ctx, argoWait, app.Name, "Synced, the canary paused (Suspended)", func(s framework.AppStatus) bool {
		return s.Current && !s.OperationPending && s.Sync == "Synced" && s.Health == "Suspended"
	})
	must(t, err)
	rs2 := story.waitNewRevision(rs1, 1).rs
	r.expectReads(rs2, pinV2)
	must(t, e2e.cluster.WaitPods(ctx, 30*time.Second, rs1, 2))
	r.expectReads(rs1, pinV1)

	t.Log("when: a spot node takes a stable pod")
	r.spotKill(rs1, 2)
	r.expectReads(rs1, pinV1)
	t.Log("then: its replacement reads the old content though app-config, as Argo CD applied it, holds the new")

	t.Log("when: Argo CD compares again (hard refresh)")
	st = refreshed(t, app.Name)
	if st.Sync != "Synced" {
		t.Fatalf("then: the Application is %s after pinning, want Synced: %s", st.Sync, st)
	}
	expectResources(t, st, "ConfigMap/app-config", "Rollout/demo")
	r.expectAppConfigHasNoOwners()
	meta, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, "app-config")
	must(t, err)
	if len(meta.Finalizers) > 0 {
		t.Fatalf("app-config got finalizers %v: the static object is Argo CD's, untouched", meta.Finalizers)
	}
	snaps, err := e2e.cluster.Snapshots(ctx, ns, "app-config")
	must(t, err)
	for _, s := range snaps {
		for k := range s.Annotations {
			if k == "argocd.argoproj.io/tracking-id" {
				t.Fatalf("snapshot %s carries Argo CD's tracking annotation: Argo CD would claim it", s.Name)
			}
		}
	}
	t.Logf("then: still Synced; Argo CD manages exactly app-config and the Rollout, and neither the %d snapshots nor the pods show in its diff", len(snaps))

	t.Log("when: the canary is promoted")
	promotePaused(t, ns, "demo")
	must(t, e2e.cluster.WaitPods(ctx, argoWait, rs2, 3))
	r.expectReads(rs2, pinV2)
	st, err = e2e.cluster.WaitSynced(ctx, argoWait, app.Name)
	must(t, err)
	t.Logf("then: Synced and Healthy: %s", st)
}

// refreshed asks Argo CD to compare the Application again and returns the status of that comparison.
func refreshed(t *testing.T, name string) framework.AppStatus {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.PatchApplication(ctx, name, map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{"argocd.argoproj.io/refresh": "hard"}}}))
	st, err := e2e.cluster.WaitApplication(ctx, argoWait, name, "refreshed", func(s framework.AppStatus) bool {
		app, err := e2e.cluster.Application(ctx, name)
		if err != nil {
			return false
		}
		_, pending := app.GetAnnotations()["argocd.argoproj.io/refresh"]
		return !pending && s.Current
	})
	must(t, err)
	return st
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
