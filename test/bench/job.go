package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// job: the wall time of a Job run as a deploy pipeline sees it (process start to exit): first the
// attach of 3 ConfigMaps to 5 fresh Rollouts, then re-runs on a Rollout whose 3 ConfigMaps are already
// attached, alternating with the original tool on the very same objects: in a namespace holding only
// the benchmark's Rollouts, then again with otherRS more ReplicaSets in it.
func (e env) job(ctx context.Context, runs, otherRS int, keep bool) error {
	const ns, first = "bench-job", 5
	if err := e.freshNamespace(ctx, ns, keep); err != nil {
		return err
	}
	var names [first + 1][]string
	for i := range first + 1 {
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
	ours := func(i int) runner {
		return runner{path: e.bin.Path, env: []string{"IS_IN_CLUSTER=false", "KUBECONFIG=" + e.c.Kubeconfig, "VERSION=bench"},
			args: []string{"-rollout", fmt.Sprintf("app%d", i), "-namespace", ns, "-configmaps", strings.Join(names[i], ",")}}
	}
	var times []time.Duration
	for i := range first {
		r, err := ours(i).run(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("first attach, run %d: %s\n", i+1, r.wall.Round(time.Millisecond))
		times = append(times, r.wall)
	}
	fmt.Printf("\nJob attach of 3 ConfigMaps: median %s (min %s, max %s) over %d runs\n",
		median(times).Round(time.Millisecond), minOf(times).Round(time.Millisecond), maxOf(times).Round(time.Millisecond), first)
	fmt.Println("(the first run includes waiting for the Rollout's first ReplicaSet to appear)")

	if e.peers.original == "" {
		return nil
	}
	home, cleanup, err := originalHome(e.c.Kubeconfig)
	if err != nil {
		return err
	}
	defer cleanup()
	original := runner{path: e.peers.original, env: []string{"HOME=" + home, "IS_IN_CLUSTER=false", "VERSION=bench"},
		args: ours(first).args}
	// Ours attaches, then the original rewrites the list to its own reference (its JSON merge patch
	// replaces ownerReferences: controller and blockOwnerDeletion true). From then on both find every
	// object attached to the current ReplicaSet and write nothing: ours matches by uid, the original
	// compares the whole list.
	for _, r := range []runner{ours(first), original} {
		if _, err := r.run(ctx); err != nil {
			return err
		}
	}
	levels := []int{0}
	if otherRS > 0 {
		levels = append(levels, otherRS)
	}
	for _, extra := range levels {
		if extra > 0 {
			if err := e.createReplicaSets(ctx, ns, extra); err != nil {
				return err
			}
			time.Sleep(5 * time.Second) // kube-controller-manager is done looking at them
		}
		if err := e.compareJobs(ctx, ns, names[first], ours(first), original, runs, extra); err != nil {
			return err
		}
	}
	return nil
}

// compareJobs runs ours and the original alternately on objects both find attached and prints the
// medians and their ratio; it fails if either wrote anything.
func (e env) compareJobs(ctx context.Context, ns string, objects []string, ours, original runner, runs, otherRS int) error {
	before, err := e.resourceVersions(ctx, ns, objects)
	if err != nil {
		return err
	}
	for _, r := range []runner{ours, original} { // warm-up, not counted
		if _, err := r.run(ctx); err != nil {
			return err
		}
	}
	var oursRuns, origRuns []result
	for i := range runs {
		order := []*[]result{&oursRuns, &origRuns}
		rs := []runner{ours, original}
		if i%2 == 1 { // alternate who goes first
			order[0], order[1], rs[0], rs[1] = order[1], order[0], rs[1], rs[0]
		}
		for k, r := range rs {
			res, err := r.run(ctx)
			if err != nil {
				return err
			}
			*order[k] = append(*order[k], res)
		}
	}
	after, err := e.resourceVersions(ctx, ns, objects)
	if err != nil {
		return err
	}
	writes := "none (resourceVersions unchanged)"
	if strings.Join(before, ",") != strings.Join(after, ",") {
		return fmt.Errorf("a re-run wrote: resourceVersions %v -> %v", before, after)
	}
	walls := func(rs []result) []time.Duration { return pick(rs, func(r result) time.Duration { return r.wall }) }
	cpus := func(rs []result) []time.Duration { return pick(rs, func(r result) time.Duration { return r.cpu }) }
	fmt.Printf("\nRe-run on a Rollout with 3 attached ConfigMaps, %d other ReplicaSets in the namespace, %d runs each, alternating (writes: %s)\n",
		otherRS, runs, writes)
	fmt.Printf("%-22s %10s %10s %10s %12s\n", "", "median", "min", "max", "CPU median")
	for _, row := range []struct {
		name string
		rs   []result
	}{{"configmap-attacher", oursRuns}, {"original (e59a93b)", origRuns}} {
		w := walls(row.rs)
		fmt.Printf("%-22s %10s %10s %10s %12s\n", row.name, ms(median(w)), ms(minOf(w)), ms(maxOf(w)), ms(median(cpus(row.rs))))
	}
	fmt.Printf("ratio ours / original: wall %.2f, CPU %.2f\n",
		float64(median(walls(oursRuns)))/float64(median(walls(origRuns))),
		float64(median(cpus(oursRuns)))/float64(median(cpus(origRuns))))
	return nil
}

// createReplicaSets adds n ReplicaSets of 0 replicas, owned by nothing, as other workloads' revisions
// in a busy namespace.
func (e env) createReplicaSets(ctx context.Context, ns string, n int) error {
	zero := int32(0)
	fmt.Printf("\ncreating %d other ReplicaSets in %s...\n", n, ns)
	return parallel(n, 32, func(i int) error {
		name := fmt.Sprintf("other-%04d", i)
		t := framework.PodTemplate(name, []string{name + "-cm"}, nil)
		_, err := e.c.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: t.Labels}, Template: t},
		}, metav1.CreateOptions{})
		return err
	})
}

func (e env) resourceVersions(ctx context.Context, ns string, names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		cm, err := e.c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, cm.ResourceVersion)
	}
	return out, nil
}

// runner runs a Job binary the way a pipeline does and takes its wall and CPU time.
type runner struct {
	path string
	env  []string
	args []string
}

type result struct{ wall, cpu time.Duration }

func (r runner) run(ctx context.Context) (result, error) {
	cmd := exec.CommandContext(ctx, r.path, r.args...)
	cmd.Env = append(os.Environ(), r.env...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: %w\n%s", r.path, strings.Join(r.args, " "), err, out.String())
	}
	return result{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
}

func pick(rs []result, f func(result) time.Duration) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func sorted(d []time.Duration) []time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// median of an even count is the mean of the two middle values.
func median(d []time.Duration) time.Duration {
	s := sorted(d)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func minOf(d []time.Duration) time.Duration { return sorted(d)[0] }
func maxOf(d []time.Duration) time.Duration { return sorted(d)[len(d)-1] }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
