//go:build e2e

// Package e2e proves the project's promises on a real control plane: kube-apiserver, the garbage
// collector in kube-controller-manager, the Argo Rollouts controller, kwok nodes. Run with
// `make test-e2e` (or `go test -tags e2e ./test/e2e`). With KUBECONFIG set, the tests reuse that
// cluster (it must run Argo Rollouts); otherwise they start one with hack/cluster/up.sh and delete it
// at the end (E2E_KEEP_CLUSTER=1 keeps it).
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// env is what every test shares: the cluster and the real binary.
type env struct {
	cluster *framework.Cluster
	bin     framework.Binary
	root    string
}

var e2e env // set once by TestMain, read-only afterwards

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	c, err := framework.Start(ctx, framework.StartOptions{
		RepoRoot: root, Kubeconfig: os.Getenv("KUBECONFIG"), Name: "e2e", Progress: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the cluster:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster ready in %s (KUBECONFIG=%s)\n", time.Since(start).Round(time.Second), c.Kubeconfig)
	if c.Owned() && os.Getenv("E2E_KEEP_CLUSTER") != "1" {
		defer func() {
			if err := c.Stop(ctx, os.Stderr); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: stopping the cluster:", err)
			}
		}()
	}
	bin, cleanup, err := framework.BuildBinary(ctx, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer cleanup()
	e2e = env{cluster: c, bin: framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}, root: root}
	return m.Run()
}
