package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/trigger"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// reloader: a config change starting a new revision, our controller side by side with Reloader (the
// pinned peer build). Each tool in turn gets a namespace of its own with fresh copies of the same n
// workloads (half Deployments, half Rollouts with the write-up's canary, one replica each, each reading
// its own ConfigMap and carrying reloader.stakater.com/auto: "true") and watches that namespace only;
// only one tool runs at a time, so no workload is ever acted on by two. Then every ConfigMap is edited
// at once, and the bench's own watch measures, per workload, the time from the ConfigMap's update to
// the workload's new ReplicaSet (one process, one clock).
//
// Rows: ours at its defaults with the trigger's switch (-reloader-annotations, nothing else), with
// -config-settle=0 and at the default settle window; ours with -pinning too, in a namespace with
// pinning on and the ConfigMaps pinned (what pinning adds: the snapshots),
// Reloader with its default strategy (env-vars) and with --reload-strategy=annotations, both with
// --is-Argo-Rollouts=true (else it ignores Rollouts) and KUBERNETES_NAMESPACE set to the namespace,
// and Reloader once more with reloader.stakater.com/rollout-strategy: restart on the Rollouts: it sets
// spec.restartAt, so their pods restart and no new ReplicaSet (no canary) is made; that row counts the
// Rollouts restarted instead of waiting for their new ReplicaSets.
//
// Writes: each tool talks to the API server through a counting proxy (apiproxy.go), so its own
// requests are counted exactly; kube-apiserver's apiserver_request_total gives every write in the
// cluster during the change (the workload controllers', kwok's, ours), for context.
func (e env) againstReloader(ctx context.Context, n int, keep bool) error {
	tools := []triggerTool{
		{name: ours + " -reloader-annotations, -config-settle=0", start: e.startTrigger("0s", false)},
		{name: fmt.Sprintf("%s -reloader-annotations, -config-settle=%s (default)", ours, trigger.DefaultSettle), start: e.startTrigger(trigger.DefaultSettle.String(), false)},
		{name: ours + " -pinning -reloader-annotations, -config-settle=0, pinned", pinned: true, start: e.startTrigger("0s", true)},
	}
	if e.peers.reloader != "" {
		if l, err := net.Listen("tcp", ":9090"); err != nil {
			fmt.Println("(Reloader left out: it always listens on :9090, which is taken)")
		} else {
			l.Close()
			v := reloaderVersion(e.peers.reloader)
			tools = append(tools,
				triggerTool{name: "Reloader " + v + ", env-vars (default)", start: e.startReloaderIn()},
				triggerTool{name: "Reloader " + v + ", annotations", start: e.startReloaderIn("--reload-strategy=annotations")},
				triggerTool{name: "Reloader " + v + ", env-vars, Rollouts with " + api.ReloaderRolloutStrategy + ": restart",
					rolloutAnnotations: map[string]string{api.ReloaderRolloutStrategy: "restart"}, restartsRollouts: true, start: e.startReloaderIn()})
		}
	}
	fmt.Printf("%d workloads per tool (%d Deployments, %d Rollouts), each reading its own ConfigMap; every ConfigMap edited at once\n",
		n, (n+1)/2, n/2)
	var rows [][]string
	for i, tool := range tools {
		fmt.Printf("\n== %s\n", tool.name)
		r, err := e.triggerPhase(ctx, fmt.Sprintf("bench-trigger-%d", i), tool, n, keep)
		if err != nil {
			return fmt.Errorf("%s: %w", tool.name, err)
		}
		rows = append(rows, append([]string{tool.name}, r...))
	}
	fmt.Println()
	fmt.Println("| tool | new ReplicaSets per change | ConfigMap updated → new ReplicaSet, p50 / p99 / max | Deployments p50 / p99 | Rollouts p50 / p99 | " +
		"the tool's API writes per change | the tool's reads per change | every write in the cluster per change | peak RSS |")
	fmt.Println("|" + strings.Repeat(" --- |", 9))
	for _, r := range rows {
		fmt.Println("| " + strings.Join(r, " | ") + " |")
	}
	return nil
}

// triggerTool is one row: how to start the tool on a namespace, given the kubeconfig to use.
type triggerTool struct {
	name   string
	pinned bool // the namespace pinning-enabled, the ConfigMaps labelled for pinning
	// rolloutAnnotations are added to the Rollouts' own; restartsRollouts: the tool restarts them
	// (spec.restartAt) rather than making a new ReplicaSet.
	rolloutAnnotations map[string]string
	restartsRollouts   bool
	start              func(ctx context.Context, ns, kubeconfig string) (*framework.Process, func(), error)
}

// startTrigger starts our controller with -reloader-annotations (the trigger's switch), the settle
// window and, with pinning, -pinning, on the namespace alone.
func (e env) startTrigger(settle string, pinning bool) func(ctx context.Context, ns, kubeconfig string) (*framework.Process, func(), error) {
	return func(ctx context.Context, ns, kubeconfig string) (*framework.Process, func(), error) {
		o := e
		o.bin = framework.Binary{Path: e.bin.Path, Kubeconfig: kubeconfig}
		o.controllerFlags = append([]string{"-reloader-annotations", "-config-settle=" + settle}, e.controllerFlags...)
		if pinning {
			p, _, stop, err := o.startPinning(ctx, ns)
			return p, stop, err
		}
		p, err := o.startOurs(ctx, "-namespaces", ns)
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Stop() }, nil
	}
}

// startReloaderIn starts Reloader watching one namespace (KUBERNETES_NAMESPACE), Argo Rollouts on,
// its other flags at their defaults plus args.
func (e env) startReloaderIn(args ...string) func(ctx context.Context, ns, kubeconfig string) (*framework.Process, func(), error) {
	return func(ctx context.Context, ns, kubeconfig string) (*framework.Process, func(), error) {
		p, err := framework.Binary{Path: e.peers.reloader, Kubeconfig: kubeconfig}.Start(ctx, []string{"KUBERNETES_NAMESPACE=" + ns},
			append([]string{"--is-Argo-Rollouts=true"}, args...)...)
		if err != nil {
			return nil, nil, err
		}
		stop := func() { _ = p.Stop() }
		// No readiness of its own: its informers sync within the seconds the workloads take to start.
		time.Sleep(2 * time.Second)
		if p.Exited() {
			stop()
			return nil, nil, fmt.Errorf("exited:\n%s", tail(p.Logs(), 20))
		}
		return p, stop, nil
	}
}

// reloaderVersion reads the VERSION file of the peer's source beside its binary's build (hack/tools/build.sh peers).
func reloaderVersion(bin string) string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "..", "src", "peers", "reloader", "VERSION"))
	if err != nil {
		return ""
	}
	return "v" + strings.TrimSpace(string(b))
}

// triggerPhase runs one tool on fresh workloads in ns and returns its row's cells.
func (e env) triggerPhase(ctx context.Context, ns string, tool triggerTool, n int, keep bool) ([]string, error) {
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return nil, err
	}
	if !keep {
		// Deleted while the tool still runs (deferred calls run last-first), so our controller takes
		// its finalizers off the snapshots.
		defer func() { _ = e.c.DeleteNamespace(context.Background(), ns) }()
	}
	if tool.pinned {
		if err := e.c.EnablePinning(ctx, ns); err != nil {
			return nil, err
		}
	}
	proxy, err := startAPIProxy(e.c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	defer proxy.Stop()
	p, stop, err := tool.start(ctx, ns, proxy.Kubeconfig)
	if err != nil {
		return nil, err
	}
	defer stop()
	w, err := newTriggerWatch(ctx, e, ns)
	if err != nil {
		return nil, err
	}
	defer w.stop()

	fmt.Printf("creating %d ConfigMaps and workloads...\n", n)
	v1 := map[string]string{"v": "1"}
	if err := parallel(n, 16, func(i int) error {
		cfg, app := fmt.Sprintf("cfg-%d", i), fmt.Sprintf("app-%d", i)
		var err error
		if tool.pinned {
			err = e.c.PutPinnedConfigMap(ctx, ns, cfg, v1)
		} else {
			_, err = e.c.PutConfigMap(ctx, ns, cfg, v1)
		}
		if err != nil {
			return err
		}
		auto := map[string]string{api.ReloaderAuto: "true"}
		if i%2 == 1 {
			annotations := maps.Clone(auto)
			maps.Copy(annotations, tool.rolloutAnnotations)
			return e.c.CreateRollout(ctx, ns, app, framework.RolloutSpec{Replicas: 1, ConfigMaps: []string{cfg}, Annotations: annotations})
		}
		t := framework.PodTemplate(app, []string{cfg}, nil)
		one := int32(1)
		_, err = e.c.Kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: app, Annotations: auto},
			Spec:       appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := framework.Eventually(ctx, 10*time.Minute, "every workload running its first ReplicaSet", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("%s exited:\n%s", tool.name, tail(p.Logs(), 20))
		}
		got := w.ready()
		return got == n, fmt.Sprintf("%d/%d", got, n), nil
	}); err != nil {
		return nil, err
	}
	if strings.HasPrefix(tool.name, ours) {
		// Its first look at each workload writes the workload's record: not part of a change.
		if err := framework.Eventually(ctx, 5*time.Minute, "our record of every workload", func(ctx context.Context) (bool, string, error) {
			l, err := e.c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: api.RecordLabel + "=" + api.RecordValue})
			if err != nil {
				return false, "", err
			}
			return len(l.Items) == n, fmt.Sprintf("%d/%d records", len(l.Items), n), nil
		}); err != nil {
			return nil, err
		}
	}
	time.Sleep(5 * time.Second) // quiet before counting

	toolBefore := proxy.Counts()
	allBefore, err := apiserverRequestKinds(ctx, e.c.Kube.Discovery())
	if err != nil {
		return nil, err
	}
	w.startMeasuring()
	start := time.Now()
	patch := []byte(`{"data":{"v":"2"}}`)
	if err := parallel(n, 32, func(i int) error {
		_, err := e.c.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cfg-%d", i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Printf("  %d ConfigMaps edited in %s\n", n, time.Since(start).Round(time.Millisecond))
	wantRS, what := n, "a new ReplicaSet for every workload"
	if tool.restartsRollouts {
		wantRS, what = (n+1)/2, "a new ReplicaSet for every Deployment, spec.restartAt on every Rollout"
	}
	restarted := 0
	if err := framework.Eventually(ctx, 20*time.Minute, what, func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("%s exited:\n%s", tool.name, tail(p.Logs(), 20))
		}
		got := len(w.latencies(-1))
		if !tool.restartsRollouts {
			return got == wantRS, fmt.Sprintf("%d/%d", got, wantRS), nil
		}
		var err error
		if restarted, err = e.restartedRollouts(ctx, ns); err != nil {
			return false, "", err
		}
		return got >= wantRS && restarted == n/2, fmt.Sprintf("%d/%d new ReplicaSets, %d/%d Rollouts restarted", got, wantRS, restarted, n/2), nil
	}); err != nil {
		return nil, err
	}
	fmt.Printf("  %s %s after the first edit\n", what, time.Since(start).Round(time.Millisecond))
	time.Sleep(10 * time.Second) // a second revision, or a straggling write, would show now
	toolAfter := proxy.Counts()
	allAfter, err := apiserverRequestKinds(ctx, e.c.Kube.Discovery())
	if err != nil {
		return nil, err
	}
	rss, err := peakRSS(p.Pid())
	if err != nil {
		return nil, err
	}
	toolDiff, allDiff := diffCounts(toolBefore, toolAfter), diffCounts(allBefore, allAfter)
	var allWrites float64
	for _, c := range allDiff {
		if isWrite(c.kind) {
			allWrites += c.n
		}
	}
	q, dq, rq := quantilesOrZero(w.latencies(-1)), quantilesOrZero(w.latencies(0)), quantilesOrZero(w.latencies(1))
	cells := []string{
		fmt.Sprintf("%.2f", float64(w.newReplicaSets())/float64(n)),
		fmt.Sprintf("%s / %s / %s", secs(q.p50), secs(q.p99), secs(q.max)),
		fmt.Sprintf("%s / %s", secs(dq.p50), secs(dq.p99)),
		rolloutsCell(rq, tool.restartsRollouts, restarted, n/2),
		perChange(toolDiff, n, true),
		perChange(toolDiff, n, false),
		fmt.Sprintf("%.1f", allWrites/float64(n)),
		fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)),
	}
	fmt.Printf("  new ReplicaSets per change %s; ConfigMap updated -> new ReplicaSet p50 / p99 / max %s (Deployments %s, Rollouts %s)\n",
		cells[0], cells[1], cells[2], cells[3])
	fmt.Printf("  the tool's writes per change %s\n  its reads per change %s\n  every write in the cluster per change %s; peak RSS %s\n",
		cells[4], cells[5], cells[6], cells[7])
	return cells, nil
}

// rolloutsCell is the Rollouts' latency, or, where the tool restarts them, how many it restarted (they
// get no new ReplicaSet to time).
func rolloutsCell(q quant, restarts bool, restarted, of int) string {
	if restarts {
		return fmt.Sprintf("no new ReplicaSet: %d/%d restarted (spec.restartAt)", restarted, of)
	}
	return fmt.Sprintf("%s / %s", secs(q.p50), secs(q.p99))
}

// restartedRollouts counts the Rollouts of ns with spec.restartAt set.
func (e env) restartedRollouts(ctx context.Context, ns string) (int, error) {
	l, err := e.c.Dynamic.Resource(workload.RolloutGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ro := range l.Items {
		if at, _, _ := unstructured.NestedString(ro.Object, "spec", "restartAt"); at != "" {
			n++
		}
	}
	return n, nil
}

func quantilesOrZero(lat []time.Duration) quant {
	if len(lat) == 0 {
		return quant{}
	}
	return quantiles(lat)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// triggerWatch is the bench's own watch on the phase's ConfigMaps and ReplicaSets: when each
// ConfigMap's edit and each workload's new ReplicaSet were first seen.
type triggerWatch struct {
	stopCh    chan struct{}
	mu        sync.Mutex
	measuring bool
	edited    map[string]time.Time   // ConfigMap name -> first seen with the edit
	created   map[string][]time.Time // workload name -> its ReplicaSets first seen while measuring
	readyRS   map[string]bool        // workload name -> a ReplicaSet of it has a ready pod
}

func newTriggerWatch(ctx context.Context, e env, ns string) (*triggerWatch, error) {
	w := &triggerWatch{stopCh: make(chan struct{}), edited: map[string]time.Time{}, created: map[string][]time.Time{}, readyRS: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(e.c.Kube, 0, informers.WithNamespace(ns))
	rsInf, cmInf := f.Apps().V1().ReplicaSets().Informer(), f.Core().V1().ConfigMaps().Informer()
	onRS := func(obj any, added bool) {
		now := time.Now()
		rs := obj.(*appsv1.ReplicaSet)
		owner := metav1.GetControllerOfNoCopy(rs)
		if owner == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if added && w.measuring {
			w.created[owner.Name] = append(w.created[owner.Name], now)
		}
		if rs.Status.ReadyReplicas > 0 {
			w.readyRS[owner.Name] = true
		}
	}
	_, _ = rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onRS(obj, true) },
		UpdateFunc: func(_, obj any) { onRS(obj, false) },
	})
	_, _ = cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		now := time.Now()
		cm := obj.(*corev1.ConfigMap)
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.edited[cm.Name]; w.measuring && !seen && cm.Data["v"] == "2" {
			w.edited[cm.Name] = now
		}
	}})
	f.Start(w.stopCh)
	if !cache.WaitForCacheSync(ctx.Done(), rsInf.HasSynced, cmInf.HasSynced) {
		close(w.stopCh)
		return nil, ctx.Err()
	}
	return w, nil
}

func (w *triggerWatch) stop() { close(w.stopCh) }

func (w *triggerWatch) startMeasuring() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.measuring = true
}

// ready is the number of workloads with a ReplicaSet running a ready pod.
func (w *triggerWatch) ready() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.readyRS)
}

// newReplicaSets counts the ReplicaSets created while measuring.
func (w *triggerWatch) newReplicaSets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ts := range w.created {
		n += len(ts)
	}
	return n
}

// latencies are, per workload app-i (parity -1: all; 0: the Deployments; 1: the Rollouts), from
// cfg-i's edit to the first ReplicaSet created after it.
func (w *triggerWatch) latencies(parity int) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for app, ts := range w.created {
		var i int
		if _, err := fmt.Sscanf(app, "app-%d", &i); err != nil || (parity >= 0 && i%2 != parity) {
			continue
		}
		if edited, ok := w.edited[fmt.Sprintf("cfg-%d", i)]; ok {
			out = append(out, ts[0].Sub(edited))
		}
	}
	return out
}
