// Command demo runs the original write-up on a real control plane with the real configmap-attacher
// binary, narrating each step and drawing the resource tree; then the same canary with zero-touch
// pinning (one static ConfigMap changed in place, the controller running with -pinning); then the same
// canary started by nothing but a ConfigMap edit (Reloader's annotation); -story picks one. `make demo` runs it on a local cluster it starts (building the tools on first use) and deletes
// afterwards; -kubeconfig (or DEMO_KUBECONFIG)
// runs it on an existing cluster with Argo Rollouts installed instead. -argocd (`make demo ARGOCD=1`)
// deploys the write-up's revisions the way its team did, through Argo CD (argocd.go); -flux
// (`make demo FLUX=1`) through Flux's helm-controller (flux.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out, progress io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("DEMO_KUBECONFIG"), "run on this existing cluster (must run Argo Rollouts) instead of a local one")
	namespace := fs.String("namespace", "devops-apps-01", "namespace the demo creates and deletes")
	keep := fs.Bool("keep", os.Getenv("DEMO_KEEP") == "1", "keep the namespace and the local cluster afterwards, to look around")
	story := fs.String("story", storyAll, "which story: write-up (revisioned names, the Job), zero-touch (pinning, in <namespace>-zero-touch), "+
		"config-starts (only the ConfigMap edited, in <namespace>-config-starts), or all")
	argoCD := fs.Bool("argocd", os.Getenv("ARGOCD") == "1", "the write-up through Argo CD: an Application of charts/base-app, the attacher its Sync hook Job (write-up story only)")
	flux := fs.Bool("flux", os.Getenv("FLUX") == "1", "the write-up through Flux: a HelmRelease of charts/base-app, the attacher its Helm post-upgrade hook Job (write-up story only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *argoCD && *flux {
		return fmt.Errorf("-argocd and -flux: pick one deploy tool")
	}
	for name, on := range map[string]bool{"-argocd": *argoCD, "-flux": *flux} {
		if !on {
			continue
		}
		if *story != storyAll && *story != storyWriteUp {
			return fmt.Errorf("%s replays the write-up story only (-story %s)", name, storyWriteUp)
		}
		*story = storyWriteUp
	}
	if !slices.Contains([]string{storyAll, storyWriteUp, storyZeroTouch, storyConfigStarts}, *story) {
		return fmt.Errorf("-story %q: use %s, %s, %s or %s", *story, storyWriteUp, storyZeroTouch, storyConfigStarts, storyAll)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	start := time.Now()
	if *kubeconfig == "" {
		fmt.Fprintln(out, "Starting a local control plane (kube-apiserver, kube-controller-manager with its garbage collector,")
		fmt.Fprintln(out, "kwok fake nodes, Argo Rollouts). The first run builds the tools from Go modules: several minutes.")
	}
	c, err := framework.Start(ctx, framework.StartOptions{RepoRoot: root, Kubeconfig: *kubeconfig, Name: "demo", Progress: progress})
	if err != nil {
		return err
	}
	if c.Owned() && !*keep {
		defer func() { _ = c.Stop(context.Background(), io.Discard) }()
	}
	fmt.Fprintf(out, "Cluster ready in %s.\n", time.Since(start).Round(time.Second))

	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, *namespace, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("namespace %s already exists: the demo only works in a namespace it creates (use -namespace)", *namespace)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if !*keep {
		defer func() { _ = c.DeleteNamespace(context.Background(), *namespace) }()
	}

	bin, cleanup, err := framework.BuildBinary(ctx, root)
	if err != nil {
		return err
	}
	defer cleanup()
	b := framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}
	s := &walkthrough.Story{
		C: c, Attacher: &walkthrough.Job{Bin: b},
		Namespace: *namespace, Rollout: "demo", Out: out, Wait: 2 * time.Minute,
	}
	run := func(ctx context.Context, args ...string) error {
		r := b.Run(ctx, nil, args...)
		fmt.Fprintf(out, "\n$ configmap-attacher %s\n%s", strings.Join(args, " "), r.Stdout)
		if r.Code != 0 {
			return fmt.Errorf("%s", r)
		}
		return nil
	}
	s.AfterStep = func(ctx context.Context, step int) error {
		switch step {
		case 6: // three revisions, before the old ReplicaSets go
			if err := run(ctx, "history", "rollout/demo", "-n", *namespace); err != nil {
				return err
			}
			return run(ctx, "diff", "rollout/demo", "2", "3", "-n", *namespace)
		case 7:
			return run(ctx, "history", "rollout/demo", "-n", *namespace)
		}
		return nil
	}
	var through func(context.Context, *walkthrough.Story, string, bool, io.Writer, io.Writer) (func(), error)
	switch {
	case *argoCD:
		through = throughArgoCD
	case *flux:
		through = throughFlux
	}
	if through != nil {
		stop, err := through(ctx, s, root, *keep, out, progress)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *story == storyAll || *story == storyWriteUp {
		if through == nil {
			fmt.Fprintln(out, `
The write-up "Revisioned Configmaps for Canary deployments", replayed: every config change gets a new
ConfigMap name, the Rollout mounts it, and configmap-attacher (run exactly as the original Job) gives it an
ownerReference to the ReplicaSet that uses it. Trees show what the garbage collector sees.`)
		}
		if err := s.Walkthrough(ctx); err != nil {
			return err
		}
	}
	if *story == storyAll || *story == storyZeroTouch {
		if err := zeroTouch(ctx, c, b, *namespace+"-zero-touch", *keep, out); err != nil {
			return err
		}
	}
	if *story == storyAll || *story == storyConfigStarts {
		if err := configStarts(ctx, c, b, *namespace+"-config-starts", *keep, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nDone in %s: the spot-replaced pod read the old config", time.Since(start).Round(time.Second))
	if *story == storyAll || *story == storyWriteUp {
		fmt.Fprint(out, "; old config followed its ReplicaSets")
	}
	if *story == storyAll || *story == storyZeroTouch {
		fmt.Fprint(out, "; with pinning, each revision's pods read its own snapshot of the one ConfigMap")
	}
	if *story == storyAll || *story == storyConfigStarts {
		fmt.Fprint(out, "; editing only the ConfigMap started the canary, and its revert went back to the first revision")
	}
	fmt.Fprintln(out, ".")
	if *keep {
		fmt.Fprintf(out, "Kept: namespace %s (and %s-zero-touch and %s-config-starts, their controllers stopped); KUBECONFIG=%s\n",
			*namespace, *namespace, *namespace, c.Kubeconfig)
	}
	return nil
}
