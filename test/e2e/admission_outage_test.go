//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Policy mode when a part of ours is missing: the PinTable CRD, a table, the namespace's table of a
// namespace labelled while we were away, our controller for a while.

// restartPolicyController starts the controller of startPolicyController again, for the same
// namespaces, without labelling or waiting for anything.
func restartPolicyController(t *testing.T, namespaces ...string) *framework.Process {
	t.Helper()
	return startController(t, []string{"-pinning", "-pinning-admission=policy", "-webhook-configuration-name=pin-" + namespaces[0]}, namespaces...)
}

// expectAdmitted creates pod (a server-side dry run: the whole admission, no pod) and fails unless it
// is admitted, unchanged in what it reads.
func expectAdmitted(t *testing.T, what string, pod *corev1.Pod) {
	t.Helper()
	out, err := e2e.cluster.DryRun(context.Background(), pod)
	if err != nil {
		t.Fatalf("%s: refused: %v", what, err)
	}
	if got, want := framework.ReadsConfigMaps(out), framework.ReadsConfigMaps(pod); !slices.Equal(got, want) {
		t.Fatalf("%s: admitted reading %v, want %v unchanged", what, got, want)
	}
	t.Logf("then: %s is admitted, unchanged", what)
}

// waitRefusedFor waits for a FailedCreate Event in ns whose message has every one of parts, and returns it.
func waitRefusedFor(t *testing.T, ns string, parts ...string) string {
	t.Helper()
	var msg string
	must(t, framework.Eventually(context.Background(), 60*time.Second, "a refusal naming "+strings.Join(parts, ", "), func(ctx context.Context) (bool, string, error) {
		evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
		if err != nil {
			return false, "", err
		}
		for _, e := range evs.Items {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e.Message, p)
			}
			if ok {
				msg = e.Message
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d FailedCreate events", len(evs.Items)), nil
	}))
	return msg
}

// With every replica of ours stopped and the PinTable CRD deleted (the docs once said to delete it to
// remove the tables; several releases share it), kube-apiserver restarted: the policies left in place
// gate nothing outside the namespaces labelled for pinning (neither a namespace nobody labelled nor
// kube-system), and inside, only the pods of revisions that read config wait. The policies that read
// PinTables carry the bindings' selectors in their own constraints (a parameter error is raised for
// whatever a policy's own constraints match) and fail open; the gate reads no table.
func TestPolicyWithoutTheCRDGatesNothingOutsidePinning(t *testing.T) {
	if !e2e.cluster.Owned() {
		t.Skip("restarts kube-apiserver: needs a cluster the tests started")
	}
	// Not parallel: it deletes the PinTable CRD (every table of the cluster) and restarts kube-apiserver.
	ctx := context.Background()
	ns := givenNamespace(t, "pol-nocrd")
	other := givenNamespace(t, "pol-nocrd-unlabelled")
	ctl := startPolicyController(t, nil, ns)
	rs := givenPinnedWeb(t, ns)
	t.Cleanup(func() { must(t, e2e.cluster.EnsurePinTableCRD(context.Background(), e2e.root)) })

	t.Log("when: every replica of ours stops, the PinTable CRD is deleted, and kube-apiserver restarts")
	must(t, ctl.Stop())
	must(t, e2e.cluster.DeletePinTableCRD(ctx))
	must(t, e2e.cluster.RestartAPIServer(ctx, logWriter{t}))
	// The policies are loaded: a pod of a revision that reads config, in the labelled namespace, waits.
	msg := ""
	must(t, framework.Eventually(ctx, 60*time.Second, "the policies loaded by the restarted kube-apiserver", func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.DryRun(ctx, framework.ProbePod(ns, "app-config"))
		if err == nil {
			return false, "admitted", nil
		}
		msg = err.Error()
		return true, "", nil
	}))
	if !strings.Contains(msg, "has no entry") {
		t.Fatalf("a pod of a revision reading app-config in %s refused with %q, want the gate's: it waits for its entry", ns, msg)
	}
	t.Logf("then: in %s a pod of a revision reading config waits: %s", ns, msg)

	expectAdmitted(t, "a pod of a ReplicaSet reading app-config in "+other+" (never labelled)", framework.ProbePod(other, "app-config"))
	expectAdmitted(t, "a pod of a ReplicaSet reading a ConfigMap in kube-system", framework.ProbePod("kube-system", "coredns"))
	expectAdmitted(t, "a bare pod reading nothing in "+ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "bare-", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}})
	d, err := e2e.cluster.CreateDeployment(ctx, other, "web", framework.PodTemplate("web", []string{"app-config"}, nil), nil)
	must(t, err)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, deploymentReplicaSet(t, other, d), 1))
	t.Logf("then: Deployment web in %s runs its pod", other)

	t.Log("when: the CRD is applied again and the controller comes back")
	must(t, e2e.cluster.EnsurePinTableCRD(ctx, e2e.root))
	restartPolicyController(t, ns)
	pods, err := e2e.cluster.PodsOf(ctx, rs)
	must(t, err)
	for _, p := range pods {
		must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}))
	}
	must(t, framework.Eventually(ctx, 90*time.Second, "web's pod recreated", func(ctx context.Context) (bool, string, error) {
		ps, err := e2e.cluster.PodsOf(ctx, rs)
		fresh := slices.DeleteFunc(ps, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		return len(fresh) == 1 && framework.ReadyPods(fresh) == 1, framework.DescribePods(ps), err
	}))
	pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
}

// A namespace labelled while every replica of ours is stopped has no table: a bare pod and a Job's pod
// that read nothing are admitted; a Deployment reading a pinned ConfigMap waits, refused with a
// message naming its revision and what it reads, and is pinned once we are back.
func TestPolicyNamespaceLabelledWhileWeAreStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pol-late")
	ctl := startPolicyController(t, nil, ns)
	must(t, ctl.Stop())
	// A namespace nobody labelled yet: no label, no table.
	_, err := e2e.cluster.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, api.PinningNamespaceLabel)), metav1.PatchOptions{})
	must(t, err)
	must(t, e2e.cluster.Dynamic.Resource(policy.GVR).Namespace(ns).Delete(ctx, policy.TableName, metav1.DeleteOptions{}))
	t.Logf("given: the admission policies in place, every replica of ours stopped, namespace %s unlabelled and without a PinTable", ns)

	t.Logf("when: %s is labelled configmap-attacher.io/pinning=enabled", ns)
	must(t, e2e.cluster.EnablePinning(ctx, ns))
	must(t, e2e.cluster.WaitGateEffective(ctx, ns))

	bare, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a bare pod reading nothing: %v", err)
	}
	t.Logf("then: bare pod %s is admitted", bare.Name)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	_, err = e2e.cluster.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, 60*time.Second, "Job once's pod", func(ctx context.Context) (bool, string, error) {
		pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=once"})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) > 0, "none yet", nil
	}))
	t.Log("then: Job once's pod is admitted")

	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	rs := deploymentReplicaSet(t, ns, web)
	msg := waitRefusedFor(t, ns, "configmap-attacher pinning: ReplicaSet "+rs.Name, "reads configmap/app-config", "wait until configmap-attacher has recorded")
	t.Logf("then: Deployment web's pod is refused: %s", msg)
	if pods, err := e2e.cluster.PodsOf(ctx, rs); err != nil || len(pods) > 0 {
		t.Fatalf("pods of %s while we are stopped: %s (%v)", rs.Name, framework.DescribePods(pods), err)
	}

	t.Log("when: the controller is back")
	back := time.Now()
	restartPolicyController(t, ns)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))
	pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
	t.Logf("then: web's pod is created and pinned %s after our return", time.Since(back).Round(100*time.Millisecond))
}

// Every replica of ours stopped for 90 s while a Deployment rolls out a new revision (its image and
// its pinned ConfigMap changed): no pod reads app-config by its own name, the old revision keeps its
// pods, and once we are back the new revision's pods are created and pinned to the new content within
// 30 s: the controller wakes the ReplicaSet controller, whose own back-off after 90 s of refusals is
// over a minute.
func TestPolicyOutageAcrossADeploy(t *testing.T) {
	t.Parallel()
	const outage = 90 * time.Second
	ctx := context.Background()
	ns := givenNamespace(t, "pol-outage")
	ctl := startPolicyController(t, nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
	must(t, err)
	old := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, old, 2))
	pinnedRollout{t: t, ns: ns}.expectReads(old, pinV1)
	ledger := watchPods(t, ns)

	t.Logf("when: every replica of ours stops, and web rolls out a new image with app-config changed (v2), for %s", outage)
	must(t, ctl.Stop())
	stopped := time.Now()
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV2))
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"checksum/config":%q}},"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`,
		framework.Checksum(pinV2))
	_, err = e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	var next *appsv1.ReplicaSet
	must(t, framework.Eventually(ctx, 60*time.Second, "web's new ReplicaSet", func(ctx context.Context) (bool, string, error) {
		rs, err := currentOf(ctx, ns, "web")
		if err != nil || rs.UID == old.UID {
			return false, "not yet", nil
		}
		next = rs
		return true, "", nil
	}))
	for time.Since(stopped) < outage {
		pods, err := e2e.cluster.PodsOf(ctx, old)
		must(t, err)
		if framework.ReadyPods(pods) != 2 {
			t.Fatalf("the old revision %s has %s while we are away", old.Name, framework.DescribePods(pods))
		}
		if _, unpinned := ledger.snapshot(); len(unpinned) > 0 {
			t.Fatalf("pods admitted reading app-config by its own name: %v", unpinned)
		}
		time.Sleep(5 * time.Second)
	}
	if pods, err := e2e.cluster.PodsOf(ctx, next); err != nil || len(pods) > 0 {
		t.Fatalf("pods of %s while we were away: %s (%v)", next.Name, framework.DescribePods(pods), err)
	}
	waitRefusedFor(t, ns, "ReplicaSet "+next.Name, "has no entry")
	t.Logf("then: after %s the old revision %s keeps its 2 pods; the new revision %s has none (refused, waiting for its entry)",
		time.Since(stopped).Round(time.Second), old.Name, next.Name)

	t.Log("when: the controller is back")
	back := time.Now()
	restartPolicyController(t, ns)
	must(t, framework.Eventually(ctx, 30*time.Second, "the new revision's 2 pods", func(ctx context.Context) (bool, string, error) {
		pods, err := e2e.cluster.PodsOf(ctx, next)
		return err == nil && len(pods) == 2 && framework.ReadyPods(pods) == 2, framework.DescribePods(pods), err
	}))
	took := time.Since(back)
	pinnedRollout{t: t, ns: ns}.expectReads(next, pinV2)
	created, unpinned := ledger.result()
	if len(unpinned) > 0 {
		t.Fatalf("pods admitted reading app-config by its own name: %v", unpinned)
	}
	t.Logf("then: the new revision's 2 pods were created and pinned to v2 %s after our return (outage %s); %d pods created, none unpinned",
		took.Round(100*time.Millisecond), outage, created)
}

// `kubectl delete pintable pins`, and of a shard a workload was split off into, in a namespace whose
// pods are recreated throughout: each table is put back within seconds from what the controller
// knows, no pod is admitted unpinned meanwhile, and every pinned pod carries its own revision's mark
// whichever table kube-apiserver evaluated last.
func TestPolicyPinTableDeletedIsPutBack(t *testing.T) {
	t.Parallel()
	const apps = 40
	ctx := context.Background()
	ns := givenNamespace(t, "pol-tabledel")
	startPolicyController(t, []string{"-pinning-table-max-bytes=4096"}, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	var rss []*appsv1.ReplicaSet
	for i := range apps {
		name := fmt.Sprintf("app-%02d", i)
		d, err := e2e.cluster.CreateDeployment(ctx, ns, name, framework.PinnedTemplate(name, []string{"app-config"}, pinV1), nil)
		must(t, err)
		rss = append(rss, deploymentReplicaSet(t, ns, d))
	}
	for _, rs := range rss {
		must(t, e2e.cluster.WaitPods(ctx, 90*time.Second, rs, 1))
	}
	var shard string
	must(t, framework.Eventually(ctx, 60*time.Second, "the entries split into a shard", func(ctx context.Context) (bool, string, error) {
		tables, err := e2e.cluster.PinTables(ctx, ns)
		if err != nil || len(tables) < 2 {
			return false, fmt.Sprintf("%d tables", len(tables)), err
		}
		for name := range tables {
			if name != policy.TableName {
				shard = name
			}
		}
		return true, "", nil
	}))
	tables, err := e2e.cluster.PinTables(ctx, ns)
	must(t, err)
	t.Logf("given: %d Deployments reading app-config (pinned), their entries in PinTable pins (%d) and %d shard(s), %s holding %d",
		apps, len(tables[policy.TableName].Spec.Revisions), len(tables)-1, shard, len(tables[shard].Spec.Revisions))

	ledger := watchPods(t, ns)
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	deleted := churn(churnCtx, rss[0], 200*time.Millisecond, rss[1:]...) // a pod of each Deployment in turn
	for _, name := range []string{policy.TableName, shard} {
		before := tables[name]
		t.Logf("when: kubectl delete pintable %s", name)
		start := time.Now()
		_, err := e2e.cluster.Kubectl(ctx, "-n", ns, "delete", "pintable", name)
		must(t, err)
		must(t, framework.Eventually(ctx, 30*time.Second, "PinTable "+name+" put back", func(ctx context.Context) (bool, string, error) {
			after, err := e2e.cluster.PinTables(ctx, ns)
			if err != nil {
				return false, "", err
			}
			t := after[name]
			if t == nil || t.UID == before.UID {
				return false, "not yet", nil
			}
			return maps.EqualFunc(t.Spec.Revisions, before.Spec.Revisions, func(a, b policy.Entry) bool { return maps.Equal(a.ConfigMaps, b.ConfigMaps) }),
				fmt.Sprintf("%d entries of %d", len(t.Spec.Revisions), len(before.Spec.Revisions)), nil
		}))
		t.Logf("then: %s is put back with its %d entries %s later", name, len(before.Spec.Revisions), time.Since(start).Round(10*time.Millisecond))
		time.Sleep(3 * time.Second) // pods keep being created with the table back
	}
	stopChurn()
	for _, rs := range rss {
		must(t, e2e.cluster.WaitPods(ctx, 90*time.Second, rs, 1))
	}
	created, unpinned := ledger.result()
	if len(unpinned) > 0 {
		t.Fatalf("pods admitted reading app-config by its own name: %v", unpinned)
	}
	waiting, other, err := refusalsIn(ctx, ns)
	must(t, err)
	if len(other) > 0 {
		t.Fatalf("pods refused for another reason than a missing entry: %s", strings.Join(other, "; "))
	}
	for _, rs := range rss {
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		must(t, err)
		for _, p := range pods {
			if got := p.Annotations[api.PolicyAdmittedAnnotation]; got != string(rs.UID) {
				t.Fatalf("pod %s of %s marked %s=%q, want its revision's key %s", p.Name, rs.Name, api.PolicyAdmittedAnnotation, got, rs.UID)
			}
		}
	}
	t.Logf("then: %d pods deleted and %d created meanwhile, none unpinned, %d creations refused while an entry was missing; every pod marked with its own revision's key",
		deleted.Load(), created, len(waiting))
}

// OpenKruise's Advanced StatefulSet and DaemonSet (apps.kruise.io) share the kinds of apps/v1's, and
// their revisions are none of ours: their pods are admitted unchanged, as in webhook mode, never
// refused waiting for an entry no controller of ours would write.
func TestPolicyAdmitsKruisePodsUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pol-kruise")
	startPolicyController(t, nil, ns)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	for _, o := range []struct{ apiVersion, kind string }{{"apps.kruise.io/v1beta1", "StatefulSet"}, {"apps.kruise.io/v1alpha1", "DaemonSet"}} {
		pod := framework.ProbePod(ns, "app-config")
		pod.Labels = map[string]string{"controller-revision-hash": "db-5f7c9d8b4"}
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: o.apiVersion, Kind: o.kind, Name: "db", UID: "00000000-0000-4000-8000-0000000000cb", Controller: ptr.To(true)}}
		expectAdmitted(t, "a pod of "+o.apiVersion+" "+o.kind+" reading app-config (pinned)", pod)
	}
}

// A pinned pod debugged with an ephemeral container (kubectl debug) that reads app-config: the
// container is added by an update of the pod's ephemeralcontainers subresource, which neither the
// webhook nor the admission policies see: it reads the live object by its own name, and the pod is
// reported Unpinned. The pod's own containers keep reading their revision's snapshot.
func TestPinningEphemeralContainersReadTheLiveObject(t *testing.T) {
	eachAdmission(t, func(t *testing.T, a admission) {
		ctx := context.Background()
		ns := givenNamespace(t, a.ns("pin-debug"))
		a.start(t, "Fail", nil, ns)
		rs := givenPinnedWeb(t, ns)
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		must(t, err)
		pod := pods[0]
		t.Logf("when: kubectl debug adds an ephemeral container to %s reading app-config", pod.Name)
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{TargetContainerName: pod.Spec.Containers[0].Name,
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}})
		out, err := e2e.cluster.Kube.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod.Name, &pod, metav1.UpdateOptions{})
		must(t, err)
		if got := out.Spec.EphemeralContainers[0].EnvFrom[0].ConfigMapRef.Name; got != "app-config" {
			t.Fatalf("the ephemeral container reads %s", got)
		}
		own := out.DeepCopy()
		own.Spec.EphemeralContainers = nil
		if reads := framework.ReadsConfigMaps(own); slices.Contains(reads, "app-config") {
			t.Fatalf("the pod's own containers read %v", reads)
		}
		if reads := framework.ReadsConfigMaps(out); !slices.Contains(reads, "app-config") {
			t.Fatalf("the pod reads %v: its ephemeral container's app-config is not counted", reads)
		}
		t.Log("then: the ephemeral container reads app-config itself; the pod's containers still read the snapshot")
		must(t, framework.Eventually(ctx, 60*time.Second, "the pod reported Unpinned", func(ctx context.Context) (bool, string, error) {
			evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Unpinned,involvedObject.name=" + pod.Name})
			if apierrors.IsNotFound(err) {
				return false, "", nil
			}
			return err == nil && len(evs.Items) > 0, "no event yet", err
		}))
		t.Log("then: the pod is reported Unpinned (it reads configmap/app-config directly)")
	})
}

// The PrometheusRule carries the webhook's alerts only where the webhook pins, and the alerts on
// revisions waiting for their entry (ours, and kube-apiserver's count of the gate's refusals) with
// pinning in either mode.
func TestChartRendersTheWebhookAlertsOnlyInWebhookMode(t *testing.T) {
	t.Parallel()
	h := helmCLI(t)
	for _, mode := range []string{"policy", "webhook"} {
		out := helmRun(t, h, "template", "cma", chartPath("configmap-attacher"), "-n", "cma", "--set", "pinning.enabled=true", "--set", "pinning.admission="+mode,
			"--set", "metrics.prometheusRule.enabled=true", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
			"--show-only", "templates/prometheusrule.yaml")
		webhook := strings.Contains(out, "alert: ConfigMapAttacherWebhook")
		if webhook != (mode == "webhook") {
			t.Errorf("pinning.admission=%s: the webhook's alerts rendered: %v", mode, webhook)
		}
		for _, alert := range []string{"ConfigMapAttacherPinningRevisionWaiting", "ConfigMapAttacherPinningPodsRefused", "ConfigMapAttacherPodsUnpinned"} {
			if !strings.Contains(out, "alert: "+alert) {
				t.Errorf("pinning.admission=%s: no alert %s", mode, alert)
			}
		}
	}
	t.Log("then: the webhook's alerts in webhook mode only; the waiting revisions' in both")
}

// With the chart, only the controller's ServiceAccount writes PinTables, and only values that name a
// snapshot of the object they map: anyone else who may create a PinTable (an administrator, here)
// cannot point a revision's pods at another ConfigMap or Secret of the namespace.
func TestChartLetsOnlyTheControllerWritePinTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-pintables")
	appNS := givenNamespace(t, "e2e-pintables-app")
	must(t, e2e.cluster.EnsurePinTableCRD(ctx, e2e.root))
	r := installChart(t, "cma-tables", ns, "watchNamespaces={"+appNS+"}", "pinning.enabled=true", "pinning.admission=policy")
	table := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": policy.Group + "/" + policy.Version, "kind": policy.Kind,
			"metadata": map[string]any{"name": name, "labels": map[string]any{policy.TableLabel: policy.TableValue}},
			"spec":     map[string]any{"revisions": map[string]any{"rs-1": map[string]any{"revision": "ReplicaSet/web-1", "configMaps": map[string]any{"app-config": value}}}},
		}}
	}
	create := func(client dynamic.Interface, name, value string) error {
		var err error
		// kube-apiserver loads a new policy about a second after Helm created it.
		for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(time.Second) {
			_, err = client.Resource(policy.GVR).Namespace(appNS).Create(ctx, table(name, value), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				return err
			}
		}
		return err
	}
	err := create(e2e.cluster.Dynamic, "pins", "app-config-0123456789")
	if err == nil || !strings.Contains(err.Error(), "PinTables are written by configmap-attacher alone") {
		t.Fatalf("an administrator's PinTable: %v, want refused naming the controller's ServiceAccount", err)
	}
	t.Logf("then: an administrator's PinTable is refused: %v", err)
	cfg, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(t, ns, r.fullname()))
	must(t, err)
	sa, err := dynamic.NewForConfig(cfg)
	must(t, err)
	if err := create(sa, "pins", "db-password-0123456789"); err == nil || !strings.Contains(err.Error(), "names a snapshot of the object it maps") {
		t.Fatalf("the controller's PinTable mapping app-config to db-password's snapshot: %v, want refused", err)
	}
	if _, err := sa.Resource(policy.GVR).Namespace(appNS).Create(ctx, table("pins", "app-config-0123456789"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the controller's PinTable mapping app-config to a snapshot of it: %v", err)
	}
	t.Log("then: as the controller's ServiceAccount, a value naming another object's snapshot is refused, one naming a snapshot of the object admitted")
}
