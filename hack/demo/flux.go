package main

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// demoRepository is the HelmRepository the write-up through Flux installs base-app from.
const demoRepository = "demo-charts"

// throughFlux makes the write-up story deploy through Flux: it runs source-controller and
// helm-controller next to the local cluster (hack/cluster/flux.sh), serves charts/base-app from a Helm
// repository on loopback declared as a HelmRepository, and sets s.Deployer. The returned func deletes
// the HelmRelease (uninstalling the release) and the HelmRepository unless keep, and stops serving.
func throughFlux(ctx context.Context, s *walkthrough.Story, root string, keep bool, out, progress io.Writer) (func(), error) {
	start := time.Now()
	if err := s.C.EnsureFlux(ctx, progress); err != nil {
		return nil, fmt.Errorf("-flux needs a local cluster (make demo without DEMO_KUBECONFIG): %w", err)
	}
	chart, err := serveBaseApp(ctx, s.C, root)
	if err != nil {
		return nil, err
	}
	repos := s.C.Dynamic.Resource(framework.HelmRepositoryGVR).Namespace(framework.FluxNamespace)
	stop := func() {
		if !keep {
			_ = s.C.DeleteHelmRelease(context.Background(), 2*time.Minute, s.Namespace, demoApplication)
			_ = repos.Delete(context.Background(), demoRepository, metav1.DeleteOptions{})
		}
		chart.stop()
	}
	if err := s.C.ApplyHelmRepository(ctx, framework.FluxNamespace, demoRepository, chart.repo.URL, time.Minute); err != nil {
		stop()
		return nil, err
	}
	// Flux stops with a cluster the demo deletes (flux.sh's watchdog).
	fmt.Fprintf(out, "Flux ready in %s; chart base-app %s served at %s (HelmRepository %s/%s).\n", time.Since(start).Round(time.Second),
		chart.version, chart.repo.URL, framework.FluxNamespace, demoRepository)
	s.Deployer = &walkthrough.Flux{C: s.C, Bin: s.Attacher.(*walkthrough.Job).Bin, Repository: demoRepository, Version: chart.version,
		Release: demoApplication, Dir: chart.home, Wait: s.Wait}
	s.Attacher = walkthrough.None{} // the chart's Helm hook attaches
	fmt.Fprintln(out, `
The write-up "Revisioned Configmaps for Canary deployments", replayed through Flux: a HelmRelease of the
chart (charts/base-app) gives every config change a new ConfigMap name mounted by the Rollout; Flux's
helm-controller (Helm 4) waits for the Rollout (a paused canary is "in progress") and then runs the chart's
post-upgrade hook, the configmap-attacher Job, which gives the ConfigMap an ownerReference to the
ReplicaSet that uses it. kwok's nodes run no container, so the hook's command is run here, as the hook's
ServiceAccount, when Flux creates the Job. Trees show what the garbage collector sees.`)
	return stop, nil
}
