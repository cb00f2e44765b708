package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// job: the wall time of one Job run attaching 3 ConfigMaps, as a deploy pipeline sees it (process
// start, API discovery, watches, dry run, 3 patches, 3 events).
func (e env) job(ctx context.Context, keep bool) error {
	const ns, runs = "bench-job", 5
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	var names [runs][]string
	for i := range runs {
		for k := range 3 {
			cm, err := e.c.CreateConfigRevision(ctx, ns, fmt.Sprintf("app%d-cm%d", i, k), map[string]string{"k": fmt.Sprint(i, k)}, true)
			if err != nil {
				return err
			}
			names[i] = append(names[i], cm.Name)
		}
		if err := e.c.CreateRollout(ctx, ns, fmt.Sprintf("app%d", i), framework.RolloutSpec{Replicas: 1, ConfigMaps: names[i]}); err != nil {
			return err
		}
	}
	var times []time.Duration
	for i := range runs {
		r := e.bin.Run(ctx, []string{"LOG_LEVEL=warn"}, "-rollout", fmt.Sprintf("app%d", i), "-namespace", ns, "-configmaps", strings.Join(names[i], ","))
		if r.Code != 0 {
			return fmt.Errorf("%s", r)
		}
		fmt.Printf("run %d: %s\n", i+1, r.Duration.Round(time.Millisecond))
		times = append(times, r.Duration)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("\nJob attach of 3 ConfigMaps: median %s (min %s, max %s) over %d runs\n",
		times[runs/2].Round(time.Millisecond), times[0].Round(time.Millisecond), times[runs-1].Round(time.Millisecond), runs)
	fmt.Println("(the first run includes waiting for the Rollout's first ReplicaSet to appear)")
	return nil
}

// controller: N Rollouts with 2 opted-in ConfigMaps each; change all N at once and measure, for every
// new (ConfigMap, ReplicaSet) pair, the time from the ReplicaSet appearing in a watch to the ConfigMap
// carrying its ownerReference in a watch — both seen by this process, so clocks agree.
func (e env) controller(ctx context.Context, n int, keep bool) error {
	const ns = "bench-ctl"
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	fmt.Printf("creating %d Rollouts with 2 ConfigMaps each...\n", n)
	v1 := make([][]string, n)
	if err := parallel(n, 32, func(i int) error {
		for k := range 2 {
			cm, err := e.c.CreateConfigRevision(ctx, ns, fmt.Sprintf("app%d-cm%d", i, k), map[string]string{"v": "1"}, true)
			if err != nil {
				return err
			}
			v1[i] = append(v1[i], cm.Name)
		}
		return e.c.CreateRollout(ctx, ns, fmt.Sprintf("app%d", i), framework.RolloutSpec{Replicas: 1, ConfigMaps: v1[i]})
	}); err != nil {
		return err
	}

	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	args := append([]string{"controller", "-namespaces", ns, "-leader-elect=false",
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", ""}, e.controllerFlags...)
	p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=" + e.controllerLogLevel}, args...)
	if err != nil {
		return err
	}
	defer func() {
		_ = p.Stop()
		if e.controllerLog != "" {
			_ = os.WriteFile(e.controllerLog, []byte(p.Logs()), 0o644)
		}
	}()
	w, err := newWatch(ctx, e, ns)
	if err != nil {
		return err
	}
	fmt.Println("waiting for the controller to attach the first revisions...")
	if err := framework.Eventually(ctx, 10*time.Minute, "initial attach", func(context.Context) (bool, string, error) {
		got := w.attachedPairs()
		return got >= 2*n, fmt.Sprintf("%d/%d attached", got, 2*n), nil
	}); err != nil {
		return err
	}

	before, err := apiserverPatches(ctx, e.c)
	if err != nil {
		return err
	}
	v2 := make([][]string, n)
	if err := parallel(n, 32, func(i int) error {
		for k := range 2 {
			cm, err := e.c.CreateConfigRevision(ctx, ns, fmt.Sprintf("app%d-cm%d", i, k), map[string]string{"v": "2"}, true)
			if err != nil {
				return err
			}
			v2[i] = append(v2[i], cm.Name)
		}
		return nil
	}); err != nil {
		return err
	}
	w.startMeasuring()
	start := time.Now()
	fmt.Printf("changing the config of all %d Rollouts at once...\n", n)
	if err := parallel(n, 64, func(i int) error {
		return e.c.SetRolloutConfig(ctx, ns, fmt.Sprintf("app%d", i), v2[i], nil)
	}); err != nil {
		return err
	}
	fmt.Printf("  %d Rollout updates sent in %s\n", n, time.Since(start).Round(time.Millisecond))
	if err := framework.Eventually(ctx, 15*time.Minute, "every new ReplicaSet attached", func(context.Context) (bool, string, error) {
		got := len(w.latencies())
		return got >= 2*n, fmt.Sprintf("%d/%d new pairs attached", got, 2*n), nil
	}); err != nil {
		return err
	}
	elapsed := time.Since(start)
	time.Sleep(3 * time.Second) // let stragglers (duplicate writes, if any) show in the metrics
	after, err := apiserverPatches(ctx, e.c)
	if err != nil {
		return err
	}
	lat := w.latencies()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	rss, err := peakRSS(p.Pid())
	if err != nil {
		return err
	}
	syncs, err := histogramQuantiles("http://"+metricsAddr+"/metrics", "configmap_attacher_reconcile_duration_seconds", 0.5, 0.99)
	if err != nil {
		return err
	}
	fmt.Printf("\n%d Rollouts x 2 ConfigMaps changed at once; all %d new ReplicaSets attached %s after the first update\n", n, n, elapsed.Round(time.Millisecond))
	fmt.Printf("ReplicaSet created -> ownerReference present (%d pairs): p50 %s  p95 %s  p99 %s  max %s\n",
		len(lat), pct(0.50), pct(0.95), pct(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
	for code, v := range after {
		d := v - before[code]
		if d != 0 {
			fmt.Printf("apiserver PATCH configmaps, code %s: %+.0f (%.3f per new (ConfigMap, ReplicaSet) pair)\n", code, d, d/float64(2*n))
		}
	}
	fmt.Printf("controller sync of one ReplicaSet, whole run (its histogram, bucket upper bounds): p50 <= %s, p99 <= %s\n", syncs[0], syncs[1])
	fmt.Printf("controller peak RSS (VmHWM): %.1f MiB\n", float64(rss)/(1<<20))
	return nil
}

// histogramQuantiles reads a Prometheus histogram from url and returns, for each q, the upper bound of
// the first bucket holding at least that fraction of observations.
func histogramQuantiles(url, name string, qs ...float64) ([]time.Duration, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		le := between(line, `le="`, `"`)
		count, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return nil, err
		}
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			bound = math.Inf(1)
		}
		buckets = append(buckets, bucket{bound, count})
	}
	if len(buckets) == 0 {
		return nil, fmt.Errorf("no histogram %s at %s", name, url)
	}
	total := buckets[len(buckets)-1].count
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		for _, b := range buckets {
			if b.count >= q*total {
				out[i] = time.Duration(b.le * float64(time.Second)).Round(100 * time.Microsecond)
				break
			}
		}
	}
	return out, nil
}

// memory: the controller's RSS with many large opted-in ConfigMaps, when they arrive through the watch
// and when it starts with them already there (one big initial LIST).
func (e env) memory(ctx context.Context, count, size int, keep bool) error {
	const ns = "bench-mem"
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	startController := func() (*framework.Process, error) {
		probe, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := append([]string{"controller", "-leader-elect=false", "-metrics-bind-address", "",
			"-health-probe-bind-address", probe}, e.controllerFlags...)
		p, err := e.bin.Start(ctx, []string{"LOG_LEVEL=warn"}, args...)
		if err != nil {
			return nil, err
		}
		return p, framework.Eventually(ctx, 5*time.Minute, "controller ready", func(ctx context.Context) (bool, string, error) {
			resp, err := http.Get("http://" + probe + "/readyz")
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status, nil
		})
	}
	p, err := startController()
	if err != nil {
		return err
	}
	base, _ := peakRSS(p.Pid())
	fmt.Printf("controller peak RSS before the ConfigMaps exist: %.1f MiB\n", float64(base)/(1<<20))

	payload := strings.Repeat("x", size)
	fmt.Printf("creating %d labelled ConfigMaps of %d KiB (%d MiB in all)...\n", count, size/1024, count*size>>20)
	start := time.Now()
	if err := parallel(count, 32, func(i int) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%05d", i), Namespace: ns,
				Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}},
			Data: map[string]string{"data": payload},
		}
		_, err := e.c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	fmt.Printf("  created in %s\n", time.Since(start).Round(time.Second))
	time.Sleep(5 * time.Second)
	watched, _ := peakRSS(p.Pid())
	fmt.Printf("controller peak RSS after %d ConfigMaps arrived through its watch: %.1f MiB\n", count, float64(watched)/(1<<20))
	_ = p.Stop()

	p, err = startController()
	if err != nil {
		return err
	}
	defer p.Stop()
	time.Sleep(5 * time.Second)
	listed, _ := peakRSS(p.Pid())
	fmt.Printf("controller peak RSS starting with %d ConfigMaps present (initial LIST): %.1f MiB\n", count, float64(listed)/(1<<20))
	return nil
}

func (e env) freshNamespace(ctx context.Context, ns string, keep bool) error {
	if err := e.c.DeleteNamespace(ctx, ns); err != nil {
		return err
	}
	if err := framework.Eventually(ctx, 5*time.Minute, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := e.c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err != nil, "terminating", nil
	}); err != nil {
		return err
	}
	return e.c.CreateNamespace(ctx, ns)
}

// watch records when this process first sees each ReplicaSet and each (ConfigMap, owner) pair.
type watch struct {
	mu        sync.Mutex
	measuring bool
	rsSeen    map[types.UID]time.Time
	pairSeen  map[[2]types.UID]time.Time
	newRS     map[types.UID]bool
}

func newWatch(ctx context.Context, e env, ns string) (*watch, error) {
	w := &watch{rsSeen: map[types.UID]time.Time{}, pairSeen: map[[2]types.UID]time.Time{}, newRS: map[types.UID]bool{}}
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
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, o := range cm.OwnerReferences {
			k := [2]types.UID{cm.UID, o.UID}
			if _, ok := w.pairSeen[k]; !ok {
				w.pairSeen[k] = now
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

func (w *watch) attachedPairs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pairSeen)
}

// latencies are ReplicaSet-seen to pair-seen, for ReplicaSets created after startMeasuring.
func (w *watch) latencies() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for k, t := range w.pairSeen {
		if w.newRS[k[1]] {
			out = append(out, t.Sub(w.rsSeen[k[1]]))
		}
	}
	return out
}

// apiserverPatches reads apiserver_request_total for PATCH on configmaps, by response code.
func apiserverPatches(ctx context.Context, c *framework.Cluster) (map[string]float64, error) {
	raw, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="configmaps"`) ||
			!strings.Contains(line, `verb="PATCH"`) {
			continue
		}
		code := between(line, `code="`, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return nil, err
		}
		out[code] += v
	}
	return out, nil
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	return s[:strings.Index(s, end)]
}

// peakRSS is the process's VmHWM: the most resident memory it ever had.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM for pid %d", pid)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// parallel runs f(0..n-1) with at most width at once and returns the first error.
func parallel(n, width int, f func(int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, width)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}
