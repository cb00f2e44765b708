package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// admissionRatios are the CREATE latency ratios (with ÷ without, p50 and p99) of each way of pinning.
type admissionRatios struct{ webhook, policy stormRatios }

// webhook measures what zero-touch pinning adds to pod creation, policy mode beside webhook mode
// beside none, and returns the median ratios (with ÷ without) over the rounds. One storm creates pods at
// once in three namespaces, interleaved: in one, pinning by the webhook is on, so every CREATE goes
// through the webhook and the pod is pointed at its revision's snapshot; in another, pinning by the API
// server's admission policies (a controller with -pinning-admission=policy: the mutating policy
// rewrites the pod from the namespace's PinTable, the validating policy checks its revision has an
// entry); in the third, the same objects without the namespace label, so nothing of pinning runs. It
// prints the client-side CREATE latency of all three (same run, same moment: the ratios are what each
// way costs), the webhook's own admission time, and the API requests the webhook made on the pod path
// (its steady state reads caches only). Then the PinTable's writes per revision.
//
// The pods are created directly, controlled by a ReplicaSet of 0 replicas whose selector they do not
// match (pinning keys on the controlling ReplicaSet's uid). The ReplicaSet controller then releases
// them, in every namespace alike.
func (e env) webhook(ctx context.Context, pods, inFlight, rounds int, keep bool) (admissionRatios, error) {
	pinned, byPolicy, plain := "bench-webhook-pinned", "bench-webhook-policy", "bench-webhook-plain"
	for _, ns := range []string{pinned, byPolicy, plain} {
		if err := e.freshNamespace(ctx, ns, keep); err != nil {
			return admissionRatios{}, err
		}
	}
	for _, ns := range []string{pinned, byPolicy} {
		if err := e.c.EnablePinning(ctx, ns); err != nil {
			return admissionRatios{}, err
		}
	}
	proc, metricsURL, stop, err := e.startPinning(ctx, pinned, plain)
	if err != nil {
		return admissionRatios{}, err
	}
	defer stop()
	policyProc, policyMetrics, stopPolicy, err := e.startPolicy(ctx, byPolicy)
	if err != nil {
		return admissionRatios{}, err
	}
	defer stopPolicy()

	data := map[string]string{"configuration.json": `{"general": {"projectName": "demo service"}}`}
	owners := map[string]*appsv1.ReplicaSet{}
	for _, ns := range []string{pinned, byPolicy, plain} {
		if err := e.c.PutPinnedConfigMap(ctx, ns, "app-config", data); err != nil {
			return admissionRatios{}, err
		}
		zero := int32(0)
		tmpl := framework.PodTemplate("storm-rs", []string{"app-config"}, nil)
		rs, err := e.c.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "storm"},
			Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}, metav1.CreateOptions{})
		if err != nil {
			return admissionRatios{}, err
		}
		owners[ns] = rs
	}
	snapshots := map[string]string{}
	for ns, p := range map[string]*framework.Process{pinned: proc, byPolicy: policyProc} {
		if err := framework.Eventually(ctx, time.Minute, "the ReplicaSet's snapshot in "+ns, func(ctx context.Context) (bool, string, error) {
			s, err := e.c.SnapshotOf(ctx, ns, "app-config", owners[ns].UID)
			if err != nil || s == nil {
				return false, fmt.Sprint(err), nil
			}
			snapshots[ns] = s.Name
			return true, "", nil
		}); err != nil {
			return admissionRatios{}, fmt.Errorf("%w\n%s", err, tail(p.Logs(), 20))
		}
	}
	if err := e.waitEntry(ctx, byPolicy, string(owners[byPolicy].UID), true); err != nil {
		return admissionRatios{}, fmt.Errorf("%w\n%s", err, tail(policyProc.Logs(), 20))
	}

	// A client of its own, without client-side rate limiting: the storm must reach the API server at once.
	cfg, err := clientcmd.BuildConfigFromFlags("", e.c.Kubeconfig)
	if err != nil {
		return admissionRatios{}, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	storm, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return admissionRatios{}, err
	}
	before, err := readHistogram(metricsURL, "configmap_attacher_webhook_admission_duration_seconds", `outcome="pinned"`)
	if err != nil {
		before = nil // no admission yet: the series appears with the first
	}
	callsBefore, err := counterSum(metricsURL, "configmap_attacher_webhook_api_calls_total")
	if err != nil {
		return admissionRatios{}, err
	}

	fmt.Printf("\nwebhook: %d pods per namespace created at once, interleaved over three namespaces (no pinning, the webhook, the admission policies), %d CREATEs in flight; %d rounds\n", pods, inFlight, rounds)
	fmt.Printf("%-7s %-34s %9s %9s %9s %9s   %s\n", "round", "CREATE latency (client)", "p50", "p95", "p99", "max", "ratio with ÷ without")
	var hook50, hook99, pol50, pol99 []float64
	for round := 1; round <= rounds; round++ {
		lat, err := e.podStorm(ctx, storm, owners, pods, inFlight, round)
		if err != nil {
			return admissionRatios{}, err
		}
		q := map[string]quant{pinned: quantiles(lat[pinned]), byPolicy: quantiles(lat[byPolicy]), plain: quantiles(lat[plain])}
		ratio := func(ns string) (float64, float64) {
			return float64(q[ns].p50) / float64(q[plain].p50), float64(q[ns].p99) / float64(q[plain].p99)
		}
		h50, h99 := ratio(pinned)
		p50, p99 := ratio(byPolicy)
		hook50, hook99, pol50, pol99 = append(hook50, h50), append(hook99, h99), append(pol50, p50), append(pol99, p99)
		for _, row := range []struct{ name, ns, ratio string }{
			{"without pinning", plain, ""},
			{"with the webhook (pinned)", pinned, fmt.Sprintf("p50 %.2f  p99 %.2f", h50, h99)},
			{"with the admission policies (pinned)", byPolicy, fmt.Sprintf("p50 %.2f  p99 %.2f", p50, p99)},
		} {
			fmt.Printf("%-7d %-34s %9s %9s %9s %9s   %s\n", round, row.name, ms(q[row.ns].p50), ms(q[row.ns].p95), ms(q[row.ns].p99), ms(q[row.ns].max), row.ratio)
		}
		reads, err := e.stormReads(ctx, pinned, byPolicy, plain)
		if err != nil {
			return admissionRatios{}, err
		}
		if reads[pinned][snapshots[pinned]] != pods || reads[byPolicy][snapshots[byPolicy]] != pods || reads[plain]["app-config"] != pods {
			return admissionRatios{}, fmt.Errorf("round %d: pods read %v (webhook), %v (policies) and %v (no pinning)", round, reads[pinned], reads[byPolicy], reads[plain])
		}
		if err := e.deleteStorm(ctx, pinned, byPolicy, plain); err != nil {
			return admissionRatios{}, err
		}
	}
	ratios := admissionRatios{webhook: stormRatios{medianOf(hook50), medianOf(hook99)}, policy: stormRatios{medianOf(pol50), medianOf(pol99)}}
	fmt.Printf("median ratio over the rounds: webhook p50 %.2f  p99 %.2f; admission policies p50 %.2f  p99 %.2f\n",
		ratios.webhook.p50, ratios.webhook.p99, ratios.policy.p50, ratios.policy.p99)

	after, err := readHistogram(metricsURL, "configmap_attacher_webhook_admission_duration_seconds", `outcome="pinned"`)
	if err != nil {
		return admissionRatios{}, err
	}
	admission := after.since(before)
	callsAfter, err := counterSum(metricsURL, "configmap_attacher_webhook_api_calls_total")
	if err != nil {
		return admissionRatios{}, err
	}
	fmt.Printf("webhook admission time (its histogram, bucket bounds): p50 ≤ %s, p99 ≤ %s over %.0f pinned pods\n",
		bound(admission.quantile(0.5)), bound(admission.quantile(0.99)), admission[len(admission)-1].count)
	fmt.Printf("API requests on the pod path during the storms: %.0f (webhook); none of ours in policy mode (nothing of ours is on it)\n", callsAfter-callsBefore)
	fmt.Printf("every round: %d of %d pods read the snapshot %s (webhook), %d of %d %s (policies); the plain namespace's %d read app-config\n",
		pods, pods, snapshots[pinned], pods, pods, snapshots[byPolicy], pods)
	if err := e.tableWrites(ctx, byPolicy, policyMetrics); err != nil {
		return admissionRatios{}, err
	}
	return ratios, nil
}

// podStorm creates pods pods in each namespace of owners, interleaved, inFlight at once, and returns
// each namespace's CREATE latencies.
func (e env) podStorm(ctx context.Context, client kubernetes.Interface, owners map[string]*appsv1.ReplicaSet, pods, inFlight, round int) (map[string][]time.Duration, error) {
	var namespaces []string
	for ns := range owners {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	yes := true
	err := parallel(len(namespaces)*pods, inFlight, func(i int) error {
		ns := namespaces[i%len(namespaces)]
		rs := owners[ns]
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("storm-%d-%04d", round, i/len(namespaces)), Labels: map[string]string{"app": "storm-pod"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}},
			Spec: *rs.Spec.Template.Spec.DeepCopy(),
		}
		start := time.Now()
		_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", ns, p.Name, err)
		}
		mu.Lock()
		lat[ns] = append(lat[ns], d)
		mu.Unlock()
		return nil
	})
	return lat, err
}

// stormReads counts the storm's pods of each namespace by the ConfigMaps they read.
func (e env) stormReads(ctx context.Context, namespaces ...string) (map[string]map[string]int, error) {
	reads := map[string]map[string]int{}
	for _, ns := range namespaces {
		list, err := e.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=storm-pod"})
		if err != nil {
			return nil, err
		}
		reads[ns] = map[string]int{}
		for i := range list.Items {
			reads[ns][strings.Join(framework.ReadsConfigMaps(&list.Items[i]), ",")]++
		}
	}
	return reads, nil
}

// deleteStorm deletes the storm's pods (one DELETE each: a DeleteCollection of a thousand pods outlasts
// the API server's request timeout on a loaded machine) and waits until they are gone, so every round
// starts alike.
func (e env) deleteStorm(ctx context.Context, namespaces ...string) error {
	zero := int64(0)
	for _, ns := range namespaces {
		list, err := e.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=storm-pod"})
		if err != nil {
			return err
		}
		if err := parallel(len(list.Items), 32, func(i int) error {
			err := e.c.Kube.CoreV1().Pods(ns).Delete(ctx, list.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return framework.Eventually(ctx, 5*time.Minute, "the storm's pods deleted", func(ctx context.Context) (bool, string, error) {
		left := 0
		for _, ns := range namespaces {
			list, err := e.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=storm-pod"})
			if err != nil {
				return false, "", err
			}
			left += len(list.Items)
		}
		return left == 0, fmt.Sprintf("%d pods left", left), nil
	})
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// startPinning runs our controller with -pinning on the namespaces, its webhook registered by URL,
// and waits until it is ready and the webhook configuration carries its CA. stop stops it and removes
// the configuration and its certificate Secret.
func (e env) startPinning(ctx context.Context, namespaces ...string) (*framework.Process, string, func(), error) {
	probe, err := freeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	hook, err := freeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	const name = "bench-webhook"
	args := append([]string{"controller", "-leader-elect=false", "-namespaces", strings.Join(namespaces, ","),
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probe,
		"-pinning", "-pinning-admission=webhook", "-webhook-url=https://" + hook, "-webhook-configuration-name=" + name}, e.controllerFlags...)
	p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=warn"}, args...)
	if err != nil {
		return nil, "", nil, err
	}
	stop := func() {
		_ = p.Stop()
		bg := context.Background()
		_ = e.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(bg, name, metav1.DeleteOptions{})
		_ = e.c.Kube.CoreV1().Secrets("kube-system").Delete(bg, name+"-webhook-tls", metav1.DeleteOptions{})
	}
	err = framework.Eventually(ctx, 2*time.Minute, "controller ready, webhook registered", func(ctx context.Context) (bool, string, error) {
		if ok, why, err := ready(p, probe); !ok || err != nil {
			return false, why, err
		}
		c, err := e.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(c.Webhooks) == 1 && len(c.Webhooks[0].ClientConfig.CABundle) > 0, "no caBundle yet", nil
	})
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	return p, "http://" + metricsAddr + "/metrics", stop, nil
}

// counterSum adds a counter's samples over every label value (0 when it has none yet).
func counterSum(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	for _, line := range strings.Split(readAll(resp), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}
