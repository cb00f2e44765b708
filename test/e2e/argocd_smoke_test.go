//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

const argoWait = 2 * time.Minute

// TestArgoCDSyncsAHelmChartFromALocalRepo proves the local Argo CD works end to end: a chart served
// from a loopback Helm repository is synced by an Application (explicit sync first, then automated
// sync with prune and selfHeal), lands in the cluster as rendered, and follows a values change.
func TestArgoCDSyncsAHelmChartFromALocalRepo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "argocd-smoke")
	useArgoCD(t)

	repo, err := framework.ServeChartRepo(helmCLI(t), "")
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	version, err := repo.Add(ctx, testdataPath("charts/argocd-smoke"), "")
	must(t, err)
	t.Logf("given: chart argocd-smoke %s served at %s", version, repo.URL)

	app := framework.HelmApp{
		Name: "argocd-smoke", RepoURL: repo.URL, Chart: "argocd-smoke", Version: version, Namespace: ns,
		Values:      map[string]any{"greeting": "hello", "replicas": int64(2)},
		SyncOptions: []string{"PruneLast=true"},
		Cascade:     true,
	}
	// A leftover of an interrupted run would be synced already.
	must(t, e2e.cluster.DeleteApplication(ctx, argoWait, app.Name))
	t.Log("when: an Application without automated sync is created")
	start := time.Now()
	must(t, e2e.cluster.ApplyApplication(ctx, app))
	t.Cleanup(func() {
		if err := e2e.cluster.DeleteApplication(context.Background(), argoWait, app.Name); err != nil {
			t.Log(err)
		}
	})

	st, err := e2e.cluster.WaitApplication(ctx, argoWait, app.Name, "to be compared (OutOfSync)", func(s framework.AppStatus) bool {
		return s.Current && s.Sync == "OutOfSync"
	})
	must(t, err)
	t.Logf("then: after %s Argo CD rendered the chart and finds it missing: %s", time.Since(start).Round(time.Millisecond), st)

	t.Log("when: a sync is requested (the Application's operation field)")
	start = time.Now()
	must(t, e2e.cluster.SyncApplication(ctx, app.Name, true, nil))
	st, err = e2e.cluster.WaitSynced(ctx, argoWait, app.Name)
	must(t, err)
	t.Logf("then: Synced and Healthy after %s: %s", time.Since(start).Round(time.Millisecond), st)
	expectResources(t, st, "ConfigMap/argocd-smoke-config", "Deployment/argocd-smoke")
	expectDeployed(t, ns, "hello", 2)

	t.Log("when: a value changes and automated sync (prune, selfHeal) is turned on")
	start = time.Now()
	app.Values = map[string]any{"greeting": "hello again", "replicas": int64(3)}
	app.Automated = &framework.AutoSync{Prune: true, SelfHeal: true}
	must(t, e2e.cluster.ApplyApplication(ctx, app))
	st, err = e2e.cluster.WaitSynced(ctx, argoWait, app.Name)
	must(t, err)
	t.Logf("then: synced by itself after %s: %s", time.Since(start).Round(time.Millisecond), st)
	expectDeployed(t, ns, "hello again", 3)

	t.Log("when: someone edits the ConfigMap by hand")
	start = time.Now()
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, "argocd-smoke-config", types.MergePatchType,
		[]byte(`{"data":{"greeting":"edited by hand"}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, argoWait, "selfHeal to restore the greeting", func(ctx context.Context) (bool, string, error) {
		cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "argocd-smoke-config", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return cm.Data["greeting"] == "hello again", fmt.Sprintf("greeting %q", cm.Data["greeting"]), nil
	}))
	t.Logf("then: selfHeal restored it after %s", time.Since(start).Round(time.Millisecond))
}

// expectResources checks the Application manages exactly these Kind/name resources, all Synced.
func expectResources(t *testing.T, st framework.AppStatus, want ...string) {
	t.Helper()
	var got []string
	for _, r := range st.Resources {
		if r.Status != "Synced" {
			t.Errorf("resource %s is not Synced", r)
		}
		got = append(got, r.Kind+"/"+r.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the Application manages %v, want %v", got, want)
	}
}

// expectDeployed checks the chart's objects as rendered with these values: the ConfigMap's greeting
// and a Deployment rolled out with that many available replicas (kwok makes pods Ready).
func expectDeployed(t *testing.T, ns, greeting string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "argocd-smoke-config", metav1.GetOptions{})
	must(t, err)
	if cm.Data["greeting"] != greeting {
		t.Fatalf("ConfigMap argocd-smoke-config has greeting %q, want %q", cm.Data["greeting"], greeting)
	}
	var d *appsv1.Deployment
	d, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "argocd-smoke", metav1.GetOptions{})
	must(t, err)
	// Healthy (Argo CD's Deployment check) means rolled out: every replica updated and available.
	if *d.Spec.Replicas != replicas || d.Status.UpdatedReplicas != replicas || d.Status.AvailableReplicas != replicas {
		t.Fatalf("Deployment argocd-smoke: spec.replicas %d, %d updated, %d available; want %d of each",
			*d.Spec.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, replicas)
	}
	t.Logf("then: ConfigMap greeting %q, Deployment with %d available replicas", greeting, replicas)
}
