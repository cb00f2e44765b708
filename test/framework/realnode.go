package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A real node (hack/cluster/realnode.sh): a kubelet on containerd and runc joined to a local cluster,
// so pods placed on it run real containers (kwok's nodes only pretend). It is labelled and tainted
// type=real; Place puts a pod there. Its images are imported archives, or pulled from a registry
// AllowRegistry names.

const (
	// RealNodeLabel and RealNodeValue select the real node (kwok's nodes carry type=kwok); its taint is
	// RealNodeLabel=RealNodeValue:NoSchedule.
	RealNodeLabel = "type"
	RealNodeValue = "real"
	// RealNodeBusybox is Debian's busybox-static in a FROM scratch image, present on the real node.
	RealNodeBusybox = "localhost/realnode-busybox:1"
)

// ErrNotLocalCluster is returned by Cluster.RealNode for a cluster hack/cluster/up.sh did not make.
var ErrNotLocalCluster = errors.New("a real node needs a local cluster from hack/cluster/up.sh (its CA key signs the kubelet's certificate)")

// RealNode is a cluster's real node.
type RealNode struct {
	Name    string
	cluster *Cluster
	clName  string // CLUSTER_NAME of the local cluster
}

type realNodeStart struct {
	once sync.Once
	node *RealNode
	err  error
}

var realNodes sync.Map // *Cluster -> *realNodeStart

// RealNode starts the cluster's real node, or reuses it, once per Cluster (hack/cluster/realnode.sh
// up: it builds the kubelet if needed and waits until the Node is Ready). Only for local clusters
// from hack/cluster/up.sh (it signs the kubelet's certificate with the cluster's CA); the node goes
// away with the cluster (hack/cluster/down.sh stops it first).
func (c *Cluster) RealNode(ctx context.Context, progress io.Writer) (*RealNode, error) {
	v, _ := realNodes.LoadOrStore(c, &realNodeStart{})
	s := v.(*realNodeStart)
	s.once.Do(func() { s.node, s.err = c.startRealNode(ctx, progress) })
	return s.node, s.err
}

func (c *Cluster) localClusterName() (string, error) {
	if c.owned {
		return c.name, nil
	}
	// A cluster up.sh made and the tests reuse (KUBECONFIG=<root>/_output/kwok/clusters/<name>/kubeconfig.yaml).
	dir := filepath.Dir(c.Kubeconfig)
	if filepath.Base(c.Kubeconfig) == "kubeconfig.yaml" && filepath.Base(filepath.Dir(dir)) == "clusters" {
		if _, err := os.Stat(filepath.Join(dir, "pki", "ca.key")); err == nil {
			return filepath.Base(dir), nil
		}
	}
	return "", fmt.Errorf("%w; %s is not one", ErrNotLocalCluster, c.Kubeconfig)
}

func (c *Cluster) startRealNode(ctx context.Context, progress io.Writer) (*RealNode, error) {
	name, err := c.localClusterName()
	if err != nil {
		return nil, err
	}
	out, err := c.realnodeScript(ctx, name, progress, "up")
	if err != nil {
		return nil, err
	}
	var node string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "NODE="); ok {
			node = v
		}
	}
	if node == "" {
		return nil, fmt.Errorf("hack/cluster/realnode.sh up printed no NODE=<name> line:\n%s", out)
	}
	return &RealNode{Name: node, cluster: c, clName: name}, nil
}

// KWOK_WORKDIR is left to lib.sh's default (the repository's _output/kwok), where up.sh made the
// cluster, unless the caller's environment says otherwise, as for up.sh.
func (c *Cluster) realnodeScript(ctx context.Context, clusterName string, progress io.Writer, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "hack/cluster/realnode.sh"), args...)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+clusterName)
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("hack/cluster/realnode.sh %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// Import loads docker-archives (podman save --format docker-archive) into the node's containerd,
// where its kubelet finds them (reference: the archive's RepoTags, e.g. localhost/name:tag).
func (n *RealNode) Import(ctx context.Context, progress io.Writer, archives ...string) error {
	_, err := n.cluster.realnodeScript(ctx, n.clName, progress, append([]string{"import"}, archives...)...)
	return err
}

// Place makes a pod run on the real node: its nodeSelector and a toleration for its taint.
func (n *RealNode) Place(spec *corev1.PodSpec) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[RealNodeLabel] = RealNodeValue
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
		Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: RealNodeValue, Effect: corev1.TaintEffectNoSchedule,
	})
}

// WaitPodReady waits until the pod is Ready and returns it; a timeout describes its phase and why
// each container is not running (ContainerCreating, FailedMount, ErrImageNeverPull, CrashLoopBackOff).
func (c *Cluster) WaitPodReady(ctx context.Context, timeout time.Duration, ns, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := Eventually(ctx, timeout, "pod "+ns+"/"+name+" Ready", func(ctx context.Context) (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		return ReadyPods([]corev1.Pod{*p}) == 1, DescribePod(p), nil
	})
	return pod, err
}

// DescribePod is a one-line summary of a pod's state, for messages.
func DescribePod(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s on node %q", p.Status.Phase, p.Spec.NodeName)
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %s (exit %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Running != nil:
			s += fmt.Sprintf("; %s running (ready %t, restarts %d)", cs.Name, cs.Ready, cs.RestartCount)
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			s += fmt.Sprintf("; %s: %s", cond.Type, cond.Message)
		}
	}
	return s
}

// Kubectl runs the real kubectl (hack/tools build) on the cluster and returns its stdout; an error
// carries stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return c.runTool(ctx, "kubectl", "kubectl", args...)
}

// runTool runs a tool of the hack/tools build, bin, on the cluster (its --kubeconfig) and returns its
// stdout; an error names it as the user types it (as) and carries stderr.
func (c *Cluster) runTool(ctx context.Context, bin, as string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "_output/tools/bin", bin), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", as, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Exec runs a command in a pod's container as `kubectl exec -n ns pod -c container -- command...`
// does (through the API server and the node's kubelet) and returns its stdout. container may be
// empty (the pod's only or default container).
func (c *Cluster) Exec(ctx context.Context, ns, pod, container string, command ...string) (string, error) {
	args := []string{"exec", "-n", ns, pod}
	if container != "" {
		args = append(args, "-c", container)
	}
	return c.Kubectl(ctx, append(append(args, "--"), command...)...)
}

// AllowRegistry lets the node's containerd pull from a plain-HTTP registry at hostport (a loopback
// registry), as `hack/cluster/realnode.sh registry HOST:PORT` configures it.
func (n *RealNode) AllowRegistry(ctx context.Context, progress io.Writer, hostport string) error {
	_, err := n.cluster.realnodeScript(ctx, n.clName, progress, "registry", hostport)
	return err
}
