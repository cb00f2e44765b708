//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Argo CD with plain manifests from git (no Helm, no checksum annotation): a commit that edits only the
// ConfigMap is synced by Argo CD, the controller starts the canary, the old pods stay pinned, and with
// automated sync and self-heal on the Application stays Synced and the template is not reverted.

// argoManifests are the two manifests of the repository: app-config (pinned) holding data, and the
// write-up's Rollout opted in with Reloader's annotation.
func argoManifests(data map[string]string) map[string]string {
	return map[string]string{
		"app/configmap.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels:
    configmap-attacher.io/pin: "true"
data:
  configuration.json: %q
`, data["configuration.json"]),
		"app/rollout.yaml": `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: demo
  annotations:
    reloader.stakater.com/auto: "true"
spec:
  replicas: 3
  selector:
    matchLabels:
      app: demo
  template:
    metadata:
      labels:
        app: demo
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          volumeMounts:
            - name: config
              mountPath: /etc/app
      volumes:
        - name: config
          configMap:
            name: app-config
  strategy:
    canary:
      maxSurge: 0
      maxUnavailable: 1
      steps:
        - setWeight: 1
        - pause: {}
`,
	}
}

// watchFor is how long the stories watch the Rollout's template after the commit: a hard refresh every
// 10 s, each a full comparison (self-heal would revert drift at the first).
const watchFor = 45 * time.Second

func configStartsThroughArgoCD(t *testing.T, ns string, app framework.GitApp) {
	ctx := context.Background()
	useArgoCD(t)
	startTriggerController(t, ns)
	repo, err := framework.ServeGitRepo(ctx)
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	_, err = repo.Commit(ctx, "the app", argoManifests(pinV1))
	must(t, err)
	app.RepoURL, app.Path, app.Namespace = repo.URL, "app", ns
	app.Automated = &framework.AutoSync{Prune: true, SelfHeal: true}
	must(t, e2e.cluster.DeleteApplication(ctx, argoWait, app.Name))
	t.Cleanup(func() { _ = e2e.cluster.DeleteApplication(context.Background(), argoWait, app.Name) })

	t.Logf("given: Application %s of plain manifests at %s (auto-sync, self-heal), Rollout demo opted in with %s", app.Name, repo.URL, api.ReloaderAuto)
	must(t, e2e.cluster.ApplyApplication(ctx, app))
	_, err = e2e.cluster.WaitSynced(ctx, argoWait, app.Name)
	must(t, err)
	r := pinnedRollout{t: t, ns: ns}
	story := &helmStory{t: t, ns: ns, rollout: "demo"}
	rs1 := story.waitNewRevision(nil, 3).rs
	r.expectReads(rs1, pinV1)
	tw, err := e2e.cluster.WatchTemplate(ctx, workload.RolloutGVR, ns, "demo")
	must(t, err)

	t.Log("when: a commit edits only the ConfigMap, and Argo CD syncs it")
	_, err = repo.Commit(ctx, "faulty config", map[string]string{"app/configmap.yaml": argoManifests(pinV2)["app/configmap.yaml"]})
	must(t, err)
	must(t, e2e.cluster.RefreshApplication(ctx, app.Name))
	rs2 := story.waitNewRevision(rs1, 1).rs
	if hashOf(rs2) == "" {
		t.Fatalf("canary %s carries no %s", rs2.Name, api.ConfigHashAnnotation)
	}
	r.expectReads(rs2, pinV2)
	must(t, e2e.cluster.WaitPaused(ctx, argoWait, ns, "demo"))
	must(t, e2e.cluster.WaitPods(ctx, time.Minute, rs1, 2))
	r.spotKill(rs1, 2)
	r.expectReads(rs1, pinV1)
	t.Logf("then: canary %s started by the controller (%s=%s), the stable pods pinned to the old content", rs2.Name, api.ConfigHashAnnotation, hashOf(rs2))

	t.Logf("then, for %s: the Application stays Synced and the template keeps our annotation", watchFor)
	deadline := time.Now().Add(watchFor)
	for time.Now().Before(deadline) {
		st := refreshed(t, app.Name)
		if st.Sync != "Synced" {
			t.Fatalf("the Application is %s: Argo CD sees our annotation as drift: %s", st.Sync, st)
		}
		time.Sleep(10 * time.Second)
	}
	if changes := tw.Stop(); len(changes) != 1 {
		t.Fatalf("the Rollout's template changed %d times after the commit, want exactly 1 (ours): Argo CD reverted it or we fought:\n%s",
			len(changes), strings.Join(changes, "\n"))
	}
	if v, _, err := e2e.cluster.TemplateAnnotation(ctx, workload.RolloutGVR, ns, "demo", api.ConfigHashAnnotation); err != nil || v != hashOf(rs2) {
		t.Fatalf("the Rollout's %s is %q (%v), want %q: the template was reverted", api.ConfigHashAnnotation, v, err, hashOf(rs2))
	}
	expectOnlyOurAnnotation(t, workload.RolloutGVR, ns, "demo")
	res, err := e2e.cluster.Resolve(ctx, ns, "demo")
	must(t, err)
	if len(res.Owned) != 2 {
		t.Fatalf("%d ReplicaSets, want 2", len(res.Owned))
	}
	t.Logf("then: exactly one template change in %s, the Application Synced throughout", watchFor)
}

// Server-side diff (Argo CD's compare option ServerSideDiff=true): a field another field manager owns
// is not drift.
func TestConfigStartsArgoCDServerSideDiffKeepsTheApplicationSynced(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "config-starts-argocd-ssd")
	configStartsThroughArgoCD(t, ns, framework.GitApp{Name: "config-starts-ssd", ServerSideDiff: true})
}

// The legacy diff (Argo CD's default) with the documented entry: ignoreDifferences for every field our
// field manager owns, respected by syncs (docs/config-starts.md).
func TestConfigStartsArgoCDLegacyDiffWithManagedFieldsManagersKeepsTheApplicationSynced(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "config-starts-argocd-legacy")
	configStartsThroughArgoCD(t, ns, framework.GitApp{Name: "config-starts-legacy",
		IgnoreDifferences: []map[string]any{{"group": "argoproj.io", "kind": "Rollout", "managedFieldsManagers": []any{api.FieldManager}}},
		SyncOptions:       []string{"RespectIgnoreDifferences=true"}})
}
