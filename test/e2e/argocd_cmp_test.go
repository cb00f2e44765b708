//go:build e2e

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Argo CD renders Helm charts itself and has no post-renderer: the shipped Config Management Plugin
// (deploy/argocd-cmp/plugin.yaml, run by argocd-cmp-server as its sidecar would, with the Helm Argo CD
// ships) pipes `helm template` through render. A public chart (grafana) goes through an install and two config changes, synced with
// prune on: Argo CD neither prunes nor flags the previous revision's config while a ReplicaSet uses it,
// and the garbage collector removes it with that ReplicaSet.
func TestArgoCDRendersAPublicChartThroughTheCMP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "argocd-cmp")
	useArgoCD(t)
	startController(t, nil, ns)

	cmp, err := e2e.cluster.StartCMPServer(ctx, rootPath("deploy/argocd-cmp/plugin.yaml"), map[string]string{
		"helm": argoCDHelm(t), "configmap-attacher": e2e.bin.Path,
	})
	must(t, err)
	t.Cleanup(cmp.Close)
	repo, err := framework.ServeChartRepo(helmCLI(t), "")
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	version, err := repo.Add(ctx, testdataPath("charts/grafana"), "")
	must(t, err)
	t.Logf("given: the grafana chart %s in a Helm repository at %s, the plugin server running deploy/argocd-cmp/plugin.yaml", version, repo.URL)

	values := map[string]any{}
	b, err := os.ReadFile(testdataPath("grafana-values.yaml"))
	must(t, err)
	must(t, yaml.Unmarshal(b, &values))
	app := pluginApp(t, framework.HelmApp{Name: "argocd-cmp-grafana", RepoURL: repo.URL, Chart: "grafana", Version: version, Namespace: ns}, values)
	must(t, e2e.cluster.DeleteApplication(ctx, argoWait, app.GetName()))
	apps := e2e.cluster.Dynamic.Resource(framework.ApplicationGVR).Namespace(framework.ArgoCDNamespace)
	_, err = apps.Create(ctx, app, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() { _ = e2e.cluster.DeleteApplication(context.Background(), argoWait, app.GetName()) })
	ref := workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "graf-grafana"}

	// deploy syncs the Application with values (prune on) and returns the new revision and the
	// revisioned config it reads, checking Argo CD manages exactly that config and the previous
	// revision still finds its own.
	deploy := func(prev *appsv1.ReplicaSet) (*appsv1.ReplicaSet, []string) {
		t.Helper()
		if prev != nil {
			setPluginValues(t, app.GetName(), values)
		}
		must(t, e2e.cluster.SyncApplication(ctx, app.GetName(), true, nil))
		st, err := e2e.cluster.WaitSynced(ctx, argoWait, app.GetName())
		must(t, err)
		rs := waitDeploymentRevision(t, ref, prev)
		config := expectConfigOf(t, rs)
		if prev != nil {
			expectConfigOf(t, prev)
		}
		expectManaged(t, st, config)
		return rs, config
	}

	t.Log("when: the Application (source.plugin: configmap-attacher) is synced")
	rs1, first := deploy(nil)
	t.Logf("then: Synced and Healthy; the pods read %v, renamed by the plugin and attached", first)

	t.Log("when: grafana.ini changes and the Application is synced with prune")
	values["grafana.ini"] = map[string]any{"log": map[string]any{"level": "debug"}}
	rs2, second := deploy(rs1)
	t.Logf("then: Synced; revision 2 reads %v; Argo CD neither pruned nor lists revision 1's %v", diffNames(first, second), diffNames(second, first))

	t.Log("when: envRenderSecret changes and the Application is synced with prune")
	values["envRenderSecret"] = map[string]any{"GF_FEATURE_X": "2"}
	_, third := deploy(rs2)
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, helmWait, ns, rs1.Name))
	for _, r := range diffNames(union(second, third), first) {
		kind, name, _ := strings.Cut(r, "/")
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.Kind(kind), name))
	}
	t.Logf("then: revision 3 reads %v; ReplicaSet %s is pruned and the garbage collector removes what only it read",
		diffNames(second, third), rs1.Name)
	st, err := e2e.cluster.WaitSynced(ctx, argoWait, app.GetName())
	must(t, err)
	t.Logf("then: still Synced and Healthy: %s", st)
}

// pluginApp turns a Helm Application into one rendered by the configmap-attacher plugin, with the
// chart values as its `values` parameter.
func pluginApp(t *testing.T, a framework.HelmApp, values map[string]any) *unstructured.Unstructured {
	t.Helper()
	obj := a.Object()
	unstructured.RemoveNestedField(obj.Object, "spec", "source", "helm")
	plugin := map[string]any{
		"name": "configmap-attacher",
		"env": []any{
			map[string]any{"name": "RELEASE_NAME", "value": "graf"},
			map[string]any{"name": "RENDER_ARGS", "value": "-select=configmap/graf-grafana,secret/graf-grafana,secret/graf-grafana-env " +
				"-allow-lookup=secret/graf-grafana"}, // the chart looks its admin password up unless given: the values give it
		},
		"parameters": valuesParameter(t, values),
	}
	must(t, unstructured.SetNestedField(obj.Object, plugin, "spec", "source", "plugin"))
	return obj
}

func valuesParameter(t *testing.T, values map[string]any) []any {
	t.Helper()
	b, err := yaml.Marshal(values)
	must(t, err)
	return []any{map[string]any{"name": "values", "string": string(b)}}
}

func setPluginValues(t *testing.T, name string, values map[string]any) {
	t.Helper()
	must(t, e2e.cluster.PatchApplication(context.Background(), name, map[string]any{
		"spec": map[string]any{"source": map[string]any{"plugin": map[string]any{"parameters": valuesParameter(t, values)}}},
	}))
}

// expectManaged checks the Application manages (status.resources) the current revision's config and
// nothing of an older one: an attached config object that left the manifests is the ReplicaSet's.
func expectManaged(t *testing.T, st framework.AppStatus, current []string) {
	t.Helper()
	var managed []string
	for _, r := range st.Resources {
		if r.Kind == "ConfigMap" || r.Kind == "Secret" {
			managed = append(managed, r.Kind+"/"+r.Name)
		}
		if r.Status != "Synced" {
			t.Errorf("resource %s is not Synced", r)
		}
	}
	if got, want := union(managed, nil), union(current, nil); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the Application manages config %v, want exactly the current revision's %v", got, want)
	}
}

// argoCDHelm is the Helm Argo CD ships in its image (v3.5.7: Helm v4.2.1, ARGOCD_HELM_VERSION), which
// the plugin sidecar built from deploy/argocd-cmp/Dockerfile runs as `helm`.
func argoCDHelm(t *testing.T) string {
	t.Helper()
	p, err := framework.HelmBinary(e2e.root, framework.HelmArgoCD)
	must(t, err)
	return p
}

func rootPath(rel string) string { return e2e.root + "/" + rel }
