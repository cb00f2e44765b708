// Command soak runs random but reproducible sequences of deploys and faults against the real
// configmap-attacher controller (two replicas, leader election, zero-touch pinning), the Job mode, the
// garbage collector and the Argo Rollouts controller, and checks after every step that no config in
// use was lost and every pod of a pinned workload reads the content its revision was created with and,
// once settled, that no opted-in config (snapshots included) nothing uses was left behind. It is a
// program, not a test: nothing it asserts is about time. See test/soak/README.md.
//
//	go run ./test/soak -steps 30 -seed 1
//	go run ./test/soak -steps 300 -seed 7 -keep
//
// It starts a local cluster named "soak" (-cluster; deleted afterwards unless -keep) unless -kubeconfig
// names one. The last line printed is `steps=N faults=F lost=L leaked=K unpinned=U wrong=W refused=R seed=S`;
// the exit code is 1 when any of lost, leaked, unpinned, wrong, refused is not zero.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

type options struct {
	steps       int
	seed        uint64
	kubeconfig  string
	cluster     string
	keep        bool
	workDir     string
	settleEvery int
	settle      time.Duration
	admission   string
}

func run(ctx context.Context, args []string) (int, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.IntVar(&o.steps, "steps", 30, "number of random steps")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the one random source every choice comes from; the same seed replays the same sequence")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "existing cluster to use (default: start a local one named soak); kube-apiserver restarts need a cluster the soak started")
	fs.StringVar(&o.cluster, "cluster", "soak", "name of the local cluster started (two soaks at once each need their own)")
	fs.BoolVar(&o.keep, "keep", false, "keep the cluster (or, with -kubeconfig, the namespaces) afterwards")
	fs.StringVar(&o.workDir, "workdir", "", "where controller and Job logs go (default _output/soak/seed-<seed>)")
	fs.IntVar(&o.settleEvery, "settle-every", 10, "check for leaked config after every this many steps (and at the end)")
	fs.DurationVar(&o.settle, "settle", 90*time.Second, "how long a leak check waits for the garbage collector and the controller to finish")
	fs.StringVar(&o.admission, "pinning-admission", "webhook", "how pods are pinned: webhook (the controller's webhook, with certificate rotations) or policy (the API server's admission policies over the controller's PinTables; Kubernetes 1.36+)")
	plan := fs.Bool("plan", false, "print the steps the seed draws, assuming every step succeeds, without a cluster (to choose a seed)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if o.steps < 1 || o.settleEvery < 1 {
		return 2, fmt.Errorf("-steps and -settle-every must be at least 1")
	}
	if o.admission != "webhook" && o.admission != "policy" {
		return 2, fmt.Errorf("-pinning-admission %q: use webhook or policy", o.admission)
	}
	if *plan {
		newSoak(nil, framework.Binary{}, o).plan(os.Stdout)
		return 0, nil
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return 2, err
	}
	if o.workDir == "" {
		o.workDir = filepath.Join(root, "_output", "soak", fmt.Sprintf("seed-%d", o.seed))
	}
	if err := os.RemoveAll(o.workDir); err != nil {
		return 2, err
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return 2, err
	}

	start := time.Now()
	c, err := framework.Start(ctx, framework.StartOptions{RepoRoot: root, Kubeconfig: o.kubeconfig, Name: o.cluster, Progress: os.Stderr})
	if err != nil {
		return 2, err
	}
	bin, cleanup, err := framework.BuildBinary(ctx, root)
	if err != nil {
		if c.Owned() && !o.keep {
			_ = c.Stop(context.Background(), os.Stderr)
		}
		return 2, err
	}
	fmt.Fprintf(os.Stderr, "soak: cluster and binary ready in %s (KUBECONFIG=%s); logs in %s\n",
		time.Since(start).Round(time.Second), c.Kubeconfig, o.workDir)

	s := newSoak(c, framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}, o)
	// Stop the controllers and clean up before the summary, so the summary is the last line.
	var once sync.Once
	finish := func() {
		once.Do(func() {
			s.shutdown(context.Background())
			if c.Owned() && !o.keep {
				if err := c.Stop(context.Background(), os.Stderr); err != nil {
					fmt.Fprintln(os.Stderr, "soak: deleting the cluster:", err)
				}
			}
			cleanup()
		})
	}
	defer finish()
	if err := s.setUp(ctx); err != nil {
		return 2, err
	}
	loopErr := s.loop(ctx)
	finish()
	s.summary(time.Since(start))
	if loopErr != nil {
		return 2, loopErr
	}
	if s.lost > 0 || s.leaked > 0 || s.unpinned > 0 || s.wrong > 0 || s.refused > 0 || s.trig.right != s.trig.judged {
		return 1, nil
	}
	return 0, nil
}
