// Command bench measures configmap-attacher on the local control plane and prints the figures recorded
// in docs/benchmarks.md. It is a program, not a test: nothing here asserts a duration. Every comparison
// it prints is between processes measured side by side in the same run (a ratio), never against a
// number from another run.
//
//	go run ./test/bench job          # Job wall time; re-runs side by side with the original tool
//	go run ./test/bench controller   # 500 Rollouts changed at once: latency beside the floor and a peer
//	go run ./test/bench memory       # peak RSS with 2,000 and 10,000 ConfigMaps of 64 KiB beside the
//	                                 # peers, then with 10,000 Pods as well
//	go run ./test/bench webhook      # 500 pods created at once without pinning, with the webhook, with the admission policies
//	go run ./test/bench reloader     # 100 workloads' ConfigMaps edited at once: ours beside Reloader
//	go run ./test/bench scale        # one cluster grown to 1,000, 10,000, 50,000, 150,000 Pods: RSS beside
//	                                 # kube-controller-manager and the peers, start, storm, restart
//	go run ./test/bench policy-scale # the scale mix at 1,000 and 50,000 Pods: pod CREATE latency and the API
//	                                 # server's and etcd's RSS with the admission policies and tables ÷ without
//	go run ./test/bench uninstall    # 5,000 opted-in ConfigMaps deleted at once in a namespace of 5,000
//	                                 # Pods: RSS while protection releases them (beside -baseline-bin)
//
// The peers (the original configmap-attacher, configmap-rs-operator, Reloader) are built by
// `hack/tools/build.sh peers` into _output/tools/bin; a scenario leaves out those not built.
//
// Each scenario's output is also written to docs/benchmarks/<scenario>.txt (-out), overwritten by the
// next run: the raw figures behind docs/benchmarks.md's section for it.
//
// It starts a local cluster named "bench" (deleted afterwards) unless -kubeconfig names one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type env struct {
	c                  *framework.Cluster
	meta               metadata.Interface
	root               string
	bin                framework.Binary
	floor              string // the floor watcher's binary
	peers              peers
	controllerFlags    []string
	controllerLog      string
	controllerLogLevel string
	breakdown          bool
	triggerObjects     triggerObjects // memory: unlabelled objects and Reloader-annotated workloads
	// stormAllNamespaces makes the controller scenario's controller watch every namespace.
	stormAllNamespaces bool
	// baseline is another build of our controller measured beside it (memory and scale scenarios).
	baseline framework.Binary
	// controllerEnv is added to the environment of our controller (and the baseline) in the memory
	// and scale scenarios, e.g. GOMEMLIMIT.
	controllerEnv []string
	// profiles: scale, a directory for our controller's heap profile at each measurement.
	profiles string
	// cpuProfiles: controller and scale, a directory for our controller's CPU profile and execution
	// trace during each storm, and (scale) its CPU profile from each of its starts until it stops.
	cpuProfiles string
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "existing cluster to use (default: start a local one)")
	rollouts := fs.Int("rollouts", 500, "controller: number of Rollouts")
	runs := fs.Int("runs", 10, "job: runs of each binary in the side-by-side comparison")
	otherRS := fs.Int("replicasets", 500, "job: other ReplicaSets in the namespace for the second comparison (0: none)")
	configMaps := fs.String("configmaps", "2000,10000", "memory: numbers of ConfigMaps to measure at, ascending, comma-separated")
	pods := fs.Int("pods", 10000, "memory: Pods to add for the last measurement of our controller (0: none)")
	size := fs.Int("size", 64*1024, "memory: bytes of data per ConfigMap")
	unlabelled := fs.Int("unlabelled", 0, "memory: unlabelled ConfigMaps (of -size) and Helm release Secrets (of half) to add after the labelled ones; "+
		"with it or -annotated, ours also runs with -pinning -reloader-annotations (the widened config cache) and with -pinning alone")
	annotated := fs.Int("annotated", 0, "memory: Deployments (0 replicas) with reloader.stakater.com/auto to add last, each reading one unlabelled ConfigMap")
	withPeers := fs.Bool("peers", true, "run the peers built by hack/tools/build.sh peers beside ours")
	breakdown := fs.Bool("breakdown", false, "controller: split each latency of ours and the floor at the moment its PATCH returned (their logs)")
	cpuProfiles := fs.String("cpu-profiles", "", "controller, scale: keep our controller's CPU profile and execution trace of each storm, and at scale its CPU profile from each of its starts, in this directory")
	keep := fs.Bool("keep", false, "keep the cluster and namespaces afterwards")
	stormRounds := fs.Int("storm-rounds", 1, "controller: storms, each in a fresh namespace")
	alternate := fs.String("storm-alternate", "", "controller: each round runs the storm twice, ours as built and ours with these flags too, space-separated (e.g. \"-workers=32\")")
	controllerLog := fs.String("controller-log", "", "controller scenario: write the controller's logs to this file")
	controllerLogLevel := fs.String("controller-log-level", "warn", "LOG_LEVEL of the controller")
	webhookPods := fs.Int("webhook-pods", 500, "webhook: pods created at once in each of the two namespaces")
	inFlight := fs.Int("in-flight", 64, "webhook: CREATE requests in flight at once")
	rounds := fs.Int("rounds", 5, "webhook: storms, each with fresh pods")
	workloads := fs.Int("workloads", 100, "reloader: workloads per tool (half Deployments, half Rollouts)")
	scaleSteps := fs.String("scale-steps", "1000,10000,50000,100000,150000", "scale: Pod counts to grow the cluster to, ascending, comma-separated")
	stormRollouts := fs.Int("scale-storm-rollouts", 100, "scale: Rollouts changed at once in the storm at each step")
	pending := fs.Int("scale-pending", 200, "scale: revisions left to attach (and in-use ConfigMaps deleted) while the controller is down, at the largest step")
	scaleOut := fs.String("scale-out", "docs/benchmarks", "scale: directory for scale.md and scale-rss.svg (relative to the repository)")
	rawOut := fs.String("out", "docs/benchmarks", "directory for <scenario>.txt, a copy of what the scenario prints, overwritten by each run (relative to the repository; empty: none)")
	budget := fs.Duration("scale-budget", time.Hour, "scale: no step starts that would end the run after this")
	peersMax := fs.Int("scale-peers-max", 0, "scale: run the peers and the baseline build only up to this many Pods (0: at every size)")
	baselineBin := fs.String("baseline-bin", "", "memory, scale, uninstall: another build of configmap-attacher (e.g. main's) to measure beside ours")
	controllerEnv := fs.String("controller-env", "", "memory, scale: environment of our controller (and the baseline), space-separated (e.g. \"GOMEMLIMIT=200MiB\")")
	resume := fs.Bool("scale-resume", false, "scale: measure the scale cluster an earlier run left (stopped or kept with -keep) instead of building one from empty: "+
		"its steps start from the Pods it holds (with -keep, it is left for the next run)")
	watchVariants := fs.String("scale-watch-variant", "", "scale: also run ours through the watch (and anew) once per variant, comma-separated; a variant is environment (NAME=VALUE) and flags (-flag=value), space-separated, "+
		"e.g. the sizing table's soft limit for the largest step and Go's default GC target (\"GOMEMLIMIT=224MiB,-gc-percent=100\")")
	profiles := fs.String("scale-profiles", "", "scale: keep our controller's heap profile at each measurement in this directory")
	controllerFlags := fs.String("controller-flags", "", "extra flags for the controller, space-separated (e.g. \"-workers=16 -kube-api-qps=300\")")
	policySteps := fs.String("policy-steps", "1000,50000", "policy-scale: Pod counts to grow the cluster to, ascending, comma-separated")
	policyProbes := fs.Int("policy-probes", 1000, "policy-scale: pods created one at a time for each latency figure")
	uninstallObjects := fs.Int("uninstall-objects", 5000, "uninstall: opted-in ConfigMaps deleted at once")
	uninstallPods := fs.Int("uninstall-pods", 5000, "uninstall: Pods in their namespace, none reading them")
	uninstallRounds := fs.Int("uninstall-rounds", 1, "uninstall: rounds, each build once per round")
	uninstallTimeout := fs.Duration("uninstall-timeout", 20*time.Minute, "uninstall: how long a build may take to release them (the rest is counted, then released by the bench)")
	if len(args) == 0 {
		return fmt.Errorf("usage: bench job|controller|memory|webhook|reloader|scale|policy-scale|uninstall [flags], or bench scale-plot [-scale-out DIR] scale.md...")
	}
	scenario := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	counts, err := ascending("-configmaps", *configMaps)
	if err != nil {
		return err
	}
	steps, err := ascending("-scale-steps", *scaleSteps)
	if err != nil {
		return err
	}
	pSteps, err := ascending("-policy-steps", *policySteps)
	if err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if scenario == "scale-plot" {
		// No cluster: the curve of the scale.md files of runs that grew one cluster in turns.
		return scalePlot(inRepo(root, *scaleOut), fs.Args())
	}
	name := "bench"
	if *kubeconfig == "" {
		// Room for the pods of 500 Rollouts during a canary.
		os.Setenv("CLUSTER_NODES", "12")
		if scenario == "policy-scale" {
			// The scale scenario's cluster tuning, a cluster of its own.
			name = "policy-scale"
			os.Setenv("CLUSTER_NODES", "1")
			os.Setenv("CLUSTER_KWOKCTL_CONFIG", filepath.Join(root, "test/bench/scale-kwokctl.yaml"))
			os.Setenv("ROLLOUTS_CONTROLLER_ARGS", "--qps 300 --burst 600 --rollout-threads 20")
			if err := framework.DeleteCluster(ctx, root, name, os.Stderr); err != nil {
				return fmt.Errorf("deleting the policy-scale cluster of an earlier run: %w", err)
			}
		}
		if scenario == "scale" {
			// A cluster of its own, tuned for size (test/bench/scale-kwokctl.yaml); it adds its nodes.
			name = "scale"
			os.Setenv("CLUSTER_NODES", "1")
			os.Setenv("CLUSTER_KWOKCTL_CONFIG", filepath.Join(root, "test/bench/scale-kwokctl.yaml"))
			// Argo Rollouts' client limit (40 requests a second) and 10 workers would bound the build
			// as kube-controller-manager's would (scale-kwokctl.yaml).
			os.Setenv("ROLLOUTS_CONTROLLER_ARGS", "--qps 300 --burst 600 --rollout-threads 20")
			// Its steps count from an empty cluster: what an interrupted run left (up to 150,000
			// Pods, and nodes whose TTL annotation kube-controller-manager now owns) goes first,
			// unless the run is to resume on it (building 150,000 Pods takes two hours here).
			if *resume {
				fmt.Fprintln(os.Stderr, "-scale-resume: keeping the scale cluster an earlier run left")
			} else if err := framework.DeleteCluster(ctx, root, name, os.Stderr); err != nil {
				return fmt.Errorf("deleting the scale cluster of an earlier run: %w", err)
			}
		}
	}
	c, err := framework.Start(ctx, framework.StartOptions{RepoRoot: root, Kubeconfig: *kubeconfig, Name: name, Progress: os.Stderr})
	if err != nil {
		return err
	}
	if c.Owned() && !*keep {
		defer func() { _ = c.Stop(context.Background(), os.Stderr) }()
	}
	bin, cleanup, err := framework.BuildBinary(ctx, root)
	if err != nil {
		return err
	}
	defer cleanup()
	floor, cleanupFloor, err := buildFloor(ctx, root)
	if err != nil {
		return err
	}
	defer cleanupFloor()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	e := env{c: c, meta: meta, root: root, bin: framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}, floor: floor,
		controllerFlags: strings.Fields(*controllerFlags), controllerEnv: strings.Fields(*controllerEnv), controllerLog: *controllerLog, controllerLogLevel: *controllerLogLevel, breakdown: *breakdown,
		triggerObjects: triggerObjects{unlabelled: *unlabelled, annotated: *annotated}, profiles: *profiles, cpuProfiles: *cpuProfiles}
	if *withPeers {
		e.peers = findPeers(root)
	}
	if *baselineBin != "" {
		e.baseline = framework.Binary{Path: *baselineBin, Kubeconfig: c.Kubeconfig}
	}
	if *rawOut != "" && slices.Contains(scenarios, scenario) {
		restore, err := teeStdout(filepath.Join(inRepo(root, *rawOut), scenario+".txt"))
		if err != nil {
			return err
		}
		defer func() { _ = restore() }()
	}
	fmt.Printf("commit %s, %s, %d cores\n", commit(root), time.Now().Format("2006-01-02"), numCPU())
	start := time.Now()
	defer func() { fmt.Printf("\n(%s scenario took %s)\n", scenario, time.Since(start).Round(time.Second)) }()
	switch scenario {
	case "job":
		return e.job(ctx, *runs, *otherRS, *keep)
	case "controller":
		return e.controllerRounds(ctx, *rollouts, *stormRounds, strings.Fields(*alternate), *keep)
	case "memory":
		return e.memory(ctx, counts, *pods, *size, *keep)
	case "webhook":
		_, err := e.webhook(ctx, *webhookPods, *inFlight, *rounds, *keep)
		return err
	case "reloader":
		return e.againstReloader(ctx, *workloads, *keep)
	case "policy-scale":
		return e.policyScale(ctx, pSteps, *policyProbes)
	case "uninstall":
		return e.uninstall(ctx, *uninstallObjects, *uninstallPods, *uninstallRounds, *uninstallTimeout, *keep)
	case "scale":
		variants, err := parseWatchVariants(*watchVariants)
		if err != nil {
			return err
		}
		return e.scale(ctx, scaleOptions{watchVariants: variants, steps: steps, stormRollouts: *stormRollouts, webhookPods: *webhookPods, inFlight: *inFlight,
			pending: *pending, outDir: inRepo(root, *scaleOut), budget: *budget, peersMax: *peersMax, keep: *keep, resume: *resume})
	}
	return fmt.Errorf("unknown scenario %q: job, controller, memory, webhook, reloader, scale, policy-scale or uninstall", scenario)
}

// inRepo makes a relative path relative to the repository.
func inRepo(root, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(root, path)
}

// ascending parses a comma-separated list of ascending positive numbers.
func ascending(flag, v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("%s %q: want ascending positive numbers", flag, v)
		}
		out = append(out, n)
	}
	return out, nil
}
