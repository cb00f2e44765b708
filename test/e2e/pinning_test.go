//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Zero-touch pinning: one static ConfigMap, changed in place with the checksum annotation; every
// revision's pods read the content their revision was created with. The webhook is registered through
// its URL (-webhook-url=https://127.0.0.1:PORT), as in local runs.

// startPinningController runs the controller with -pinning for the namespaces (labelled for pinning),
// its webhook on a free loopback port under a configuration named after the first namespace; the
// configuration and certificate Secret go when the test ends.
func startPinningController(t *testing.T, failurePolicy string, namespaces ...string) *framework.Process {
	t.Helper()
	return startPinningControllerWith(t, failurePolicy, nil, namespaces...)
}

// startTriggerController is startPinningController with the config trigger on: -reloader-annotations,
// its own switch (pinning alone does not turn it on).
func startTriggerController(t *testing.T, namespaces ...string) *framework.Process {
	t.Helper()
	return startPinningControllerWith(t, "Fail", []string{"-reloader-annotations"}, namespaces...)
}

// startPinningControllerWith is startPinningController with more controller flags.
func startPinningControllerWith(t *testing.T, failurePolicy string, extraArgs []string, namespaces ...string) *framework.Process {
	t.Helper()
	ctx := context.Background()
	for _, ns := range namespaces {
		must(t, e2e.cluster.EnablePinning(ctx, ns))
	}
	name := "pin-" + namespaces[0]
	t.Cleanup(func() { // runs after the controller has stopped (cleanups run last-registered first)
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		_ = e2e.cluster.Kube.CoreV1().Secrets("kube-system").Delete(ctx, name+"-webhook-tls", metav1.DeleteOptions{})
	})
	port, err := framework.FreeLoopbackPort()
	must(t, err)
	p := startController(t, append([]string{"-pinning", "-pinning-admission=webhook", fmt.Sprintf("-webhook-url=https://127.0.0.1:%d", port),
		"-webhook-configuration-name=" + name, "-webhook-failure-policy=" + failurePolicy}, extraArgs...), namespaces...)
	must(t, framework.Eventually(ctx, 30*time.Second, "the webhook registered", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", p.Logs())
		}
		c, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not yet", nil
		}
		return err == nil && len(c.Webhooks) == 1 && len(c.Webhooks[0].ClientConfig.CABundle) > 0, "no caBundle yet", err
	}))
	must(t, p.WaitReady(ctx, 30*time.Second)) // its caBundle loaded by kube-apiserver too (Serving.Ready)
	t.Logf("given: the controller runs with -pinning %s, its webhook registered at https://127.0.0.1:%d (failurePolicy %s)", strings.Join(extraArgs, " "), port, failurePolicy)
	return p
}

var (
	pinV1 = map[string]string{"configuration.json": `{"general": {"projectName": "demo service"}}`}
	pinV2 = map[string]string{"configuration.json": `{"general": {"projectName": "demo service", "faulty": true}}`}
	pinV3 = map[string]string{"configuration.json": `{"general": {"projectName": "demo service v3"}}`}
)

// pinnedRollout is the write-up's Rollout, 3 replicas, reading the static app-config.
type pinnedRollout struct {
	t  *testing.T
	ns string
	// config is the pinned ConfigMap expectReads checks; app-config when empty.
	config string
	// others are the ConfigMaps the pods read besides config's snapshot (none when empty).
	others []string
}

func (r pinnedRollout) configName() string {
	if r.config == "" {
		return "app-config"
	}
	return r.config
}

func (r pinnedRollout) deploy(data map[string]string) {
	r.t.Helper()
	ctx := context.Background()
	must(r.t, e2e.cluster.PutPinnedConfigMap(ctx, r.ns, "app-config", data)) // the config first, as Helm and Argo CD apply it
	must(r.t, e2e.cluster.SetRolloutTemplate(ctx, r.ns, "demo", framework.PinnedTemplate("demo", []string{"app-config"}, data)))
}

// current waits for the Rollout's current ReplicaSet to run the template of data with n ready pods.
func (r pinnedRollout) current(data map[string]string, n int) *appsv1.ReplicaSet {
	r.t.Helper()
	var rs *appsv1.ReplicaSet
	must(r.t, framework.Eventually(context.Background(), 90*time.Second, fmt.Sprintf("the revision of checksum %.8s with %d pods", framework.Checksum(data), n),
		func(ctx context.Context) (bool, string, error) {
			res, err := e2e.cluster.Resolve(ctx, r.ns, "demo")
			if err != nil {
				return false, err.Error(), nil
			}
			cur, err := res.Current()
			if err != nil {
				return false, err.Error(), nil
			}
			if cur.Spec.Template.Annotations["checksum/config"] != framework.Checksum(data) {
				return false, "current is " + cur.Name, nil
			}
			pods, err := e2e.cluster.PodsOf(ctx, cur)
			if err != nil {
				return false, "", err
			}
			rs = cur
			return framework.ReadyPods(pods) == n && len(pods) == n, fmt.Sprintf("%d pods", len(pods)), nil
		}))
	return rs
}

// expectReads checks every pod of rs reads the snapshot its revision owns, holding data.
func (r pinnedRollout) expectReads(rs *appsv1.ReplicaSet, data map[string]string) string {
	r.t.Helper()
	ctx := context.Background()
	snap, err := e2e.cluster.SnapshotOf(ctx, r.ns, r.configName(), rs.UID)
	must(r.t, err)
	if !maps.Equal(snap.Data, data) || snap.Immutable == nil || !*snap.Immutable {
		r.t.Fatalf("snapshot %s of %s holds %v (immutable %v), want %v", snap.Name, rs.Name, snap.Data, snap.Immutable, data)
	}
	pods, err := e2e.cluster.PodsOf(ctx, rs)
	must(r.t, err)
	want := slices.Sorted(slices.Values(append([]string{snap.Name}, r.others...)))
	for i := range pods {
		if got := framework.ReadsConfigMaps(&pods[i]); !slices.Equal(got, want) {
			r.t.Fatalf("pod %s of %s reads %v, want %v: its revision's snapshot %s", pods[i].Name, rs.Name, got, want, snap.Name)
		}
	}
	what := snap.Data["configuration.json"]
	if what == "" {
		what = fmt.Sprintf("%d keys", len(snap.Data))
	}
	r.t.Logf("then: the %d pods of %s (revision %s) read %s: %s", len(pods), rs.Name, framework.RevisionOf(rs), snap.Name, what)
	return snap.Name
}

// spotKill deletes a pod of rs, as a spot interruption would, and waits for rs to run n pods again.
func (r pinnedRollout) spotKill(rs *appsv1.ReplicaSet, n int) {
	r.t.Helper()
	ctx := context.Background()
	pods, err := e2e.cluster.PodsOf(ctx, rs)
	must(r.t, err)
	if len(pods) == 0 {
		r.t.Fatalf("ReplicaSet %s has no pod to replace", rs.Name)
	}
	must(r.t, e2e.cluster.Kube.CoreV1().Pods(r.ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}))
	must(r.t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, n))
}

func (r pinnedRollout) expectAppConfigHasNoOwners() {
	r.t.Helper()
	if owners := ownersOf(r.t, r.ns, refs.ConfigMap, "app-config"); len(owners) != 0 {
		r.t.Fatalf("app-config got ownerReferences %v: the static object must never be tied to a revision", owners)
	}
}

// The write-up's story with a static app-config: the canary pauses, a stable pod is replaced (spot) and
// reads the old content, the canary the new; abort keeps the old; undo brings back the old snapshot;
// promote and revisionHistoryLimit pruning collect the old snapshots; app-config never gets owners.
func TestPinningTheWalkthroughWithAStaticConfigMap(t *testing.T) {
	t.Parallel()
	eachAdmission(t, pinningTheWalkthroughWithAStaticConfigMap)
}

// pinningTheWalkthroughWithAStaticConfigMap is the story of TestPinningTheWalkthroughWithAStaticConfigMap in one admission mode.
func pinningTheWalkthroughWithAStaticConfigMap(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("pin-walkthrough"))
	a.start(t, "Fail", nil, ns)
	r := pinnedRollout{t: t, ns: ns}

	t.Log("given: app-config (pinned) and Rollout demo reading it, 3 replicas, the write-up's canary")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	tmpl := framework.PinnedTemplate("demo", []string{"app-config"}, pinV1)
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, Template: &tmpl}))
	rs1 := r.current(pinV1, 3)
	s1 := r.expectReads(rs1, pinV1)

	t.Log("when: app-config is changed in place (faulty) with the checksum annotation: a canary starts and pauses")
	r.deploy(pinV2)
	rs2 := r.current(pinV2, 1)
	s2 := r.expectReads(rs2, pinV2)
	must(t, e2e.cluster.WaitPods(ctx, 30*time.Second, rs1, 2))
	r.expectReads(rs1, pinV1)

	t.Log("when: a spot node takes a stable pod")
	r.spotKill(rs1, 2)
	t.Logf("then: its replacement reads the OLD content, not app-config's faulty one")
	r.expectReads(rs1, pinV1)

	t.Log("when: the canary is aborted")
	must(t, e2e.cluster.Abort(ctx, ns, "demo"))
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs1, 3))
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs2, 0))
	r.expectReads(rs1, pinV1)

	t.Log("when: the faulty revision is undone to revision 1 (app-config still holds the faulty content)")
	must(t, e2e.cluster.Undo(ctx, ns, "demo", 1))
	back := r.current(pinV1, 3)
	if back.UID != rs1.UID {
		t.Fatalf("undo made ReplicaSet %s instead of reusing %s", back.Name, rs1.Name)
	}
	if got := r.expectReads(back, pinV1); got != s1 {
		t.Fatalf("undo: pods read %s, want revision 1's snapshot %s", got, s1)
	}

	t.Log("when: a fixed config is deployed and promoted, then revisionHistoryLimit 0 prunes the old revisions")
	r.deploy(pinV3)
	rs3 := r.current(pinV3, 1)
	r.expectReads(rs3, pinV3)
	promotePaused(t, ns, "demo")
	r.current(pinV3, 3)
	must(t, e2e.cluster.SetRevisionHistoryLimit(ctx, ns, "demo", 0))
	for _, rs := range []*appsv1.ReplicaSet{rs1, rs2} {
		must(t, e2e.cluster.WaitReplicaSetGone(ctx, 90*time.Second, ns, rs.Name))
	}
	t.Logf("then: the old snapshots %s and %s go with their revisions", s1, s2)
	for _, s := range []string{s1, s2} {
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, s))
	}
	r.expectReads(rs3, pinV3)
	r.expectAppConfigHasNoOwners()
}

// Issue 20: the garbage collector's deletion of a pruned revision's snapshot can reach the controller
// before the revision's own deletion does; the snapshot is then held for that revision, and must go
// with it. The order is forced here: the snapshot is deleted while its ReplicaSet (no pods left, no
// Deployment to recreate it) still exists, so it is held for that ReplicaSet alone; then the
// ReplicaSet is deleted. The backstop resync is off (-held-resync=0): only the ReplicaSet's deletion
// can free the snapshot.
func TestPinningASnapshotHeldForItsRevisionGoesWithTheRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pin-held-snapshot")
	startPinningControllerWith(t, "Fail", []string{"-held-resync=0"}, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	d, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	rs := deploymentReplicaSet(t, ns, d)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))
	snap := pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, snap))

	t.Logf("given: Deployment web scaled to 0 and deleted with orphan propagation: %s stays, with no pods and nothing to recreate it", rs.Name)
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, 60*time.Second, "every pod of "+rs.Name+" gone", func(ctx context.Context) (bool, string, error) {
		pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0, framework.DescribePods(pods.Items), nil
	}))
	orphan := metav1.DeletePropagationOrphan
	must(t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &orphan}))
	must(t, framework.Eventually(ctx, 60*time.Second, rs.Name+" orphaned", func(ctx context.Context) (bool, string, error) {
		got, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return metav1.GetControllerOf(got) == nil && apierrors.IsNotFound(err), "still owned, or the Deployment still there", nil
	}))

	t.Logf("when: snapshot %s is deleted while %s, which owns it, still exists", snap, rs.Name)
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, snap, metav1.DeleteOptions{}))
	want := "in use by replicaset/" + rs.Name + ": deletion waits until nothing uses it"
	must(t, framework.Eventually(ctx, attachWithin, "the DeletionHeld event: "+want, func(ctx context.Context) (bool, string, error) {
		msgs, err := e2e.cluster.Events(ctx, ns, refs.ConfigMap, snap, "DeletionHeld")
		return slices.Contains(msgs, want), strings.Join(msgs, "; "), err
	}))
	t.Logf("then: it is held for %s alone (%q)", rs.Name, want)

	t.Logf("when: %s is deleted: the snapshot's deletion was seen before its revision's", rs.Name)
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Delete, rs.Name)
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, 60*time.Second, ns, rs.Name))
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, snap))
	t.Logf("then: %s goes with its revision", snap)
}

// An image-only deploy: the new revision is created with the same content, so it shares the previous
// revision's snapshot, owned by both. The attach controller, re-examining the revisions (here because
// an opted-in ConfigMap they name appears; a controller restart does the same), must not take that
// ownerReference back as "no longer used": it is the pin. Had it, the revision it took it from would
// have been pinned again to what app-config holds by then (changed in place since), or read it on
// its next pod.
//
// Webhook mode only: its revision names web-extra before it exists, which in policy mode makes the
// revision's pods wait for it (TestTableWaitsForAnObjectTheRevisionCannotStartWithout).
func TestPinningARevisionSharingItsSnapshotKeepsIt(t *testing.T) {
	t.Parallel()
	pinningARevisionSharingItsSnapshotKeepsIt(t, byWebhook)
}

// pinningARevisionSharingItsSnapshotKeepsIt is the story of TestPinningARevisionSharingItsSnapshotKeepsIt in one admission mode.
func pinningARevisionSharingItsSnapshotKeepsIt(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("pin-shared-snapshot"))
	a.start(t, "Fail", nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	d, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config", "web-extra"}, pinV1), nil)
	must(t, err)
	rs1 := deploymentReplicaSet(t, ns, d)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs1, 1))
	s1, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", rs1.UID)
	must(t, err)
	t.Logf("given: Deployment web (revision %s) reads app-config through %s, and names web-extra, an opted-in ConfigMap not created yet", rs1.Name, s1.Name)

	t.Log("when: an image-only deploy")
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.28"}]}}}}`), metav1.PatchOptions{})
	must(t, err)
	var rs2 *appsv1.ReplicaSet
	must(t, framework.Eventually(ctx, 90*time.Second, "the image-only revision running, pinned", func(ctx context.Context) (bool, string, error) {
		res, err := e2e.cluster.ResolveWorkload(ctx, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "web"})
		if err != nil {
			return false, err.Error(), nil
		}
		if rs2, err = res.Current(); err != nil || rs2.UID == rs1.UID {
			return false, "no new revision yet", nil
		}
		pods, err := e2e.cluster.PodsOf(ctx, rs2)
		if err != nil || len(pods) != 1 || framework.ReadyPods(pods) != 1 {
			return false, "pods: " + framework.DescribePods(pods), err
		}
		return slices.Equal(framework.ReadsConfigMaps(&pods[0]), []string{s1.Name, "web-extra"}), "pods: " + framework.DescribePods(pods), nil
	}))
	ownedByBoth := func() error {
		owners := ownersOf(t, ns, refs.ConfigMap, s1.Name)
		for _, rs := range []*appsv1.ReplicaSet{rs1, rs2} {
			if !slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == rs.UID }) {
				return fmt.Errorf("snapshot %s owned by %s, not by %s: that revision lost its pin", s1.Name, describe(owners), rs.Name)
			}
		}
		return nil
	}
	must(t, ownedByBoth())
	t.Logf("then: %s's pod reads the same snapshot %s, owned by both revisions", rs2.Name, s1.Name)

	t.Log("when: app-config is changed in place without a template change (drift), and web-extra appears: both revisions are synced again")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV2))
	configRevisionLabelled(t, ns, "web-extra", true)
	for _, rs := range []*appsv1.ReplicaSet{rs1, rs2} {
		must(t, e2e.cluster.WaitAttached(ctx, attachWithin, ns, refs.ConfigMap, "web-extra", rs))
	}
	must(t, ownedByBoth())
	snaps, err := e2e.cluster.Snapshots(ctx, ns, "app-config")
	must(t, err)
	if len(snaps) != 1 {
		var names []string
		for _, s := range snaps {
			names = append(names, s.Name+" (owners "+describe(s.OwnerReferences)+")")
		}
		t.Fatalf("snapshots of app-config: %v; want only %s: a revision was pinned again to the changed content", names, s1.Name)
	}
	t.Logf("then: web-extra attached to both, and %s still pins both revisions", s1.Name)

	t.Logf("when: a spot node takes %s's pod", rs2.Name)
	pinnedRollout{t: t, ns: ns}.spotKill(rs2, 1)
	pods, err := e2e.cluster.PodsOf(ctx, rs2)
	must(t, err)
	if got := framework.ReadsConfigMaps(&pods[0]); !slices.Equal(got, []string{s1.Name, "web-extra"}) {
		t.Fatalf("the replacement reads %v; want %s (v1), not app-config's changed content", got, s1.Name)
	}
	t.Logf("then: its replacement reads %s, the content its revision was created with", s1.Name)
}

// A Deployment: kubectl rollout undo copies annotations between ReplicaSets and the Deployment; the pin
// is not an annotation, so it stays right. And exactly one ReplicaSet per revision, over many deploys:
// pods are mutated, templates never.
func TestPinningADeploymentThroughRolloutUndo(t *testing.T) {
	t.Parallel()
	eachAdmission(t, pinningADeploymentThroughRolloutUndo)
}

// pinningADeploymentThroughRolloutUndo is the story of TestPinningADeploymentThroughRolloutUndo in one admission mode.
func pinningADeploymentThroughRolloutUndo(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("pin-deployment"))
	a.start(t, "Fail", nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	d, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	rs1 := deploymentReplicaSet(t, ns, d)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs1, 1))
	r := pinnedRollout{t: t, ns: ns}
	s1 := r.expectReads(rs1, pinV1)

	versions := []map[string]string{pinV2, pinV3}
	for i := 4; i <= 6; i++ {
		versions = append(versions, map[string]string{"configuration.json": fmt.Sprintf(`{"v": %d}`, i)})
	}
	t.Logf("when: %d config changes are deployed, each with its checksum", len(versions))
	for _, v := range versions {
		must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", v))
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"checksum/config":%q}}}}}`, framework.Checksum(v))
		_, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err)
		rs := waitDeploymentOn(t, ns, "web", framework.Checksum(v))
		r.expectReads(rs, v)
	}
	rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(rss.Items) != 1+len(versions) {
		t.Fatalf("%d ReplicaSets for %d revisions: the Deployment controller must find each revision's ReplicaSet by its template", len(rss.Items), 1+len(versions))
	}
	t.Logf("then: exactly %d ReplicaSets for %d revisions", len(rss.Items), 1+len(versions))

	t.Log("when: kubectl rollout undo --to-revision=1")
	must(t, deploymentUndo(ctx, ns, "web", rs1))
	back := waitDeploymentOn(t, ns, "web", framework.Checksum(pinV1))
	if back.UID != rs1.UID {
		t.Fatalf("undo made ReplicaSet %s instead of reusing %s", back.Name, rs1.Name)
	}
	if got := r.expectReads(back, pinV1); got != s1 {
		t.Fatalf("after undo pods read %s, want revision 1's %s", got, s1)
	}
	r.expectAppConfigHasNoOwners()
}

// deploymentUndo does what `kubectl rollout undo` does: one JSON patch that puts the ReplicaSet's template
// (without its hash label) back into the Deployment and its annotations onto the Deployment (kubectl's
// skip list aside). A patch, not an Update: the Deployment controller writes the object meanwhile.
func deploymentUndo(ctx context.Context, ns, name string, to *appsv1.ReplicaSet) error {
	d, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	t := to.Spec.Template.DeepCopy()
	delete(t.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	annotations := map[string]string{}
	for k, v := range d.Annotations {
		annotations[k] = v
	}
	for k, v := range to.Annotations {
		if !strings.HasPrefix(k, "deployment.kubernetes.io/") && k != "kubectl.kubernetes.io/last-applied-configuration" {
			annotations[k] = v
		}
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template", "value": t},
		{"op": "replace", "path": "/metadata/annotations", "value": annotations},
	})
	if err != nil {
		return err
	}
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

func waitDeploymentOn(t *testing.T, ns, name, checksum string) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	must(t, framework.Eventually(context.Background(), 90*time.Second, "Deployment "+name+" on checksum "+checksum[:8], func(ctx context.Context) (bool, string, error) {
		res, err := e2e.cluster.ResolveWorkload(ctx, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: name})
		if err != nil {
			return false, err.Error(), nil
		}
		cur, err := res.Current()
		if err != nil || cur.Spec.Template.Annotations["checksum/config"] != checksum {
			return false, "not yet", nil
		}
		pods, err := e2e.cluster.PodsOf(ctx, cur)
		if err != nil {
			return false, "", err
		}
		rs = cur
		return len(pods) == 1 && framework.ReadyPods(pods) == 1 && cur.Status.Replicas == 1, framework.DescribePods(pods), nil
	}))
	return rs
}

// A StatefulSet partitioned update: the pod below the partition comes back from the old revision with
// the old content, though app-config holds the new one.
func TestPinningAStatefulSetPartitionedUpdate(t *testing.T) {
	t.Parallel()
	eachAdmission(t, pinningAStatefulSetPartitionedUpdate)
}

// pinningAStatefulSetPartitionedUpdate is the story of TestPinningAStatefulSetPartitionedUpdate in one admission mode.
func pinningAStatefulSetPartitionedUpdate(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("pin-statefulset"))
	a.start(t, "Fail", nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	sts, err := e2e.cluster.CreateStatefulSet(ctx, ns, "db", 2, framework.PinnedTemplate("db", []string{"app-config"}, pinV1))
	must(t, err)
	waitStatefulPods(t, ns, "db", 2, "")
	cr1 := waitRevisions(t, ns, sts.UID, 1)[0]
	s1, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr1.UID)
	must(t, err)

	t.Log("when: app-config changes with a partitioned update that only db-1 takes")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV2))
	tmpl := framework.PinnedTemplate("db", []string{"app-config"}, pinV2)
	patch := fmt.Sprintf(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":1}},"template":{"metadata":{"annotations":{"checksum/config":%q}}}}}`,
		tmpl.Annotations["checksum/config"])
	_, err = e2e.cluster.Kube.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	cr2 := waitRevisions(t, ns, sts.UID, 2)[1]
	s2 := waitPodReads(t, ns, "db-1", func(names []string) bool { return len(names) == 1 && names[0] != s1.Name })
	snap2, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr2.UID)
	must(t, err)
	if s2 != snap2.Name || !maps.Equal(snap2.Data, pinV2) {
		t.Fatalf("db-1 reads %s; want revision 2's snapshot %s with v2", s2, snap2.Name)
	}

	t.Log("when: db-0, below the partition, is lost")
	must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{}))
	time.Sleep(time.Second)
	got := waitPodReads(t, ns, "db-0", func(names []string) bool { return len(names) == 1 })
	if got != s1.Name || !maps.Equal(s1.Data, pinV1) {
		t.Fatalf("db-0 came back reading %s; want revision 1's snapshot %s (v1)", got, s1.Name)
	}
	t.Logf("then: db-0 came back reading %s, the old content", got)
}

// waitPodReads waits for a live pod reading ConfigMaps that satisfy ok, and returns the first.
func waitPodReads(t *testing.T, ns, pod string, ok func([]string) bool) string {
	t.Helper()
	var names []string
	must(t, framework.Eventually(context.Background(), 90*time.Second, "pod "+pod, func(ctx context.Context) (bool, string, error) {
		p, err := e2e.cluster.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			return false, "absent", nil
		}
		names = framework.ReadsConfigMaps(p)
		return ok(names), strings.Join(names, ","), nil
	}))
	return names[0]
}

// A DaemonSet: its pods are pinned through the ControllerRevision their hash label names.
func TestPinningADaemonSet(t *testing.T) {
	t.Parallel()
	eachAdmission(t, pinningADaemonSet)
}

// pinningADaemonSet is the story of TestPinningADaemonSet in one admission mode.
func pinningADaemonSet(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("pin-daemonset"))
	a.start(t, "Fail", nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	ds, err := e2e.cluster.CreateDaemonSet(ctx, ns, "agent", framework.PinnedTemplate("agent", []string{"app-config"}, pinV1), nil)
	must(t, err)
	cr1 := waitRevisions(t, ns, ds.UID, 1)[0]
	must(t, framework.Eventually(ctx, 90*time.Second, "every agent pod on its revision's snapshot", func(ctx context.Context) (bool, string, error) {
		s, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr1.UID)
		if err != nil {
			return false, "no snapshot yet", nil
		}
		pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil || len(pods.Items) == 0 {
			return false, "no pods", err
		}
		for i := range pods.Items {
			if !slices.Equal(framework.ReadsConfigMaps(&pods.Items[i]), []string{s.Name}) {
				return false, framework.DescribePods(pods.Items), nil
			}
		}
		return true, "", nil
	}))
}

// The webhook down: with failurePolicy Fail no pod of a pinning namespace is created (the ReplicaSet
// reports the refusal) until it is back; with Ignore pods start with the live config, unpinned, and
// the audit reports them.
func TestPinningWithTheWebhookDown(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"Fail", "Ignore"} {
		t.Run(policy, func(t *testing.T) {
			ctx := context.Background()
			ns := givenNamespace(t, "pin-down-"+strings.ToLower(policy))
			ctl := startPinningController(t, policy, ns)
			must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
			t.Log("when: the controller (and its webhook) is down and a Deployment is created")
			must(t, ctl.Stop())
			d, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
			must(t, err)
			rs := deploymentReplicaSet(t, ns, d)
			if policy == "Fail" {
				must(t, framework.Eventually(ctx, 60*time.Second, "a FailedCreate event on "+rs.Name, func(ctx context.Context) (bool, string, error) {
					evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
					for _, e := range evs.Items {
						if e.InvolvedObject.Name == rs.Name && e.Reason == "FailedCreate" && strings.Contains(e.Message, "pin-pods.configmap-attacher.io") {
							return true, "", nil
						}
					}
					return false, "none", err
				}))
				pods, err := e2e.cluster.PodsOf(ctx, rs)
				must(t, err)
				if len(pods) != 0 {
					t.Fatalf("pods were created past a Fail webhook that is down: %s", framework.DescribePods(pods))
				}
				t.Log("then: no pod is created (FailedCreate names the webhook); when: the controller is back")
				startPinningController(t, policy, ns)
				must(t, e2e.cluster.WaitPods(ctx, 90*time.Second, rs, 1))
				pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
				return
			}
			must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))
			pods, err := e2e.cluster.PodsOf(ctx, rs)
			must(t, err)
			if got := framework.ReadsConfigMaps(&pods[0]); !slices.Equal(got, []string{"app-config"}) {
				t.Fatalf("with the webhook down and Ignore, the pod reads %v; want app-config itself", got)
			}
			t.Log("then: the pod starts reading app-config itself, unpinned; when: the controller is back, the audit reports it")
			startPinningController(t, policy, ns)
			must(t, framework.Eventually(ctx, 30*time.Second, "an Unpinned event on "+pods[0].Name, func(ctx context.Context) (bool, string, error) {
				evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
				for _, e := range evs.Items {
					if e.InvolvedObject.Name == pods[0].Name && e.Reason == "Unpinned" {
						return true, "", nil
					}
				}
				return false, "none", err
			}))
		})
	}
}

// A server-side dry run of a pod takes no snapshot (the webhook's sideEffects: NoneOnDryRun).
func TestPinningDryRunCreatesNoSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pin-dry-run")
	startPinningController(t, "Fail", ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	// The webhook pins only for a revision that exists (never for a UID nobody has): a ReplicaSet of
	// no replicas whose own template reads nothing, so the controller has nothing to snapshot for it
	// and any snapshot would be the dry run's.
	labels := map[string]string{"app": "web-dry-run"}
	rs, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-dry-run"},
		Spec: appsv1.ReplicaSetSpec{Replicas: new(int32), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}},
		Spec: framework.PinnedTemplate("web", []string{"app-config"}, pinV1).Spec}
	out, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	must(t, err)
	got := framework.ReadsConfigMaps(out)
	if len(got) != 1 || !strings.HasPrefix(got[0], "app-config-") {
		t.Fatalf("the dry-run pod reads %v; want the snapshot name it would get", got)
	}
	snaps, err := e2e.cluster.Snapshots(ctx, ns, "app-config")
	must(t, err)
	if len(snaps) != 0 {
		t.Fatalf("a dry run created snapshots: %v", snaps[0].Name)
	}
	t.Logf("then: the dry run answers %s and no snapshot exists", got[0])
}
