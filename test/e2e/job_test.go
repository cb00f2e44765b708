//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// app is one Rollout with its config revisions, as a deploy pipeline would create them.
type app struct {
	t    *testing.T
	ns   string
	name string
}

// givenRollout creates a Rollout running its first config revision (names) and waits until it is
// healthy on its first ReplicaSet.
func givenRollout(t *testing.T, ns, name string, configMaps []string, secrets []string) *app {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.CreateRollout(ctx, ns, name, framework.RolloutSpec{Replicas: 1, ConfigMaps: configMaps, Secrets: secrets}))
	a := &app{t: t, ns: ns, name: name}
	a.currentRS(configMaps...)
	return a
}

// configRevision creates an immutable ConfigMap named after its content.
func configRevision(t *testing.T, ns, base string, content string) string {
	t.Helper()
	cm, err := e2e.cluster.CreateConfigRevision(context.Background(), ns, base, map[string]string{"config": content}, true)
	must(t, err)
	return cm.Name
}

func secretRevision(t *testing.T, ns, name string) string {
	t.Helper()
	_, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		StringData: map[string]string{"password": "s3cr3t-" + name},
	}, metav1.CreateOptions{})
	must(t, err)
	return name
}

// currentRS waits until the Rollout's current ReplicaSet mounts every named ConfigMap and returns it.
func (a *app) currentRS(configMaps ...string) *appsv1.ReplicaSet {
	a.t.Helper()
	var rs *appsv1.ReplicaSet
	must(a.t, framework.Eventually(context.Background(), 90*time.Second, fmt.Sprintf("Rollout %s to run %v", a.name, configMaps),
		func(ctx context.Context) (bool, string, error) {
			res, err := e2e.cluster.Resolve(ctx, a.ns, a.name)
			if err != nil {
				return false, err.Error(), nil
			}
			cur, err := res.Current()
			if err != nil {
				return false, err.Error(), nil
			}
			used := refs.FromPodSpec(&cur.Spec.Template.Spec)
			for _, n := range configMaps {
				if !used.Has(refs.Ref{Kind: refs.ConfigMap, Name: n}) {
					return false, cur.Name + " does not mount " + n, nil
				}
			}
			rs = cur
			return true, "", nil
		}))
	return rs
}

// attach runs the real binary as the original Job does and returns its result.
func attachJob(t *testing.T, bin framework.Binary, args ...string) framework.Result {
	t.Helper()
	r := bin.Run(context.Background(), nil, args...)
	t.Logf("%s", r)
	return r
}

func expectAttached(t *testing.T, ns string, kind refs.Kind, name string, rs *appsv1.ReplicaSet) {
	t.Helper()
	owners, exists, err := e2e.cluster.Owners(context.Background(), ns, kind, name)
	must(t, err)
	if !exists {
		t.Fatalf("%s %s does not exist", kind, name)
	}
	must(t, framework.CheckAttached(owners, rs))
}

func ownersOf(t *testing.T, ns string, kind refs.Kind, name string) []metav1.OwnerReference {
	t.Helper()
	owners, _, err := e2e.cluster.Owners(context.Background(), ns, kind, name)
	must(t, err)
	return owners
}

func resourceVersion(t *testing.T, ns, cm string) string {
	t.Helper()
	obj, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cm, metav1.GetOptions{})
	must(t, err)
	return obj.ResourceVersion
}

// The race the original tool loses: the Job starts before the Rollouts controller has created the new
// ReplicaSet (an Argo CD Sync hook racing the apply). It must wait and attach to the NEW ReplicaSet.
func TestJobStartedBeforeTheDeployAttachesToTheNewReplicaSet(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-race")
	v1 := configRevision(t, ns, "demo-cm", "v1")
	a := givenRollout(t, ns, "demo", []string{v1}, nil)
	oldRS := a.currentRS(v1)
	v2 := configRevision(t, ns, "demo-cm", "v2")

	// When the Job starts first...
	ctx := context.Background()
	done := make(chan framework.Result, 1)
	go func() { done <- e2e.bin.Run(ctx, nil, "-rollout", "demo", "-namespace", ns, "-configmaps", v2) }()
	time.Sleep(3 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("the Job did not wait for the new ReplicaSet: %s", r)
	default:
	}
	if owners := ownersOf(t, ns, refs.ConfigMap, v2); len(owners) != 0 {
		t.Fatalf("attached before the deploy: %v", owners)
	}
	// ...and the deploy follows,
	must(t, e2e.cluster.SetRolloutConfig(ctx, ns, "demo", []string{v2}, nil))
	newRS := a.currentRS(v2)

	// then it attaches the new config to the new ReplicaSet, not the old one.
	r := <-done
	t.Logf("%s", r)
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	expectAttached(t, ns, refs.ConfigMap, v2, newRS)
	for _, o := range ownersOf(t, ns, refs.ConfigMap, v2) {
		if o.UID == oldRS.UID {
			t.Fatalf("new config attached to the OLD ReplicaSet %s: the GC would delete it under live pods", oldRS.Name)
		}
	}
}

func TestJobKeepsForeignOwnerReferencesAndReRunWritesNothing(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-foreign")
	ctx := context.Background()
	cm := configRevision(t, ns, "demo-cm", "v1")
	// Given the ConfigMap already has an owner someone else wrote (a live object, so the GC keeps it).
	parent, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent", Namespace: ns}}, metav1.CreateOptions{})
	must(t, err)
	yes := true
	foreign := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: parent.UID, BlockOwnerDeletion: &yes}
	obj, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
	must(t, err)
	obj.OwnerReferences = []metav1.OwnerReference{foreign}
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Update(ctx, obj, metav1.UpdateOptions{})
	must(t, err)
	a := givenRollout(t, ns, "demo", []string{cm}, nil)
	rs := a.currentRS(cm)

	// When the Job attaches,
	if r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", cm); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	// then both owners are there, the foreign one untouched.
	expectAttached(t, ns, refs.ConfigMap, cm, rs)
	owners := ownersOf(t, ns, refs.ConfigMap, cm)
	if len(owners) != 2 || owners[0].UID != foreign.UID && owners[1].UID != foreign.UID {
		t.Fatalf("owners %+v: the foreign reference must stay", owners)
	}
	for _, o := range owners {
		if o.UID == foreign.UID && (o.BlockOwnerDeletion == nil || !*o.BlockOwnerDeletion || o.Controller != nil) {
			t.Fatalf("the foreign reference was rewritten: %+v", o)
		}
	}

	// And the attach is visible in `kubectl describe configmap`.
	events, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + cm})
	must(t, err)
	if len(events.Items) != 1 || events.Items[0].Reason != "Attached" ||
		!strings.Contains(events.Items[0].Message, "Attached to ReplicaSet "+rs.Name+" (revision 1)") {
		t.Fatalf("want one Attached event on %s, got %+v", cm, events.Items)
	}

	// And running the Job again writes nothing.
	rv := resourceVersion(t, ns, cm)
	r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", cm)
	if r.Code != 0 || !strings.Contains(r.Stderr, "nothing to do") {
		t.Fatalf("re-run: exit %d, want 0 and 'nothing to do'", r.Code)
	}
	if got := resourceVersion(t, ns, cm); got != rv {
		t.Fatalf("re-run changed the ConfigMap (resourceVersion %s -> %s)", rv, got)
	}
}

// Two Rollouts share one config revision; their Jobs run at the same moment. Both must succeed and
// both references must remain (a JSON merge patch would keep only the last writer's).
func TestConcurrentJobsBothAttach(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-concurrent")
	shared := configRevision(t, ns, "shared-cm", "v1")
	a := givenRollout(t, ns, "app-a", []string{shared}, nil)
	b := givenRollout(t, ns, "app-b", []string{shared}, nil)
	rsA, rsB := a.currentRS(shared), b.currentRS(shared)

	var wg sync.WaitGroup
	results := make([]framework.Result, 2)
	for i, name := range []string{"app-a", "app-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e2e.bin.Run(context.Background(), nil, "-rollout", name, "-namespace", ns, "-configmaps", shared)
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.Code != 0 {
			t.Fatalf("%s", r)
		}
	}
	expectAttached(t, ns, refs.ConfigMap, shared, rsA)
	expectAttached(t, ns, refs.ConfigMap, shared, rsB)
}

func TestJobWithADeployment(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-deployment")
	ctx := context.Background()
	v1 := configRevision(t, ns, "web-cm", "v1")
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: framework.PodTemplate("web", []string{v1}, nil)},
	}
	_, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	must(t, err)
	if r := attachJob(t, e2e.bin, "-deployment", "web", "-namespace", ns, "-configmaps", v1); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	rs1 := deploymentRS(t, ns, v1)
	expectAttached(t, ns, refs.ConfigMap, v1, rs1)

	// When the config changes, the Job attaches the new revision to the new ReplicaSet.
	v2 := configRevision(t, ns, "web-cm", "v2")
	must(t, e2e.cluster.SetDeploymentConfig(ctx, ns, "web", "web", []string{v2}, nil))
	if r := attachJob(t, e2e.bin, "--deployment=web", "--namespace="+ns, "--configmaps="+v2); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	rs2 := deploymentRS(t, ns, v2)
	if rs2.UID == rs1.UID {
		t.Fatal("no new ReplicaSet")
	}
	expectAttached(t, ns, refs.ConfigMap, v2, rs2)
	expectAttached(t, ns, refs.ConfigMap, v1, rs1)
}

func deploymentRS(t *testing.T, ns, cm string) *appsv1.ReplicaSet {
	t.Helper()
	var found *appsv1.ReplicaSet
	must(t, framework.Eventually(context.Background(), 60*time.Second, "a ReplicaSet mounting "+cm, func(ctx context.Context) (bool, string, error) {
		list, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		for i := range list.Items {
			if refs.FromPodSpec(&list.Items[i].Spec.Template.Spec).Has(refs.Ref{Kind: refs.ConfigMap, Name: cm}) {
				found = &list.Items[i]
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d ReplicaSets, none mounts it", len(list.Items)), nil
	}))
	return found
}

// A Rollout whose template lives in a Deployment (workloadRef): a config change is a Deployment change.
func TestJobWithAWorkloadRefRolloutAndSecrets(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-workloadref")
	ctx := context.Background()
	v1 := configRevision(t, ns, "demo-cm", "v1")
	s1 := secretRevision(t, ns, "demo-secret-1")
	must(t, e2e.cluster.CreateWorkloadRefRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 1, ConfigMaps: []string{v1}, Secrets: []string{s1}}))
	a := &app{t: t, ns: ns, name: "demo"}
	rs1 := a.currentRS(v1)
	if r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", v1, "-secrets", s1); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	expectAttached(t, ns, refs.ConfigMap, v1, rs1)
	expectAttached(t, ns, refs.Secret, s1, rs1)

	// When the referenced Deployment's template changes (the Job runs right away, before the
	// Rollouts controller has noticed), the Job waits and attaches to the new ReplicaSet.
	v2 := configRevision(t, ns, "demo-cm", "v2")
	s2 := secretRevision(t, ns, "demo-secret-2")
	must(t, e2e.cluster.SetDeploymentConfig(ctx, ns, "demo-template", "demo", []string{v2}, []string{s2}))
	if r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", v2, "-secrets", s2); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	rs2 := a.currentRS(v2)
	expectAttached(t, ns, refs.ConfigMap, v2, rs2)
	expectAttached(t, ns, refs.Secret, s2, rs2)
}

func TestJobDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-dry-run")
	cm := configRevision(t, ns, "demo-cm", "v1")
	a := givenRollout(t, ns, "demo", []string{cm}, nil)
	rs := a.currentRS(cm)
	rv := resourceVersion(t, ns, cm)
	r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", cm, "-dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, "add ownerReference to ReplicaSet "+rs.Name) {
		t.Fatalf("dry run: exit %d, stdout %q", r.Code, r.Stdout)
	}
	if got := resourceVersion(t, ns, cm); got != rv || len(ownersOf(t, ns, refs.ConfigMap, cm)) != 0 {
		t.Fatal("the dry run wrote")
	}
}

// Every bad input: a clear one-line error naming the object, a non-zero exit, nothing changed.
func TestJobBadInput(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "job-bad-input")
	ctx := context.Background()
	cm := configRevision(t, ns, "demo-cm", "v1")
	unused := configRevision(t, ns, "demo-cm", "not mounted")
	givenRollout(t, ns, "demo", []string{cm}, nil)

	// A ServiceAccount that may read everything but patch nothing.
	_, err := e2e.cluster.Kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-only", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = e2e.cluster.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-only", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-only"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "read-only", Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err)
	dir := t.TempDir()
	saKubeconfig, err := e2e.cluster.ServiceAccountKubeconfig(ctx, ns, "read-only", dir)
	must(t, err)
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	must(t, os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))

	short := "-timeout=4s"
	tests := []struct {
		name       string
		kubeconfig string
		args       []string
		code       int
		want       string
	}{
		{"no flags at all", "", []string{"-namespace", ns}, 2, "one of -rollout or -deployment is required"},
		{"both workloads", "", []string{"-rollout", "demo", "-deployment", "demo", "-namespace", ns, "-configmaps", cm}, 2, "exclusive"},
		{"empty list", "", []string{"-rollout", "demo", "-namespace", ns, "-configmaps", ""}, 2, "-configmaps is empty"},
		{"duplicate name", "", []string{"-rollout", "demo", "-namespace", ns, "-configmaps", cm + "," + cm}, 2, "twice"},
		{"invalid name", "", []string{"-rollout", "demo", "-namespace", ns, "-configmaps", "Not_A_Name"}, 2, "not a valid Kubernetes name"},
		{"unknown namespace", "", []string{"-rollout", "demo", "-namespace", "no-such-namespace", "-configmaps", cm}, 1, `namespace "no-such-namespace" not found`},
		{"unknown rollout", "", []string{"-rollout", "nope", "-namespace", ns, "-configmaps", cm, short}, 1, "Rollout " + ns + "/nope: not found"},
		{"unknown configmap", "", []string{"-rollout", "demo", "-namespace", ns, "-configmaps", "no-such-cm", short}, 1, "ConfigMap " + ns + "/no-such-cm does not exist"},
		{"unknown secret", "", []string{"-rollout", "demo", "-namespace", ns, "-secrets", "no-such-secret", short}, 1, "Secret " + ns + "/no-such-secret does not exist"},
		{"object the ReplicaSet never references", "", []string{"-rollout", "demo", "-namespace", ns, "-configmaps", cm + "," + unused, short}, 1, "does not reference [ConfigMap/" + unused + "]"},
		{"RBAC denied", saKubeconfig, []string{"-rollout", "demo", "-namespace", ns, "-configmaps", cm}, 1, `cannot patch resource "configmaps"`},
		{"unreachable API server", unreachable, []string{"-rollout", "demo", "-namespace", ns, "-configmaps", cm}, 1, "API server unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := e2e.bin
			if tt.kubeconfig != "" {
				bin.Kubeconfig = tt.kubeconfig
			}
			r := bin.Run(ctx, nil, tt.args...)
			msg := errorLine(r.Stderr)
			t.Logf("exit %d after %s: %s", r.Code, r.Duration.Round(time.Millisecond), msg)
			if r.Code != tt.code || !strings.Contains(msg, tt.want) {
				t.Fatalf("want exit %d and an error line containing %q\n%s", tt.code, tt.want, r)
			}
		})
	}
	// Nothing was written by any of them.
	for _, n := range []string{cm, unused} {
		if owners := ownersOf(t, ns, refs.ConfigMap, n); len(owners) != 0 {
			t.Fatalf("ConfigMap %s gained owners %v from a failed run", n, owners)
		}
	}
}

// errorLine is the one line the binary prints about a failure: "configmap-attacher <command>: ...".
func errorLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "configmap-attacher ") {
			return l
		}
	}
	return ""
}
