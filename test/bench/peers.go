package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// peers are the other tools measured beside ours, built by `hack/tools/build.sh peers` (pinned in
// hack/tools/versions.env). An empty path means not built: the scenario leaves that peer out.
type peers struct {
	// original is liorfranko/configmap-attacher, the Job we replace.
	original string
	// rsOperator is matanbaruch/configmap-rs-operator: a controller-runtime operator that gives every
	// ConfigMap mounted as a plain configMap volume by a ReplicaSet created after its start an
	// ownerReference to it (a full Update of the ConfigMap read from its cache of every ConfigMap).
	rsOperator string
	// reloader is stakater/Reloader: no ownerReferences, but the best-known controller that watches
	// every ConfigMap and Secret; measured for memory only.
	reloader string
}

func findPeers(root string) peers {
	dir := os.Getenv("TOOLS_OUT")
	if dir == "" {
		dir = filepath.Join(root, "_output", "tools")
	}
	find := func(name string) string {
		p := filepath.Join(dir, "bin", name)
		if _, err := os.Stat(p); err != nil {
			fmt.Printf("(peer %s not built: hack/tools/build.sh peers)\n", name)
			return ""
		}
		return p
	}
	return peers{
		original:   find("configmap-attacher-original"),
		rsOperator: find("configmap-rs-operator"),
		reloader:   find("reloader"),
	}
}

// buildFloor compiles the floor watcher (test/bench/floor) into a temporary directory.
func buildFloor(ctx context.Context, root string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "bench-floor")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	path := filepath.Join(dir, "floor")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./test/bench/floor")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build ./test/bench/floor: %w\n%s", err, b)
	}
	return path, cleanup, nil
}

// originalHome is a HOME for the original tool: it reads only ~/.kube/config when IS_IN_CLUSTER=false.
func originalHome(kubeconfig string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "bench-original-home")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := os.MkdirAll(filepath.Join(dir, ".kube"), 0o700); err != nil {
		cleanup()
		return "", nil, err
	}
	if err := os.Symlink(kubeconfig, filepath.Join(dir, ".kube", "config")); err != nil {
		cleanup()
		return "", nil, err
	}
	return dir, cleanup, nil
}

func commit(root string) string {
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%h").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func numCPU() int { return runtime.NumCPU() }
