//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Pinning by the API server itself (-pinning-admission=policy): a MutatingAdmissionPolicy rewrites
// each pod from the namespace's PinTable the controller keeps, a ValidatingAdmissionPolicy refuses a
// pod whose revision has no entry yet. Nothing of ours is on the pod path.

// admission is how a story's pods are pinned.
type admission string

const (
	byWebhook admission = "webhook"
	byPolicy  admission = "policy"
)

// eachAdmission tells the story once per admission mode, in parallel, each in namespaces of its own
// (admission.ns).
func eachAdmission(t *testing.T, story func(t *testing.T, a admission)) {
	t.Helper()
	for _, a := range []admission{byWebhook, byPolicy} {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			story(t, a)
		})
	}
}

// ns is a story's namespace name in this mode.
func (a admission) ns(base string) string {
	if a == byPolicy {
		return base + "-p"
	}
	return base
}

// start runs the pinning controller for the namespaces in this mode (failurePolicy: the webhook's).
func (a admission) start(t *testing.T, failurePolicy string, extraArgs []string, namespaces ...string) *framework.Process {
	t.Helper()
	if a == byPolicy {
		return startPolicyController(t, extraArgs, namespaces...)
	}
	return startPinningControllerWith(t, failurePolicy, extraArgs, namespaces...)
}

// startPolicyController runs the controller with -pinning -pinning-admission=policy for the
// namespaces (labelled for pinning): it applies its admission policies (named after the first
// namespace, their bindings limited to the namespaces) and fills their PinTables. The policies go when
// the test ends.
func startPolicyController(t *testing.T, extraArgs []string, namespaces ...string) *framework.Process {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.EnsurePinTableCRD(ctx, e2e.root))
	for _, ns := range namespaces {
		must(t, e2e.cluster.EnablePinning(ctx, ns))
	}
	name := "pin-" + namespaces[0]
	t.Cleanup(func() { // after the controller has stopped
		_ = policy.DeletePolicies(context.Background(), e2e.cluster.Kube, name)
	})
	p := startController(t, append([]string{"-pinning", "-pinning-admission=policy", "-webhook-configuration-name=" + name}, extraArgs...), namespaces...)
	must(t, framework.Eventually(ctx, 30*time.Second, "the admission policies applied and every namespace's PinTable made", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited:\n%s", p.Logs())
		}
		if _, err := e2e.cluster.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, "no binding yet", nil
		}
		for _, ns := range namespaces {
			if _, err := e2e.cluster.PinTable(ctx, ns); err != nil {
				return false, "no PinTable in " + ns + " yet", nil
			}
		}
		return true, "", nil
	}))
	must(t, e2e.cluster.WaitPolicyEffective(ctx, namespaces[0]))
	t.Logf("given: the controller runs with -pinning -pinning-admission=policy %s: the API server pins pods (policies %s)", strings.Join(extraArgs, " "), name)
	return p
}

// expectNoWebhookOf checks that no MutatingWebhookConfiguration carrying our webhook selects ns.
func expectNoWebhookOf(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	n, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	must(t, err)
	cfgs, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, c := range cfgs.Items {
		for _, w := range c.Webhooks {
			if w.Name != pinning.WebhookName {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
			must(t, err)
			if sel.Matches(labels.Set(n.Labels)) {
				t.Fatalf("MutatingWebhookConfiguration %s (webhook %s) gates namespace %s: in policy mode none of ours may", c.Name, w.Name, ns)
			}
		}
	}
	t.Logf("then: no MutatingWebhookConfiguration of ours gates %s", ns)
}

// The issue's own case, nothing of ours running: the write-up's canary paused on a faulty config,
// every replica of ours stopped, and a spot node replaced: the old revision's pods come back, each
// reading the old revision's snapshot, and the canary's pod the new one. The API server pinned them.
func TestPolicyTheCanaryWithEveryReplicaOfOursStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pol-canary")
	ctl := startPolicyController(t, nil, ns)
	r := pinnedRollout{t: t, ns: ns}

	t.Log("given: app-config (pinned) and Rollout demo reading it, 3 replicas, the write-up's canary (setWeight 1, pause)")
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	tmpl := framework.PinnedTemplate("demo", []string{"app-config"}, pinV1)
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, Template: &tmpl}))
	rs1 := r.current(pinV1, 3)
	s1 := r.expectReads(rs1, pinV1)

	t.Log("when: app-config is changed in place (faulty) with the checksum annotation: the canary starts and pauses")
	r.deploy(pinV2)
	must(t, e2e.cluster.WaitPaused(ctx, 90*time.Second, ns, "demo"))
	rs2 := r.current(pinV2, 1)
	s2 := r.expectReads(rs2, pinV2)
	must(t, e2e.cluster.WaitPods(ctx, 30*time.Second, rs1, 2))
	r.expectReads(rs1, pinV1)

	t.Log("when: every replica of ours stops")
	must(t, ctl.Stop())
	expectNoWebhookOf(t, ns)

	t.Logf("when: a spot node is replaced: every pod of %s and the canary's pod go", rs1.Name)
	for _, rs := range []*appsv1.ReplicaSet{rs1, rs2} {
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		must(t, err)
		for _, p := range pods {
			must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		}
	}
	fresh := func(rs *appsv1.ReplicaSet, n int) {
		must(t, framework.Eventually(ctx, 90*time.Second, fmt.Sprintf("%d new pods of %s", n, rs.Name), func(ctx context.Context) (bool, string, error) {
			pods, err := e2e.cluster.PodsOf(ctx, rs)
			if err != nil {
				return false, "", err
			}
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					return false, "old ones still going", nil
				}
			}
			return len(pods) == n && framework.ReadyPods(pods) == n, framework.DescribePods(pods), nil
		}))
	}
	fresh(rs1, 2)
	fresh(rs2, 1)
	if got := r.expectReads(rs1, pinV1); got != s1 {
		t.Fatalf("the recreated pods of %s read %s, want %s", rs1.Name, got, s1)
	}
	if got := r.expectReads(rs2, pinV2); got != s2 {
		t.Fatalf("the canary's recreated pod reads %s, want %s", got, s2)
	}
	live, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	must(t, err)
	if !maps.Equal(live.Data, pinV2) {
		t.Fatalf("app-config holds %v", live.Data)
	}
	t.Logf("then: with nothing of ours running, the old revision's new pods read %s (v1) though app-config holds the faulty v2; the canary's reads %s", s1, s2)
	r.expectAppConfigHasNoOwners()
}

// applyOne is one `kubectl apply` of a ConfigMap labelled for pinning and a Deployment reading it, in
// the order given.
func applyOne(t *testing.T, ns string, data map[string]string, configFirst bool) {
	t.Helper()
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns, Labels: map[string]string{api.PinLabel: api.PinValue}}, Data: data}
	replicas := int32(2)
	tmpl := framework.PinnedTemplate("web", []string{"app-config"}, data)
	d := appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl}}
	docs := []any{cm, d}
	if !configFirst {
		docs = []any{d, cm}
	}
	var b strings.Builder
	for _, doc := range docs {
		y, err := yaml.Marshal(doc)
		must(t, err)
		b.WriteString("---\n")
		b.Write(y)
	}
	path := filepath.Join(t.TempDir(), "app.yaml")
	must(t, os.WriteFile(path, []byte(b.String()), 0o644))
	_, err := e2e.cluster.Kubectl(context.Background(), "apply", "-f", path)
	must(t, err)
}

// refusalsIn sorts the FailedCreate Events of ns: those of the validating policy (a revision waiting
// for its entry, written or loaded into the mutating policy) and any other.
func refusalsIn(ctx context.Context, ns string) (waiting, other []string, err error) {
	return refusalsSince(ctx, ns, time.Time{})
}

// refusalsSince is refusalsIn for the refusals that last happened at since or later (Events keep whole
// seconds: give since on a second's start). By when they happened, not by which Events were there at since: a ReplicaSet
// controller's Events are written asynchronously, and on a loaded machine a refusal from before since
// (a pod created before its revision's entry) was written after it.
func refusalsSince(ctx context.Context, ns string, since time.Time) (waiting, other []string, err error) {
	evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, e := range evs.Items {
		if e.Reason != "FailedCreate" || lastSeen(e).Before(since) {
			continue
		}
		line := fmt.Sprintf("%s ×%d: %s", e.InvolvedObject.Name, max(e.Count, 1), e.Message)
		// Missing from kube-apiserver's view: not written yet, or not loaded into the mutating policy yet.
		if strings.Contains(e.Message, "configmap-attacher pinning:") && (strings.Contains(e.Message, "has no entry") || strings.Contains(e.Message, "had not loaded the entry")) {
			for range max(e.Count, 1) {
				waiting = append(waiting, line)
			}
			continue
		}
		other = append(other, line)
	}
	return waiting, other, nil
}

// The ordering hole, closed: a Deployment and its ConfigMap, labelled for pinning, in one kubectl
// apply, in fresh namespaces, half with the ConfigMap first and half with the Deployment first. Every
// pod reads its revision's snapshot; pods are refused (and retried by their ReplicaSet) only while
// their revision's entry is missing.
func TestPolicyOneApplyPinsEveryPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	var namespaces []string
	for i := range n {
		namespaces = append(namespaces, givenNamespace(t, fmt.Sprintf("pol-apply-%02d", i)))
	}
	startPolicyController(t, nil, namespaces...)

	t.Logf("when: in each of %d fresh namespaces, one kubectl apply of app-config (pin label) and Deployment web (2 replicas) reading it", n)
	var wg sync.WaitGroup
	for i, ns := range namespaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applyOne(t, ns, map[string]string{"configuration.json": fmt.Sprintf(`{"namespace": %q}`, ns)}, i%2 == 0)
		}()
	}
	wg.Wait()

	var pods, refused int
	for i, ns := range namespaces {
		data := map[string]string{"configuration.json": fmt.Sprintf(`{"namespace": %q}`, ns)}
		var rs *appsv1.ReplicaSet
		must(t, framework.Eventually(ctx, 2*time.Minute, "web's 2 pods in "+ns, func(ctx context.Context) (bool, string, error) {
			res, err := e2e.cluster.ResolveWorkload(ctx, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "web"})
			if err != nil {
				return false, err.Error(), nil
			}
			if rs, err = res.Current(); err != nil {
				return false, err.Error(), nil
			}
			ps, err := e2e.cluster.PodsOf(ctx, rs)
			return len(ps) == 2 && framework.ReadyPods(ps) == 2, framework.DescribePods(ps), err
		}))
		snap := pinnedRollout{t: t, ns: ns}.expectReads(rs, data)
		pods += 2
		waiting, other, err := refusalsIn(ctx, ns)
		must(t, err)
		if len(other) > 0 {
			t.Fatalf("%s: pods refused for another reason than a missing entry: %s", ns, strings.Join(other, "; "))
		}
		refused += len(waiting)
		order := "ConfigMap first"
		if i%2 == 1 {
			order = "Deployment first"
		}
		t.Logf("then: %s (%s): both pods read %s; refused while the entry was missing: %d", ns, order, snap, len(waiting))
	}
	t.Logf("then: %d pods in %d namespaces, 0 unpinned; refusals while an entry was missing: %d (each retried by its ReplicaSet)", pods, n, refused)
}

// appConfigReaders are the pods in ns reading app-config by its own name: unpinned.
func appConfigReaders(ctx context.Context, ns string) ([]string, error) {
	pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range pods.Items {
		if slices.Contains(framework.ReadsConfigMaps(&pods.Items[i]), "app-config") {
			out = append(out, pods.Items[i].Name)
		}
	}
	return out, nil
}

// The mutating policy marks a pod as pinned by it (api.PolicyAdmittedAnnotation holding its revision's
// key) only when its table had the revision's entry: the webhook's configuration skips a pod so marked,
// so a mark on a pod the policy could not pin would leave that pod to nobody while a switch to webhook
// mode has taken the validating binding out and the mutating one not yet (a pod of a new revision read
// the live object: TestPolicyHelmUpgradeSwitchesModesRefusingNoPodAndLeavingNoneUnpinned, on CI).
func TestPolicyMarksAsPinnedOnlyThePodsItPinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "pol-mark")
	startPolicyController(t, nil, ns)
	rs := givenPinnedWeb(t, ns)
	yes := true
	podOf := func(kind, name string, uid types.UID, tmpl corev1.PodTemplateSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: ns, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}}},
			Spec: tmpl.Spec}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	mark := func(p *corev1.Pod) (string, bool) {
		t.Helper()
		out, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, p, dryRun)
		must(t, err)
		v, ok := out.Annotations[api.PolicyAdmittedAnnotation]
		return v, ok
	}

	t.Logf("when: a pod of %s (its revision has an entry) is created (server-side dry run)", rs.Name)
	if v, ok := mark(podOf("ReplicaSet", rs.Name, rs.UID, rs.Spec.Template)); !ok || v != string(rs.UID) {
		t.Fatalf("a pod the policy pinned is marked %q (present %v), want its revision's key %s", v, ok, rs.UID)
	}
	t.Logf("then: it is marked %s=%s: the webhook would skip it", api.PolicyAdmittedAnnotation, rs.UID)

	t.Log("when: a pod of a ReplicaSet the table has no entry for, reading nothing pinned (the validating policy lets it through)")
	bare := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	const unknown = types.UID("00000000-0000-4000-8000-0000000000aa")
	if v, ok := mark(podOf("ReplicaSet", "web-unknown", unknown, bare)); !ok || v != "" {
		t.Fatalf("a pod of a revision without entry is marked %q (present %v), want an empty mark: the webhook must be asked about it", v, ok)
	}
	t.Logf("then: it is marked with an empty value: the webhook, when present, is asked about it")
}
