// Package framework drives the local control plane for the e2e tests and the demo: it starts or reuses
// a cluster, builds and runs the real configmap-attacher binary, and performs what a user does to a
// Rollout (apply, change config, promote, abort, undo, delete a pod).
package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a reachable cluster with Argo Rollouts installed.
type Cluster struct {
	Kubeconfig string
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface

	root     string
	name     string // set when we started it, so Stop tears it down
	owned    bool
	nodePods int // StartOptions.NodePods, given again whenever up.sh runs
}

// StartOptions say which cluster to use.
type StartOptions struct {
	RepoRoot string
	// Kubeconfig, when set, names an existing cluster to reuse; it is never torn down.
	Kubeconfig string
	// Name is the CLUSTER_NAME given to hack/cluster/up.sh when a cluster is created.
	Name string
	// Progress receives up.sh's progress lines (tool builds, component starts).
	Progress io.Writer
	// NodePods is how many pods each fake node holds (CLUSTER_NODE_PODS; 0: up.sh's default).
	NodePods int
}

// Start reuses the cluster opts.Kubeconfig names, or creates one with hack/cluster/up.sh, whose last
// stdout line is KUBECONFIG=<path>.
func Start(ctx context.Context, opts StartOptions) (*Cluster, error) {
	c := &Cluster{root: opts.RepoRoot, Kubeconfig: opts.Kubeconfig, nodePods: opts.NodePods}
	if c.Kubeconfig == "" {
		c.name, c.owned = opts.Name, true
		cmd := exec.CommandContext(ctx, filepath.Join(opts.RepoRoot, "hack/cluster/up.sh"))
		cmd.Env = c.upEnv()
		cmd.Stderr = opts.Progress
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("hack/cluster/up.sh: %w", err)
		}
		path, err := lastKubeconfigLine(out)
		if err != nil {
			return nil, err
		}
		c.Kubeconfig = path
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if err := c.checkRollouts(); err != nil {
		return nil, err
	}
	return c, nil
}

func lastKubeconfigLine(out []byte) (string, error) {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	path, ok := strings.CutPrefix(last, "KUBECONFIG=")
	if !ok || path == "" {
		return "", fmt.Errorf("hack/cluster/up.sh did not end with KUBECONFIG=<path> (last line %q)", last)
	}
	return path, nil
}

func (c *Cluster) checkRollouts() error {
	if _, err := c.Kube.Discovery().ServerResourcesForGroupVersion("argoproj.io/v1alpha1"); err != nil {
		return fmt.Errorf("the cluster at %s has no Argo Rollouts API: install Argo Rollouts there (CRDs and "+
			"controller), or name no kubeconfig to get a local cluster with it: %w", c.Kubeconfig, err)
	}
	return nil
}

// Owned reports whether Stop will delete the cluster.
func (c *Cluster) Owned() bool { return c.owned }

// Stop deletes the cluster if we created it.
func (c *Cluster) Stop(ctx context.Context, progress io.Writer) error {
	if !c.owned {
		return nil
	}
	return DeleteCluster(ctx, c.root, c.name, progress)
}

// DeleteCluster deletes the local cluster name (hack/cluster/down.sh); fine when there is none.
func DeleteCluster(ctx context.Context, root, name string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/cluster/down.sh"))
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+name)
	cmd.Stdout, cmd.Stderr = progress, progress
	return cmd.Run()
}

// RepoRoot finds the module root from the working directory (tests run in their package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack/cluster/up.sh")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root not found above the working directory")
		}
		dir = parent
	}
}

// RestartAPIServer kills kube-apiserver (SIGKILL: no graceful goodbye to watchers) and starts it
// again through hack/cluster/up.sh, which restarts stopped components. Only for clusters we started.
func (c *Cluster) RestartAPIServer(ctx context.Context, progress io.Writer) error {
	if !c.owned {
		return fmt.Errorf("restarting kube-apiserver needs a cluster the tests started (KUBECONFIG is set)")
	}
	pidFile := filepath.Join(filepath.Dir(c.Kubeconfig), "pids", "kube-apiserver.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver (pid %d): %w", pid, err)
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	// kube-controller-manager and kube-scheduler exit a few seconds after an API server outage (their
	// Lease lost), after kwokctl restarted the API server: its readiness wait, which wants every
	// component running, would then wait its full WAIT_TIMEOUT for nothing. A short one first; up.sh's
	// own checks follow it, and RestartComponents brings the others back.
	if err := c.up(ctx, progress, "WAIT_TIMEOUT=30"); err == nil {
		return nil
	}
	return c.up(ctx, progress)
}

// upEnv is the environment of hack/cluster/up.sh for this cluster.
func (c *Cluster) upEnv() []string {
	env := append(os.Environ(), "CLUSTER_NAME="+c.name)
	if c.nodePods > 0 {
		env = append(env, fmt.Sprintf("CLUSTER_NODE_PODS=%d", c.nodePods))
	}
	return env
}

// up runs hack/cluster/up.sh again on the cluster we started: it restarts stopped components.
func (c *Cluster) up(ctx context.Context, progress io.Writer, env ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "hack/cluster/up.sh"))
	cmd.Env = append(append(c.upEnv(), "SKIP_TOOLS_BUILD=1"), env...)
	cmd.Stdout, cmd.Stderr = io.Discard, progress
	return cmd.Run()
}
