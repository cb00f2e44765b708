//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// A chart nobody here wrote, installed and upgraded with the real helm, the post-renderer and the
// controller: grafana 12.11.1 (grafana-community/helm-charts @ 3386a115, charts/grafana, vendored
// unchanged in testdata/charts/grafana). It puts its config in a ConfigMap (mounted with subPath, which
// a running pod never sees change) and two Secrets (envFrom, secretKeyRef), with checksum annotations.
func TestPublicChartGrafanaInstallAndTwoConfigUpgrades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-grafana")
	startController(t, nil, ns)
	h := helmCLI(t)
	deploy := func(verb string, set ...string) {
		args := []string{verb, "graf", testdataPath("charts/grafana"), "-n", ns, "-f", testdataPath("grafana-values.yaml")}
		for _, s := range set {
			args = append(args, "--set-string", s)
		}
		// -chart: render reads the templates and finds the admin password's lookup; the values give the
		// password, which -allow-lookup says.
		helmRun(t, h, append(args, postRenderer(ns, "-select=configmap/graf-grafana,secret/graf-grafana,secret/graf-grafana-env",
			"-chart="+testdataPath("charts/grafana"), "-allow-lookup=secret/graf-grafana")...)...)
	}
	ref := workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "graf-grafana"}

	t.Log("given: grafana installed with the post-renderer")
	deploy("install")
	rs1 := waitDeploymentRevision(t, ref, nil)
	first := expectConfigOf(t, rs1)

	t.Log("when: upgrade 1 changes grafana.ini (the ConfigMap)")
	deploy("upgrade", "grafana\\.ini.log.level=debug")
	rs2 := waitDeploymentRevision(t, ref, rs1)
	second := expectConfigOf(t, rs2)
	changed := diffNames(first, second)
	if len(changed) != 1 || !strings.HasPrefix(changed[0], "ConfigMap/graf-grafana-") {
		t.Fatalf("then: want exactly the ConfigMap renamed, got %v", changed)
	}
	expectConfigOf(t, rs1) // still there for the ReplicaSet kept for rollback
	t.Logf("then: revision 2 reads %s; revision 1's config is kept for a rollback", changed[0])

	t.Log("when: upgrade 2 changes envRenderSecret (the Secret graf-grafana-env)")
	deploy("upgrade", "grafana\\.ini.log.level=debug", "envRenderSecret.GF_FEATURE_X=2")
	rs3 := waitDeploymentRevision(t, ref, rs2)
	third := expectConfigOf(t, rs3)
	changed = diffNames(second, third)
	if len(changed) != 1 || !strings.HasPrefix(changed[0], "Secret/graf-grafana-env-") {
		t.Fatalf("then: want exactly the Secret graf-grafana-env renamed, got %v", changed)
	}
	t.Logf("then: revision 3 reads %s", changed[0])

	t.Logf("then: revisionHistoryLimit 1 prunes ReplicaSet %s, and the config only it used goes with it", rs1.Name)
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, helmWait, ns, rs1.Name))
	expectConfigOf(t, rs2)
	for _, r := range diffNames(union(second, third), first) {
		kind, name, _ := strings.Cut(r, "/")
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.Kind(kind), name))
	}
	must(t, framework.Eventually(ctx, freedWithin, "no revisioned object but the two revisions' config", func(ctx context.Context) (bool, string, error) {
		got, err := revisionedObjects(ctx, ns)
		if err != nil {
			return false, "", err
		}
		want := union(second, third)
		return slices.Equal(got, want), fmt.Sprintf("revisioned objects %v, want %v", got, want), nil
	}))
	t.Logf("then: exactly the config of the two live revisions remains: %v", union(second, third))
}

// waitDeploymentRevision waits for a current ReplicaSet other than prev with all its pods ready and
// every other ReplicaSet scaled to zero.
func waitDeploymentRevision(t *testing.T, ref workload.Ref, prev *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	t.Helper()
	rs := waitCurrentRevision(t, ref, prev, -1, true)
	t.Logf("then: ReplicaSet %s (revision %s) runs", rs.Name, framework.RevisionOf(rs))
	return rs
}

// waitCurrentRevision waits until the workload's current ReplicaSet is not prev and runs ready ready
// pods (-1: as many as it wants) and no others; with settled, every other ReplicaSet runs none.
func waitCurrentRevision(t *testing.T, ref workload.Ref, prev *appsv1.ReplicaSet, ready int, settled bool) *appsv1.ReplicaSet {
	t.Helper()
	var cur *appsv1.ReplicaSet
	what := fmt.Sprintf("a new revision of %s with %d ready pods", ref, ready)
	must(t, framework.Eventually(context.Background(), helmWait, what, func(ctx context.Context) (bool, string, error) {
		res, err := e2e.cluster.ResolveWorkload(ctx, ref)
		if err != nil {
			return false, err.Error(), nil
		}
		rs, err := res.Current()
		if err != nil {
			return false, err.Error(), nil
		}
		if prev != nil && rs.UID == prev.UID {
			return false, "still on " + rs.Name, nil
		}
		for _, o := range res.Owned {
			if settled && o.UID != rs.UID && o.Status.Replicas > 0 {
				return false, o.Name + " still runs pods", nil
			}
		}
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		if err != nil {
			return false, "", err
		}
		want := ready
		if want < 0 {
			want = int(*rs.Spec.Replicas)
		}
		if n := framework.ReadyPods(pods); n != want || len(pods) != want {
			return false, fmt.Sprintf("%s has %d pods, %d ready", rs.Name, len(pods), n), nil
		}
		cur = rs
		return true, "", nil
	}))
	return cur
}

// expectConfigOf checks every ConfigMap and Secret the ReplicaSet's pods read exists, and each one the
// renderer revisioned is kept, immutable and attached to the ReplicaSet. It returns the revisioned
// ones as Kind/name, sorted.
func expectConfigOf(t *testing.T, rs *appsv1.ReplicaSet) []string {
	t.Helper()
	ctx := context.Background()
	var revisioned []string
	for _, r := range refs.FromPodSpec(&rs.Spec.Template.Spec).Sorted() {
		m, err := e2e.cluster.Meta(ctx, rs.Namespace, r.Kind, r.Name)
		if err != nil {
			t.Fatalf("ReplicaSet %s reads %s, which does not resolve: %v", rs.Name, r, err)
		}
		if !api.OptedIn(m.Labels) {
			continue
		}
		if m.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Fatalf("%s is revisioned but not kept: annotations %v", r, m.Annotations)
		}
		must(t, e2e.cluster.WaitAttached(ctx, 30*time.Second, rs.Namespace, r.Kind, r.Name, rs))
		revisioned = append(revisioned, r.String())
	}
	if len(revisioned) != 3 {
		t.Fatalf("ReplicaSet %s reads revisioned %v, want the chart's ConfigMap and its two Secrets", rs.Name, revisioned)
	}
	return revisioned
}

// diffNames is what b has that a has not.
func diffNames(a, b []string) []string {
	var out []string
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// revisionedObjects lists the opted-in ConfigMaps and Secrets of ns not being deleted, as Kind/name.
func revisionedObjects(ctx context.Context, ns string) ([]string, error) {
	var out []string
	for _, kind := range refs.Kinds() {
		list, err := e2e.cluster.Dynamic.Resource(kind.GVR()).Namespace(ns).List(ctx,
			metav1.ListOptions{LabelSelector: api.RevisionedLabel + "=" + api.RevisionedValue})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			if o.GetDeletionTimestamp() == nil {
				out = append(out, refs.Ref{Kind: kind, Name: o.GetName()}.String())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
