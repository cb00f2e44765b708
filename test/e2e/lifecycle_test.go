//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Removing ourselves: each story runs beside the write-up's situation — a canary paused mid-way on a
// new config revision while a spot node takes one of the old ReplicaSet's pods — and checks that
// nothing of it is lost.

// pausedCanary is the write-up's Rollout (3 replicas, setWeight 1 then pause) on its first config
// revision, deployed once more: the canary runs the second revision on one pod and waits; the two
// stable pods run the first.
type pausedCanary struct {
	t              *testing.T
	a              *app
	v1, v2         string
	stable, canary *appsv1.ReplicaSet
}

func givenPausedCanary(t *testing.T, ns string) *pausedCanary {
	t.Helper()
	ctx := context.Background()
	v1 := configRevision(t, ns, "demo-cm", "v1")
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 3, ConfigMaps: []string{v1}}))
	a := &app{t: t, ns: ns, name: "demo"}
	stable := a.currentRS(v1)
	must(t, e2e.cluster.WaitPods(ctx, 90*time.Second, stable, 3))
	v2, canary := a.deploy("v2")
	must(t, e2e.cluster.WaitPaused(ctx, 90*time.Second, ns, "demo"))
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, canary, 1))
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, stable, 2))
	t.Logf("given: Rollout %s/demo paused mid-canary: %s (%s) on 2 pods, the canary %s (%s) on 1", ns, stable.Name, v1, canary.Name, v2)
	return &pausedCanary{t: t, a: a, v1: v1, v2: v2, stable: stable, canary: canary}
}

// spotReplace deletes one of the stable ReplicaSet's pods, as a spot interruption would, and waits for
// its replacement, which mounts the old revision by name.
func (p *pausedCanary) spotReplace(when string) {
	p.t.Helper()
	ctx := context.Background()
	pods, err := e2e.cluster.PodsOf(ctx, p.stable)
	must(p.t, err)
	if len(pods) == 0 {
		p.t.Fatalf("%s has no pod to replace", p.stable.Name)
	}
	must(p.t, e2e.cluster.Kube.CoreV1().Pods(p.a.ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}))
	must(p.t, framework.Eventually(ctx, 60*time.Second, "a replacement pod of "+p.stable.Name, func(ctx context.Context) (bool, string, error) {
		now, err := e2e.cluster.PodsOf(ctx, p.stable)
		if err != nil {
			return false, "", err
		}
		// A pod that was not there before: creation timestamps have whole seconds, and on an idle
		// cluster the replacement can come within the second the taken pod was created in.
		fresh := slices.ContainsFunc(now, func(q corev1.Pod) bool {
			return !slices.ContainsFunc(pods, func(o corev1.Pod) bool { return o.UID == q.UID })
		})
		return fresh && framework.ReadyPods(now) == 2, fmt.Sprintf("%d ready", framework.ReadyPods(now)), nil
	}))
	p.t.Logf("%s: a spot node took pod %s of %s; its replacement runs, mounting %s", when, pods[0].Name, p.stable.Name, p.v1)
}

// expectIntact checks that both revisions of the paused canary still exist, are not being deleted, keep
// the ownerReference to their ReplicaSet, and that both ReplicaSets still run their pods.
func (p *pausedCanary) expectIntact(when string) {
	p.t.Helper()
	ctx := context.Background()
	for cm, rs := range map[string]*appsv1.ReplicaSet{p.v1: p.stable, p.v2: p.canary} {
		obj, err := e2e.cluster.Kube.CoreV1().ConfigMaps(p.a.ns).Get(ctx, cm, metav1.GetOptions{})
		if err != nil {
			p.t.Fatalf("%s: ConfigMap %s: %v", when, cm, err)
		}
		if obj.DeletionTimestamp != nil {
			p.t.Fatalf("%s: ConfigMap %s is being deleted", when, cm)
		}
		must(p.t, framework.CheckAttached(obj.OwnerReferences, rs))
	}
	for rs, n := range map[*appsv1.ReplicaSet]int{p.stable: 2, p.canary: 1} {
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		must(p.t, err)
		if framework.ReadyPods(pods) != n {
			p.t.Fatalf("%s: %s runs %s; want %d ready pods", when, rs.Name, framework.DescribePods(pods), n)
		}
	}
	p.t.Logf("%s: %s and %s exist, attached to %s and %s, whose pods all run", when, p.v1, p.v2, p.stable.Name, p.canary.Name)
}

// finalizersIn lists the ConfigMaps of ns that carry our finalizer.
func finalizersIn(t *testing.T, ns string) []string {
	t.Helper()
	list, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	var out []string
	for _, o := range list.Items {
		if slices.Contains(o.Finalizers, api.InUseFinalizer) {
			out = append(out, o.Name)
		}
	}
	return out
}

// `helm uninstall`: the chart's pre-delete hook stops the controller and lifts our finalizer from every
// object; nothing is deleted, and the paused canary's old pods keep being replaced with their config.
func TestUninstallHookLiftsEveryFinalizerAndDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-uninstall")
	appNS := givenNamespace(t, "e2e-uninstall-app")
	r := installChart(t, "cma-uninstall", ns, "watchNamespaces={"+appNS+"}", "rbac.ownerReferencesPermissionEnforcement=true")
	p := r.runController(r.deployment())
	r.expectLeader(p)
	c := givenPausedCanary(t, appNS)
	for _, cm := range []string{c.v1, c.v2} {
		must(t, e2e.cluster.WaitProtected(ctx, attachWithin, appNS, refs.ConfigMap, cm))
	}
	c.spotReplace("given")
	c.expectIntact("given")

	t.Log("when: helm uninstall (its pre-delete hook, then the release's objects)")
	res := r.runReleaseHook(p)
	helmRun(t, r.helm, "uninstall", r.name, "-n", ns, "--no-hooks", "--wait")
	for _, cm := range []string{c.v1, c.v2} {
		if !strings.Contains(res.Stdout, "released ConfigMap "+appNS+"/"+cm) {
			t.Fatalf("the hook did not release %s: %s", cm, res)
		}
	}

	if left := finalizersIn(t, appNS); len(left) > 0 {
		t.Fatalf("after uninstall these still carry %s: %v", api.InUseFinalizer, left)
	}
	t.Logf("then: no ConfigMap of %s carries %s", appNS, api.InUseFinalizer)
	c.expectIntact("then")
	c.spotReplace("then, with the controller gone")
}

// `helm uninstall --no-hooks` leaves our finalizers on objects nothing will release; the namespace's
// deletion then hangs. The alert on finalizers nobody lifts fires first; the documented `release`
// command unblocks the namespace.
func TestUninstallWithoutHooksAlertsAndReleaseUnblocksTheNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-nohooks")
	appNS := givenNamespace(t, "e2e-nohooks-app")
	r := installChart(t, "cma-nohooks", ns, "watchNamespaces={"+appNS+"}", "rbac.ownerReferencesPermissionEnforcement=true")
	p := r.runController(r.deployment())
	r.expectLeader(p)
	c := givenPausedCanary(t, appNS)
	for _, cm := range []string{c.v1, c.v2} {
		must(t, e2e.cluster.WaitProtected(ctx, attachWithin, appNS, refs.ConfigMap, cm))
	}
	c.spotReplace("given")
	before := scrape(t, "http://"+metricsAddress(t, p)+"/metrics")
	protected := gaugeValue(t, before, "configmap_attacher_protected_objects")
	leader := gaugeValue(t, before, "configmap_attacher_leader")
	t.Logf("given: the controller exports configmap_attacher_protected_objects %v, configmap_attacher_leader %v", protected, leader)
	if protected < 2 || leader != 1 {
		t.Fatalf("want at least the canary's 2 revisions protected by a leader")
	}

	t.Log("when: helm uninstall --no-hooks: the controller goes (its pod with it), the finalizers stay")
	helmRun(t, r.helm, "uninstall", r.name, "-n", ns, "--no-hooks", "--wait")
	must(t, p.Stop())
	stranded := finalizersIn(t, appNS)
	if len(stranded) < 2 {
		t.Fatalf("after uninstall --no-hooks %v carry the finalizer; want the canary's revisions", stranded)
	}
	c.spotReplace("then, with the controller gone")
	c.expectIntact("then")

	t.Log("then: the alert ConfigMapAttacherNoLeader, fed what the controller exported before it went and nothing after, fires within 10 minutes")
	expectNoLeaderAlert(t, protected)

	t.Logf("when: namespace %s is deleted", appNS)
	must(t, e2e.cluster.Kube.CoreV1().Namespaces().Delete(ctx, appNS, metav1.DeleteOptions{}))
	var msg string
	must(t, framework.Eventually(ctx, 2*time.Minute, "the namespace to report our finalizer", func(ctx context.Context) (bool, string, error) {
		n, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NamespaceFinalizersRemaining && cond.Status == corev1.ConditionTrue && strings.Contains(cond.Message, api.InUseFinalizer) {
				msg = cond.Message
				return true, "", nil
			}
		}
		return false, string(n.Status.Phase), nil
	}))
	time.Sleep(10 * time.Second)
	if _, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{}); err != nil {
		t.Fatalf("the namespace went without a release: %v", err)
	}
	t.Logf("then: the namespace hangs in Terminating: %s", msg)

	t.Log("when: the documented command runs: configmap-attacher release -n " + appNS)
	res := e2e.bin.Run(ctx, nil, "release", "-n", appNS)
	if res.Code != 0 {
		t.Fatalf("release: %s", res)
	}
	start := time.Now()
	must(t, framework.Eventually(ctx, 2*time.Minute, "namespace "+appNS+" gone", func(ctx context.Context) (bool, string, error) {
		_, err := e2e.cluster.Kube.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "terminating", nil
	}))
	t.Logf("then: %s released the %d objects and the namespace was gone %s later", strings.TrimSpace(res.Stdout), len(stranded), time.Since(start).Round(time.Second))
}

func gaugeValue(t *testing.T, families map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: want one series", name)
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// expectNoLeaderAlert runs promtool on the chart's rules with the series a Prometheus would hold: the
// protected-objects and leader gauges at the values the controller exported, scraped every minute for
// 30 minutes, then nothing (the pod is gone). What this proves: the rule, as the chart renders it,
// fires on exactly what the real controller exported followed by its absence; no Prometheus ran here.
func expectNoLeaderAlert(t *testing.T, protected float64) {
	t.Helper()
	dir := t.TempDir()
	rules := renderRules(t, dir)
	series := `{namespace="kube-system", job="configmap-attacher-metrics", pod="configmap-attacher-0"}`
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'configmap_attacher_protected_objects%[2]s'
    values: '%[3]vx30'
  - series: 'configmap_attacher_leader%[2]s'
    values: '1x30'
  alert_rule_test:
  - eval_time: 35m
    alertname: ConfigMapAttacherNoLeader
    exp_alerts: []
  - eval_time: 45m
    alertname: ConfigMapAttacherNoLeader
    exp_alerts:
    - exp_labels: {severity: critical}
      exp_annotations:
        summary: No configmap-attacher controller leads while objects carry its finalizer.
        description: 'Up to %[3]v ConfigMaps and Secrets carry configmap-attacher.io/in-use-protection and no controller replica holds the leader Lease: their deletions, and the deletion of their namespaces, will not complete.'
        runbook_url: https://github.com/configmap-attacher/configmap-attacher/blob/main/docs/operations.md#configmapattachernoleader
`, rules, series, protected)
	file := filepath.Join(dir, "no-leader.test.yaml")
	must(t, os.WriteFile(file, []byte(test), 0o644))
	out, err := exec.Command(filepath.Join(e2e.root, "_output/tools/bin/promtool"), "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool: ConfigMapAttacherNoLeader quiet 5 minutes after the controller went, firing after 15 with value %v:\n%s", protected, strings.TrimSpace(string(out)))
}

// renderRules writes the chart's PrometheusRule spec (release configmap-attacher in kube-system) as a
// Prometheus rule file in dir, as hack/test-rules.sh does.
func renderRules(t *testing.T, dir string) string {
	t.Helper()
	out, err := helmCLI(t).Run(context.Background(), "template", "configmap-attacher", chartPath("configmap-attacher"), "-n", "kube-system",
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml")
	must(t, err)
	_, spec, ok := strings.Cut(out, "\nspec:\n")
	if !ok {
		t.Fatalf("no spec in the rendered PrometheusRule:\n%s", out)
	}
	var b strings.Builder
	for _, l := range strings.Split(spec, "\n") {
		b.WriteString(strings.TrimPrefix(l, "  ") + "\n")
	}
	path := filepath.Join(dir, "rules.yaml")
	must(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}
