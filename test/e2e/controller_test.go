//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

const attachWithin = 30 * time.Second

// deploy points the Rollout at a new config revision and returns the ReplicaSet that runs it.
func (a *app) deploy(content string) (string, *appsv1.ReplicaSet) {
	a.t.Helper()
	cm := configRevision(a.t, a.ns, a.name+"-cm", content)
	must(a.t, e2e.cluster.SetRolloutConfig(context.Background(), a.ns, a.name, []string{cm}, nil))
	return cm, a.currentRS(cm)
}

// promote continues the canary and waits until rs is the stable ReplicaSet.
func (a *app) promote(rs *appsv1.ReplicaSet) {
	a.t.Helper()
	ctx := context.Background()
	promotePaused(a.t, a.ns, a.name)
	hash := rs.Labels[workload.RolloutHashLabel]
	must(a.t, framework.Eventually(ctx, 60*time.Second, rs.Name+" stable", func(ctx context.Context) (bool, string, error) {
		ro, err := e2e.cluster.Rollout(ctx, a.ns, a.name)
		if err != nil {
			return false, "", err
		}
		return ro.Status.StableRS == hash, "stableRS " + ro.Status.StableRS, nil
	}))
}

func waitAttached(t *testing.T, ns, cm string, rs *appsv1.ReplicaSet) {
	t.Helper()
	must(t, e2e.cluster.WaitAttached(context.Background(), attachWithin, ns, refs.ConfigMap, cm, rs))
}

// expectLiveConfigKept is the invariant behind every scenario: no config object used by a live
// ReplicaSet is ever deleted.
func expectLiveConfigKept(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, rs := range rss.Items {
		if rs.DeletionTimestamp != nil {
			continue
		}
		for _, r := range refs.FromPodSpec(&rs.Spec.Template.Spec).Sorted() {
			if _, exists, err := e2e.cluster.Owners(ctx, ns, r.Kind, r.Name); err != nil || !exists {
				t.Fatalf("%s %s, used by live ReplicaSet %s, is gone (err %v)", r.Kind, r.Name, rs.Name, err)
			}
		}
	}
}

func TestControllerRecoversFromAnAPIServerRestart(t *testing.T) {
	if !e2e.cluster.Owned() {
		t.Skip("restarts kube-apiserver: needs a cluster the tests started")
	}
	// Not parallel: every other test would see the API server vanish.
	ns := givenNamespace(t, "ctl-apiserver-restart")
	startController(t, nil, ns)
	v1 := configRevision(t, ns, "demo-cm", "v1")
	a := givenRollout(t, ns, "demo", []string{v1}, nil)
	rs1 := a.currentRS(v1)
	waitAttached(t, ns, v1, rs1)

	// When a deploy starts and kube-apiserver dies right after,
	v2 := configRevision(t, ns, "demo-cm", "v2")
	must(t, e2e.cluster.SetRolloutConfig(context.Background(), ns, "demo", []string{v2}, nil))
	start := time.Now()
	must(t, e2e.cluster.RestartAPIServer(context.Background(), logWriter{t}))
	t.Logf("kube-apiserver back after %s", time.Since(start).Round(time.Millisecond))

	// then the controller reconnects and attaches the new revision, and later deploys too.
	rs2 := a.currentRS(v2)
	waitAttached(t, ns, v2, rs2)
	waitAttached(t, ns, v1, rs1)
	v3, rs3 := a.deploy("v3")
	waitAttached(t, ns, v3, rs3)
	expectLiveConfigKept(t, ns)
}

func TestControllerLeaderFailover(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "ctl-failover")
	election := []string{"-leader-elect=true", "-leader-election-namespace", ns, "-leader-election-id", "configmap-attacher",
		"-leader-election-lease-duration", "4s", "-leader-election-renew-deadline", "3s", "-leader-election-retry-period", "500ms"}
	replicas := []*framework.Process{startController(t, election, ns), startController(t, election, ns)}
	v1 := configRevision(t, ns, "demo-cm", "v1")
	a := givenRollout(t, ns, "demo", []string{v1}, nil)
	rs1 := a.currentRS(v1)
	waitAttached(t, ns, v1, rs1)

	leader, standby := replicas[0], replicas[1]
	if !strings.Contains(leader.Logs(), "became leader") {
		leader, standby = standby, leader
	}
	if !strings.Contains(leader.Logs(), "became leader") || strings.Contains(standby.Logs(), "became leader") {
		t.Fatalf("want exactly one leader; logs:\n%s\n---\n%s", replicas[0].Logs(), replicas[1].Logs())
	}

	// When the leader dies without releasing its Lease during a rollout,
	leader.Kill()
	v2, rs2 := a.deploy("v2")

	// then the standby takes over within the lease duration and attaches the new revision.
	must(t, e2e.cluster.WaitAttached(context.Background(), attachWithin, ns, refs.ConfigMap, v2, rs2))
	if !strings.Contains(standby.Logs(), "became leader") {
		t.Fatalf("the standby never took over:\n%s", standby.Logs())
	}
	waitAttached(t, ns, v1, rs1)
	expectLiveConfigKept(t, ns)
}

func TestControllerCatchesUpAfterDowntime(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "ctl-downtime")
	ctl := startController(t, nil, ns)
	v1 := configRevision(t, ns, "demo-cm", "v1")
	a := givenRollout(t, ns, "demo", []string{v1}, nil)
	rs1 := a.currentRS(v1)
	waitAttached(t, ns, v1, rs1)

	// Given the controller is down,
	must(t, ctl.Stop())
	// while three revisions roll out, one of whose ConfigMaps someone else also owns,
	v2, rs2 := a.deploy("v2")
	addForeignOwner(t, ns, v2)
	a.promote(rs2)
	v3, rs3 := a.deploy("v3")
	a.promote(rs3)
	v4, rs4 := a.deploy("v4")
	for _, cm := range []string{v2, v3, v4} {
		if owners := ownersOf(t, ns, refs.ConfigMap, cm); len(owners) > 1 {
			t.Fatalf("%s attached while the controller was down: %v", cm, owners)
		}
	}

	// when it starts again, every revision is attached, and the foreign owner stays.
	startController(t, nil, ns)
	for cm, rs := range map[string]*appsv1.ReplicaSet{v1: rs1, v2: rs2, v3: rs3, v4: rs4} {
		waitAttached(t, ns, cm, rs)
	}
	if owners := ownersOf(t, ns, refs.ConfigMap, v2); len(owners) != 2 {
		t.Fatalf("owners of %s: %v, want the foreign one and ReplicaSet %s", v2, owners, rs2.Name)
	}
	expectLiveConfigKept(t, ns)

}

// A hand-made ConfigMap (no opt-in label) is never attached: deleting its workload must not delete it.
func TestControllerLeavesUnlabelledConfigAlone(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "ctl-opt-in")
	ctx := context.Background()
	startController(t, nil, ns)
	handMade := configRevisionLabelled(t, ns, "hand-made", false)
	revisioned := configRevision(t, ns, "demo-cm", "v1")
	_, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: framework.PodTemplate("web", []string{handMade, revisioned}, nil)},
	}, metav1.CreateOptions{})
	must(t, err)
	rs := deploymentRS(t, ns, revisioned)
	waitAttached(t, ns, revisioned, rs)
	if owners := ownersOf(t, ns, refs.ConfigMap, handMade); len(owners) != 0 {
		t.Fatalf("the unlabelled ConfigMap got owners %v", owners)
	}
	// When the Deployment is deleted, its revisioned config goes with it; the hand-made one stays.
	bg := metav1.DeletePropagationBackground
	must(t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &bg}))
	must(t, e2e.cluster.WaitGone(ctx, 60*time.Second, ns, refs.ConfigMap, revisioned))
	time.Sleep(2 * time.Second)
	if _, exists, _ := e2e.cluster.Owners(ctx, ns, refs.ConfigMap, handMade); !exists {
		t.Fatal("the hand-made ConfigMap was deleted")
	}
}

func configRevisionLabelled(t *testing.T, ns, name string, optedIn bool) string {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "v"}}
	if optedIn {
		cm.Labels = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	}
	_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// addForeignOwner makes a live ConfigMap "parent" an owner of cm, as another tool would.
func addForeignOwner(t *testing.T, ns, cm string) {
	t.Helper()
	ctx := context.Background()
	parent, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent-of-" + cm, Namespace: ns}}, metav1.CreateOptions{})
	must(t, err)
	obj, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
	must(t, err)
	obj.OwnerReferences = append(obj.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: parent.Name, UID: parent.UID})
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Update(ctx, obj, metav1.UpdateOptions{})
	must(t, err)
}
