//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// A config change starts a revision (docs/config-starts.md): workloads opt in with Reloader's own
// annotations, the user edits only the ConfigMap, and the controller (-pinning -reloader-annotations)
// writes configmap-attacher.io/config-hash on the pod template with server-side apply. The settle
// window is the default (trigger.DefaultSettle).

// settled is long enough for the controller to have acted on a change: the settle window, then a
// margin for a loaded machine.
const settled = trigger.DefaultSettle + 10*time.Second

// expectOnlyOurAnnotation checks our field manager owns exactly the config-hash annotation of the
// object's pod template: server-side apply, and nothing else of the user's workload.
func expectOnlyOurAnnotation(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	owned, err := e2e.cluster.FieldsOwnedBy(context.Background(), gvr, ns, name, api.FieldManager)
	must(t, err)
	if !slices.Equal(owned, []string{framework.OnlyOurAnnotation}) {
		t.Fatalf("%s %s: our field manager owns %q; want exactly %q", gvr.Resource, name, owned, framework.OnlyOurAnnotation)
	}
	t.Logf("then: managedFields: %s owns only %s of %s/%s (server-side apply)", api.FieldManager, api.ConfigHashAnnotation, gvr.Resource, name)
}

// expectEvents checks the object has exactly one Event with reason (recorded once, not repeated),
// containing each of want, and returns its message.
func expectEvents(t *testing.T, ns, kind, name, reason string, want ...string) string {
	t.Helper()
	ctx := context.Background()
	_, err := e2e.cluster.WaitEvent(ctx, 60*time.Second, ns, kind, name, reason)
	must(t, err)
	evs, err := e2e.cluster.EventsOn(ctx, ns, kind, name, reason)
	must(t, err)
	if len(evs) != 1 || evs[0].Count > 1 {
		var msgs []string
		for _, e := range evs {
			msgs = append(msgs, fmt.Sprintf("%dx %s", e.Count, e.Message))
		}
		t.Fatalf("%s events on %s %s: %q; want exactly one, recorded once", reason, kind, name, msgs)
	}
	for _, w := range want {
		if !strings.Contains(evs[0].Message, w) {
			t.Fatalf("%s event on %s %s says %q; want it to say %q", reason, kind, name, evs[0].Message, w)
		}
	}
	t.Logf("then: %s %s: %s: %s", kind, name, reason, evs[0].Message)
	return evs[0].Message
}

// The write-up's story with nothing but the ConfigMap edited (the demo's third story): the canary
// starts and pauses by itself, a spot-replaced stable pod reads the old content, abort, the revert
// goes back to the stable revision, a fixed edit is promoted, and pruning collects the old snapshots.
func TestConfigStartsTheWriteUpsCanaryWithNothingButTheConfigMapEdited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := story(t, "config-starts", nil)
	ctrl, err := walkthrough.StartTriggerController(ctx, e2e.cluster, e2e.bin, "walkthrough-"+s.Namespace, s.Namespace)
	must(t, err)
	t.Cleanup(func() {
		must(t, ctrl.Stop(context.Background()))
		if t.Failed() {
			t.Logf("controller logs:\n%s", ctrl.Process.Logs())
		}
	})
	s.AfterStep = func(ctx context.Context, step int) error {
		if step == 2 { // the canary our write started
			expectOnlyOurAnnotation(t, workload.RolloutGVR, s.Namespace, s.Rollout)
			expectEvents(t, s.Namespace, "Rollout", s.Rollout, trigger.ReasonStarted, "ConfigMap/app-config changed", api.ConfigHashAnnotation)
			ro, err := e2e.cluster.Dynamic.Resource(workload.RolloutGVR).Namespace(s.Namespace).Get(ctx, s.Rollout, metav1.GetOptions{})
			must(t, err)
			if _, found, _ := unstructured.NestedFieldNoCopy(ro.Object, "spec", "restartAt"); found {
				t.Fatal("spec.restartAt set: a config change must never restart every pod")
			}
		}
		return nil
	}
	must(t, s.ConfigStarts(ctx))
}

// triggered is one workload of the stories below with pinned app-config.
type triggered struct {
	t  *testing.T
	ns string
}

// put creates the pinned app-config, or edits its data and nothing else.
func (w triggered) put(data map[string]string) {
	w.t.Helper()
	must(w.t, e2e.cluster.PutPinnedConfigMap(context.Background(), w.ns, "app-config", data))
}

// waitDeployment waits for the Deployment's current ReplicaSet to be one that ok accepts, with its one
// pod ready and reading the ReplicaSet's own snapshot of data, and returns it.
func (w triggered) waitDeployment(name string, data map[string]string, ok func(*appsv1.ReplicaSet) bool) *appsv1.ReplicaSet {
	w.t.Helper()
	return w.waitCurrent(workload.Deployment, name, 1, data, ok)
}

func (w triggered) replicaSets() []appsv1.ReplicaSet {
	w.t.Helper()
	list, err := e2e.cluster.Kube.AppsV1().ReplicaSets(w.ns).List(context.Background(), metav1.ListOptions{})
	must(w.t, err)
	return list.Items
}

func hashOf(rs *appsv1.ReplicaSet) string {
	return rs.Spec.Template.Annotations[api.ConfigHashAnnotation]
}

// optIn puts Reloader's annotation on a running workload and waits until the controller has taken
// its first look (its record exists): opting in starts nothing, and an edit made at the same instant
// would count as content from before.
func (w triggered) optIn(gvr schema.GroupVersionResource, kind, name string) {
	w.t.Helper()
	ctx := context.Background()
	must(w.t, e2e.cluster.Annotate(ctx, gvr, w.ns, name, framework.ReloaderAuto))
	waitRecord(w.t, w.ns, kind, name, time.Minute)
}

// A Deployment: opting in starts nothing; a burst of two edits is one revision; the revert to the
// first content removes our annotation and the Deployment controller reuses the first ReplicaSet; an
// edit back to the burst's content reuses its ReplicaSet. Exactly one ReplicaSet per content.
func TestConfigStartsADeploymentAndARevertReusesItsReplicaSet(t *testing.T) {
	t.Parallel()
	eachAdmission(t, configStartsADeploymentAndARevertReusesItsReplicaSet)
}

// configStartsADeploymentAndARevertReusesItsReplicaSet is the story of TestConfigStartsADeploymentAndARevertReusesItsReplicaSet in one admission mode.
func configStartsADeploymentAndARevertReusesItsReplicaSet(t *testing.T, a admission) {
	ctx := context.Background()
	ns := givenNamespace(t, a.ns("config-starts-deployment"))
	a.start(t, "Fail", []string{"-reloader-annotations"}, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	_, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PodTemplate("web", []string{"app-config"}, nil), nil)
	must(t, err)
	rs1 := w.waitDeployment("web", pinV1, func(*appsv1.ReplicaSet) bool { return true })

	t.Log("when: the Deployment opts in (reloader.stakater.com/auto) after it runs")
	w.optIn(framework.DeploymentGVR, "Deployment", "web")
	time.Sleep(settled)
	if n := len(w.replicaSets()); n != 1 {
		t.Fatalf("%d ReplicaSets after opting in, want 1: opting in never starts a revision", n)
	}
	t.Log("then: no new revision")

	t.Log("when: app-config is edited twice within a second (a burst)")
	w.put(pinV2)
	time.Sleep(500 * time.Millisecond)
	w.put(pinV3)
	rs3 := w.waitDeployment("web", pinV3, func(rs *appsv1.ReplicaSet) bool { return rs.UID != rs1.UID && hashOf(rs) != "" })
	time.Sleep(settled)
	if n := len(w.replicaSets()); n != 2 {
		t.Fatalf("%d ReplicaSets after a burst of two edits, want 2: one revision per settled change", n)
	}
	expectOnlyOurAnnotation(t, framework.DeploymentGVR, ns, "web")
	t.Logf("then: one revision, %s, reading the burst's last content", rs3.Name)

	t.Log("when: app-config is reverted to its first content")
	w.put(pinV1)
	back := w.waitDeployment("web", pinV1, func(rs *appsv1.ReplicaSet) bool { return rs.UID == rs1.UID })
	if _, has, _ := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "web", api.ConfigHashAnnotation); has {
		t.Fatal("the revert left our annotation: the first revision's template had none")
	}
	t.Logf("then: our annotation is removed and ReplicaSet %s (revision %s) runs again, its snapshot pinned", back.Name, framework.RevisionOf(back))

	t.Log("when: app-config is edited back to the burst's content")
	w.put(pinV3)
	again := w.waitDeployment("web", pinV3, func(rs *appsv1.ReplicaSet) bool { return rs.UID == rs3.UID })
	time.Sleep(settled)
	if n := len(w.replicaSets()); n != 2 {
		t.Fatalf("%d ReplicaSets, want 2: each content has exactly one revision", n)
	}
	t.Logf("then: ReplicaSet %s again; still exactly 2 ReplicaSets", again.Name)
	pinnedRollout{t: t, ns: ns}.expectAppConfigHasNoOwners()
}

// A StatefulSet with a partition: the edit starts a revision that only the pods at or above the
// partition take; a pod below it comes back from the old revision with the old content.
func TestConfigStartsAStatefulSetPartitionedUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-statefulset")
	startTriggerController(t, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	sts, err := e2e.cluster.CreateStatefulSet(ctx, ns, "db", 2, framework.PodTemplate("db", []string{"app-config"}, nil))
	must(t, err)
	waitStatefulPods(t, ns, "db", 2, "")
	cr1 := waitRevisions(t, ns, sts.UID, 1)[0]
	s1, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr1.UID)
	must(t, err)
	_, err = e2e.cluster.Kube.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType,
		[]byte(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":1}}}}`), metav1.PatchOptions{})
	must(t, err)
	w.optIn(framework.StatefulSetGVR, "StatefulSet", "db")
	t.Log("given: StatefulSet db (2 pods, partition 1) opted in, reading pinned app-config")

	t.Log("when: app-config alone is edited")
	w.put(pinV2)
	cr2 := waitRevisions(t, ns, sts.UID, 2)[1]
	got := waitPodReads(t, ns, "db-1", func(names []string) bool { return len(names) == 1 && names[0] != s1.Name })
	snap2, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr2.UID)
	must(t, err)
	if got != snap2.Name || !maps.Equal(snap2.Data, pinV2) {
		t.Fatalf("db-1 reads %s; want revision 2's snapshot %s with v2", got, snap2.Name)
	}
	expectOnlyOurAnnotation(t, framework.StatefulSetGVR, ns, "db")

	t.Log("when: db-0, below the partition, is lost")
	must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{}))
	time.Sleep(time.Second)
	if got = waitPodReads(t, ns, "db-0", func(names []string) bool { return len(names) == 1 }); got != s1.Name {
		t.Fatalf("db-0 came back reading %s; want revision 1's snapshot %s", got, s1.Name)
	}
	t.Logf("then: db-0 came back reading %s (v1); db-1 reads %s (v2)", s1.Name, snap2.Name)
}

// A DaemonSet: the edit starts a revision, and its pods read their revision's snapshot.
func TestConfigStartsADaemonSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-daemonset")
	startTriggerController(t, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	tmpl := framework.PodTemplate("agent", []string{"app-config"}, nil)
	ds, err := e2e.cluster.CreateDaemonSet(ctx, ns, "agent", tmpl, nil)
	must(t, err)
	waitRevisions(t, ns, ds.UID, 1)
	w.optIn(framework.DaemonSetGVR, "DaemonSet", "agent")

	t.Log("when: app-config alone is edited")
	w.put(pinV2)
	cr2 := waitRevisions(t, ns, ds.UID, 2)[1]
	must(t, framework.Eventually(ctx, 2*time.Minute, "every agent pod on revision 2's snapshot", func(ctx context.Context) (bool, string, error) {
		s, err := e2e.cluster.SnapshotOf(ctx, ns, "app-config", cr2.UID)
		if err != nil {
			return false, "no snapshot yet", nil
		}
		pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil || len(pods.Items) == 0 {
			return false, "no pods", err
		}
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp != nil || !slices.Equal(framework.ReadsConfigMaps(&pods.Items[i]), []string{s.Name}) {
				return false, framework.DescribePods(pods.Items), nil
			}
		}
		return maps.Equal(s.Data, pinV2), "", nil
	}))
	expectOnlyOurAnnotation(t, framework.DaemonSetGVR, ns, "agent")
}

// A Rollout with workloadRef: its pod template lives in the Deployment it names, so that is where our
// annotation goes (its own spec.template must stay empty); Argo Rollouts resolves the changed template
// and starts the canary, with old pods pinned.
func TestConfigStartsARolloutWithWorkloadRef(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-workloadref")
	startTriggerController(t, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	tmpl := framework.PodTemplate("demo", []string{"app-config"}, nil)
	must(t, e2e.cluster.CreateWorkloadRefRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, Template: &tmpl, Annotations: framework.ReloaderAuto}))
	r := pinnedRollout{t: t, ns: ns}
	story := &helmStory{t: t, ns: ns, rollout: "demo"}
	rs1 := story.waitNewRevision(nil, 3).rs
	r.expectReads(rs1, pinV1)
	t.Log("given: Rollout demo (workloadRef: Deployment demo-template) opted in, reading pinned app-config")

	t.Log("when: app-config alone is edited")
	w.put(pinV2)
	rs2 := story.waitNewRevision(rs1, 1).rs
	if hashOf(rs2) == "" {
		t.Fatalf("the new ReplicaSet %s carries no %s", rs2.Name, api.ConfigHashAnnotation)
	}
	r.expectReads(rs2, pinV2)
	must(t, e2e.cluster.WaitPaused(ctx, 2*time.Minute, ns, "demo"))
	must(t, e2e.cluster.WaitPods(ctx, time.Minute, rs1, 2))
	r.spotKill(rs1, 2)
	r.expectReads(rs1, pinV1)
	expectOnlyOurAnnotation(t, framework.DeploymentGVR, ns, "demo-template")
	ro, err := e2e.cluster.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, "demo", metav1.GetOptions{})
	must(t, err)
	if _, found, _ := unstructured.NestedFieldNoCopy(ro.Object, "spec", "template"); found {
		t.Fatal("the Rollout got a spec.template: with workloadRef the template is the Deployment's")
	}
	t.Logf("then: the annotation is on Deployment demo-template's template; Argo Rollouts made canary %s from it; the stable pods stay pinned", rs2.Name)
}

// Helm with the checksum annotation: an upgrade changes app-config and the template together; the
// Deployment also carries Reloader's annotation. Exactly one new revision: Helm's.
func TestConfigStartsNothingMoreWhenAHelmUpgradeChangesConfigAndChecksumTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-helm")
	startTriggerController(t, ns)
	h := helmCLI(t)
	values := func(data map[string]string) string {
		b, err := json.Marshal(map[string]any{"config": data})
		must(t, err)
		p := filepath.Join(t.TempDir(), "values.json")
		must(t, os.WriteFile(p, b, 0o600))
		return p
	}
	chart := testdataPath("charts/config-starts")
	helmRun(t, h, "upgrade", "--install", "web", chart, "-n", ns, "-f", values(pinV1), "--wait", "--timeout", "2m")
	w := triggered{t: t, ns: ns}
	rs1 := w.waitDeployment("web", pinV1, func(*appsv1.ReplicaSet) bool { return true })
	tw, err := e2e.cluster.WatchTemplate(ctx, framework.DeploymentGVR, ns, "web")
	must(t, err)

	t.Log("when: helm upgrade with new config (the chart's checksum annotation changes with it)")
	helmRun(t, h, "upgrade", "web", chart, "-n", ns, "-f", values(pinV2), "--wait", "--timeout", "2m")
	rs2 := w.waitDeployment("web", pinV2, func(rs *appsv1.ReplicaSet) bool { return rs.UID != rs1.UID })
	time.Sleep(settled)
	if changes := tw.Stop(); len(changes) != 1 {
		t.Fatalf("the template changed %d times during the upgrade, want 1 (Helm's):\n%s", len(changes), strings.Join(changes, "\n"))
	}
	if n := len(w.replicaSets()); n != 2 {
		t.Fatalf("%d ReplicaSets, want 2: no second revision after Helm's", n)
	}
	if evs, err := e2e.cluster.EventsOn(ctx, ns, "Deployment", "web", trigger.ReasonStarted); err != nil || len(evs) != 0 {
		t.Fatalf("the controller started a revision (%v, %v): the upgrade's own revision already reads the new content", evs, err)
	}
	t.Logf("then: exactly one new revision, %s, Helm's; the controller wrote nothing", rs2.Name)
}

// Someone reverts our annotation (a tool, kubectl edit): the Deployment goes back to its first revision,
// we report it once and do not write it back; the next edit of the config starts a revision again.
func TestConfigStartsNeverFightsAToolRevertingIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-fight")
	startTriggerController(t, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	tmpl := framework.PodTemplate("web", []string{"app-config"}, nil)
	_, err := e2e.cluster.CreateDeployment(ctx, ns, "web", tmpl, nil)
	must(t, err)
	rs1 := w.waitDeployment("web", pinV1, func(*appsv1.ReplicaSet) bool { return true })
	w.optIn(framework.DeploymentGVR, "Deployment", "web")
	w.put(pinV2)
	w.waitDeployment("web", pinV2, func(rs *appsv1.ReplicaSet) bool { return rs.UID != rs1.UID })

	t.Log("when: a tool removes our annotation from the template (a JSON patch, as kubectl edit sends)")
	tw, err := e2e.cluster.WatchTemplate(ctx, framework.DeploymentGVR, ns, "web")
	must(t, err)
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/template/metadata/annotations/configmap-attacher.io~1config-hash"}]`), metav1.PatchOptions{FieldManager: "some-tool"})
	must(t, err)
	w.waitDeployment("web", pinV1, func(rs *appsv1.ReplicaSet) bool { return rs.UID == rs1.UID })
	time.Sleep(settled + 15*time.Second)
	if changes := tw.Stop(); len(changes) != 1 {
		t.Fatalf("the template changed %d times after the tool's revert, want 1 (the tool's): no write-back:\n%s", len(changes), strings.Join(changes, "\n"))
	}
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonOverruled, "ConfigMap/app-config", "the next change of the config starts one")
	t.Log("then: the tool's revert stands (revision 1, its snapshot), reported once")

	t.Log("when: the config changes again")
	w.put(pinV3)
	w.waitDeployment("web", pinV3, func(rs *appsv1.ReplicaSet) bool { return rs.UID != rs1.UID && hashOf(rs) != "" })
	t.Log("then: a revision starts again")
}

// Bad input: a reload list naming an object that does not exist, a malformed list, kinds we do not
// revise (a Job, a bare Pod), an annotation we do not honour: each a Warning naming the object and the
// fix, recorded once, and no write.
func TestConfigStartsBadInputIsToldAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-bad-input")
	startTriggerController(t, ns)
	w := triggered{t: t, ns: ns}
	w.put(pinV1)
	for name, annotations := range map[string]map[string]string{
		"missing":   {api.ReloaderConfigMapReload: "app-config,no-such-config"},
		"malformed": {api.ReloaderConfigMapReload: "app-config,[broken"},
	} {
		_, err := e2e.cluster.CreateDeployment(ctx, ns, name, framework.PodTemplate(name, []string{"app-config"}, nil), nil)
		must(t, err)
		must(t, e2e.cluster.Annotate(ctx, framework.DeploymentGVR, ns, name, annotations))
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns, Annotations: framework.ReloaderAuto},
		Spec: batchv1.JobSpec{Template: framework.PodTemplate("once", []string{"app-config"}, nil)}}
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	_, err := e2e.cluster.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	must(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: ns, Annotations: framework.ReloaderAuto},
		Spec: framework.PodTemplate("lonely", []string{"app-config"}, nil).Spec}
	_, err = e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	tmpl := framework.PodTemplate("restart", []string{"app-config"}, nil)
	must(t, e2e.cluster.CreateRollout(ctx, ns, "restart", framework.RolloutSpec{Replicas: 1, Template: &tmpl,
		Annotations: map[string]string{api.ReloaderAuto: "true", api.ReloaderRolloutStrategy: "restart"}}))

	t.Log("when: app-config is edited")
	time.Sleep(2 * time.Second)
	w.put(pinV2)
	time.Sleep(settled)

	expectEvents(t, ns, "Deployment", "missing", trigger.ReasonInvalid, "ConfigMap no-such-config", "create it or remove the name")
	expectEvents(t, ns, "Deployment", "malformed", trigger.ReasonInvalid, `"[broken"`, "not a valid regular expression", api.ReloaderConfigMapReload)
	expectEvents(t, ns, "Job", "once", trigger.ReasonInvalid, "not honoured on a Job")
	expectEvents(t, ns, "Pod", "lonely", trigger.ReasonInvalid, "not honoured on a Pod")
	expectEvents(t, ns, "Rollout", "restart", trigger.ReasonNotHonoured, api.ReloaderRolloutStrategy, "skips the canary", "goes through the Rollout's strategy")
	if _, has, _ := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "malformed", api.ConfigHashAnnotation); has {
		t.Fatal("the Deployment with a malformed list got our annotation")
	}
	t.Log("then: each told once; nothing written where the annotations cannot be followed")
	// The missing name does not stop the others: app-config still starts a revision.
	must(t, framework.Eventually(ctx, time.Minute, "Deployment missing's template annotated", func(ctx context.Context) (bool, string, error) {
		_, has, err := e2e.cluster.TemplateAnnotation(ctx, framework.DeploymentGVR, ns, "missing", api.ConfigHashAnnotation)
		return has, "not yet", err
	}))
	ro, err := e2e.cluster.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).Get(ctx, "restart", metav1.GetOptions{})
	must(t, err)
	if _, found, _ := unstructured.NestedFieldNoCopy(ro.Object, "spec", "restartAt"); found {
		t.Fatal("spec.restartAt set on the Rollout asking for rollout-strategy restart: we never restart")
	}
}

// An object that is not pinned: the revision still starts, as Reloader's would, and a Warning says the
// older revisions' new pods read the new content, with the label that fixes it.
func TestConfigStartsWithUnpinnedConfigTellsTheLabelThatFixesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-unpinned")
	startTriggerController(t, ns)
	_, err := e2e.cluster.PutConfigMap(ctx, ns, "plain-config", pinV1)
	must(t, err)
	_, err = e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PodTemplate("web", []string{"plain-config"}, nil), nil)
	must(t, err)
	triggered{t: t, ns: ns}.optIn(framework.DeploymentGVR, "Deployment", "web")
	_, err = e2e.cluster.PutConfigMap(ctx, ns, "plain-config", pinV2)
	must(t, err)
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonStarted, "ConfigMap/plain-config")
	expectEvents(t, ns, "Deployment", "web", trigger.ReasonUnpinned, "configmap plain-config "+api.PinLabel+"="+api.PinValue)
	meta, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, "plain-config")
	must(t, err)
	if len(meta.OwnerReferences) > 0 || len(meta.Finalizers) > 0 || len(meta.Labels) > 0 {
		t.Fatalf("plain-config got owners %v, finalizers %v, labels %v: it is not ours", meta.OwnerReferences, meta.Finalizers, meta.Labels)
	}
}

// The chart grants our first write on workloads (patch on Deployments, StatefulSets, DaemonSets,
// Rollouts) only while the trigger's own value is on (reloaderAnnotations, default off), with pinning
// or without; the deprecated pinning.reloaderAnnotations is honoured when set, with pinning. A
// Reloader cluster's chart with pinning on and the trigger off grants no patch on workloads.
// TestChartPinningRBACSuffices proves the grant suffices.
func TestConfigStartsChartGrantsPatchOnWorkloadsOnlyWhileOn(t *testing.T) {
	t.Parallel()
	h := helmCLI(t)
	for _, tc := range []struct {
		sets  []string
		patch bool
		flag  string // the controller's, "" for none
	}{
		{[]string{"pinning.enabled=true"}, false, "-reloader-annotations=false"},
		{nil, false, "-reloader-annotations=false"},
		{[]string{"reloaderAnnotations=true"}, true, "-reloader-annotations=true"},
		{[]string{"pinning.enabled=true", "reloaderAnnotations=true"}, true, "-reloader-annotations=true"},
		{[]string{"pinning.enabled=true", "watchNamespaces={a}", "reloaderAnnotations=true"}, true, "-reloader-annotations=true"},
		{[]string{"pinning.enabled=true", "pinning.reloaderAnnotations=true"}, true, "-reloader-annotations=true"}, // deprecated, honoured
		{[]string{"pinning.enabled=true", "pinning.reloaderAnnotations=false"}, false, "-reloader-annotations=false"},
		{[]string{"reloaderAnnotations=true", "secrets=false"}, true, "-reloader-annotations=true"},
	} {
		args := []string{"template", "cma", chartPath("configmap-attacher"), "-n", "cma"}
		for _, s := range tc.sets {
			args = append(args, "--set", s)
		}
		objs, err := framework.ParseManifests(helmRun(t, h, args...))
		must(t, err)
		var patched, created, keyRules []string
		flag, keyFlag := "", ""
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				c, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, a := range c[0].(map[string]any)["args"].([]any) {
					if strings.HasPrefix(a.(string), "-reloader-annotations") {
						flag = a.(string)
					}
					if strings.HasPrefix(a.(string), "-config-hash-key-secret=") {
						keyFlag = a.(string)
					}
				}
			}
			if o.GetKind() == "Role" && o.GetName() == "cma-configmap-attacher-config-hash-key" {
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				for _, r := range rules {
					keyRules = append(keyRules, fmt.Sprint(r))
				}
			}
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				m := r.(map[string]any)
				verbs, _ := m["verbs"].([]any)
				resources, _ := m["resources"].([]any)
				if slices.Contains(verbs, any("patch")) {
					for _, res := range resources {
						if slices.Contains([]any{"deployments", "statefulsets", "daemonsets", "rollouts"}, res) {
							patched = append(patched, o.GetKind()+"/"+res.(string))
						}
					}
				}
				if slices.Contains(verbs, any("create")) && slices.Contains(resources, any("configmaps")) {
					created = append(created, o.GetKind())
				}
			}
		}
		if tc.patch != (len(patched) > 0) {
			t.Errorf("--set %v: patch on workloads granted by %v; want granted: %v", tc.sets, patched, tc.patch)
		}
		if flag != tc.flag {
			t.Errorf("--set %v: controller flag %q, want %q", tc.sets, flag, tc.flag)
		}
		if tc.patch && len(created) == 0 {
			t.Errorf("--set %v: the trigger is on but no rule lets it create its records (ConfigMaps)", tc.sets)
		}
		// The hash key of Secret contents: create, and get, list and watch by name (the key is watched),
		// in the release namespace only, while the trigger follows Secrets (docs/rbac.md).
		secrets := !slices.Contains(tc.sets, "secrets=false")
		wantKey := []string{"map[apiGroups:[] resources:[secrets] verbs:[create]]",
			"map[apiGroups:[] resourceNames:[cma-configmap-attacher-config-hash-key] resources:[secrets] verbs:[get list watch]]"}
		if !tc.patch || !secrets {
			wantKey = nil
		}
		if !slices.Equal(keyRules, wantKey) {
			t.Errorf("--set %v: the hash key Role's rules %q, want %q", tc.sets, keyRules, wantKey)
		}
		if want := "-config-hash-key-secret=cma-configmap-attacher-config-hash-key"; tc.patch && secrets && keyFlag != want {
			t.Errorf("--set %v: controller flag %q, want %q", tc.sets, keyFlag, want)
		}
		t.Logf("--set %v: patch on workloads: %v %s", tc.sets, patched, flag)
	}
}

// With the config informers widened to every ConfigMap (the feature on), in-use protection and the
// attach controller still touch only opted-in objects, on a real API server: a ConfigMap Reloader's
// annotations select and a plain one, both read by the Deployment, get no finalizer and no
// ownerReference; an opted-in one gets both, and loses exactly those when its label is removed (an
// update for the widened watch, a delete for the controllers' view of it).
func TestConfigStartsWidenedCacheTouchesOnlyOptedInObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "config-starts-widened")
	startTriggerController(t, ns)
	ours := configRevision(t, ns, "web-cm", "v1")
	plain := configRevisionLabelled(t, ns, "plain", false)
	selected := configRevisionLabelled(t, ns, "selected", false)
	_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, selected, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+api.ReloaderMatch+`":"true"}}}`), metav1.PatchOptions{})
	must(t, err)
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", template("web", ours, plain, selected), nil)
	must(t, err)
	must(t, e2e.cluster.Annotate(ctx, framework.DeploymentGVR, ns, "web", map[string]string{api.ReloaderSearch: "true"}))
	rs := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitOwnedBy(ctx, attachWithin, ns, refs.ConfigMap, ours, framework.OwnerOf("ReplicaSet", rs)))
	must(t, e2e.cluster.WaitProtected(ctx, attachWithin, ns, refs.ConfigMap, ours))
	t.Logf("given: %s opted in (attached, protected); %s plain and %s selected by Reloader's search+match, all read by Deployment web", ours, plain, selected)

	t.Log("when: the opted-in object loses its label")
	_, err = e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, ours, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"`+api.RevisionedLabel+`":null}}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, attachWithin, "what we wrote on "+ours+" removed", func(ctx context.Context) (bool, string, error) {
		m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, ours)
		if err != nil {
			return false, "", err
		}
		return len(m.Finalizers) == 0 && len(m.OwnerReferences) == 0, fmt.Sprintf("finalizers %v, owners %v", m.Finalizers, m.OwnerReferences), nil
	}))
	time.Sleep(5 * time.Second) // give a wrong controller time to write
	for _, name := range []string{plain, selected, ours} {
		m, err := e2e.cluster.Meta(ctx, ns, refs.ConfigMap, name)
		must(t, err)
		if len(m.Finalizers) > 0 || len(m.OwnerReferences) > 0 {
			t.Fatalf("ConfigMap %s is not opted in, yet carries finalizers %v and owners %v", name, m.Finalizers, m.OwnerReferences)
		}
	}
	t.Log("then: our finalizer and ownerReference left the opted-out object; the others never got any")
}
