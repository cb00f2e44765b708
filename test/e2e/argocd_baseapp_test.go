//go:build e2e

package e2e

import (
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// charts/base-app deployed as the write-up's team deploys it: by an Argo CD Application from a Helm
// repository, with `attacher: job`, whose Job is an Argo CD Sync hook in sync-wave 1 (after the
// Rollout, wave 0; its RBAC in wave -1).
//
// The hook Job really runs the binary: its pod is placed on the real node (a kubelet on containerd)
// with the project's image, through base-app's job values (nodeSelector, tolerations, and, as there is
// no kube-proxy and the API server listens on loopback, hostNetwork and KUBERNETES_SERVICE_HOST/PORT
// in extraEnv; defaults unchanged). On kwok's nodes the hook's pod would "complete" at once without
// running anything, and Argo CD would report an attach that never happened. The real node makes
// the whole path real: Argo CD creates the Job when it decides to, the Job controller runs the pod,
// the binary authenticates with the ServiceAccount token the kubelet mounts, under the chart's Role.
//
// What Argo CD does with the hook while a canary is paused is part of the story (argoStory.duringPause):
// the Rollout is Suspended, not Healthy, and Argo CD does not start wave 1 until wave 0 is Healthy,
// so the sync stays Running and the hook runs only after the promotion.
func TestArgoCDBaseAppWithTheSyncHookJob(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ns := givenNamespace(t, "e2e-argocd-base-app-job")
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	enforced := enforcesOwnerRefPermissions(t, ns)
	job := onRealNode(t, n, enforced)
	t.Logf("given: base-app %s served at %s; OwnerReferencesPermissionEnforcement: %v", versions["base-app"], repo.URL, enforced)

	values := func(d argoDeploy) map[string]any { return baseAppValues(d, "job", job) }
	app := framework.HelmApp{
		Name: "e2e-base-app-job", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true,
	}
	givenApplication(t, app)
	watchInUse(t, ns)
	s := newArgoStory(t, ns, app, values, attachByHookAfterPromotion)
	s.afterSync = func(_ argoDeploy, _ revisionOf) { expectHookRanOnRealNode(t, n, s.hooks[len(s.hooks)-1]) }
	s.run(argoDeploys)
	t.Logf("then: %d syncs ran %d Sync hook Jobs, each a new Job on the real node", len(argoDeploys), len(s.hooks))
}

// The same deploys with `attacher: controller`: no hook, no waves; the controller (the real binary,
// scoped to the namespace) attaches each revision as its ReplicaSet appears and protects the config
// in use with its finalizer. Argo CD's sync ends as soon as the manifests are applied, the
// Application shows Suspended during the pause and Healthy after the promotion.
func TestArgoCDBaseAppWithTheController(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "e2e-argocd-base-app-controller")
	useArgoCD(t)
	startController(t, nil, ns)
	repo, versions := serveCharts(t, "base-app")
	t.Logf("given: base-app %s served at %s; configmap-attacher controller -namespaces %s", versions["base-app"], repo.URL, ns)

	values := func(d argoDeploy) map[string]any { return baseAppValues(d, "controller", nil) }
	app := framework.HelmApp{
		Name: "e2e-base-app-controller", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true,
	}
	givenApplication(t, app)
	watchInUse(t, ns)
	s := newArgoStory(t, ns, app, values, attachByController)
	s.afterSync = func(_ argoDeploy, cur revisionOf) { expectProtected(t, ns, cur.cm) }
	s.run(argoDeploys)
}
