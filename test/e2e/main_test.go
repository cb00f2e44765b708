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

// env is what every test shares: the cluster, the real binary, and Helm 4's plugins directory where
// the post-renderer plugin packed with that binary is installed.
type env struct {
	cluster     *framework.Cluster
	bin         framework.Binary
	root        string
	helmPlugins string
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
	// KUBERNETES_COMPAT=<minor> (make test-e2e's second run): a cluster of its own on the
	// compatibility control plane (hack/cluster/up.sh passes it on).
	name := "e2e"
	if os.Getenv("KUBERNETES_COMPAT") != "" {
		name = "e2e-compat"
	}
	c, err := framework.Start(ctx, framework.StartOptions{
		RepoRoot: root, Kubeconfig: os.Getenv("KUBECONFIG"), Name: name, Progress: os.Stderr,
		// A failed story's namespace is kept for a look, pods and all: at 110 pods a node, one story's
		// 168 kept pods and a storm's 200 filled the three nodes, and every story after them waited
		// for pods that could not be scheduled.
		NodePods: 330,
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
	plugins, cleanupPlugin, err := installHelmPlugin(ctx, root, bin, c.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: installing the Helm plugin:", err)
		return 1
	}
	defer cleanupPlugin()
	e2e = env{cluster: c, bin: framework.Binary{Path: bin, Kubeconfig: c.Kubeconfig}, root: root, helmPlugins: plugins}
	return m.Run()
}

// installHelmPlugin installs the post-renderer plugin with bin, as make helm-plugin's directory (a development
// install, which Helm does not verify), once for every test's Helm 4.
func installHelmPlugin(ctx context.Context, root, bin, kubeconfig string) (plugins string, cleanup func(), err error) {
	path, err := framework.HelmBinary(root, framework.Helm4)
	if err != nil {
		return "", nil, err
	}
	home, err := os.MkdirTemp("", "e2e-helm-plugin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(home) }
	plugins, err = framework.InstallHelmPlugin(ctx, framework.Helm{Path: path, Kubeconfig: kubeconfig, Home: home}, root, bin)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return plugins, cleanup, nil
}
