//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// The write-up through Argo CD, exactly as `make demo ARGOCD=1` tells it: an Application of
// charts/base-app, the attacher its Sync hook Job (wave 1), whose command the story runs as the
// hook's ServiceAccount when Argo CD creates the Job (kwok's nodes run no container;
// TestArgoCDBaseAppWithTheSyncHookJob runs the same hook as a real pod). The story asserts the hook
// has not run during each canary pause (the sync waits for the Rollout) and attaches after promotion.
func TestArgoCDWalkthroughWithTheSyncHook(t *testing.T) {
	t.Parallel()
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	s := story(t, "e2e-argocd-walkthrough", walkthrough.None{})
	argo := &walkthrough.ArgoCD{C: e2e.cluster, Bin: e2e.bin, RepoURL: repo.URL, Version: versions["base-app"],
		App: "e2e-argocd-walkthrough", Dir: t.TempDir(), Wait: argoSyncWait}
	s.Deployer = argo
	givenNoApplication(t, argo.App)
	must(t, s.Walkthrough(context.Background()))
	t.Logf("then: %d Sync hook Jobs ran, one per sync", argo.Hooks())
}

// givenNoApplication deletes a leftover Application of that name now and the Application (with what
// it deployed) at the end of the test.
func givenNoApplication(t *testing.T, name string) {
	t.Helper()
	must(t, e2e.cluster.DeleteApplication(context.Background(), argoSyncWait, name))
	t.Cleanup(func() {
		if err := e2e.cluster.DeleteApplication(context.Background(), argoSyncWait, name); err != nil {
			t.Log(err)
		}
	})
}
