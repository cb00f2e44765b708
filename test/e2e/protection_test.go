//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// freedWithin is how long after its last user goes a config object may stay: the promise is "within
// a minute", the garbage collector usually takes well under a second.
const freedWithin = time.Minute

func template(app string, configMaps ...string) corev1.PodTemplateSpec {
	return framework.PodTemplate(app, configMaps, nil)
}

func deleteBackground(ctx context.Context, t *testing.T, del func(context.Context, string, metav1.DeleteOptions) error, name string) {
	t.Helper()
	bg := metav1.DeletePropagationBackground
	must(t, del(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}))
}

// stillThere asserts the object exists after the garbage collector had time to act on it.
func stillThere(t *testing.T, ns string, kind refs.Kind, name, why string) {
	t.Helper()
	time.Sleep(2 * time.Second) // the GC acts within a second here; give it twice that
	if _, exists, err := e2e.cluster.Owners(context.Background(), ns, kind, name); err != nil || !exists {
		t.Fatalf("%s %s is gone (err %v), but %s", kind, name, err, why)
	}
}

// The first way config was lost: one revisioned ConfigMap used by a Deployment and a StatefulSet;
// deleting the Deployment deleted it while the StatefulSet still used it.
func TestConfigSharedByADeploymentAndAStatefulSetSurvivesTheDeployment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-shared")
	startController(t, nil, ns)
	cm := configRevision(t, ns, "shared-cm", "v1")

	// Given a Deployment and a StatefulSet using the same config revision,
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", template("web", cm), nil)
	must(t, err)
	db, err := e2e.cluster.CreateStatefulSet(ctx, ns, "db", 1, template("db", cm))
	must(t, err)
	// then it is attached to the Deployment's ReplicaSet and to the StatefulSet's ControllerRevision,
	// and protected.
	var crs []appsv1.ControllerRevision
	must(t, framework.Eventually(ctx, attachWithin, "the StatefulSet's ControllerRevision", func(ctx context.Context) (bool, string, error) {
		crs, err = e2e.cluster.ControllerRevisions(ctx, ns, db.UID)
		return len(crs) == 1, "none yet", err
	}))
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, cm, framework.OwnerOf("ControllerRevision", &crs[0])))
	rs := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, cm, framework.OwnerOf("ReplicaSet", rs)))
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))

	// When the Deployment is deleted,
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete, "web")
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, 30*time.Second, ns, rs.Name))
	// then the config stays: the StatefulSet's revision still owns it.
	stillThere(t, ns, refs.ConfigMap, cm, "StatefulSet db still uses it")
	if held, err := e2e.cluster.Held(ctx, ns, refs.ConfigMap, cm); err != nil || held {
		t.Fatalf("held %v, err %v: the garbage collector should not even have tried, the ControllerRevision owns it", held, err)
	}

	// When the StatefulSet goes too, it is freed within a minute.
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().StatefulSets(ns).Delete, "db")
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
}

func deploymentReplicaSet(t *testing.T, ns string, d *appsv1.Deployment) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	must(t, framework.Eventually(context.Background(), 60*time.Second, "Deployment "+d.Name+"'s ReplicaSet", func(ctx context.Context) (bool, string, error) {
		res, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var newest *appsv1.ReplicaSet
		for i := range res.Items {
			r := &res.Items[i]
			if metav1.IsControlledBy(r, d) && r.DeletionTimestamp == nil && (newest == nil || r.CreationTimestamp.After(newest.CreationTimestamp.Time) || r.Name > newest.Name) {
				newest = r
			}
		}
		rs = newest
		return rs != nil, "none", nil
	}))
	return rs
}

// The second way: revisionHistoryLimit 0, the controller down during an image-only deploy. The old
// ReplicaSet, the config's only owner, is pruned and the garbage collector deletes the config the new
// ReplicaSet uses.
func TestConfigSurvivesAnImageOnlyDeployWhileTheControllerIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-ctl-down")
	ctl := startController(t, nil, ns)
	cm := configRevision(t, ns, "web-cm", "v1")
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", template("web", cm), ptrTo(int32(0)))
	must(t, err)
	rs1 := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, cm, framework.OwnerOf("ReplicaSet", rs1)))
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))

	// Given the controller is down (an upgrade, a crash),
	must(t, ctl.Stop())
	// when an image-only deploy replaces the ReplicaSet and prunes the old one,
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`)
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, 60*time.Second, ns, rs1.Name))
	// then the garbage collector deletes the config, but our finalizer holds it: the new ReplicaSet's
	// pods keep mounting it.
	must(t, e2e.cluster.WaitHeld(ctx, 30*time.Second, ns, refs.ConfigMap, cm))
	stillThere(t, ns, refs.ConfigMap, cm, "the new ReplicaSet uses it")

	// When the controller comes back, it keeps holding it while the Deployment uses it,
	startController(t, nil, ns)
	stillThere(t, ns, refs.ConfigMap, cm, "the controller came back and the new ReplicaSet still uses it")
	must(t, framework.Eventually(ctx, attachWithin, "a DeletionHeld event", func(ctx context.Context) (bool, string, error) {
		msgs, err := e2e.cluster.Events(ctx, ns, refs.ConfigMap, cm, "DeletionHeld")
		return len(msgs) > 0 && strings.Contains(msgs[0], "replicaset/web-"), strings.Join(msgs, "; "), err
	}))
	// and lets it go within a minute of the Deployment's deletion.
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete, "web")
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
}

// The third way: the attach-all annotation let anyone who may create a Deployment get any Secret of
// the namespace deleted. Now an administrator must allow it per namespace.
func TestAttachAllNeedsAnAdministrator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-attach-all")
	startController(t, nil, ns) // no -attach-all-namespaces
	_, err := e2e.cluster.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	must(t, err)

	// Given a Deployment annotated attach-all that names someone else's Secret as optional,
	t2 := template("thief")
	t2.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}, Optional: ptrTo(true)}}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "thief", Annotations: map[string]string{api.AttachAllAnnotation: "true"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptrTo(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: t2.Labels}, Template: t2}}
	d, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	must(t, err)
	rs := deploymentReplicaSet(t, ns, d)
	must(t, e2e.cluster.WaitPods(ctx, 30*time.Second, rs, 1))
	time.Sleep(2 * time.Second) // the controller has synced the ReplicaSet by now
	if owners := ownersOf(t, ns, refs.Secret, "db-password"); len(owners) != 0 {
		t.Fatalf("the Secret got owners %v from an annotation no administrator allowed", owners)
	}
	// when the Deployment is deleted, the Secret stays.
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete, "thief")
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, 30*time.Second, ns, rs.Name))
	stillThere(t, ns, refs.Secret, "db-password", "nothing allowed attaching it")
}

// A DaemonSet rolling update: each revision's config is attached to its ControllerRevision, and a
// revision pruned by revisionHistoryLimit takes its config with it.
func TestDaemonSetRollingUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-daemonset")
	startController(t, nil, ns)
	v1, v2 := configRevision(t, ns, "agent-cm", "v1"), configRevision(t, ns, "agent-cm", "v2")
	ds, err := e2e.cluster.CreateDaemonSet(ctx, ns, "agent", template("agent", v1), ptrTo(int32(0)))
	must(t, err)
	cr1 := waitRevisions(t, ns, ds.UID, 1)[0]
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v1, framework.OwnerOf("ControllerRevision", &cr1)))

	// When the DaemonSet rolls to the next config,
	patch := []byte(`{"spec":{"template":{"spec":{"volumes":[{"name":"configmaps-volume","projected":{"sources":[{"configMap":{"name":"` + v2 + `"}}]}}]}}}}`)
	_, err = e2e.cluster.Kube.AppsV1().DaemonSets(ns).Patch(ctx, "agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
	// then the new revision owns the new config,
	var cr2 appsv1.ControllerRevision
	must(t, framework.Eventually(ctx, 60*time.Second, "the second ControllerRevision", func(ctx context.Context) (bool, string, error) {
		crs, err := e2e.cluster.ControllerRevisions(ctx, ns, ds.UID)
		if err != nil || len(crs) == 0 || crs[len(crs)-1].Revision < 2 {
			return false, "not yet", err
		}
		cr2 = crs[len(crs)-1]
		return true, "", nil
	}))
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v2, framework.OwnerOf("ControllerRevision", &cr2)))
	// and once the rollout is done, the pruned revision (revisionHistoryLimit 0) takes v1 with it.
	must(t, e2e.cluster.WaitGone(ctx, 2*time.Minute, ns, refs.ConfigMap, v1))
	stillThere(t, ns, refs.ConfigMap, v2, "the current revision uses it")
}

func waitRevisions(t *testing.T, ns string, owner types.UID, n int) []appsv1.ControllerRevision {
	t.Helper()
	var crs []appsv1.ControllerRevision
	must(t, framework.Eventually(context.Background(), 60*time.Second, "ControllerRevisions", func(ctx context.Context) (bool, string, error) {
		var err error
		crs, err = e2e.cluster.ControllerRevisions(ctx, ns, owner)
		return len(crs) >= n, "not yet", err
	}))
	return crs
}

// A StatefulSet partitioned update: a pod below the partition is recreated from the OLD revision, and
// its config must still be there.
func TestStatefulSetPartitionedUpdateRecreatesAnOldPodWithItsConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-statefulset")
	startController(t, nil, ns)
	v1, v2 := configRevision(t, ns, "db-cm", "v1"), configRevision(t, ns, "db-cm", "v2")
	sts, err := e2e.cluster.CreateStatefulSet(ctx, ns, "db", 3, template("db", v1))
	must(t, err)
	waitStatefulPods(t, ns, "db", 3, v1)
	cr1 := waitRevisions(t, ns, sts.UID, 1)[0]
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v1, framework.OwnerOf("ControllerRevision", &cr1)))

	// Given a partitioned update to v2 that only pod db-2 takes,
	patch := []byte(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":2}},` +
		`"template":{"spec":{"volumes":[{"name":"configmaps-volume","projected":{"sources":[{"configMap":{"name":"` + v2 + `"}}]}}]}}}}`)
	_, err = e2e.cluster.Kube.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, 90*time.Second, "db-2 on v2", func(ctx context.Context) (bool, string, error) {
		p, err := e2e.cluster.Kube.CoreV1().Pods(ns).Get(ctx, "db-2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return podUses(p, v2), "still on v1", nil
	}))
	// when pod db-0 (below the partition) is lost, as on a spot node,
	must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{}))
	// then it comes back from the old revision, mounting v1, and v1 is there.
	must(t, framework.Eventually(ctx, 90*time.Second, "db-0 recreated", func(ctx context.Context) (bool, string, error) {
		p, err := e2e.cluster.Kube.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			return false, "not yet", nil
		}
		if !podUses(p, v1) {
			return false, "", fmt.Errorf("db-0 came back without v1: %v", refs.FromPodSpec(&p.Spec).Sorted())
		}
		return true, "", nil
	}))
	stillThere(t, ns, refs.ConfigMap, v1, "db-0 and db-1 run the old revision")
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, v1))
}

func podUses(p *corev1.Pod, cm string) bool {
	return refs.FromPodSpec(&p.Spec).Has(refs.Ref{Kind: refs.ConfigMap, Name: cm})
}

func waitStatefulPods(t *testing.T, ns, name string, n int, cm string) {
	t.Helper()
	must(t, framework.Eventually(context.Background(), 90*time.Second, name+" pods", func(ctx context.Context) (bool, string, error) {
		pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		ready := framework.ReadyPods(pods.Items)
		return ready == n, fmt.Sprintf("ready: %d", ready), nil
	}))
}

// A CronJob's template changes in place: its Jobs keep the config they were created with, the CronJob
// gives up what it no longer uses, and the config goes with the last Job using it.
func TestCronJobAndItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-cronjob")
	startController(t, nil, ns)
	v1, v2 := configRevision(t, ns, "backup-cm", "v1"), configRevision(t, ns, "backup-cm", "v2")
	cj, err := e2e.cluster.CreateCronJob(ctx, ns, "backup", template("backup", v1))
	must(t, err)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v1, framework.OwnerOf("CronJob", cj)))
	job, err := e2e.cluster.JobFrom(ctx, cj, "backup-manual")
	must(t, err)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v1, framework.OwnerOf("Job", job)))

	// When the CronJob moves to v2,
	patch := []byte(`{"spec":{"jobTemplate":{"spec":{"template":{"spec":{"volumes":[{"name":"configmaps-volume","projected":{"sources":[{"configMap":{"name":"` + v2 + `"}}]}}]}}}}}}`)
	_, err = e2e.cluster.Kube.BatchV1().CronJobs(ns).Patch(ctx, "backup", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v2, framework.OwnerOf("CronJob", cj)))
	// then v1 loses the CronJob's reference but keeps the Job's,
	must(t, framework.Eventually(ctx, attachWithin, "v1 detached from the CronJob", func(ctx context.Context) (bool, string, error) {
		owners := ownersOf(t, ns, refs.ConfigMap, v1)
		return len(owners) == 1 && owners[0].UID == job.UID, "owners " + describe(owners), nil
	}))
	// and goes with the Job.
	deleteBackground(ctx, t, e2e.cluster.Kube.BatchV1().Jobs(ns).Delete, job.Name)
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, v1))
	stillThere(t, ns, refs.ConfigMap, v2, "the CronJob uses it")

	// When the CronJob moves on to v3 before any Job ran with v2,
	v3 := configRevision(t, ns, "backup-cm", "v3")
	patch = []byte(`{"spec":{"jobTemplate":{"spec":{"template":{"spec":{"volumes":[{"name":"configmaps-volume","projected":{"sources":[{"configMap":{"name":"` + v3 + `"}}]}}]}}}}}}`)
	_, err = e2e.cluster.Kube.BatchV1().CronJobs(ns).Patch(ctx, "backup", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, v3, framework.OwnerOf("CronJob", cj)))
	// then v2 keeps the CronJob's reference, its last: without an owner the garbage collector would
	// never delete it,
	stillThere(t, ns, refs.ConfigMap, v2, "the CronJob is its only owner")
	if owners := ownersOf(t, ns, refs.ConfigMap, v2); len(owners) != 1 || owners[0].UID != cj.UID {
		t.Fatalf("%s owners %s; want the CronJob's reference kept", v2, describe(owners))
	}
	// and both go with the CronJob.
	deleteBackground(ctx, t, e2e.cluster.Kube.BatchV1().CronJobs(ns).Delete, cj.Name)
	for _, cm := range []string{v2, v3} {
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
	}
}

// A bare Pod is its own revision.
func TestABarePodOwnsItsConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-pod")
	startController(t, nil, ns)
	cm := configRevision(t, ns, "debug-cm", "v1")
	p, err := e2e.cluster.CreatePod(ctx, ns, "debug", template("debug", cm))
	must(t, err)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, cm, framework.OwnerOf("Pod", p)))
	must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, "debug", metav1.DeleteOptions{}))
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
}

// givenAProtectedDeployment runs Deployment web (one pod) reading a revisioned ConfigMap, and waits
// until in-use protection holds that ConfigMap; it returns its name.
func givenAProtectedDeployment(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	cm := configRevision(t, ns, "web-cm", "v1")
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", template("web", cm), nil)
	must(t, err)
	must(t, e2e.cluster.WaitPods(ctx, 30*time.Second, deploymentReplicaSet(t, ns, web), 1))
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))
	return cm
}

// `kubectl delete cm` of an object in use: held while used, released once not.
func TestDeletingAConfigInUseWaitsUntilItIsUnused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-kubectl-delete")
	startController(t, nil, ns)
	cm := givenAProtectedDeployment(t, ns)

	// When someone deletes the ConfigMap while the Deployment uses it,
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, cm, metav1.DeleteOptions{}))
	// then it is held, and says why.
	must(t, e2e.cluster.WaitHeld(ctx, 10*time.Second, ns, refs.ConfigMap, cm))
	stillThere(t, ns, refs.ConfigMap, cm, "the Deployment's pods use it")
	must(t, framework.Eventually(ctx, attachWithin, "a DeletionHeld event", func(ctx context.Context) (bool, string, error) {
		msgs, err := e2e.cluster.Events(ctx, ns, refs.ConfigMap, cm, "DeletionHeld")
		return len(msgs) > 0, "none", err
	}))
	// When the Deployment goes, the deletion completes within a minute.
	deleteBackground(ctx, t, e2e.cluster.Kube.AppsV1().Deployments(ns).Delete, "web")
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
}

// A namespace deletion never hangs on our finalizer.
func TestNamespaceDeletionCompletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-namespace")
	startController(t, nil, ns)
	givenAProtectedDeployment(t, ns)

	must(t, e2e.cluster.DeleteNamespace(ctx, ns))
	must(t, framework.Eventually(ctx, 2*time.Minute, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "terminating", nil
	}))
}

// Opting out undoes what we wrote, and only that.
func TestOptingOutRemovesOnlyWhatWeWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-opt-out")
	startController(t, nil, ns)
	cm := configRevision(t, ns, "web-cm", "v1")
	// Someone else's owner (a ConfigMap standing in for an app's CR) and finalizer.
	other := configRevisionLabelled(t, ns, "other-owner", false)
	otherMeta, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, other)
	must(t, err)
	theirs := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: other, UID: otherMeta.UID}
	patch := []byte(`{"metadata":{"finalizers":["example.com/keep"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"` + other + `","uid":"` + string(otherMeta.UID) + `"}]}}`)
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, cm, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "someone-else"})
	must(t, err)
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", template("web", cm), nil)
	must(t, err)
	rs := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, cm, framework.OwnerOf("ReplicaSet", rs)))
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))

	// When the label is removed,
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, cm, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"`+api.RevisionedLabel+`":null}}}`), metav1.PatchOptions{})
	must(t, err)
	// then our finalizer and our ownerReference go; theirs stay.
	must(t, framework.Eventually(ctx, attachWithin, "what we wrote removed", func(ctx context.Context) (bool, string, error) {
		m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, cm)
		if err != nil {
			return false, "", err
		}
		ok := !api.HasFinalizer(m.Finalizers, api.InUseFinalizer) && len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == theirs.UID
		return ok, "finalizers " + strings.Join(m.Finalizers, ",") + ", owners " + describe(m.OwnerReferences), nil
	}))
	m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, cm)
	must(t, err)
	if !api.HasFinalizer(m.Finalizers, "example.com/keep") {
		t.Fatalf("someone else's finalizer was removed: %v", m.Finalizers)
	}
	// Remove the stand-in finalizer so the namespace can go.
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, cm, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/keep"]}}`), metav1.PatchOptions{})
	must(t, err)
}

// `configmap-attacher release` takes the finalizer off, what uninstall runs.
func TestReleaseCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-release")
	ctl := startController(t, nil, ns)
	cm := configRevision(t, ns, "web-cm", "v1")
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))
	must(t, ctl.Stop())

	r := e2e.bin.Run(ctx, nil, "release", "-n", ns, "-dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, "would release ConfigMap "+ns+"/"+cm) {
		t.Fatalf("dry run: %s", r)
	}
	must(t, e2e.cluster.WaitProtected(ctx, time.Second, ns, refs.ConfigMap, cm))
	r = e2e.bin.Run(ctx, nil, "release", "-n", ns)
	if r.Code != 0 || !strings.Contains(r.Stdout, "released 1 objects") {
		t.Fatalf("release: %s", r)
	}
	m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, cm)
	must(t, err)
	if api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
		t.Fatalf("finalizers after release: %v", m.Finalizers)
	}
	if r := e2e.bin.Run(ctx, nil, "release"); r.Code != 2 {
		t.Fatalf("release without a scope: %s; want exit 2", r)
	}
}

func describe(owners []metav1.OwnerReference) string {
	var s []string
	for _, o := range owners {
		s = append(s, o.Kind+"/"+o.Name)
	}
	return strings.Join(s, ",")
}

func ptrTo[T any](v T) *T { return &v }

// In-use protection never releases an object a pod reads, though the pod was created a moment before
// the object's deletion and the controller's cache may not show it yet: before it lets a deletion go,
// it confirms with a consistent LIST of the namespace what its cache says (pvcprotection's check).
// Pods are created and their ConfigMaps deleted right after, many at once: bare pods (revisions of
// their own) and pods whose controller is an object the controller does not follow (as a webhook's
// volume: what they read is not their controller's).
func TestAPodCreatedJustBeforeItsConfigIsDeletedKeepsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "protect-race")
	startController(t, nil, ns)
	anchor, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "anchor"}}, metav1.CreateOptions{})
	must(t, err)
	const n = 12
	cms := make([]string, n)
	for i := range cms {
		cms[i] = configRevision(t, ns, fmt.Sprintf("race-%02d", i), "v1")
	}
	for _, cm := range cms {
		must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, cm))
	}

	// When each pod is created and, as soon as the API server has it, its ConfigMap deleted,
	errs := make(chan error, n)
	for i, cm := range cms {
		go func() {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("reader-%02d", i), Namespace: ns}, Spec: template("reader", cm).Spec}
			if i%2 == 1 {
				yes := true
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: anchor.Name, UID: anchor.UID, Controller: &yes}}
			}
			if _, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			errs <- e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, cm, metav1.DeleteOptions{})
		}()
	}
	for range cms {
		must(t, <-errs)
	}
	// then every one is held, and says by which pod.
	for i, cm := range cms {
		must(t, e2e.cluster.WaitHeld(ctx, 10*time.Second, ns, refs.ConfigMap, cm))
		want := fmt.Sprintf("in use by pod/reader-%02d", i)
		must(t, framework.Eventually(ctx, attachWithin, "a DeletionHeld event on "+cm, func(ctx context.Context) (bool, string, error) {
			msgs, err := e2e.cluster.Events(ctx, ns, refs.ConfigMap, cm, "DeletionHeld")
			for _, m := range msgs {
				if strings.Contains(m, want) {
					return true, "", err
				}
			}
			return false, fmt.Sprint(msgs), err
		}))
	}
	stillThere(t, ns, refs.ConfigMap, cms[0], "a pod reads it")
	for _, cm := range cms[1:] {
		if _, exists, err := e2e.cluster.Owners(ctx, ns, refs.ConfigMap, cm); err != nil || !exists {
			t.Fatalf("ConfigMap %s is gone (err %v), but a pod reads it", cm, err)
		}
	}
	// When the pods go, so do the ConfigMaps.
	zero := int64(0)
	for i := range cms {
		must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("reader-%02d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}
	for _, cm := range cms {
		must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, cm))
	}
}
