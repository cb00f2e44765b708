package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// demoApplication is the Argo CD Application (and Helm release) of the write-up through Argo CD, and
// the HelmRelease of the write-up through Flux.
const demoApplication = "demo"

// throughArgoCD makes the write-up story deploy through Argo CD: it runs Argo CD next to the local
// cluster (hack/cluster/argocd.sh), serves charts/base-app from a Helm repository on loopback, and
// sets s.Deployer. The returned func deletes the Application (unless keep) and stops serving.
//
// Only a cluster made by hack/cluster/up.sh works: Argo CD's repo server must reach the chart
// repository on this machine's loopback.
func throughArgoCD(ctx context.Context, s *walkthrough.Story, root string, keep bool, out, progress io.Writer) (func(), error) {
	start := time.Now()
	if err := s.C.EnsureArgoCD(ctx, progress); err != nil {
		return nil, fmt.Errorf("-argocd needs a local cluster (make demo without DEMO_KUBECONFIG): %w", err)
	}
	chart, err := serveBaseApp(ctx, s.C, root)
	if err != nil {
		return nil, err
	}
	stop := func() {
		if !keep {
			_ = s.C.DeleteApplication(context.Background(), 2*time.Minute, demoApplication)
		}
		chart.stop()
	}
	// Argo CD stops with a cluster the demo deletes (argocd.sh's watchdog).
	fmt.Fprintf(out, "Argo CD ready in %s; chart base-app %s served at %s.\n", time.Since(start).Round(time.Second), chart.version, chart.repo.URL)
	s.Deployer = &walkthrough.ArgoCD{C: s.C, Bin: s.Attacher.(*walkthrough.Job).Bin, RepoURL: chart.repo.URL, Version: chart.version,
		App: demoApplication, Dir: chart.home, Wait: s.Wait}
	s.Attacher = walkthrough.None{} // the chart's Sync hook attaches
	fmt.Fprintln(out, `
The write-up "Revisioned Configmaps for Canary deployments", replayed the way its team deploys: an Argo CD
Application of the chart (charts/base-app) gives every config change a new ConfigMap name mounted by the
Rollout; configmap-attacher, the chart's Argo CD Sync hook Job (sync-wave 1, after the Rollout in wave 0),
gives it an ownerReference to the ReplicaSet that uses it. kwok's nodes run no container, so the hook's
command is run here, as the hook's ServiceAccount, when Argo CD creates the Job. Trees show what the
garbage collector sees.`)
	return stop, nil
}

// servedChart is charts/base-app in a Helm repository on loopback, for a deploy tool on the local
// cluster.
type servedChart struct {
	repo    *framework.ChartRepo
	version string
	home    string // a Helm home of its own (and where hook ServiceAccounts' kubeconfigs go)
	stop    func()
}

func serveBaseApp(ctx context.Context, c *framework.Cluster, root string) (*servedChart, error) {
	helm, err := framework.HelmBinary(root, framework.Helm4)
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "demo-chart")
	if err != nil {
		return nil, err
	}
	repo, err := framework.ServeChartRepo(framework.Helm{Path: helm, Kubeconfig: c.Kubeconfig, Home: home}, "")
	if err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	sc := &servedChart{repo: repo, home: home, stop: func() { _ = repo.Close(); os.RemoveAll(home) }}
	if sc.version, err = repo.Add(ctx, root+"/charts/base-app", ""); err != nil {
		sc.stop()
		return nil, err
	}
	return sc, nil
}
