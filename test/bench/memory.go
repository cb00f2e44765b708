package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// memProc is one watcher whose peak RSS the memory scenario reads.
type memProc struct {
	name  string
	start func(ctx context.Context) (*framework.Process, error)
	p     *framework.Process
	pprof string // where the process serves /debug/pprof/ ("" when it does not)
	// scale scenario: the largest size it runs at (0: every size), and whether only started anew.
	upTo     int
	anewOnly bool
}

// runsAt reports whether the process runs at a cluster of pods Pods.
func (m *memProc) runsAt(pods int) bool { return m.upTo == 0 || pods <= m.upTo }

// memory: peak RSS (VmHWM) of our controller and the peers, all running at once on the same cluster
// and objects: labelled ConfigMaps (-size each, 64 KiB by default) arriving through their watches,
// then each process started anew with them present (one initial LIST), at each count; finally Pods
// added (ours caches every Pod and workload, reduced to their config references; the peers none).
func (e env) memory(ctx context.Context, counts []int, pods, size int, keep bool) error {
	const ns = "bench-mem"
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	triggers := 0
	procs, cleanupOurs := e.oursForMemory()
	defer cleanupOurs()
	if e.baseline.Path != "" {
		procs = append(procs, &memProc{name: baselineName, start: func(ctx context.Context) (*framework.Process, error) {
			return e.startController(ctx, e.baseline)
		}})
	}
	nOurs := len(procs) // ours in every configuration and the baseline build: the peers come after
	if e.peers.rsOperator != "" {
		procs = append(procs, &memProc{name: rsOperator, start: func(ctx context.Context) (*framework.Process, error) {
			triggers++
			return e.startRSOperator(ctx, ns, triggers)
		}})
	}
	if e.peers.reloader != "" {
		if l, err := net.Listen("tcp", ":9090"); err != nil {
			fmt.Println("(Reloader left out: it always listens on :9090, which is taken)")
		} else {
			l.Close()
			procs = append(procs, &memProc{name: "reloader", start: e.startReloader})
		}
	}
	startAll := func() error {
		for _, m := range procs {
			p, err := m.start(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			m.p = p
		}
		return nil
	}
	stopAll := func() {
		for _, m := range procs {
			if m.p != nil {
				_ = m.p.Stop()
				m.p = nil
			}
		}
	}
	defer stopAll()
	if err := startAll(); err != nil {
		return err
	}
	table := [][]string{{"peak RSS (VmHWM)"}}
	for _, m := range procs {
		table[0] = append(table[0], m.name)
	}
	if len(procs) > 1 {
		table[0] = append(table[0], "ours / best peer")
	}
	all := len(procs)
	row := func(label string) error {
		r := []string{label}
		var oursRSS, best int64
		for i, m := range procs {
			if m.p.Exited() {
				return fmt.Errorf("%s exited:\n%s", m.name, tail(m.p.Logs(), 20))
			}
			settle(ctx, m.p.Pid())
			rss, err := peakRSS(m.p.Pid())
			if err != nil {
				return err
			}
			switch {
			case i == 0:
				oursRSS = rss
			case i < nOurs: // ours too, not a peer
			case best == 0 || rss < best:
				best = rss
			}
			r = append(r, fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)))
		}
		for len(r) < all+1 {
			r = append(r, "—")
		}
		if all > 1 {
			ratio := "—"
			if best > 0 {
				ratio = fmt.Sprintf("1/%.1f", float64(best)/float64(oursRSS))
			}
			r = append(r, ratio)
		}
		table = append(table, r)
		fmt.Println(strings.Join(r, "  |  "))
		return nil
	}
	if err := row("before the ConfigMaps exist"); err != nil {
		return err
	}

	payload := strings.Repeat("x", size)
	created := 0
	for _, count := range counts {
		fmt.Printf("creating labelled ConfigMaps %d..%d of %d KiB (%d MiB in all)...\n", created, count-1, size/1024, count*size>>20)
		start := time.Now()
		if err := parallel(count-created, 32, func(i int) error {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%05d", created+i), Namespace: ns,
					Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}},
				Data: map[string]string{"data": payload},
			}
			_, err := e.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		created = count
		fmt.Printf("  created in %s\n", time.Since(start).Round(time.Second))
		if err := row(fmt.Sprintf("%d ConfigMaps, arrived through the watch", count)); err != nil {
			return err
		}
		stopAll()
		if err := startAll(); err != nil {
			return err
		}
		if err := row(fmt.Sprintf("%d ConfigMaps, started with them present (initial LIST)", count)); err != nil {
			return err
		}
	}
	if err := e.memoryTrigger(ctx, ns, size, row, func() error { stopAll(); return startAll() }); err != nil {
		return err
	}
	stopAll()

	if pods > 0 {
		// Everyone again, the peers too: they cache no Pods, and Pods are what ours caches beside the
		// config objects' metadata (the comparison "at 10,000 Pods and 10,000 ConfigMaps").
		if err := startAll(); err != nil {
			return err
		}
		cleanup, err := e.createPods(ctx, ns, pods)
		if cleanup != nil && !keep {
			defer cleanup()
		}
		if err != nil {
			return err
		}
		if err := row(fmt.Sprintf("%d ConfigMaps + %d Pods, arrived through the watch", created, pods)); err != nil {
			return err
		}
		stopAll()
		if err := startAll(); err != nil {
			return err
		}
		if err := row(fmt.Sprintf("%d ConfigMaps + %d Pods, started with them present (initial LIST)", created, pods)); err != nil {
			return err
		}
	}

	fmt.Println()
	for i, r := range table {
		fmt.Println("| " + strings.Join(r, " | ") + " |")
		if i == 0 {
			fmt.Println("|" + strings.Repeat(" --- |", len(r)))
		}
	}
	return nil
}

// startOurs starts our controller on every namespace, with args, and waits until its caches synced (/readyz).
func (e env) startOurs(ctx context.Context, args ...string) (*framework.Process, error) {
	return e.startController(ctx, e.bin, args...)
}

// startController starts a build of our controller like startOurs.
func (e env) startController(ctx context.Context, bin framework.Binary, args ...string) (*framework.Process, error) {
	return e.startControllerWith(ctx, bin, nil, args...)
}

// startControllerWith starts a build of our controller like startOurs, with env added to its
// environment.
func (e env) startControllerWith(ctx context.Context, bin framework.Binary, env []string, args ...string) (*framework.Process, error) {
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args = append(append([]string{"controller", "-leader-elect=false", "-metrics-bind-address", "",
		"-health-probe-bind-address", probe}, args...), e.controllerFlags...)
	p, err := bin.Start(ctx, append(append([]string{"LOG_LEVEL=warn"}, e.controllerEnv...), env...), args...)
	if err != nil {
		return nil, err
	}
	return p, framework.Eventually(ctx, 10*time.Minute, "controller ready", func(context.Context) (bool, string, error) {
		return ready(p, probe)
	})
}

// startRSOperator starts configmap-rs-operator (default flags: every namespace; args add to them) and makes it do its
// job once: controller-runtime starts its cache of every ConfigMap on the first read, which comes
// with the first new ReplicaSet mounting one. A ReplicaSet of 0 replicas mounting a small ConfigMap
// does that; once that ConfigMap carries its ownerReference, the cache is full.
func (e env) startRSOperator(ctx context.Context, ns string, n int, args ...string) (*framework.Process, error) {
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := framework.Binary{Path: e.peers.rsOperator, Kubeconfig: e.c.Kubeconfig}.Start(ctx, nil, append([]string{"--health-probe-bind-address", probe}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := framework.Eventually(ctx, time.Minute, rsOperator+" ready", func(context.Context) (bool, string, error) {
		return ready(p, probe)
	}); err != nil {
		return p, err
	}
	time.Sleep(time.Second) // its start time is taken before its caches sync; be clearly after it
	name := fmt.Sprintf("trigger-%d", n)
	if _, err := e.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		metav1.CreateOptions{}); err != nil {
		return p, err
	}
	zero := int32(0)
	labels := map[string]string{"app": name}
	rs, err := e.c.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27", VolumeMounts: []corev1.VolumeMount{{Name: "c", MountPath: "/c"}}}},
				Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
			}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return p, err
	}
	return p, framework.Eventually(ctx, 5*time.Minute, rsOperator+" attached "+name, func(ctx context.Context) (bool, string, error) {
		owners, _, err := e.c.Owners(ctx, ns, refs.ConfigMap, name)
		if err != nil {
			return false, "", err
		}
		for _, o := range owners {
			if o.UID == rs.UID {
				return true, "", nil
			}
		}
		return false, "not yet", nil
	})
}

// startReloader starts Reloader with its defaults: every namespace, ConfigMaps and Secrets.
func (e env) startReloader(ctx context.Context) (*framework.Process, error) {
	p, err := framework.Binary{Path: e.peers.reloader, Kubeconfig: e.c.Kubeconfig}.Start(ctx, nil)
	if err != nil {
		return nil, err
	}
	// It has no readiness of its own (its /live answers at once); its informers' initial LIST shows
	// as RSS growth, which settle waits out.
	time.Sleep(2 * time.Second)
	if p.Exited() {
		return p, fmt.Errorf("exited:\n%s", tail(p.Logs(), 20))
	}
	return p, nil
}

// settle waits until the process's resident memory has stopped growing (under 1% over 5 s), at most
// 3 minutes: an initial LIST or a burst of watch events is then behind it.
func settle(ctx context.Context, pid int) {
	deadline := time.Now().Add(3 * time.Minute)
	last, stable := int64(-1), 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rss, err := currentRSS(pid)
		if err != nil {
			return
		}
		if last >= 0 && float64(rss) < float64(last)*1.01 {
			stable++
		} else {
			stable = 0
			last = rss
		}
		if stable >= 5 {
			return
		}
		time.Sleep(time.Second)
	}
}

// createPods adds Nodes (kwok fakes them: 110 pods each, as up.sh's) and Pods bound to them directly
// (no scheduling), in the shape of a Deployment's: each Deployment (0 replicas, so its ReplicaSet
// makes none) has 110 Pods whose controller reference points at it and which mount its ConfigMap.
// The Pods' labels do not match its selector, so no controller adopts or deletes them; our controller
// caches them (in-use protection reads Pods) but attaches nothing to a Pod with a controller.
func (e env) createPods(ctx context.Context, ns string, pods int) (func(), error) {
	groups := (pods + podsPerNode - 1) / podsPerNode
	fmt.Printf("creating %d Nodes, %d Deployments and %d Pods bound to the Nodes...\n", groups, groups, pods)
	start := time.Now()
	var nodes []string
	cleanup := func() { e.deleteNodes(nodes) }
	nodes, err := e.createNodes(ctx, "bench-mem-node-", 0, groups)
	if err != nil {
		return cleanup, err
	}
	owners := make([]*appsv1.Deployment, groups)
	zero := int32(0)
	if err := parallel(groups, 16, func(g int) error {
		name := fmt.Sprintf("mem-app-%d", g)
		labels := map[string]string{"app": name}
		t := framework.PodTemplate(name, []string{fmt.Sprintf("big-%05d", g)}, nil)
		t.Labels = labels
		d, err := e.c.Kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: t},
		}, metav1.CreateOptions{})
		owners[g] = d
		return err
	}); err != nil {
		return cleanup, err
	}
	yes := true
	if err := parallel(pods, 64, func(i int) error {
		g := i / podsPerNode
		d := owners[g]
		spec := *d.Spec.Template.Spec.DeepCopy()
		spec.NodeName = nodes[g]
		_, err := e.c.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", d.Name, i), Namespace: ns,
				Labels: map[string]string{"bench": "memory", "group": d.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID,
					Controller: &yes}}},
			Spec: spec,
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return cleanup, err
	}
	fmt.Printf("  created in %s\n", time.Since(start).Round(time.Second))
	return cleanup, nil
}

// createNodes adds the Nodes prefix<from>..prefix<to-1>, 110 pods each, as up.sh's: kwok manages
// them (annotation kwok.x-k8s.io/node=fake), keeps them Ready and runs the pods bound to them.
func (e env) createNodes(ctx context.Context, prefix string, from, to int) ([]string, error) {
	names := make([]string, to-from)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, from+i)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse(fmt.Sprint(podsPerNode))}
	return names, parallel(len(names), 16, func(i int) error {
		name := names[i]
		_, err := e.c.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok", "kubernetes.io/os": "linux"}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// deleteNodes deletes Nodes (their pods go with them, through the pod garbage collector).
func (e env) deleteNodes(names []string) {
	_ = parallel(len(names), 16, func(i int) error {
		_ = e.c.Kube.CoreV1().Nodes().Delete(context.Background(), names[i], metav1.DeleteOptions{})
		return nil
	})
}

// currentRSS is the process's VmRSS.
func currentRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS:") }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
