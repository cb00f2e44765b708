// Command bench measures configmap-attacher on the local control plane and prints the figures recorded
// in docs/benchmarks.md. It is a program, not a test: nothing here asserts a duration.
//
//	go run ./hack/bench job          # wall time of one Job attach of 3 ConfigMaps, median of 5
//	go run ./hack/bench controller   # 500 Rollouts x 2 ConfigMaps, all changed at once: latency, writes, RSS
//	go run ./hack/bench memory       # controller RSS with 10,000 labelled ConfigMaps of 64 KiB
//
// It starts a local cluster named "bench" (deleted afterwards) unless -kubeconfig names one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
	bin                framework.Binary
	controllerFlags    []string
	controllerLog      string
	controllerLogLevel string
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "existing cluster to use (default: start a local one)")
	rollouts := fs.Int("rollouts", 500, "controller: number of Rollouts")
	configMaps := fs.Int("configmaps", 10000, "memory: number of ConfigMaps")
	size := fs.Int("size", 64*1024, "memory: bytes of data per ConfigMap")
	keep := fs.Bool("keep", false, "keep the cluster and namespaces afterwards")
	controllerLog := fs.String("controller-log", "", "controller scenario: write the controller's logs to this file")
	controllerLogLevel := fs.String("controller-log-level", "warn", "LOG_LEVEL of the controller")
	controllerFlags := fs.String("controller-flags", "", "extra flags for the controller, space-separated (e.g. \"-workers=16 -kube-api-qps=300\")")
	if len(args) == 0 {
		return fmt.Errorf("usage: bench job|controller|memory [flags]")
	}
	scenario := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if *kubeconfig == "" {
		// Room for the pods of 500 Rollouts during a canary.
		os.Setenv("CLUSTER_NODES", "12")
	}
	c, err := framework.Start(ctx, framework.StartOptions{RepoRoot: root, Kubeconfig: *kubeconfig, Name: "bench", Progress: os.Stderr})
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
	e := env{c: c, bin: framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}, controllerFlags: strings.Fields(*controllerFlags),
		controllerLog: *controllerLog, controllerLogLevel: *controllerLogLevel}
	start := time.Now()
	defer func() { fmt.Printf("\n(%s scenario took %s)\n", scenario, time.Since(start).Round(time.Second)) }()
	switch scenario {
	case "job":
		return e.job(ctx, *keep)
	case "controller":
		return e.controller(ctx, *rollouts, *keep)
	case "memory":
		return e.memory(ctx, *configMaps, *size, *keep)
	}
	return fmt.Errorf("unknown scenario %q: job, controller or memory", scenario)
}
