//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// The write-up through Flux, exactly as `make demo FLUX=1` tells it: a HelmRelease of charts/base-app,
// the attacher its Helm post-install/post-upgrade hook Job, whose command the story runs as the hook's
// ServiceAccount when Flux creates the Job (kwok's nodes run no container). Flux waits for the Rollout
// (framework.RolloutHealthChecks), so the story asserts the hook has not run during each canary pause
// and attaches after the promotion.
func TestFluxWalkthroughWithTheHelmHook(t *testing.T) {
	t.Parallel()
	useFlux(t)
	s := story(t, "e2e-flux-walkthrough", walkthrough.None{})
	versions := fluxRepository(t, s.Namespace, "base-app")
	f := &walkthrough.Flux{C: e2e.cluster, Bin: e2e.bin, Repository: s.Namespace, Version: versions["base-app"],
		Release: "demo", Dir: t.TempDir(), Wait: fluxWait}
	s.Deployer = f
	t.Cleanup(func() {
		if err := e2e.cluster.DeleteHelmRelease(context.Background(), fluxWait, s.Namespace, f.Release); err != nil {
			t.Log(err)
		}
	})
	must(t, s.Walkthrough(context.Background()))
	t.Logf("then: %d hook Jobs ran, one per install or upgrade", f.Hooks())
}
