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

// webhook measures what zero-touch pinning adds to pod creation, and returns the median ratios (with ÷
// without) over the rounds. One storm creates pods at once in two
// namespaces, interleaved: in one, pinning is on, so every CREATE goes through the webhook and the pod
// is pointed at its revision's snapshot; in the other, the same objects without the namespace label,
// so the API server never calls the webhook. It prints the client-side CREATE latency of both (same
// run, same moment: the ratio is what the webhook costs), the webhook's own admission time, and the
// API requests it made on the pod path (its steady state reads caches only).
//
// The pods are created directly, controlled by a ReplicaSet of 0 replicas whose selector they do not
// match (the webhook keys on the controlling ReplicaSet's uid). The ReplicaSet controller then releases
// them, in both namespaces alike.
func (e env) webhook(ctx context.Context, pods, inFlight, rounds int, keep bool) (stormRatios, error) {
	pinned, plain := "bench-webhook-pinned", "bench-webhook-plain"
	for _, ns := range []string{pinned, plain} {
		if err := e.freshNamespace(ctx, ns, keep); err != nil {
			return stormRatios{}, err
		}
	}
	if err := e.c.EnablePinning(ctx, pinned); err != nil {
		return stormRatios{}, err
	}
	proc, metricsURL, stop, err := e.startPinning(ctx, pinned, plain)
	if err != nil {
		return stormRatios{}, err
	}
	defer stop()

	data := map[string]string{"configuration.json": `{"general": {"projectName": "demo service"}}`}
	owners := map[string]*appsv1.ReplicaSet{}
	for _, ns := range []string{pinned, plain} {
		if err := e.c.PutPinnedConfigMap(ctx, ns, "app-config", data); err != nil {
			return stormRatios{}, err
		}
		zero := int32(0)
		tmpl := framework.PodTemplate("storm-rs", []string{"app-config"}, nil)
		rs, err := e.c.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "storm"},
			Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}, metav1.CreateOptions{})
		if err != nil {
			return stormRatios{}, err
		}
		owners[ns] = rs
	}
	var snapshot string
	if err := framework.Eventually(ctx, time.Minute, "the ReplicaSet's snapshot", func(ctx context.Context) (bool, string, error) {
		s, err := e.c.SnapshotOf(ctx, pinned, "app-config", owners[pinned].UID)
		if err != nil || s == nil {
			return false, fmt.Sprint(err), nil
		}
		snapshot = s.Name
		return true, "", nil
	}); err != nil {
		return stormRatios{}, fmt.Errorf("%w\n%s", err, tail(proc.Logs(), 20))
	}

	// A client of its own, without client-side rate limiting: the storm must reach the API server at once.
	cfg, err := clientcmd.BuildConfigFromFlags("", e.c.Kubeconfig)
	if err != nil {
		return stormRatios{}, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	storm, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return stormRatios{}, err
	}
	before, err := readHistogram(metricsURL, "configmap_attacher_webhook_admission_duration_seconds", `outcome="pinned"`)
	if err != nil {
		before = nil // no admission yet: the series appears with the first
	}
	callsBefore, err := counterSum(metricsURL, "configmap_attacher_webhook_api_calls_total")
	if err != nil {
		return stormRatios{}, err
	}

	fmt.Printf("\nwebhook: %d pods per namespace created at once, interleaved, %d CREATEs in flight; %d rounds\n", pods, inFlight, rounds)
	fmt.Printf("%-7s %-26s %9s %9s %9s %9s   %s\n", "round", "CREATE latency (client)", "p50", "p95", "p99", "max", "ratio with ÷ without")
	var ratio50, ratio99 []float64
	for round := 1; round <= rounds; round++ {
		lat, err := e.podStorm(ctx, storm, owners, pods, inFlight, round)
		if err != nil {
			return stormRatios{}, err
		}
		q := map[string]quant{pinned: quantiles(lat[pinned]), plain: quantiles(lat[plain])}
		r50, r99 := float64(q[pinned].p50)/float64(q[plain].p50), float64(q[pinned].p99)/float64(q[plain].p99)
		ratio50, ratio99 = append(ratio50, r50), append(ratio99, r99)
		for _, row := range []struct{ name, ns, ratio string }{
			{"without the webhook", plain, ""},
			{"with the webhook (pinned)", pinned, fmt.Sprintf("p50 %.2f  p99 %.2f", r50, r99)},
		} {
			fmt.Printf("%-7d %-26s %9s %9s %9s %9s   %s\n", round, row.name, ms(q[row.ns].p50), ms(q[row.ns].p95), ms(q[row.ns].p99), ms(q[row.ns].max), row.ratio)
		}
		reads, err := e.stormReads(ctx, pinned, plain)
		if err != nil {
			return stormRatios{}, err
		}
		if reads[pinned][snapshot] != pods || reads[plain]["app-config"] != pods {
			return stormRatios{}, fmt.Errorf("round %d: pods read %v (pinned namespace) and %v (plain)", round, reads[pinned], reads[plain])
		}
		if err := e.deleteStorm(ctx, pinned, plain); err != nil {
			return stormRatios{}, err
		}
	}
	ratios := stormRatios{medianOf(ratio50), medianOf(ratio99)}
	fmt.Printf("median ratio over the rounds: p50 %.2f  p99 %.2f\n", ratios.p50, ratios.p99)

	after, err := readHistogram(metricsURL, "configmap_attacher_webhook_admission_duration_seconds", `outcome="pinned"`)
	if err != nil {
		return stormRatios{}, err
	}
	admission := after.since(before)
	callsAfter, err := counterSum(metricsURL, "configmap_attacher_webhook_api_calls_total")
	if err != nil {
		return stormRatios{}, err
	}
	fmt.Printf("webhook admission time (its histogram, bucket bounds): p50 ≤ %s, p99 ≤ %s over %.0f pinned pods\n",
		bound(admission.quantile(0.5)), bound(admission.quantile(0.99)), admission[len(admission)-1].count)
	fmt.Printf("API requests on the pod path during the storms: %.0f\n", callsAfter-callsBefore)
	fmt.Printf("every round: %d of %d pods read the snapshot %s; the plain namespace's %d read app-config\n", pods, pods, snapshot, pods)
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
		if p.Exited() {
			return false, "", fmt.Errorf("the controller exited: %s", tail(p.Logs(), 20))
		}
		resp, err := http.Get("http://" + probe + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, resp.Status, nil
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
