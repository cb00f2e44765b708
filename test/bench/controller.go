package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The attachers of the controller storm. Every Rollout's pod template names two ConfigMaps for each,
// so all of them attach the same kind of object to the same ReplicaSets, in the same storm, each
// writing only its own objects:
//   - ours: labelled configmap-attacher.io/revisioned=true (the only ones our controller attaches), in
//     the projected volume the original chart uses;
//   - floor: unlabelled, named floor-*, in the same projected volume (our controller skips unlabelled
//     objects, the floor patches only floor-*);
//   - configmap-rs-operator: unlabelled, named rs-operator-*, as plain configMap volumes (the only
//     references it follows; the floor skips them by name, ours because they are unlabelled).
const (
	ours       = "configmap-attacher"
	floor      = "floor"
	rsOperator = "configmap-rs-operator"
)

var attacherPrefix = map[string]string{floor: "floor-", rsOperator: "rs-operator-"}

// attacherOf tells whose a ConfigMap of the storm is, by its name.
func attacherOf(name string) string {
	for a, p := range attacherPrefix {
		if strings.HasPrefix(name, p) {
			return a
		}
	}
	return ours
}

// stormTemplate is framework.PodTemplate (ours and the floor's ConfigMaps in one projected volume)
// plus one plain configMap volume per configmap-rs-operator object.
func stormTemplate(app string, objects map[string][]string) corev1.PodTemplateSpec {
	t := framework.PodTemplate(app, append(append([]string{}, objects[ours]...), objects[floor]...), nil)
	for i, n := range objects[rsOperator] {
		v := fmt.Sprintf("rs-operator-%d", i)
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: v,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
		t.Spec.Containers[0].VolumeMounts = append(t.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/etc/" + v})
	}
	return t
}

// stormRatios are our attach latency's p50 and p99 over the floor's, in one storm.
type stormRatios struct{ p50, p99 float64 }

// controller: N Rollouts; change all N at once and measure, for every new (ConfigMap, ReplicaSet)
// pair, the time from the ReplicaSet appearing in a watch to the ConfigMap carrying its ownerReference
// in a watch — both seen by this process, so clocks agree — for our controller, the floor and the peer.
// Our controller watches the storm's namespace only, or every namespace with e.stormAllNamespaces (the
// scale scenario: the storm at the size of the whole cluster).
func (e env) controller(ctx context.Context, n int, keep bool) (stormRatios, error) {
	const ns = "bench-ctl"
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return stormRatios{}, err
	}
	attachers := []string{ours, floor}
	if e.peers.rsOperator != "" {
		attachers = append(attachers, rsOperator)
	}
	fmt.Printf("attachers in the storm: %s\n", strings.Join(attachers, ", "))
	createConfig := func(i int, version string) (map[string][]string, error) {
		objects := map[string][]string{}
		for _, a := range attachers {
			for k := range 2 {
				cm, err := e.c.CreateConfigRevision(ctx, ns, fmt.Sprintf("%sapp%d-cm%d", attacherPrefix[a], i, k), map[string]string{"v": version}, a == ours)
				if err != nil {
					return nil, err
				}
				objects[a] = append(objects[a], cm.Name)
			}
		}
		return objects, nil
	}
	fmt.Printf("creating %d Rollouts with %d ConfigMaps each...\n", n, 2*len(attachers))
	if err := parallel(n, 32, func(i int) error {
		v1, err := createConfig(i, "1")
		if err != nil {
			return err
		}
		t := stormTemplate(fmt.Sprintf("app%d", i), v1)
		return e.c.CreateRollout(ctx, ns, fmt.Sprintf("app%d", i), framework.RolloutSpec{Replicas: 1, Template: &t})
	}); err != nil {
		return stormRatios{}, err
	}

	metricsAddr, err := freeAddr()
	if err != nil {
		return stormRatios{}, err
	}
	args := []string{"controller", "-leader-elect=false", "-metrics-bind-address", metricsAddr, "-health-probe-bind-address", ""}
	if !e.stormAllNamespaces {
		args = append(args, "-namespaces", ns)
	}
	if e.cpuProfiles != "" {
		args = append(args, "-profiling")
	}
	args = append(args, e.controllerFlags...)
	level, floorArgs := e.controllerLogLevel, []string{"-namespace", ns, "-prefix", attacherPrefix[floor]}
	if e.breakdown {
		// Our "attached" lines (info) and the floor's "patched" lines say when each PATCH returned.
		if level != "debug" {
			level = "info"
		}
		floorArgs = append(floorArgs, "-log-patches")
	}
	p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=" + level, "LOG_FORMAT=json"}, args...)
	if err != nil {
		return stormRatios{}, err
	}
	defer func() {
		_ = p.Stop()
		if e.controllerLog != "" {
			_ = os.WriteFile(e.controllerLog, []byte(p.Logs()), 0o644)
		}
	}()
	fl, err := framework.Binary{Path: e.floor, Kubeconfig: e.c.Kubeconfig}.Start(ctx, nil, floorArgs...)
	if err != nil {
		return stormRatios{}, err
	}
	defer fl.Stop()
	var op *framework.Process
	if e.peers.rsOperator != "" {
		// Warmed up like in the memory scenario: its cache of ConfigMaps starts with its first attach.
		op, err = e.startRSOperator(ctx, ns, 1, "--namespace-regex", "^"+ns+"$")
		if op != nil {
			defer op.Stop()
		}
		if err != nil {
			return stormRatios{}, err
		}
	}
	w, err := newWatch(ctx, e, ns)
	if err != nil {
		return stormRatios{}, err
	}
	// configmap-rs-operator only handles ReplicaSets created after it started: the first revisions
	// are ours and the floor's alone.
	fmt.Println("waiting for our controller and the floor to attach the first revisions...")
	if err := framework.Eventually(ctx, 10*time.Minute, "initial attach", func(context.Context) (bool, string, error) {
		got := w.attachedPairs(ours) + w.attachedPairs(floor)
		return got >= 4*n, fmt.Sprintf("%d/%d attached", got, 4*n), nil
	}); err != nil {
		return stormRatios{}, err
	}

	v2 := make([]map[string][]string, n)
	if err := parallel(n, 32, func(i int) error {
		var err error
		v2[i], err = createConfig(i, "2")
		return err
	}); err != nil {
		return stormRatios{}, err
	}
	// Our in-use protection puts its finalizer on every new opted-in object: let those writes finish
	// before counting the storm's.
	if err := framework.Eventually(ctx, 5*time.Minute, "finalizers on the new ConfigMaps", func(context.Context) (bool, string, error) {
		got := w.protected()
		return got >= 4*n, fmt.Sprintf("%d/%d protected", got, 4*n), nil
	}); err != nil {
		return stormRatios{}, err
	}
	time.Sleep(2 * time.Second) // every cache has the new objects
	metricsURL := "http://" + metricsAddr + "/metrics"
	const depthMetric = "configmap_attacher_queue_depth"
	// The storm measures attaching at the pace of new revisions. A controller started on a cluster
	// where revisions wait for it first works through them (the scale scenario's 50,034-Pod step at
	// 26994a7: up to 1,225 queued during the storm, 245 PATCHes beyond the storm's, and its median
	// at 1.52 of the floor's); the restart with pending work measures that. Wait for it to be done.
	drainStart, first := time.Now(), -1.0
	if err := framework.Eventually(ctx, 15*time.Minute, "our queue empty before the storm", func(context.Context) (bool, string, error) {
		d, err := gauge(metricsURL, depthMetric)
		if err != nil {
			return false, err.Error(), nil
		}
		if first < 0 {
			first = d
		}
		return d == 0, fmt.Sprintf("%.0f revisions queued", d), nil
	}); err != nil {
		return stormRatios{}, err
	}
	fmt.Printf("our queue before the storm: %.0f revisions, empty after %s\n", first, time.Since(drainStart).Round(100*time.Millisecond))
	before, err := apiserverWrites(ctx, e.c)
	if err != nil {
		return stormRatios{}, err
	}
	floorBefore, _, err := floorCount(fl)
	if err != nil {
		return stormRatios{}, err
	}
	const syncMetric, delayMetric, attachSyncs = "configmap_attacher_reconcile_duration_seconds", "configmap_attacher_attach_delay_seconds", `controller="attach"`
	syncsBefore, err := readHistogram(metricsURL, syncMetric, attachSyncs)
	if err != nil {
		return stormRatios{}, err
	}
	delaysBefore, err := readHistogram(metricsURL, delayMetric, "")
	if err != nil {
		return stormRatios{}, err
	}
	const waitMetric = "configmap_attacher_queue_wait_seconds"
	waitsBefore, err := readHistogram(metricsURL, waitMetric, attachSyncs)
	if err != nil {
		return stormRatios{}, err
	}
	depth := sampleGauge(ctx, metricsURL, depthMetric, 100*time.Millisecond)
	profiled := e.profileStorm("http://" + metricsAddr)
	w.startMeasuring()
	start := time.Now()
	fmt.Printf("changing the config of all %d Rollouts at once...\n", n)
	if err := parallel(n, 64, func(i int) error {
		return e.c.SetRolloutTemplate(ctx, ns, fmt.Sprintf("app%d", i), stormTemplate(fmt.Sprintf("app%d", i), v2[i]))
	}); err != nil {
		return stormRatios{}, err
	}
	fmt.Printf("  %d Rollout updates sent in %s\n", n, time.Since(start).Round(time.Millisecond))
	if err := framework.Eventually(ctx, 15*time.Minute, "every new ReplicaSet attached by ours and the floor", func(context.Context) (bool, string, error) {
		a, b := len(w.latencies(ours)), len(w.latencies(floor))
		return a >= 2*n && b >= 2*n, fmt.Sprintf("ours %d/%d, floor %d/%d new pairs attached", a, 2*n, b, 2*n), nil
	}); err != nil {
		return stormRatios{}, err
	}
	elapsed := time.Since(start)
	if op != nil {
		// It may drop a ReplicaSet for good (it gives up on an object missing from its cache): wait
		// while it makes progress, at most 10 minutes.
		last, lastChange := -1, time.Now()
		_ = framework.Eventually(ctx, 10*time.Minute, rsOperator+" done", func(context.Context) (bool, string, error) {
			got := len(w.latencies(rsOperator))
			if got != last {
				last, lastChange = got, time.Now()
			}
			if time.Since(lastChange) > 30*time.Second {
				return false, "", fmt.Errorf("%s stopped at %d/%d pairs", rsOperator, got, 2*n)
			}
			return got >= 2*n, fmt.Sprintf("%d/%d", got, 2*n), nil
		})
		fmt.Printf("%s attached %d of %d new pairs %s after the first update\n", rsOperator, len(w.latencies(rsOperator)), 2*n,
			time.Since(start).Round(time.Second))
		if errs := linesWith(op.Logs(), "Reconciler error"); len(errs) > 0 {
			fmt.Printf("%s logged %d reconcile errors, the first: %s\n", rsOperator, len(errs), errs[0])
		}
	}
	time.Sleep(3 * time.Second) // let stragglers (duplicate writes, if any) show in the metrics
	maxDepth, meanDepth := depth()
	after, err := apiserverWrites(ctx, e.c)
	if err != nil {
		return stormRatios{}, err
	}
	rss := map[string]int64{}
	rss[ours], _ = peakRSS(p.Pid())
	rss[floor], _ = peakRSS(fl.Pid())
	if op != nil {
		rss[rsOperator], _ = peakRSS(op.Pid())
	}
	syncs, err := readHistogram(metricsURL, syncMetric, attachSyncs)
	if err != nil {
		return stormRatios{}, err
	}
	syncs = syncs.since(syncsBefore)
	delays, err := readHistogram(metricsURL, delayMetric, "")
	if err != nil {
		return stormRatios{}, err
	}
	delays = delays.since(delaysBefore)
	waits, err := readHistogram(metricsURL, waitMetric, attachSyncs)
	if err != nil {
		return stormRatios{}, err
	}
	waits = waits.since(waitsBefore)
	floorAfter, floorErrors, err := floorCount(fl)
	if err != nil {
		return stormRatios{}, err
	}
	if floorErrors > 0 {
		fmt.Printf("(the floor had %d failed patches:\n%s)\n", floorErrors, tail(fl.Logs(), 5))
	}
	floorPatches := floorAfter - floorBefore

	fmt.Printf("\n%d Rollouts changed at once; ours and the floor attached all %d new ReplicaSets %s after the first update\n",
		n, n, elapsed.Round(time.Millisecond))
	fmt.Printf("ReplicaSet created -> ownerReference present, per (ConfigMap, ReplicaSet) pair:\n")
	fmt.Printf("%-22s %6s %9s %9s %9s %9s %11s %11s %9s\n", "", "pairs", "p50", "p95", "p99", "max", "p50/floor", "p99/floor", "peak RSS")
	fq := quantiles(w.latencies(floor))
	for _, a := range attachers {
		lat := w.latencies(a)
		if len(lat) == 0 {
			fmt.Printf("%-22s %6d\n", a, 0)
			continue
		}
		q := quantiles(lat)
		fmt.Printf("%-22s %6d %9s %9s %9s %9s %11.2f %11.2f %7.1f MiB\n", a, len(lat), ms(q.p50), ms(q.p95), ms(q.p99), ms(q.max),
			float64(q.p50)/float64(fq.p50), float64(q.p99)/float64(fq.p99), float64(rss[a])/(1<<20))
	}
	if e.breakdown {
		printBreakdown(w, map[string]map[pairKey]time.Time{ours: oursPatches(p.Logs()), floor: floorPatchTimes(fl.Logs())})
	}
	oq := quantiles(w.latencies(ours))
	ratios := stormRatios{float64(oq.p50) / float64(fq.p50), float64(oq.p99) / float64(fq.p99)}
	fmt.Printf("ratio to floor: p50 %.2f p99 %.2f (ours / floor, same run; targets p50 <= 1.2, p99 <= 1.5)\n", ratios.p50, ratios.p99)
	pairs := float64(2 * n)
	for _, k := range sortedKeys(after) {
		if d := after[k] - before[k]; d != 0 {
			fmt.Printf("apiserver %s configmaps, code %s: %+.0f\n", k[0], k[1], d)
		}
	}
	ourPatches := after[[2]string{"PATCH", "200"}] - before[[2]string{"PATCH", "200"}] - float64(floorPatches)
	fmt.Printf("writes per new (ConfigMap, ReplicaSet) pair: ours %.3f PATCH (200s minus the floor's %d), floor %.3f PATCH",
		ourPatches/pairs, floorPatches, float64(floorPatches)/pairs)
	if op != nil {
		fmt.Printf(", %s %.3f PUT (every PUT of a ConfigMap in the cluster)", rsOperator, (after[[2]string{"PUT", "200"}]-before[[2]string{"PUT", "200"}])/pairs)
	}
	fmt.Println()
	fmt.Printf("our controller during the storm (its histograms, bucket upper bounds): %.0f syncs of one revision, p50 <= %s, p99 <= %s; "+
		"revision created -> written p50 <= %s, p99 <= %s (creationTimestamp has 1 s resolution)\n", syncs[len(syncs)-1].count,
		bound(syncs.quantile(0.5)), bound(syncs.quantile(0.99)), bound(delays.quantile(0.5)), bound(delays.quantile(0.99)))
	fmt.Printf("our queue depth during the storm (sampled every 100 ms): max %.0f, mean %.1f; a key's wait there p50 <= %s, p99 <= %s\n",
		maxDepth, meanDepth, bound(waits.quantile(0.5)), bound(waits.quantile(0.99)))
	for _, line := range profiled() {
		fmt.Println(line)
	}
	return ratios, nil
}

func linesWith(logs, s string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// bound prints a histogram bucket bound; the last bucket has none.
func bound(d time.Duration) string {
	if d < 0 {
		return "+Inf"
	}
	return d.String()
}

type quant struct{ p50, p95, p99, max time.Duration }

func quantiles(lat []time.Duration) quant {
	s := sorted(lat)
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	return quant{at(0.50), at(0.95), at(0.99), s[len(s)-1]}
}

// floorCount asks the floor for its count of successful patches (SIGUSR1) and reads its answer,
// "floor: patched N ConfigMaps, E errors".
func floorCount(p *framework.Process) (patched, errors int, err error) {
	prev := strings.Count(p.Logs(), "floor: patched ")
	if err := syscall.Kill(p.Pid(), syscall.SIGUSR1); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.Logs(), "floor: patched ") == prev {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the floor did not report its count:\n%s", tail(p.Logs(), 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range strings.Split(p.Logs(), "\n") {
		if strings.HasPrefix(line, "floor: patched ") {
			if _, err := fmt.Sscanf(line, "floor: patched %d ConfigMaps, %d errors", &patched, &errors); err != nil {
				return 0, 0, err
			}
		}
	}
	return patched, errors, nil
}

// sampleGauge polls a gauge until the returned function is called, which gives its max and mean.
func sampleGauge(ctx context.Context, url, name string, every time.Duration) func() (max, mean float64) {
	var mu sync.Mutex
	var samples []float64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
			}
			v, err := gauge(url, name)
			if err == nil {
				mu.Lock()
				samples = append(samples, v)
				mu.Unlock()
			}
		}
	}()
	return func() (float64, float64) {
		close(stop)
		<-done
		var max, sum float64
		for _, v := range samples {
			sum += v
			if v > max {
				max = v
			}
		}
		if len(samples) == 0 {
			return 0, 0
		}
		return max, sum / float64(len(samples))
	}
}

func gauge(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v float64
	for _, line := range strings.Split(readAll(resp), "\n") {
		if strings.HasPrefix(line, name+" ") {
			_, err := fmt.Sscanf(strings.TrimPrefix(line, name+" "), "%g", &v)
			return v, err
		}
	}
	return 0, fmt.Errorf("no %s", name)
}

// watch records when this process first sees each ReplicaSet and each (ConfigMap, owner) pair.
type watch struct {
	mu        sync.Mutex
	measuring bool
	rsSeen    map[types.UID]time.Time
	newRS     map[types.UID]bool
	pairSeen  map[string]map[[2]types.UID]time.Time // by attacher
	finalized map[types.UID]bool                    // ConfigMaps carrying our in-use finalizer
	cmName    map[types.UID]string
}

func newWatch(ctx context.Context, e env, ns string) (*watch, error) {
	w := &watch{rsSeen: map[types.UID]time.Time{}, newRS: map[types.UID]bool{}, pairSeen: map[string]map[[2]types.UID]time.Time{},
		finalized: map[types.UID]bool{}, cmName: map[types.UID]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(e.c.Kube, 0, informers.WithNamespace(ns))
	rsInf := f.Apps().V1().ReplicaSets().Informer()
	cmInf := f.Core().V1().ConfigMaps().Informer()
	_, _ = rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		now := time.Now()
		rs := obj.(*appsv1.ReplicaSet)
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.rsSeen[rs.UID]; !ok {
			w.rsSeen[rs.UID] = now
			w.newRS[rs.UID] = w.measuring
		}
	}})
	onCM := func(obj any) {
		now := time.Now()
		cm := obj.(*corev1.ConfigMap)
		a := attacherOf(cm.Name)
		w.mu.Lock()
		defer w.mu.Unlock()
		if api.HasFinalizer(cm.Finalizers, api.InUseFinalizer) {
			w.finalized[cm.UID] = true
		}
		w.cmName[cm.UID] = cm.Name
		seen := w.pairSeen[a]
		if seen == nil {
			seen = map[[2]types.UID]time.Time{}
			w.pairSeen[a] = seen
		}
		for _, o := range cm.OwnerReferences {
			k := [2]types.UID{cm.UID, o.UID}
			if _, ok := seen[k]; !ok {
				seen[k] = now
			}
		}
	}
	_, _ = cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onCM, UpdateFunc: func(_, n any) { onCM(n) }})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), rsInf.HasSynced, cmInf.HasSynced) {
		return nil, ctx.Err()
	}
	return w, nil
}

func (w *watch) startMeasuring() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.measuring = true
}

func (w *watch) attachedPairs(attacher string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pairSeen[attacher])
}

func (w *watch) protected() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.finalized)
}

// latencies are ReplicaSet-seen to pair-seen, for ReplicaSets created after startMeasuring.
func (w *watch) latencies(attacher string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for k, t := range w.pairSeen[attacher] {
		if w.newRS[k[1]] {
			out = append(out, t.Sub(w.rsSeen[k[1]]))
		}
	}
	return out
}

func sortedKeys(m map[[2]string]float64) [][2]string {
	var out [][2]string
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0]+out[i][1] < out[j][0]+out[j][1] })
	return out
}

// pairKey is a ConfigMap name and the uid of the ReplicaSet it was attached to.
type pairKey struct {
	cm string
	rs types.UID
}

// oursPatches reads when each of our PATCHes returned from the controller's JSON log ("attached").
func oursPatches(logs string) map[pairKey]time.Time {
	out := map[pairKey]time.Time{}
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Object string    `json:"object"`
			UID    types.UID `json:"uid"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "attached" {
			continue
		}
		name := l.Object[strings.LastIndex(l.Object, "/")+1:] // "ConfigMap ns/name"
		out[pairKey{name, l.UID}] = l.Time
	}
	return out
}

// floorPatchTimes reads the floor's "patched NAME RS-UID UNIX-NANOS" lines.
func floorPatchTimes(logs string) map[pairKey]time.Time {
	out := map[pairKey]time.Time{}
	for _, line := range strings.Split(logs, "\n") {
		var name, uid string
		var nanos int64
		if n, _ := fmt.Sscanf(line, "patched %s %s %d", &name, &uid, &nanos); n == 3 {
			out[pairKey{name, types.UID(uid)}] = time.Unix(0, nanos)
		}
	}
	return out
}

// printBreakdown splits each measured latency at the moment the attacher's PATCH returned: before it,
// the attacher's reaction (its watch or informer delivering the ReplicaSet, its queue and sync, the
// PATCH); after it, the ConfigMap's update reaching the measuring watch.
func printBreakdown(w *watch, patched map[string]map[pairKey]time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Println("split at the PATCH's return (from the attachers' logs): ReplicaSet seen -> PATCH returned | PATCH returned -> seen attached")
	for _, a := range []string{ours, floor} {
		var react, deliver []time.Duration
		for k, seen := range w.pairSeen[a] {
			if !w.newRS[k[1]] {
				continue
			}
			t, ok := patched[a][pairKey{w.cmName[k[0]], k[1]}]
			if !ok {
				continue
			}
			react = append(react, t.Sub(w.rsSeen[k[1]]))
			deliver = append(deliver, seen.Sub(t))
		}
		if len(react) == 0 {
			fmt.Printf("  %-20s no PATCH times found\n", a)
			continue
		}
		r, d := quantiles(react), quantiles(deliver)
		fmt.Printf("  %-20s %4d pairs: reaction p50 %s p99 %s | delivery p50 %s p99 %s\n", a, len(react), ms(r.p50), ms(r.p99), ms(d.p50), ms(d.p99))
	}
}

// stormProfileSeconds covers a storm's attaching (3–9 s in the scale runs).
const stormProfileSeconds = 8

// profileStorm starts fetching our controller's CPU profile and execution trace of the next
// stormProfileSeconds from base (served with -profiling) into e.cpuProfiles; the function it returns
// waits for both and says where they are. Without -cpu-profiles it does nothing.
func (e env) profileStorm(base string) func() []string {
	if e.cpuProfiles == "" {
		return func() []string { return nil }
	}
	stamp := time.Now().Format("150405")
	kinds := []struct{ path, file string }{
		{"/debug/pprof/profile", "ours-storm-" + stamp + ".cpu.pprof"},
		{"/debug/pprof/trace", "ours-storm-" + stamp + ".trace"},
	}
	lines := make([]string, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			file := filepath.Join(e.cpuProfiles, k.file)
			if err := fetchTo(fmt.Sprintf("%s%s?seconds=%d", base, k.path, stormProfileSeconds), file); err != nil {
				lines[i] = fmt.Sprintf("our %s during the storm: %v", k.path, err)
				return
			}
			lines[i] = fmt.Sprintf("our %s during the storm: %s", k.path, file)
		}()
	}
	return func() []string { wg.Wait(); return lines }
}

func fetchTo(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startProfileChunk is one CPU profile of a start: profiles follow one another until the process stops
// (a start takes 0.5 s at 1,000 Pods and 40-76 s at 150,000; `go tool pprof` merges the chunks).
const startProfileChunk = 10

// profileStart keeps our controller's CPU profile from the moment its metrics address answers (its
// first second, before the first lists) until the process stops or startProfileChunks chunks are
// kept, in e.cpuProfiles, and says where.
func (e env) profileStart(ctx context.Context, base string) {
	const startProfileChunks = 12
	stamp := time.Now().Format("150405")
	var kept []string
	defer func() {
		if len(kept) > 0 {
			fmt.Printf("  our CPU profile of a start (%d s each): %s\n", startProfileChunk, strings.Join(kept, " "))
		}
	}()
	for deadline := time.Now().Add(2 * time.Minute); ctx.Err() == nil && len(kept) < startProfileChunks; {
		file := filepath.Join(e.cpuProfiles, fmt.Sprintf("ours-start-%s-%02d.cpu.pprof", stamp, len(kept)))
		err := fetchTo(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, startProfileChunk), file)
		switch {
		case err == nil:
			kept = append(kept, file)
		case len(kept) == 0 && errors.Is(err, syscall.ECONNREFUSED) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond) // not listening yet
		default:
			_ = os.Remove(file)
			return // stopped
		}
	}
}

// controllerRounds runs the storm rounds times; with alternate flags, each round runs it with ours as
// built, then with those flags added: the two compare side by side, each against the floor of its
// own storm, on a machine whose load changes between rounds.
func (e env) controllerRounds(ctx context.Context, n, rounds int, alternate []string, keep bool) error {
	variants := [][]string{nil}
	if len(alternate) > 0 {
		variants = append(variants, alternate)
	}
	for i, flags := range variants {
		variants[i] = append(slices.Clone(e.controllerFlags), flags...)
	}
	got := make([][]stormRatios, len(variants))
	for r := range max(rounds, 1) {
		for i, flags := range variants {
			v := e
			v.controllerFlags = flags
			fmt.Printf("\n== round %d: ours with %q\n", r+1, strings.Join(flags, " "))
			ratios, err := v.controller(ctx, n, keep)
			if err != nil {
				return err
			}
			got[i] = append(got[i], ratios)
		}
	}
	for i, flags := range variants {
		var p50s, p99s []string
		for _, r := range got[i] {
			p50s, p99s = append(p50s, fmt.Sprintf("%.2f", r.p50)), append(p99s, fmt.Sprintf("%.2f", r.p99))
		}
		fmt.Printf("ours with %q: ratio to the floor per round p50 %s, p99 %s\n", strings.Join(flags, " "), strings.Join(p50s, " "), strings.Join(p99s, " "))
	}
	return nil
}
