package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The policy-scale scenario: admission policy mode on the scale scenario's mix (scale.go), grown to
// each size. At each: every tenant namespace labelled for pinning and its "settings" ConfigMap (which
// every pod reads) labelled pinned; then, without the admission policies and with them (our controller
// in policy mode, every revision's entry written):
//   - the latency of pod CREATEs, one at a time, of pods of a tenant's current ReplicaSet (its
//     template; bound to a node that does not exist, so that nothing runs them), p50 and p99;
//   - kube-apiserver's and etcd's RSS (the median of 5 samples, 3 s apart);
//   - with: the PinTables' bytes as stored (JSON) and their number.
// It prints ratios (with ÷ without), measured side by side in the run. Between sizes the policies and
// the tables are taken away again.

// policyStep is what one size measured.
type policyStep struct {
	pods, tenants         int
	without, with         quant
	apiWithout, apiWith   int64
	etcdWithout, etcdWith int64
	tables, entries       int
	tableBytes            int64
	entriesIn             time.Duration
}

func (e env) policyScale(ctx context.Context, steps []int, probes int) error {
	fast, err := e.fastClient()
	if err != nil {
		return err
	}
	g := &grower{e: e, kube: fast}
	for _, ns := range []string{scaleSystem, probeNamespace} {
		if err := e.c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	if err := e.c.EnsurePinTableCRD(ctx, e.root); err != nil {
		return err
	}
	var done []policyStep
	for i, target := range steps {
		fmt.Printf("\n== step %d: growing to %d Pods ==\n", i+1, target)
		start := time.Now()
		if err := g.growTo(ctx, target); err != nil {
			return fmt.Errorf("growing to %d Pods: %w", target, err)
		}
		fmt.Printf("  %d Pods on %d nodes (%d tenants) built in %s\n", g.pods(), len(g.nodes), g.tenants, time.Since(start).Round(time.Second))
		e.waitPodsStarted(ctx)
		e.waitKwokSettled(ctx)
		s, err := e.policyStep(ctx, fast, g, probes)
		if err != nil {
			return fmt.Errorf("at %d Pods: %w", g.pods(), err)
		}
		done = append(done, s)
		printPolicySteps(done)
	}
	return nil
}

func (e env) policyStep(ctx context.Context, fast kubernetes.Interface, g *grower, probes int) (policyStep, error) {
	s := policyStep{pods: g.pods(), tenants: g.tenants}
	namespaces := make([]string, g.tenants)
	for i := range namespaces {
		namespaces[i] = tenantName(i)
	}
	label := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.PinningNamespaceLabel, api.PinningEnabled)
	pin := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.PinLabel, api.PinValue)
	if err := parallel(len(namespaces), 64, func(i int) error {
		if _, err := fast.CoreV1().Namespaces().Patch(ctx, namespaces[i], types.StrategicMergePatchType, []byte(label), metav1.PatchOptions{}); err != nil {
			return err
		}
		_, err := fast.CoreV1().ConfigMaps(namespaces[i]).Patch(ctx, "settings", types.StrategicMergePatchType, []byte(pin), metav1.PatchOptions{})
		return err
	}); err != nil {
		return s, err
	}
	owners, err := probeOwners(ctx, fast, namespaces)
	if err != nil {
		return s, err
	}
	fmt.Printf("  %d tenant namespaces labelled for pinning, their settings ConfigMap pinned\n", len(namespaces))

	if s.without, err = createLatency(ctx, fast, owners, probes); err != nil {
		return s, fmt.Errorf("creates without the policies: %w", err)
	}
	s.apiWithout, s.etcdWithout = e.steadyRSS(ctx)
	fmt.Printf("  without the policies: CREATE p50 %s p99 %s; kube-apiserver %s, etcd %s\n", s.without.p50, s.without.p99, mib(s.apiWithout), mib(s.etcdWithout))

	stop, err := e.startPolicyEverywhere(ctx, namespaces, owners, &s.entriesIn)
	if err != nil {
		return s, err
	}
	if s.with, err = createLatency(ctx, fast, owners, probes); err != nil {
		stop()
		return s, fmt.Errorf("creates with the policies: %w", err)
	}
	s.apiWith, s.etcdWith = e.steadyRSS(ctx)
	t, err := e.pinTables(ctx)
	stop()
	if err != nil {
		return s, err
	}
	s.tables, s.entries, s.tableBytes = t.tables, len(t.keys), t.bytes
	fmt.Printf("  with the policies (every entry written %s after the start): CREATE p50 %s p99 %s; kube-apiserver %s, etcd %s; %d PinTables, %d entries, %s\n",
		s.entriesIn.Round(time.Second), s.with.p50, s.with.p99, mib(s.apiWith), mib(s.etcdWith), s.tables, s.entries, mib(s.tableBytes))
	// The next size starts without: no tables, no policies.
	if err := parallel(len(namespaces), 64, func(i int) error {
		return e.c.Dynamic.Resource(policy.GVR).Namespace(namespaces[i]).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}); err != nil {
		return s, err
	}
	return s, nil
}

// probeOwners are, round robin over the namespaces, the current ReplicaSet of each tenant's web-0:
// the probes are pods of those.
func probeOwners(ctx context.Context, kube kubernetes.Interface, namespaces []string) ([]*appsv1.ReplicaSet, error) {
	var out []*appsv1.ReplicaSet
	for _, ns := range namespaces {
		list, err := kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web-0"})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			if rs := &list.Items[i]; rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
				out = append(out, rs)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ReplicaSet of web-0 with replicas in %d namespaces", len(namespaces))
	}
	return out, nil
}

// createLatency creates n pods one at a time, each of the next owner (its template, bound to a node
// that does not exist), and returns the latency quantiles of the creates; then it deletes them.
func createLatency(ctx context.Context, kube kubernetes.Interface, owners []*appsv1.ReplicaSet, n int) (quant, error) {
	lat := make([]time.Duration, 0, n)
	type created struct{ ns, name string }
	var pods []created
	defer func() {
		_ = parallel(len(pods), 32, func(i int) error {
			return kube.CoreV1().Pods(pods[i].ns).Delete(context.Background(), pods[i].name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}()
	yes := true
	for i := range n {
		rs := owners[i%len(owners)]
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: rs.Name + "-probe-", Namespace: rs.Namespace, Labels: rs.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}},
			Spec: *rs.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = "policy-probe-nowhere"
		start := time.Now()
		out, err := kube.CoreV1().Pods(rs.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return quant{}, err
		}
		lat = append(lat, time.Since(start))
		pods = append(pods, created{out.Namespace, out.Name})
	}
	return quantiles(lat), nil
}

// steadyRSS is the median VmRSS of kube-apiserver and of etcd over 5 samples 3 s apart.
func (e env) steadyRSS(ctx context.Context) (apiserver, etcd int64) {
	var a, b []int64
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
		a = append(a, e.componentRSS("kube-apiserver"))
		b = append(b, e.componentRSS("etcd"))
	}
	slices.Sort(a)
	slices.Sort(b)
	return a[len(a)/2], b[len(b)/2]
}

// entriesSettled: the entries are all written once every probe owner has one and their number has not
// grown for this long (some revisions of the mix never get one: their config is gone).
const entriesSettled = 20 * time.Second

// startPolicyEverywhere runs our controller in policy mode on every namespace and waits until every
// entry is written (entriesSettled) and the policies are enforced; entriesIn is how long after the
// start the last entry came. stop stops it and deletes the policies.
func (e env) startPolicyEverywhere(ctx context.Context, namespaces []string, owners []*appsv1.ReplicaSet, entriesIn *time.Duration) (func(), error) {
	start := time.Now()
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"controller", "-leader-elect=false", "-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probe,
		"-pinning", "-pinning-admission=policy", "-webhook-configuration-name=" + benchPolicy}, e.controllerFlags...)
	p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=warn"}, args...)
	if err != nil {
		return nil, err
	}
	stop := func() {
		_ = p.Stop()
		_ = policy.DeletePolicies(context.Background(), e.c.Kube, benchPolicy)
	}
	last, grew := 0, time.Now()
	err = framework.Eventually(ctx, time.Hour, "every entry in the PinTables", func(ctx context.Context) (bool, string, error) {
		if ok, why, err := ready(p, probe); !ok || err != nil {
			return false, why, err
		}
		t, err := e.pinTables(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		n := len(t.keys)
		if n/1000 != last/1000 {
			fmt.Printf("    %d entries written\n", n)
		}
		if n > last {
			last, grew = n, time.Now()
		}
		without := 0
		for _, o := range owners {
			if !t.keys[string(o.UID)] {
				without++
			}
		}
		return without == 0 && time.Since(grew) >= entriesSettled, fmt.Sprintf("%d entries, %d probed ReplicaSets without one", n, without), nil
	})
	*entriesIn = grew.Sub(start)
	if err == nil {
		err = e.c.WaitPolicyEffective(ctx, namespaces[0])
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// pinTableStats are the cluster's PinTables: how many, their entries' keys, their bytes as stored
// (JSON).
type pinTableStats struct {
	tables int
	keys   map[string]bool
	bytes  int64
}

func (e env) pinTables(ctx context.Context) (pinTableStats, error) {
	out := pinTableStats{keys: map[string]bool{}}
	list, err := e.c.Dynamic.Resource(policy.GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, err
	}
	for i := range list.Items {
		b, err := json.Marshal(list.Items[i].Object)
		if err != nil {
			return out, err
		}
		out.bytes += int64(len(b))
		t, err := policy.FromUnstructured(&list.Items[i])
		if err != nil {
			return out, err
		}
		for key := range t.Spec.Revisions {
			out.keys[key] = true
		}
	}
	out.tables = len(list.Items)
	return out, nil
}

func printPolicySteps(steps []policyStep) {
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }
	ratioB := func(a, b int64) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }
	var b strings.Builder
	fmt.Fprintln(&b, "\n| Pods | tenants | CREATE p50 with ÷ without | p99 with ÷ without | kube-apiserver RSS with ÷ without | etcd RSS with ÷ without | PinTables | entries | bytes of the tables |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, s := range steps {
		fmt.Fprintf(&b, "| %d | %d | %s (%s ÷ %s) | %s (%s ÷ %s) | %s (%s ÷ %s) | %s (%s ÷ %s) | %d | %d | %s |\n", s.pods, s.tenants,
			ratio(s.with.p50, s.without.p50), s.with.p50, s.without.p50, ratio(s.with.p99, s.without.p99), s.with.p99, s.without.p99,
			ratioB(s.apiWith, s.apiWithout), mib(s.apiWith), mib(s.apiWithout), ratioB(s.etcdWith, s.etcdWithout), mib(s.etcdWith), mib(s.etcdWithout),
			s.tables, s.entries, mib(s.tableBytes))
	}
	fmt.Print(b.String())
}
