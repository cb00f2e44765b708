package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The scale scenario grows one cluster in steps of Pods, in a fixed mix of every workload kind the
// controller follows, and measures ours beside kube-controller-manager and the peers at each step.
//
// The mix, per tenant namespace (a team's applications; docs/benchmarks.md gives it per 1,000 Pods):
//   - 8 Deployments of 4 replicas, each with 3 ReplicaSets (the current one and 2 old ones at 0
//     replicas, as after two deploys); 4 of them opted in: one revisioned ConfigMap per revision,
//     labelled configmap-attacher.io/revisioned, and an opted-in Secret; the other 4 read a plain
//     ConfigMap and a plain Secret;
//   - 2 Rollouts (Argo Rollouts, canary) of 4 replicas, opted in like the Deployments, 3 ReplicaSets each;
//   - 1 StatefulSet of 2 replicas (plain ConfigMap and Secret), its pods made by its controller;
//   - 1 CronJob (opted in, 2 config revisions) with 2 finished Jobs, one pod each, made by the Job
//     controller and completed by kwok;
//   - 1 plain ConfigMap "settings" every pod reads (envFrom), and kube-root-ca.crt.
//
// So 44 Pods, 30 ReplicaSets, 20 opted-in and 7 plain ConfigMaps, 6 opted-in and 5 plain Secrets per
// tenant; plus 2 DaemonSets with a pod on every node. The ReplicaSets' pods are made by the bench,
// bound to kwok nodes 96 to a node (kube-controller-manager runs without its ReplicaSet controller:
// test/bench/scale-kwokctl.yaml), and their ReplicaSets' status set as the controller would.
const (
	podsPerNode       = 110 // each kwok node's capacity, as up.sh's
	boundPerNode      = 96  // pods the bench binds to a node; the rest is for the scheduler's
	tenantDeployments = 8
	optedDeployments  = 4
	tenantRollouts    = 2
	appReplicas       = 4
	appRevisions      = 3
	stsReplicas       = 2
	cronJobRuns       = 2
	daemonSets        = 2
	boundPerTenant    = (tenantDeployments + tenantRollouts) * appReplicas
	podsPerTenant     = boundPerTenant + stsReplicas + cronJobRuns
	tenantPrefix      = "scale-t"
	scaleNodePrefix   = "scale-node-"
	scaleSystem       = "scale-system"
	probeNamespace    = "scale-probe"
)

type scaleOptions struct {
	steps         []int
	stormRollouts int
	webhookPods   int
	inFlight      int
	pending       int
	outDir        string
	budget        time.Duration
	peersMax      int
	keep          bool
	// resume: the cluster is one an earlier run built (-scale-resume); the grower takes what it holds.
	resume bool
	// watchVariants are more of ours run through the watch and anew (-scale-watch-variant).
	watchVariants []watchVariant
}

// scaleStep is what one step measured.
type scaleStep struct {
	target               int // the Pods the step grows to (pods: how many it holds then)
	pods, nodes, tenants int
	build                time.Duration
	// ours: through the watch (started at the previous step's size), then started anew; peak RSS and
	// the live heap (after a forced collection: what the caches hold).
	watchRSS, startRSS   int64
	watchHeap, startHeap int64
	// limit: the GOMEMLIMIT of ours' second start (sizedLimit of watchHeap), whose peak RSS is
	// peersStart[limitedName].
	limit               int64
	watchCPU, startCPU  float64
	synced, firstAttach time.Duration
	// baselineSynced: the baseline build (-baseline-bin) started anew alone, right after ours, to its
	// caches synced (0 when it did not run).
	baselineSynced time.Duration
	// load is the machine's load average (1 minute) when ours started anew.
	load string
	// quiet: ours started anew once more with kwok's controller stopped (quietStart).
	quiet          quietStart
	lists, watches int
	listResources  []string
	kcm, apiserver int64 // VmRSS
	etcd           int64
	used           int64 // the machine's memory in use with everything running, grown to this step
	peersWatch     map[string]int64
	// peersWatchCPU: their CPU seconds through the watch (the variants' column).
	peersWatchCPU map[string]float64
	peersStart    map[string]int64
	storm         stormRatios
	webhook       admissionRatios
	stepTime      time.Duration
}

// scale runs the scenario: the cluster must be the bench's own (or one made with
// CLUSTER_KWOKCTL_CONFIG=test/bench/scale-kwokctl.yaml).
func (e env) scale(ctx context.Context, o scaleOptions) error {
	fast, err := e.fastClient()
	if err != nil {
		return err
	}
	g := &grower{e: e, kube: fast}
	if o.resume {
		if err := g.adopt(ctx); err != nil {
			return err
		}
		fmt.Printf("resuming on %d Pods on %d nodes (%d tenants) an earlier run built\n", g.pods(), len(g.nodes), g.tenants)
	}
	for _, ns := range []string{scaleSystem, probeNamespace} {
		if err := e.c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	procs := e.scaleProcs(o.peersMax, o.watchVariants)
	defer procs.stop()
	base, err := procs.start(ctx, o.steps[0])
	if err != nil {
		return err
	}
	baseline := base[ours].rss
	if o.resume {
		// Not an empty cluster's: no per-Pod figure counts from it (-1: none).
		fmt.Printf("started on the resumed cluster: ours %s\n", mib(baseline))
		baseline = -1
	} else {
		fmt.Printf("before any tenant: ours %s\n", mib(baseline))
	}

	var steps []scaleStep
	var stopReason string
	runStart := time.Now()
	for i, target := range o.steps {
		if reason := e.canGrow(steps, target, runStart, o.budget); reason != "" {
			stopReason = reason
			break
		}
		stepStart := time.Now()
		s := scaleStep{target: target}
		fmt.Printf("\n== step %d: growing to %d Pods ==\n", i+1, target)
		if err := g.growTo(ctx, target); err != nil {
			return fmt.Errorf("growing to %d Pods: %w", target, err)
		}
		s.build = time.Since(stepStart)
		s.pods, s.nodes, s.tenants = g.pods(), len(g.nodes), g.tenants
		fmt.Printf("  %d Pods on %d nodes (%d tenants) built in %s\n", s.pods, s.nodes, s.tenants, s.build.Round(time.Second))
		e.waitPodsStarted(ctx)
		e.waitKwokSettled(ctx)

		through, err := procs.measure(ctx)
		if err != nil {
			return err
		}
		s.watchRSS, s.watchCPU, s.watchHeap = through[ours].rss, through[ours].cpu, through[ours].heap
		s.peersWatch = peerRSS(through)
		s.peersWatchCPU = map[string]float64{}
		for name, f := range through {
			s.peersWatchCPU[name] = f.cpu
		}
		s.kcm, s.apiserver, s.etcd = e.componentRSS("kube-controller-manager"), e.componentRSS("kube-apiserver"), e.componentRSS("etcd")
		s.used = memUsed()
		procs.stop()

		// Ours once more, started anew with the soft memory limit the sizing rule gives for what the
		// first one holds at this size (docs/operations.md, Sizing).
		s.limit = sizedLimit(s.watchHeap)
		procs.limit = s.limit
		if err := e.startAnew(ctx, procs, &s, i); err != nil {
			return err
		}
		procs.stop()
		if s.quiet, err = e.startQuiet(ctx, procs, i); err != nil {
			return err
		}
		procs.stop()

		e.stormAllNamespaces = true
		if s.storm, err = e.controller(ctx, o.stormRollouts, o.keep); err != nil {
			return fmt.Errorf("storm at %d Pods: %w", s.pods, err)
		}
		if s.webhook, err = e.webhook(ctx, o.webhookPods, o.inFlight, 1, o.keep); err != nil {
			return fmt.Errorf("webhook at %d Pods: %w", s.pods, err)
		}
		last := i == len(o.steps)-1
		if last {
			if err := e.restartWithPending(ctx, g, o.pending); err != nil {
				return err
			}
		}
		s.stepTime = time.Since(stepStart)
		steps = append(steps, s)
		fmt.Printf("  step took %s (build %s)\n", s.stepTime.Round(time.Second), s.build.Round(time.Second))
		printScaleTable(os.Stdout, steps, baseline)
		// Written after every step: a run that stops later keeps what it measured.
		if err := writeScaleReport(o.outDir, commit(e.root), steps, baseline, ""); err != nil {
			return err
		}
		if !last {
			// The next step's "through the watch" figures: processes started at this size.
			if _, err := procs.start(ctx, o.steps[i+1]); err != nil {
				return err
			}
		}
	}
	if stopReason != "" {
		fmt.Printf("\nstopped before the next step: %s\n", stopReason)
	}
	if len(steps) == 0 {
		return fmt.Errorf("no step measured: %s", stopReason)
	}
	return writeScaleReport(o.outDir, commit(e.root), steps, baseline, stopReason)
}

// fastClient is a client without client-side rate limit, speaking protobuf: building 150,000 Pods
// is bounded by the API server, not by us.
func (e env) fastClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(cfg)
}

// waitPodsStarted waits, up to 30 minutes, until no Pod is Pending: kwok makes each bound Pod Running
// with a status write of its own, and at 150,000 Pods, 4 at a time (its default, ~35-50 a second
// here), it was still working through ~90,000 of them half an hour after the build: every start
// measured meanwhile shared the machine with that backlog (load average 5-6). scale-kwokctl.yaml
// now lets it write 32 at a time. A Pod that stays Pending only costs the wait: the step goes on,
// and says so.
func (e env) waitPodsStarted(ctx context.Context) {
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		// One is enough to know: a page of one, not the backlog's every Pod at each poll.
		list, err := e.c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending", Limit: 1})
		if err != nil {
			return false, nil // the API server is busy: ask again
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		fmt.Printf("  Pods still Pending after %s: measuring anyway\n", time.Since(start).Round(time.Second))
		return
	}
	fmt.Printf("  every Pod Running (or done) %s after the build\n", time.Since(start).Round(time.Second))
}

// waitKwokSettled waits, up to 30 minutes, until kube-apiserver refuses fewer than one Pod PATCH a
// second (code 422, over 30 s): kwok's replays of stale copies. Once every Pod is Running, kwok still
// plays its pod-ready stage again for each Pod it holds a second, older event of (from a re-list
// while the Pods were Pending), with a new Pod IP, which the API server refuses: at 150,014 Pods
// ~86,000 of them, ~45 a second, ending 13 minutes after the last Pod ran; a start timed meanwhile
// shared the machine with that stream (load average ~5), which no settled cluster carries. A stream
// that does not end only costs the wait: the step goes on, and says so.
func (e env) waitKwokSettled(ctx context.Context) {
	refused := func() (float64, error) {
		var n float64
		err := apiserverRequests(ctx, e.c, func(verb, resource, code string, v float64) {
			if verb == "PATCH" && resource == "pods" && code == "422" {
				n += v
			}
		})
		return n, err
	}
	const window = 30 * time.Second
	start := time.Now()
	first, err := refused()
	if err != nil {
		fmt.Printf("  kwok's refused replays not counted: %v\n", err)
		return
	}
	last := first
	err = wait.PollUntilContextTimeout(ctx, window, 30*time.Minute, false, func(context.Context) (bool, error) {
		n, err := refused()
		if err != nil {
			return false, nil // the API server is busy: ask again
		}
		done := n-last < window.Seconds()
		last = n
		return done, nil
	})
	if err != nil {
		fmt.Printf("  kwok's stale replays still refused after %s (%.0f meanwhile): measuring anyway\n", time.Since(start).Round(time.Second), last-first)
		return
	}
	fmt.Printf("  kwok settled %s after every Pod ran: %.0f stale replays refused meanwhile, under one a second for 30 s\n", time.Since(start).Round(time.Second), last-first)
}

// canGrow says why the next step should not run ("" when it may): the machine's memory, from the
// growth of everything running between the last two steps (the control plane, kwok, ours, the
// peers), or the time budget.
func (e env) canGrow(steps []scaleStep, target int, runStart time.Time, budget time.Duration) string {
	if len(steps) == 0 {
		return ""
	}
	last := steps[len(steps)-1]
	avail, err := memAvailable()
	if err == nil && len(steps) >= 2 {
		prev := steps[len(steps)-2]
		need := memoryNeed(prev, last, target, e.componentMemLimit("kube-apiserver"))
		if need > avail-2<<30 {
			return fmt.Sprintf("%d Pods would need ~%s more (the machine's memory in use grew by %s from %d to %d Pods; kube-apiserver's past its soft limit not counted), %s is available",
				target, mib(need), mib(last.used-prev.used), prev.pods, last.pods, mib(avail))
		}
	}
	perPod := last.stepTime.Seconds() / float64(last.pods)
	if len(steps) > 1 {
		prev := steps[len(steps)-2]
		perPod = last.stepTime.Seconds() / float64(last.pods-prev.pods)
	}
	next := time.Duration(perPod * float64(target-last.pods) * float64(time.Second))
	if elapsed := time.Since(runStart); elapsed+next > budget {
		return fmt.Sprintf("%d Pods would take ~%s more at the last step's pace (run so far %s, -scale-budget %s)",
			target, next.Round(time.Minute), elapsed.Round(time.Minute), budget)
	}
	return ""
}

// memoryNeed projects the machine's memory a step to target Pods takes, from what everything running
// grew per Pod between prev and last, less kube-apiserver's growth past its soft memory limit
// (apiLimit, 0: none): scale-kwokctl.yaml sets one, and at it kube-apiserver collects more often
// instead of growing. Counted in full, its growth stopped a run from empty before 150,000 Pods
// (~13.0 GiB projected from 50,034 with 14.5 available) on a machine where a run that went on had
// ~6.5 GiB left at 150,014.
//
//	kube-apiserver at last | its projected growth | counted
//	below its limit         | stays below          | all of it
//	below its limit         | crosses it           | up to the limit
//	at or above its limit   | any                  | none
func memoryNeed(prev, last scaleStep, target int, apiLimit int64) int64 {
	pods := float64(last.pods - prev.pods)
	more := float64(target - last.pods)
	need := float64(last.used-prev.used) / pods * more
	if apiLimit > 0 {
		apiGrowth := max(float64(last.apiserver-prev.apiserver)/pods*more, 0)
		room := max(float64(apiLimit-last.apiserver), 0)
		need -= max(apiGrowth-room, 0)
	}
	return int64(need)
}

// componentMemLimit is a control-plane component's soft memory limit, GOMEMLIMIT in its environment
// (e.g. "9GiB"), in bytes; 0 when it has none or it cannot be read.
func (e env) componentMemLimit(name string) int64 {
	pid, err := e.componentPID(name)
	if err != nil {
		return 0
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GOMEMLIMIT="); ok {
			return parseMemLimit(v)
		}
	}
	return 0
}

// parseMemLimit reads a GOMEMLIMIT value (bytes, or with a B, KiB, MiB, GiB or TiB suffix); 0 when
// it is none of these.
func parseMemLimit(v string) int64 {
	// The Go runtime's suffixes are a Kubernetes quantity's binary ones with a B.
	q, err := resource.ParseQuantity(strings.TrimSuffix(v, "B"))
	if err != nil {
		return 0
	}
	return q.Value()
}

// loadAverage is the machine's load average over the last minute ("" if unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

// memUsed is the machine's memory in use (MemTotal − MemAvailable).
func memUsed() int64 {
	total, err := meminfo("MemTotal:")
	if err != nil {
		return 0
	}
	avail, err := memAvailable()
	if err != nil {
		return 0
	}
	return total - avail
}

func memAvailable() (int64, error) { return meminfo("MemAvailable:") }

// meminfo reads a field of /proc/meminfo, in bytes.
func meminfo(field string) (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/meminfo", field)
}

// componentRSS is the VmRSS of a control plane process of the cluster (0 if unknown).
func (e env) componentRSS(name string) int64 {
	pid, err := e.componentPID(name)
	if err != nil {
		return 0
	}
	rss, _ := currentRSS(pid)
	return rss
}

// componentPID is a control-plane component's process, from the pid file kwokctl keeps beside the
// kubeconfig.
func (e env) componentPID(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(e.c.Kubeconfig), "pids", name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// cpuSeconds is the user and system CPU time of a process.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (in parentheses): state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// scaleProcs are ours and the peers, run on the whole cluster (their default scope); the peers and
// the baseline build only up to peersMax Pods (0: at every size), to leave the machine's memory to the
// cluster, ours and kube-controller-manager at the largest steps.
func (e env) scaleProcs(peersMax int, variants []watchVariant) *procSet {
	ps := &procSet{profiles: e.profiles}
	ps.add(ours, 0, false, func(ctx context.Context) (*framework.Process, error) {
		// With profiling on its own address: measure reads its live heap there.
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		ps.procs[0].pprof = addr
		if e.cpuProfiles != "" {
			go e.profileStart(ctx, "http://"+addr)
		}
		return e.startOurs(ctx, "-profiling", "-metrics-bind-address", addr)
	})
	ps.add(limitedName, 0, true, func(ctx context.Context) (*framework.Process, error) {
		return e.startControllerWith(ctx, e.bin, []string{fmt.Sprintf("GOMEMLIMIT=%dMiB", ps.limit>>20)})
	})
	for _, v := range variants {
		ps.add(v.name(), 0, false, func(ctx context.Context) (*framework.Process, error) {
			return e.startControllerWith(ctx, e.bin, v.env, v.args...)
		})
	}
	if e.baseline.Path != "" {
		ps.add(baselineName, peersMax, false, func(ctx context.Context) (*framework.Process, error) { return e.startController(ctx, e.baseline) })
	}
	n := 0
	if e.peers.rsOperator != "" {
		ps.add(rsOperator, peersMax, false, func(ctx context.Context) (*framework.Process, error) {
			n++
			return e.startRSOperator(ctx, probeNamespace, 1000+n)
		})
	}
	if e.peers.reloader != "" {
		ps.add("reloader", peersMax, false, e.startReloader)
	}
	return ps
}

// baselineName names the -baseline-bin controller (another build of ours, e.g. main's) in the tables,
// limitedName ours started anew with the sizing rule's GOMEMLIMIT.
const (
	baselineName = "configmap-attacher (baseline)"
	limitedName  = "configmap-attacher (GOMEMLIMIT)"
)

// watchVariant is one more of ours run from the first step on (-scale-watch-variant): our build with
// this environment and these flags added.
type watchVariant struct {
	env, args []string
}

// parseWatchVariants reads -scale-watch-variant: comma-separated variants, each environment
// (NAME=VALUE) and flags (-flag=value), space-separated.
func parseWatchVariants(s string) ([]watchVariant, error) {
	var out []watchVariant
	for _, spec := range strings.Split(s, ",") {
		var v watchVariant
		for _, f := range strings.Fields(spec) {
			switch {
			case strings.HasPrefix(f, "-") && strings.Contains(f, "="):
				v.args = append(v.args, f)
			case !strings.HasPrefix(f, "-") && strings.Index(f, "=") > 0:
				v.env = append(v.env, f)
			default:
				return nil, fmt.Errorf("-scale-watch-variant %q: %q is neither NAME=VALUE nor -flag=value; give e.g. \"GOMEMLIMIT=224MiB,-gc-percent=100\"", s, f)
			}
		}
		if len(v.env)+len(v.args) > 0 {
			out = append(out, v)
		}
	}
	return out, nil
}

// variantPrefix starts the names of watchVariant.name.
const variantPrefix = "configmap-attacher with "

// name names the variant in the tables: its environment and flags as given.
func (v watchVariant) name() string {
	return variantPrefix + strings.Join(append(slices.Clone(v.env), v.args...), " ")
}

// isVariant tells watchVariant.name's names.
func isVariant(name string) bool {
	return strings.HasPrefix(name, variantPrefix)
}

// sizedLimit is the soft memory limit (GOMEMLIMIT) the sizing rule (docs/operations.md) gives for a
// controller whose live heap is live (what it holds after a collection; it grows with the cluster):
// 64 MiB for what is not heap (the binary's pages, the runtime, stacks: the empty cluster's RSS is
// ~35 MiB with a 3 MiB heap) and half the live heap again as room, so that each collection frees at
// least a third of the heap and the collector, which the soft limit starts when the heap reaches it,
// runs seldom. Rounded up to 32 MiB. In a container the controller sets it to -memory-limit-ratio
// (0.8) of the memory limit: the limit to give is this ÷ 0.8.
func sizedLimit(live int64) int64 {
	const mi = 1 << 20
	l := 64*mi + live*3/2
	return (l + 32*mi - 1) / (32 * mi) * (32 * mi)
}

// procSet starts, measures and stops processes together.
type procSet struct {
	procs []*memProc
	// profiles, when set, is a directory where measure keeps each heap profile of ours.
	profiles string
	measured int
	// limit is the GOMEMLIMIT of limitedName's next start.
	limit int64
}

type procFigures struct {
	rss  int64
	cpu  float64
	heap int64 // the live heap after a forced collection, where the process serves its profiles
}

// add adds a process that runs at every size up to upTo Pods (0: every size); with anewOnly it is
// only started anew (startAnew), not through the watch.
func (ps *procSet) add(name string, upTo int, anewOnly bool, start func(context.Context) (*framework.Process, error)) {
	ps.procs = append(ps.procs, &memProc{name: name, start: start, upTo: upTo, anewOnly: anewOnly})
}

// start starts, to be measured through the watch, the processes that run at the size the cluster
// grows to next.
func (ps *procSet) start(ctx context.Context, next int) (map[string]procFigures, error) {
	for _, m := range ps.procs {
		if m.anewOnly || !m.runsAt(next) {
			continue
		}
		p, err := m.start(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		m.p = p
	}
	return ps.measure(ctx)
}

// measure waits until each process's RSS has settled and returns its peak RSS and CPU seconds.
func (ps *procSet) measure(ctx context.Context) (map[string]procFigures, error) {
	out := map[string]procFigures{}
	for _, m := range ps.procs {
		if m.p == nil {
			continue
		}
		if m.p.Exited() {
			return nil, fmt.Errorf("%s exited:\n%s", m.name, tail(m.p.Logs(), 20))
		}
		settle(ctx, m.p.Pid())
		rss, err := peakRSS(m.p.Pid())
		if err != nil {
			return nil, err
		}
		f := procFigures{rss: rss, cpu: cpuSeconds(m.p.Pid())}
		if m.pprof != "" { // after the RSS: the forced collection shrinks nothing of the peak, but moves the heap
			ps.measured++
			if f.heap, err = liveHeap(ctx, m.pprof, ps.profiles, fmt.Sprintf("ours-%02d", ps.measured)); err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
		}
		out[m.name] = f
	}
	return out, nil
}

// liveHeap reads a process's heap in use after a forced collection from its /debug/pprof/heap
// (HeapAlloc of the MemStats it prints) and, when dir is set, keeps the heap profile there as
// <name>.pprof (go tool pprof -sample_index=inuse_space).
func liveHeap(ctx context.Context, addr, dir, name string) (int64, error) {
	get := func(query string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?"+query, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("heap profile: %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	text, err := get("gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	var heap int64 = -1
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			heap, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
		}
	}
	if heap < 0 {
		return 0, fmt.Errorf("no HeapAlloc in the heap profile of %s", addr)
	}
	if dir != "" {
		b, err := get("gc=1")
		if err != nil {
			return 0, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".pprof"), b, 0o644); err != nil {
			return 0, err
		}
	}
	return heap, nil
}

func (ps *procSet) stop() {
	for _, m := range ps.procs {
		if m.p != nil {
			_ = m.p.Stop()
			m.p = nil
		}
	}
}

func peerRSS(f map[string]procFigures) map[string]int64 {
	out := map[string]int64{}
	for name, v := range f {
		if name != ours {
			out[name] = v.rss
		}
	}
	return out
}

// startAnew starts ours (and the peers) with everything present: one initial LIST (or watch-list) of
// the whole cluster. Before it, a revision is made that needs an attach (a Deployment of 0 replicas
// reading a new opted-in ConfigMap), so the time to the first correct attach is measured from the
// process's start. The API requests of the start are kube-apiserver's counters before and after
// (cluster-wide: the other components' own requests in those seconds are counted too).
func (e env) startAnew(ctx context.Context, procs *procSet, s *scaleStep, step int) error {
	before, err := e.startRequests(ctx)
	if err != nil {
		return err
	}
	s.load = loadAverage()
	if s.synced, s.firstAttach, err = e.timedStart(ctx, procs.procs[0], fmt.Sprintf("probe-%d-%s", step, time.Now().UTC().Format("150405"))); err != nil {
		return err
	}
	after, err := e.startRequests(ctx)
	if err != nil {
		return err
	}
	perResource := map[string]string{}
	for k, v := range after {
		d := int(v - before[k])
		if d == 0 {
			continue
		}
		switch k[0] {
		case "LIST":
			s.lists += d
			perResource[k[1]] += fmt.Sprintf("%d LIST ", d)
		case "WATCH":
			s.watches += d
		}
	}
	for r, v := range perResource {
		s.listResources = append(s.listResources, r+": "+strings.TrimSpace(v))
	}
	sort.Strings(s.listResources)
	// The baseline build, started alone too: e.g. a build with compression of the first lists on.
	for _, m := range procs.procs[1:] {
		if m.name != baselineName || !m.runsAt(s.target) {
			continue
		}
		started := time.Now()
		if m.p, err = m.start(ctx); err != nil { // returns once /readyz answers 200
			return fmt.Errorf("%s: %w", m.name, err)
		}
		s.baselineSynced = time.Since(started)
	}
	// The others start once ours is measured, so that their starts do not load the API server during ours.
	for _, m := range procs.procs[1:] {
		if !m.runsAt(s.target) || m.p != nil {
			continue
		}
		if m.p, err = m.start(ctx); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	started, err := procs.measure(ctx)
	if err != nil {
		return err
	}
	s.startRSS, s.startCPU, s.startHeap = started[ours].rss, started[ours].cpu, started[ours].heap
	s.peersStart = peerRSS(started)
	fmt.Printf("  started anew (load average %s): ours synced after %s, first attach after %s; API requests meanwhile (cluster-wide): %d LIST (%s), %d more watches open\n",
		s.load, s.synced.Round(time.Millisecond), s.firstAttach.Round(time.Millisecond), s.lists, strings.Join(s.listResources, ", "), s.watches)
	if s.baselineSynced > 0 {
		fmt.Printf("  the baseline build, started anew alone after it: synced after %s\n", s.baselineSynced.Round(time.Millisecond))
	}
	return nil
}

// timedStart starts m anew and times it: to its caches synced (/readyz), and to its first attach, of
// a revision made for it just before (probe, a new name each time: a resumed run numbers its steps
// anew, and an earlier run's probe-0, attached long ago, read as an attach 53 ms after the start,
// seen at 150,014 Pods).
func (e env) timedStart(ctx context.Context, m *memProc, probe string) (synced, firstAttach time.Duration, err error) {
	cm, rs, err := e.probeRevision(ctx, probe)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	var attachedAfter atomic.Int64
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go func() {
		for probeCtx.Err() == nil {
			owners, _, err := e.c.Owners(probeCtx, probeNamespace, "ConfigMap", cm)
			if err == nil {
				for _, o := range owners {
					if string(o.UID) == rs {
						attachedAfter.Store(int64(time.Since(start)))
						return
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if m.p, err = m.start(ctx); err != nil { // returns once /readyz answers 200
		return 0, 0, err
	}
	synced = time.Since(start)
	if err := framework.Eventually(ctx, 5*time.Minute, "the probe's first attach", func(context.Context) (bool, string, error) {
		return attachedAfter.Load() > 0, "not yet", nil
	}); err != nil {
		return 0, 0, err
	}
	return synced, time.Duration(attachedAfter.Load()), nil
}

// quietStart is ours started anew with kwok's controller stopped (SIGSTOP): kwok 0.8.0, once a cluster
// has grown to 150,000 Pods at once, keeps re-making Running Pods ready from a stale view, its status
// writes refused (two pod IPs), ~50 a second for ever: ~0.9 core of kwok and as much of
// kube-apiserver, which a cluster of kubelets does not spend (measured in the 150,000-Pod runs). The
// nodes' Leases stay valid meanwhile (20 minutes: scale-kwokctl.yaml's heartbeatFactor).
type quietStart struct {
	load                string
	synced, firstAttach time.Duration
	rss                 int64
}

// startQuiet starts ours anew once more, kwok's controller stopped for as long, and measures it.
func (e env) startQuiet(ctx context.Context, procs *procSet, step int) (quietStart, error) {
	var q quietStart
	pid, err := e.componentPID("kwok-controller")
	if err != nil {
		return q, fmt.Errorf("kwok's controller: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return q, fmt.Errorf("stopping kwok's controller (pid %d): %w", pid, err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	// Until kube-apiserver has answered kwok's writes in flight and the load average has come down
	// from them: a minute's average, sampled every 5 s, under 1.5 or after 2 minutes.
	for waited := time.Duration(0); waited < 2*time.Minute; waited += 5 * time.Second {
		if l, err := strconv.ParseFloat(loadAverage(), 64); err == nil && l < 1.5 {
			break
		}
		time.Sleep(5 * time.Second)
	}
	q.load = loadAverage()
	if q.synced, q.firstAttach, err = e.timedStart(ctx, procs.procs[0], fmt.Sprintf("probe-q%d-%s", step, time.Now().UTC().Format("150405"))); err != nil {
		return q, err
	}
	f, err := procs.measure(ctx)
	if err != nil {
		return q, err
	}
	q.rss = f[ours].rss
	fmt.Printf("  started anew with kwok's controller stopped (load average %s): ours synced after %s, first attach after %s, peak RSS %s\n",
		q.load, q.synced.Round(time.Millisecond), q.firstAttach.Round(time.Millisecond), mib(q.rss))
	return q, nil
}

// startRequests reads the API requests a start makes: LISTs completed (apiserver_request_total) and
// watches open (apiserver_longrunning_requests: a watch is counted in the former only when it ends),
// by verb and resource.
func (e env) startRequests(ctx context.Context) (map[[2]string]float64, error) {
	out := map[[2]string]float64{}
	add := func(verb string) func(string, string, string, float64) {
		return func(v, resource, _ string, n float64) {
			if v == verb {
				out[[2]string{verb, resource}] += n
			}
		}
	}
	if err := apiserverRequests(ctx, e.c, add("LIST")); err != nil {
		return nil, err
	}
	return out, apiserverMetric(ctx, e.c, "apiserver_longrunning_requests", add("WATCH"))
}

// probeRevision makes an opted-in ConfigMap and a Deployment of 0 replicas reading it, waits for the
// Deployment's ReplicaSet and returns the ConfigMap's name and the ReplicaSet's uid.
func (e env) probeRevision(ctx context.Context, name string) (string, string, error) {
	cm, err := e.c.CreateConfigRevision(ctx, probeNamespace, name+"-cm", map[string]string{"probe": name}, true)
	if err != nil {
		return "", "", err
	}
	zero := int32(0)
	t := framework.PodTemplate(name, []string{cm.Name}, nil)
	if _, err := e.c.Kube.AppsV1().Deployments(probeNamespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
	}, metav1.CreateOptions{}); err != nil { // one already there would be attached already
		return "", "", err
	}
	var uid string
	err = framework.Eventually(ctx, 15*time.Minute, "the probe's ReplicaSet", func(ctx context.Context) (bool, string, error) {
		list, err := e.c.Kube.AppsV1().ReplicaSets(probeNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(t.Labels).String()})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprint(err), nil
		}
		uid = string(list.Items[0].UID)
		return true, "", nil
	})
	return cm.Name, uid, err
}

// restartWithPending stops nothing (ours is not running between the scenarios) and prepares what a
// controller finds after being down during deploys: n Deployments moved to a new opted-in ConfigMap
// (n new ReplicaSets to attach) and n in-use opted-in ConfigMaps deleted (held by our finalizer, which
// must stay while their pods use them). Once the Deployment controller has made every new ReplicaSet
// (through kube-controller-manager's client limit of 20 requests a second that takes a while, and is
// not ours to time), it starts ours and measures the time until every pending attach is done, and
// counts every finalizer of ours removed meanwhile.
func (e env) restartWithPending(ctx context.Context, g *grower, n int) error {
	if n > g.tenants {
		n = g.tenants
	}
	fmt.Printf("\nrestart at %d Pods: %d Deployments moved to new config and %d ConfigMaps in use deleted while the controller is down\n", g.pods(), n, n)
	mw, err := newMetaWatch(ctx, e, api.RevisionedLabel+"="+api.RevisionedValue)
	if err != nil {
		return err
	}
	defer mw.stop()
	pending := make([]string, n)
	if err := parallel(n, 32, func(i int) error {
		ns := tenantName(i)
		app := fmt.Sprintf("web-%d", 0)
		name := fmt.Sprintf("%s-config-v%d", app, appRevisions+1)
		if _, err := g.kube.CoreV1().ConfigMaps(ns).Create(ctx, revisionedConfig(ns, name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		pending[i] = ns + "/" + name
		d, err := g.kube.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template = appTemplate(app, name, app+"-secret")
		if _, err := g.kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		// web-1's current config: its pods read it.
		return g.kube.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("web-1-config-v%d", appRevisions), metav1.DeleteOptions{})
	}); err != nil {
		return err
	}
	made := time.Now()
	if err := g.waitRevisions(ctx, n, appRevisions+1); err != nil {
		return err
	}
	fmt.Printf("  the %d new ReplicaSets were made in %s\n", n, time.Since(made).Round(time.Second))
	mw.resetRemovals()
	start := time.Now()
	p, err := e.startOurs(ctx)
	if p != nil {
		defer p.Stop()
	}
	if err != nil {
		return err
	}
	synced := time.Since(start)
	err = framework.Eventually(ctx, 30*time.Minute, "every pending attach", func(context.Context) (bool, string, error) {
		done := mw.ownedCount(pending)
		return done == n, fmt.Sprintf("%d/%d attached", done, n), nil
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	time.Sleep(5 * time.Second) // what protection would do late shows in these seconds too
	removed, held := mw.removals(), mw.heldCount()
	fmt.Printf("restart: synced after %s; every pending attach (%d) done %s after start; our finalizers removed meanwhile: %d; "+
		"in-use ConfigMaps being deleted and still held: %d of %d\n", synced.Round(time.Millisecond), n, took.Round(time.Millisecond), removed, held, n)
	return nil
}

// waitRevisions waits until web-0 of the first n tenants has a ReplicaSet reading its config revision
// k: the revision its Deployment was just moved to.
func (g *grower) waitRevisions(ctx context.Context, n, k int) error {
	app := fmt.Sprintf("web-%d", 0)
	want := fmt.Sprintf("%s-config-v%d", app, k)
	return framework.Eventually(ctx, 30*time.Minute, "the pending ReplicaSets", func(ctx context.Context) (bool, string, error) {
		made := 0
		for i := range n {
			list, err := g.kube.AppsV1().ReplicaSets(tenantName(i)).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, rs := range list.Items {
				if v := rs.Spec.Template.Spec.Volumes; len(v) > 0 && v[0].Projected != nil && v[0].Projected.Sources[0].ConfigMap.Name == want {
					made++
					break
				}
			}
		}
		if made < n {
			time.Sleep(2 * time.Second) // n LISTs a round: not at Eventually's pace
		}
		return made == n, fmt.Sprintf("%d of %d", made, n), nil
	})
}

// metaWatch follows opted-in ConfigMaps of every namespace, metadata only: which have owners, and
// every removal of our finalizer.
type metaWatch struct {
	mu       sync.Mutex
	owned    map[string]bool
	held     map[string]bool
	removed  int
	stopChan chan struct{}
}

func newMetaWatch(ctx context.Context, e env, selector string) (*metaWatch, error) {
	w := &metaWatch{owned: map[string]bool{}, held: map[string]bool{}, stopChan: make(chan struct{})}
	f := metadatainformer.NewFilteredSharedInformerFactory(e.meta, 0, metav1.NamespaceAll, func(lo *metav1.ListOptions) { lo.LabelSelector = selector })
	inf := f.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps")).Informer()
	record := func(old, cur *metav1.PartialObjectMetadata) {
		key := cur.Namespace + "/" + cur.Name
		w.mu.Lock()
		defer w.mu.Unlock()
		w.owned[key] = len(cur.OwnerReferences) > 0
		w.held[key] = cur.DeletionTimestamp != nil && api.HasFinalizer(cur.Finalizers, api.InUseFinalizer)
		if old != nil && api.HasFinalizer(old.Finalizers, api.InUseFinalizer) && !api.HasFinalizer(cur.Finalizers, api.InUseFinalizer) {
			w.removed++
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				record(nil, m)
			}
		},
		UpdateFunc: func(o, n any) {
			om, ok1 := o.(*metav1.PartialObjectMetadata)
			nm, ok2 := n.(*metav1.PartialObjectMetadata)
			if ok1 && ok2 {
				record(om, nm)
			}
		},
		DeleteFunc: func(obj any) {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
				w.mu.Lock()
				w.removed++ // gone while it still carried it: it was removed on the way
				w.mu.Unlock()
			}
		},
	})
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-w.stopChan:
		}
		close(stop)
	}()
	f.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return nil, fmt.Errorf("watching opted-in ConfigMaps: %w", ctx.Err())
	}
	return w, nil
}

func (w *metaWatch) stop() { close(w.stopChan) }

func (w *metaWatch) resetRemovals() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removed = 0
}

func (w *metaWatch) removals() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.removed
}

func (w *metaWatch) ownedCount(keys []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, k := range keys {
		if w.owned[k] {
			n++
		}
	}
	return n
}

func (w *metaWatch) heldCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, h := range w.held {
		if h {
			n++
		}
	}
	return n
}

// grower adds tenants and nodes to the cluster.
type grower struct {
	e       env
	kube    kubernetes.Interface
	tenants int
	nodes   []string
	daemons bool
}

// pods is how many Pods the cluster holds by construction: the bench's, those the StatefulSet and
// Job controllers make, and one per node per DaemonSet.
func (g *grower) pods() int {
	return g.tenants*podsPerTenant + daemonSets*len(g.nodes)
}

// adopt takes what an earlier run built: its tenants (numbered from 0, the namespaces of whole ones:
// a tenant's namespace is its first object, so the last may be partial and is counted out to be
// completed by growTo), its nodes and its DaemonSets.
func (g *grower) adopt(ctx context.Context) error {
	namespaces, err := g.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, ns := range namespaces.Items {
		have[ns.Name] = true
	}
	for have[tenantName(g.tenants)] {
		g.tenants++
	}
	if g.tenants > 0 {
		g.tenants-- // completed again by growTo: every create tolerates what exists
	}
	nodes, err := g.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, scaleNodePrefix) {
			g.nodes = append(g.nodes, n.Name)
		}
	}
	sort.Slice(g.nodes, func(i, j int) bool { return nodeIndex(g.nodes[i]) < nodeIndex(g.nodes[j]) })
	for i, n := range g.nodes {
		if nodeIndex(n) != i {
			return fmt.Errorf("the cluster to resume has no node %s%d: build it anew (without -scale-resume)", scaleNodePrefix, i)
		}
	}
	ds, err := g.kube.AppsV1().DaemonSets(scaleSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	g.daemons = len(ds.Items) == daemonSets
	return nil
}

func nodeIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, scaleNodePrefix))
	if err != nil {
		return -1
	}
	return i
}

func tenantName(i int) string { return fmt.Sprintf("%s%05d", tenantPrefix, i) }

// growTo adds tenants (and the nodes they need) until the cluster holds at least target Pods, then
// waits until every Pod exists.
func (g *grower) growTo(ctx context.Context, target int) error {
	n := g.tenants
	for {
		nodes := (n*boundPerTenant + boundPerNode - 1) / boundPerNode
		if n*podsPerTenant+daemonSets*nodes >= target {
			break
		}
		n++
	}
	nodes := (n*boundPerTenant + boundPerNode - 1) / boundPerNode
	if nodes > len(g.nodes) {
		added, err := g.e.createNodes(ctx, scaleNodePrefix, len(g.nodes), nodes)
		if err != nil {
			return err
		}
		g.nodes = append(g.nodes, added...)
	}
	if !g.daemons {
		if err := g.createDaemonSets(ctx); err != nil {
			return err
		}
		g.daemons = true
	}
	first := g.tenants
	fmt.Printf("  adding tenants %d..%d and nodes up to %d\n", first, n-1, nodes)
	if err := g.createTenants(ctx, first, n); err != nil {
		return err
	}
	g.tenants = n
	return g.waitPods(ctx)
}

// createTenants builds tenants [from, to) phase by phase, each phase in parallel across tenants.
func (g *grower) createTenants(ctx context.Context, from, to int) error {
	count := to - from
	const width = 64
	phases := []struct {
		what string
		fn   func(ctx context.Context, i int) error
	}{
		{"namespaces and config", g.createConfig},
		{"workloads", g.createWorkloads},
		{"old ReplicaSets and Jobs", g.createHistory},
		{"pods", g.createPods},
	}
	for _, ph := range phases {
		start := time.Now()
		if err := parallel(count, width, func(i int) error { return ph.fn(ctx, from+i) }); err != nil {
			return fmt.Errorf("%s: %w", ph.what, err)
		}
		fmt.Printf("    %s of %d tenants: %s\n", ph.what, count, time.Since(start).Round(time.Second))
	}
	return nil
}

func revisionedConfig(ns, name string) *corev1.ConfigMap {
	yes := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}},
		Data:       map[string]string{"config.yaml": configPayload(name)},
		Immutable:  &yes,
	}
}

// configPayload is ~1 KiB of settings, different for each object.
func configPayload(name string) string {
	var b strings.Builder
	for i := range 24 {
		fmt.Fprintf(&b, "setting%02d: %s-value-%02d\n", i, name, i)
	}
	return b.String()
}

// appTemplate reads its ConfigMap through the projected volume (as the original chart), its Secret
// and the tenant's settings through envFrom.
func appTemplate(app, configMap, secret string) corev1.PodTemplateSpec {
	t := framework.PodTemplate(app, []string{configMap}, []string{secret})
	t.Spec.Containers[0].EnvFrom = append(t.Spec.Containers[0].EnvFrom, corev1.EnvFromSource{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}})
	return t
}

// app describes one of a tenant's Deployments and Rollouts.
type app struct {
	name    string
	rollout bool
	optedIn bool
}

func tenantApps() []app {
	var out []app
	for i := range tenantDeployments {
		out = append(out, app{name: fmt.Sprintf("web-%d", i), optedIn: i < optedDeployments})
	}
	for i := range tenantRollouts {
		out = append(out, app{name: fmt.Sprintf("canary-%d", i), rollout: true, optedIn: true})
	}
	return out
}

// configOf is the ConfigMap an app's revision k (1-based) reads.
func (a app) configOf(k int) string {
	if !a.optedIn {
		return a.name + "-config"
	}
	return fmt.Sprintf("%s-config-v%d", a.name, k)
}

func (g *grower) createConfig(ctx context.Context, i int) error {
	ns := tenantName(i)
	if err := g.e.c.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	var cms []*corev1.ConfigMap
	var secrets []*corev1.Secret
	plain := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"config.yaml": configPayload(name)}}
	}
	secret := func(name string, optedIn bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, StringData: map[string]string{"password": name + "-secret-value"}}
		if optedIn {
			s.Labels[api.RevisionedLabel] = api.RevisionedValue
		}
		return s
	}
	cms = append(cms, plain("settings"), plain("db-config"))
	secrets = append(secrets, secret("db-secret", false))
	for _, a := range tenantApps() {
		secrets = append(secrets, secret(a.name+"-secret", a.optedIn))
		if !a.optedIn {
			cms = append(cms, plain(a.configOf(0)))
			continue
		}
		for k := 1; k <= appRevisions; k++ {
			cms = append(cms, revisionedConfig(ns, a.configOf(k)))
		}
	}
	for k := 1; k <= cronJobRuns; k++ {
		cms = append(cms, revisionedConfig(ns, fmt.Sprintf("report-config-v%d", k)))
	}
	for _, cm := range cms {
		if _, err := g.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for _, s := range secrets {
		if _, err := g.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (g *grower) createWorkloads(ctx context.Context, i int) error {
	ns := tenantName(i)
	replicas := int32(appReplicas)
	for _, a := range tenantApps() {
		t := appTemplate(a.name, a.configOf(appRevisions), a.name+"-secret")
		if a.rollout {
			if err := ignoreExists(g.e.c.CreateRollout(ctx, ns, a.name, framework.RolloutSpec{Replicas: replicas, Template: &t})); err != nil {
				return err
			}
			continue
		}
		if _, err := g.kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: a.name},
			Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
		}, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
	}
	sts := int32(stsReplicas)
	t := appTemplate("db", "db-config", "db-secret")
	if _, err := g.kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &sts, ServiceName: "db", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
	}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	jt := appTemplate("report", fmt.Sprintf("report-config-v%d", cronJobRuns), "db-secret")
	jt.Spec.RestartPolicy = corev1.RestartPolicyNever
	_, err := g.kube.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "report"},
		// Once a year, on the 1st of January: it never runs during the bench; its Jobs are made below.
		Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: jt}}},
	}, metav1.CreateOptions{})
	return ignoreExists(err)
}

// podTemplateHash names an old revision the way the controllers' hash labels look.
func podTemplateHash(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}

// currentReplicaSets waits until every app of the tenant has the ReplicaSet its controller (the
// Deployment controller, Argo Rollouts) made for its template, and returns them by app.
func (g *grower) currentReplicaSets(ctx context.Context, ns string) (map[string]*appsv1.ReplicaSet, error) {
	out := map[string]*appsv1.ReplicaSet{}
	apps := tenantApps()
	deadline := time.Now().Add(30 * time.Minute)
	for {
		// Every 2 s, not Eventually's 100 ms: 64 tenants wait at once, and their LISTs would load the
		// API server that is creating the ReplicaSets.
		list, err := g.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			list = &appsv1.ReplicaSetList{}
		}
		for i := range list.Items {
			rs := &list.Items[i]
			owner := metav1.GetControllerOf(rs)
			if owner == nil || (owner.Kind != "Deployment" && owner.Kind != "Rollout") {
				continue
			}
			if _, old := rs.Labels["bench-old-revision"]; !old {
				out[owner.Name] = rs
			}
		}
		if len(out) == len(apps) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %d of %d ReplicaSets after 30 minutes (last error: %v)", ns, len(out), len(apps), err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// createHistory adds the old ReplicaSets (0 replicas, owned by their Deployment or Rollout, with the
// revision annotation and hash label their controller would have written) and the CronJob's Jobs.
func (g *grower) createHistory(ctx context.Context, i int) error {
	ns := tenantName(i)
	current, err := g.currentReplicaSets(ctx, ns)
	if err != nil {
		return err
	}
	zero := int32(0)
	for _, a := range tenantApps() {
		cur := current[a.name]
		owner := metav1.GetControllerOf(cur)
		hashLabel, revAnnotation := appsv1.DefaultDeploymentUniqueLabelKey, "deployment.kubernetes.io/revision"
		if a.rollout {
			hashLabel, revAnnotation = "rollouts-pod-template-hash", "rollout.argoproj.io/revision"
		}
		for k := 1; k < appRevisions; k++ {
			hash := podTemplateHash(fmt.Sprintf("%s/%s/%d", ns, a.name, k))
			t := appTemplate(a.name, a.configOf(k), a.name+"-secret")
			t.Labels[hashLabel] = hash
			no := false
			if _, err := g.kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: a.name + "-" + hash, Labels: map[string]string{"app": a.name, hashLabel: hash, "bench-old-revision": "true"},
					Annotations:     map[string]string{revAnnotation: strconv.Itoa(k)},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID, Controller: owner.Controller, BlockOwnerDeletion: &no}}},
				Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
			}, metav1.CreateOptions{}); ignoreExists(err) != nil {
				return err
			}
		}
	}
	cron, err := g.kube.BatchV1().CronJobs(ns).Get(ctx, "report", metav1.GetOptions{})
	if err != nil {
		return err
	}
	yes := true
	for k := 1; k <= cronJobRuns; k++ {
		jt := appTemplate("report", fmt.Sprintf("report-config-v%d", k), "db-secret")
		jt.Spec.RestartPolicy = corev1.RestartPolicyNever
		if _, err := g.kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("report-%d", k),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cron.Name, UID: cron.UID, Controller: &yes}}},
			Spec: batchv1.JobSpec{Template: jt},
		}, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
	}
	return nil
}

// createPods binds the current ReplicaSets' pods to the bench's nodes, then sets each ReplicaSet's
// status as the ReplicaSet controller would once they run.
func (g *grower) createPods(ctx context.Context, i int) error {
	ns := tenantName(i)
	current, err := g.currentReplicaSets(ctx, ns)
	if err != nil {
		return err
	}
	yes := true
	slot := i * boundPerTenant // the tenant's pods fill nodes in order
	for _, a := range tenantApps() {
		rs := current[a.name]
		for r := range appReplicas {
			spec := *rs.Spec.Template.Spec.DeepCopy()
			spec.NodeName = g.nodes[slot/boundPerNode]
			slot++
			_, err := g.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", rs.Name, podTemplateHash(fmt.Sprint(r))),
					Labels:          rs.Spec.Template.Labels,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
				Spec: spec,
			}, metav1.CreateOptions{})
			if ignoreExists(err) != nil {
				return err
			}
		}
		rs.Status = appsv1.ReplicaSetStatus{Replicas: appReplicas, FullyLabeledReplicas: appReplicas, ReadyReplicas: appReplicas,
			AvailableReplicas: appReplicas, ObservedGeneration: rs.Generation}
		if _, err := g.kube.AppsV1().ReplicaSets(ns).UpdateStatus(ctx, rs, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// createDaemonSets makes the cluster's DaemonSets (a log shipper and a node agent, as every cluster
// runs): their controller puts a pod on every node.
func (g *grower) createDaemonSets(ctx context.Context) error {
	for i := range daemonSets {
		name := fmt.Sprintf("node-agent-%d", i)
		if _, err := g.kube.CoreV1().ConfigMaps(scaleSystem).Create(ctx, revisionedConfig(scaleSystem, name+"-config-v1"), metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		if _, err := g.kube.CoreV1().ConfigMaps(scaleSystem).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		if _, err := g.kube.CoreV1().Secrets(scaleSystem).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-secret"}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		t := appTemplate(name, name+"-config-v1", name+"-secret")
		if _, err := g.kube.AppsV1().DaemonSets(scaleSystem).Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
		}, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
	}
	return nil
}

// waitPods waits until the cluster holds every Pod it should (the controllers' pods included),
// counted through the metadata API page by page, every 10 s (a count of 150,000 Pods is itself a load).
func (g *grower) waitPods(ctx context.Context) error {
	want := g.pods()
	deadline := time.Now().Add(30 * time.Minute)
	for {
		n, err := g.countPods(ctx)
		if err == nil && n >= want {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Pods after 30 minutes (last error: %v)", n, want, err)
		}
		fmt.Printf("    %d/%d Pods (%v)\n", n, want, err)
		time.Sleep(10 * time.Second)
	}
}

func (g *grower) countPods(ctx context.Context) (int, error) {
	pods := g.e.meta.Resource(corev1.SchemeGroupVersion.WithResource("pods"))
	n, cont := 0, ""
	for {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1000, Continue: cont})
		if err != nil {
			return 0, err
		}
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Namespace, "bench-") { // the storms' pods come and go
				n++
			}
		}
		if cont = list.Continue; cont == "" {
			return n, nil
		}
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
