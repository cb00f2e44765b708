//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// podLedger watches every pod created in a namespace and keeps those that read app-config by its own
// name: unpinned.
type podLedger struct {
	mu       sync.Mutex
	created  int
	unpinned []string
	stop     func()
	done     chan struct{}
}

func watchPods(t *testing.T, ns string) *podLedger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e2e.cluster.Kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	must(t, err)
	l := &podLedger{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Added {
				continue
			}
			l.mu.Lock()
			l.created++
			if slices.Contains(framework.ReadsConfigMaps(p), "app-config") {
				l.unpinned = append(l.unpinned, p.Name)
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(cancel)
	return l
}

// snapshot is how many pods were created so far, and the unpinned ones.
func (l *podLedger) snapshot() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created, slices.Clone(l.unpinned)
}

// result stops the watch: how many pods were created, and the unpinned ones.
func (l *podLedger) result() (int, []string) {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created, l.unpinned
}

// steadyPods deletes a pod of ns (label app=app) every interval until ctx ends, as after spot
// interruptions: its ReplicaSet creates another. It deletes only while the app is steady (replicas
// live pods, all Ready), so a rollout always completes: deleting the first pod by name regardless
// deleted the new revision's pods first when its name sorted first (web-94bbb994d after
// web-c96589569), and on a loaded machine, where a replacement takes longer than the interval, a
// deploy's 2-minute wait ran out (CI, stop 43).
func steadyPods(ctx context.Context, ns, app string, replicas int, interval time.Duration) {
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			list, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				continue
			}
			live := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
			if len(live) != replicas || framework.ReadyPods(live) != replicas {
				continue
			}
			_ = e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, live[0].Name, metav1.DeleteOptions{})
		}
	}()
}

// waitRolled waits until the chart's Deployment has rolled out its template.
func (r *chartRelease) waitRolled(replicas int32) {
	r.t.Helper()
	must(r.t, framework.Eventually(context.Background(), 2*time.Minute, "the controller's Deployment rolled out", func(ctx context.Context) (bool, string, error) {
		d, err := e2e.cluster.Kube.AppsV1().Deployments(r.ns).Get(ctx, r.fullname(), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		done := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == replicas && d.Status.Replicas == replicas && d.Status.AvailableReplicas == replicas
		return done, fmt.Sprintf("updated %d of %d", d.Status.UpdatedReplicas, d.Status.Replicas), nil
	}))
}

// expectAdmission waits until the release's admission objects are those of the mode: in policy mode
// the policies and no webhook configuration (nor its certificate Secret); in webhook mode a
// configuration with a caBundle and no policy.
func (r *chartRelease) expectAdmission(a admission) {
	r.t.Helper()
	must(r.t, framework.Eventually(context.Background(), 90*time.Second, "only the "+string(a)+"'s admission objects", func(ctx context.Context) (bool, string, error) {
		ar := e2e.cluster.Kube.AdmissionregistrationV1()
		cfg, err := ar.MutatingWebhookConfigurations().Get(ctx, r.fullname(), metav1.GetOptions{})
		hook := err == nil && len(cfg.Webhooks) == 1 && len(cfg.Webhooks[0].ClientConfig.CABundle) > 0
		_, err = ar.MutatingAdmissionPolicyBindings().Get(ctx, r.fullname(), metav1.GetOptions{})
		mab := err == nil
		_, err = ar.ValidatingAdmissionPolicyBindings().Get(ctx, r.fullname(), metav1.GetOptions{})
		vab := err == nil
		_, err = e2e.cluster.Kube.CoreV1().Secrets(r.ns).Get(ctx, r.fullname()+"-webhook-tls", metav1.GetOptions{})
		secret := !apierrors.IsNotFound(err)
		_, err = e2e.cluster.Kube.CoreV1().Services(r.ns).Get(ctx, r.fullname()+"-webhook", metav1.GetOptions{})
		svc := !apierrors.IsNotFound(err)
		state := fmt.Sprintf("webhook %v, its Service %v, certificate Secret %v, policy bindings %v/%v", hook, svc, secret, mab, vab)
		if a == byPolicy {
			return !hook && !svc && !secret && mab && vab, state, nil
		}
		return hook && !mab && !vab, state, nil
	}))
	r.t.Logf("then: %s mode's admission alone is in place", a)
}

// helm upgrade from webhook mode to policy mode and back, the controller's pods rolled each time (real
// processes, as the chart runs them), while a pod of web is deleted every 300 ms (when all 3 are
// Ready) and a config change is deployed in each mode: no pod is refused but while its revision's
// entry was missing (counted), and none is unpinned.
func TestPolicyHelmUpgradeSwitchesModesRefusingNoPodAndLeavingNoneUnpinned(t *testing.T) {
	t.Parallel()
	const webReplicas = 3 // what the churn keeps steady and each deploy waits for
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-switch")
	appNS := givenNamespace(t, "e2e-switch-app")
	must(t, e2e.cluster.EnablePinning(ctx, appNS))
	const image = "localhost/configmap-attacher:e2e-current"
	sets := []string{"watchNamespaces={" + appNS + "}", "pinning.enabled=true", "image.repository=localhost/configmap-attacher", "image.tag=e2e-current", "image.pullPolicy=Never"}
	r := installChart(t, "cma-switch", ns, append(sets, "pinning.admission=webhook")...)
	t.Cleanup(func() {
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), r.fullname(), metav1.DeleteOptions{})
	})
	pods := runChartPods(t, r, map[string]string{image: e2e.bin.Path})
	pods.waitRunning(2, image)
	r.expectAdmission(byWebhook)
	rs := givenPinnedWeb(t, appNS)
	_, err := e2e.cluster.Kube.AppsV1().Deployments(appNS).Patch(ctx, "web", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, webReplicas)), metav1.PatchOptions{})
	must(t, err)
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, webReplicas))
	t.Log("given: the chart in webhook mode (2 replicas), Deployment web (3 pods) reading app-config through its revision's snapshot")

	ledger := watchPods(t, appNS)
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	steadyPods(churnCtx, appNS, "web", webReplicas, 300*time.Millisecond)
	deploy := func(v map[string]string) {
		t.Helper()
		start := time.Now()
		must(t, e2e.cluster.PutPinnedConfigMap(ctx, appNS, "app-config", v))
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"checksum/config":%q}}}}}`, framework.Checksum(v))
		_, err := e2e.cluster.Kube.AppsV1().Deployments(appNS).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err)
		must(t, framework.Eventually(ctx, 2*time.Minute, "web on checksum "+framework.Checksum(v)[:8]+" with 3 pods", func(ctx context.Context) (bool, string, error) {
			rs, err := currentOf(ctx, appNS, "web")
			if err != nil || rs.Spec.Template.Annotations["checksum/config"] != framework.Checksum(v) {
				return false, "not yet", nil
			}
			ps, err := e2e.cluster.PodsOf(ctx, rs)
			return len(ps) >= webReplicas && framework.ReadyPods(ps) >= webReplicas, framework.DescribePods(ps), err
		}))
		rs, err := currentOf(ctx, appNS, "web")
		must(t, err)
		snap, err := e2e.cluster.SnapshotOf(ctx, appNS, "app-config", rs.UID)
		must(t, err)
		t.Logf("then: revision %s runs after %s, its pods reading %s", rs.Name, time.Since(start).Round(time.Second), snap.Name)
	}
	t.Log("when: pods are created steadily (one of the 3 deleted every 300 ms while all 3 are Ready) and a config change is deployed, in webhook mode")
	deploy(pinV2)

	t.Log("when: helm upgrade --set pinning.admission=policy")
	pods.upgradeToPolicy(chartPath("configmap-attacher"), append(sets, "pinning.admission=policy")...)
	r.waitRolled(2)
	pods.waitRunning(2, image)
	r.expectAdmission(byPolicy)
	deploy(pinV3)

	t.Log("when: helm upgrade --set pinning.admission=webhook")
	pods.upgrade(chartPath("configmap-attacher"), append(sets, "pinning.admission=webhook")...)
	r.waitRolled(2)
	pods.waitRunning(2, image)
	r.expectAdmission(byWebhook)
	deploy(map[string]string{"configuration.json": `{"v": 4}`})

	stopChurn()
	created, unpinned := ledger.result()
	waiting, other, err := refusalsIn(ctx, appNS)
	must(t, err)
	if len(other) > 0 {
		t.Fatalf("pod creations refused for another reason than a missing entry: %s", strings.Join(other, "; "))
	}
	if len(unpinned) > 0 {
		t.Fatalf("%d of %d pods created read app-config itself, unpinned: %v", len(unpinned), created, unpinned)
	}
	if created < 30 {
		t.Fatalf("only %d pods created: the story needs pods created throughout", created)
	}
	t.Logf("then: %d pods created across both switches, 0 unpinned, 0 refused but while an entry was missing (%d such refusals, retried)", created, len(waiting))

	// The harness puts the webhook configuration back behind its (here unreachable) Service during an
	// upgrade: pods are no longer counted from here.
	t.Log("when: one more helm upgrade, nothing changed")
	pods.upgrade(chartPath("configmap-attacher"), append(sets, "pinning.admission=webhook")...)
	r.expectAdmission(byWebhook)
	t.Log("then: the policies the controller took out stay out")
}

// In policy mode `helm uninstall`'s hook takes the admission policies' bindings out first, while the
// controller still runs, then stops it and lifts the finalizers: no pod of the namespace is refused
// meanwhile or after, and no policy of ours is left.
func TestPolicyUninstallTakesTheBindingsOutFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-uninstall-pol")
	appNS := givenNamespace(t, "e2e-uninstall-pol-app")
	must(t, e2e.cluster.EnablePinning(ctx, appNS))
	r := installChart(t, "cma-unpol", ns, "watchNamespaces={"+appNS+"}", "pinning.enabled=true", "pinning.admission=policy")
	p := r.runController(r.deployment())
	r.expectLeader(p)
	// kube-apiserver loads new policies and bindings about a second after Helm created them: a pod
	// admitted before is not pinned (reported Unpinned), as it would be in any cluster just installed.
	must(t, e2e.cluster.WaitPolicyEffective(ctx, appNS))
	rs := givenPinnedWeb(t, appNS)
	t.Log("given: the chart in policy mode, a Deployment whose pod the API server pinned")

	t.Log("when: helm uninstall (its pre-delete hook, then the release's objects) while a pod of web is deleted every half second")
	// Refusals are told apart by when they happened, and Events keep whole seconds: the churn starts
	// on the next second, after any refusal of the given (its first pod may have come before its entry).
	before := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(before))
	churnCtx, stopChurn := context.WithCancel(ctx)
	created := churn(churnCtx, rs, 500*time.Millisecond)
	res := r.runReleaseHook(p)
	helmRun(t, r.helm, "uninstall", r.name, "-n", ns, "--no-hooks", "--wait")
	after := created.Load()
	must(t, framework.Eventually(ctx, 30*time.Second, "pods created with nothing left of us", func(context.Context) (bool, string, error) {
		return created.Load() >= after+2, fmt.Sprintf("%d", created.Load()-after), nil
	}))
	stopChurn()
	logs := res.Stdout + res.Stderr
	out, stop := strings.Index(logs, "took the admission policies out of the pod path"), strings.Index(logs, "stopping the controller")
	if out < 0 || stop < 0 || out > stop {
		t.Fatalf("the hook did not take the policies out before stopping the controller:\n%s", logs)
	}
	waiting, other, err := refusalsSince(ctx, appNS, before)
	must(t, err)
	if len(waiting)+len(other) > 0 {
		t.Fatalf("pod creations refused during the uninstall: %s", strings.Join(append(waiting, other...), "; "))
	}
	ar := e2e.cluster.Kube.AdmissionregistrationV1()
	tables := policy.TablesPolicyName(r.fullname())
	for what, get := range map[string]func() error{
		"MutatingAdmissionPolicyBinding " + r.fullname(): func() error {
			_, err := ar.MutatingAdmissionPolicyBindings().Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicyBinding " + r.fullname(): func() error {
			_, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicyBinding " + tables: func() error {
			_, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, tables, metav1.GetOptions{})
			return err
		},
		"MutatingAdmissionPolicy " + r.fullname(): func() error {
			_, err := ar.MutatingAdmissionPolicies().Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicy " + r.fullname(): func() error {
			_, err := ar.ValidatingAdmissionPolicies().Get(ctx, r.fullname(), metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicy " + tables: func() error {
			_, err := ar.ValidatingAdmissionPolicies().Get(ctx, tables, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Fatalf("%s after uninstall: %v", what, err)
		}
	}
	if left := finalizersIn(t, appNS); len(left) > 0 {
		t.Fatalf("after uninstall %d objects still carry the finalizer, e.g. %s", len(left), left[0])
	}
	t.Logf("then: the bindings went first, then the controller; %d pods created meanwhile, none refused; no policy, no finalizer left", created.Load())
}

// currentOf is the Deployment's current ReplicaSet.
func currentOf(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
	res, err := e2e.cluster.ResolveWorkload(ctx, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: name})
	if err != nil {
		return nil, err
	}
	return res.Current()
}
