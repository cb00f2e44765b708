//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Pods on a real node (hack/cluster/realnode.sh: a kubelet on containerd and runc, joined to the local
// cluster): real containers mount the config revisions, so a missing ConfigMap would really keep a pod
// from starting, and the controller chart's pod really runs the image.

// realNode starts (or reuses) the cluster's real node. It skips, saying why, where the node cannot
// run (not root, or a Debian package missing); on CI (CI set) that is a failure: .ci/run installs them.
func realNode(t *testing.T) *framework.RealNode {
	t.Helper()
	var missing []string
	for _, c := range []string{"containerd", "ctr", "runc", "podman", "busybox", "/usr/lib/cni/bridge", "openssl", "ip", "pgrep"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if os.Getuid() != 0 {
		missing = append(missing, "root")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("SKIPPED: no real node here, missing %v (Debian: apt-get install containerd runc "+
			"containernetworking-plugins busybox-static podman iproute2 openssl procps; run as root)", missing)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	start := time.Now()
	n, err := e2e.cluster.RealNode(context.Background(), logWriter{t})
	if errors.Is(err, framework.ErrNotLocalCluster) {
		t.Skipf("SKIPPED: %v", err)
	}
	must(t, err)
	t.Logf("given: real node %s (kubelet, containerd, runc), up in %s", n.Name, time.Since(start).Round(time.Millisecond))
	return n
}

// realTemplate is the chart's pod template (the config revisions in one projected volume at
// /etc/kubernetes/configmaps) running busybox on the real node.
func realTemplate(n *framework.RealNode, app string, configMaps []string) corev1.PodTemplateSpec {
	t := framework.PodTemplate(app, configMaps, nil)
	c := &t.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = framework.RealNodeBusybox, corev1.PullNever
	c.Command = []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 86400 & wait"}
	grace := int64(5)
	t.Spec.TerminationGracePeriodSeconds = &grace
	n.Place(&t.Spec)
	return t
}

// readConfig is the walkthrough's `kubectl exec <pod> -- cat /etc/kubernetes/configmaps/configuration.json`.
func readConfig(t *testing.T, ns, pod string) string {
	t.Helper()
	out, err := e2e.cluster.Exec(context.Background(), ns, pod, "", "cat", framework.MountPath+"/configuration.json")
	must(t, err)
	return out
}

// readyPodsOf waits until rs runs n Ready pods, on the real node, and returns them.
func readyPodsOf(t *testing.T, n *framework.RealNode, rs *appsv1.ReplicaSet, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	must(t, framework.Eventually(context.Background(), 2*time.Minute, fmt.Sprintf("%d ready pods of %s on %s", want, rs.Name, n.Name),
		func(ctx context.Context) (bool, string, error) {
			all, err := e2e.cluster.PodsOf(ctx, rs)
			if err != nil {
				return false, "", err
			}
			var seen []string
			for i := range all {
				seen = append(seen, all[i].Name+": "+framework.DescribePod(&all[i]))
				// Not scheduled yet is waited for (its PodScheduled message says why in a timeout).
				if all[i].Spec.NodeName != "" && all[i].Spec.NodeName != n.Name {
					return false, "", fmt.Errorf("pod %s landed on %s, not the real node", all[i].Name, all[i].Spec.NodeName)
				}
			}
			pods = all
			return len(all) == want && framework.ReadyPods(all) == want, strings.Join(seen, " | "), nil
		}))
	return pods
}

// The walkthrough on real containers: each pod reads its own revision through the projected volume,
// and during a canary a spot-replaced pod of the old ReplicaSet starts again with the OLD config,
// because the attached ConfigMap still exists.
func TestRealNodePodsReadTheirConfigRevision(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-realnode-config")
	content := func(v int) string { return fmt.Sprintf(`{"version": %d, "greeting": "hello from revision %d"}`, v, v) }
	revision := func(v int) string {
		cm, err := e2e.cluster.CreateConfigRevision(ctx, ns, "demo-cm", map[string]string{"configuration.json": content(v)}, true)
		must(t, err)
		return cm.Name
	}
	attach := func(cm string) {
		if r := attachJob(t, e2e.bin, "-rollout", "demo", "-namespace", ns, "-configmaps", cm); r.Code != 0 {
			t.Fatalf("the Job failed: %s", r)
		}
	}

	v1 := revision(1)
	tmpl := realTemplate(n, "demo", []string{v1})
	must(t, e2e.cluster.CreateRollout(ctx, ns, "demo", framework.RolloutSpec{Replicas: 2, Template: &tmpl}))
	a := &app{t: t, ns: ns, name: "demo"}
	rs1 := a.currentRS(v1)
	attach(v1)
	start := time.Now()
	pods := readyPodsOf(t, n, rs1, 2)
	t.Logf("given: Rollout demo, 2 real pods of ReplicaSet %s Ready in %s", rs1.Name, time.Since(start).Round(time.Millisecond))
	for _, p := range pods {
		if got := readConfig(t, ns, p.Name); got != content(1) {
			t.Fatalf("pod %s reads %q, want %q", p.Name, got, content(1))
		}
		t.Logf("then: kubectl exec %s -- cat %s/configuration.json: %s", p.Name, framework.MountPath, content(1))
	}

	// A deploy: the canary replaces one pod and pauses.
	v2 := revision(2)
	must(t, e2e.cluster.SetRolloutTemplate(ctx, ns, "demo", realTemplate(n, "demo", []string{v2})))
	rs2 := a.currentRS(v2)
	attach(v2)
	canary := readyPodsOf(t, n, rs2, 1)[0]
	old := readyPodsOf(t, n, rs1, 1)[0]
	if got := readConfig(t, ns, canary.Name); got != content(2) {
		t.Fatalf("canary pod %s reads %q, want %q", canary.Name, got, content(2))
	}
	t.Logf("when: a deploy pauses at one canary pod %s (ReplicaSet %s) reading revision 2", canary.Name, rs2.Name)
	for _, cm := range []struct {
		name string
		rs   *appsv1.ReplicaSet
	}{{v1, rs1}, {v2, rs2}} {
		expectAttached(t, ns, refs.ConfigMap, cm.name, cm.rs)
	}

	// A spot node goes away: the old ReplicaSet's pod is replaced and must start with the OLD config.
	must(t, e2e.cluster.Kube.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}))
	var replacement corev1.Pod
	must(t, framework.Eventually(ctx, 2*time.Minute, "a replacement pod in "+rs1.Name, func(ctx context.Context) (bool, string, error) {
		pods, err := e2e.cluster.PodsOf(ctx, rs1)
		if err != nil || len(pods) != 1 || pods[0].Name == old.Name {
			return false, fmt.Sprintf("%d pods", len(pods)), err
		}
		replacement = pods[0]
		return framework.ReadyPods(pods) == 1, framework.DescribePod(&pods[0]), nil
	}))
	if got := readConfig(t, ns, replacement.Name); got != content(1) {
		t.Fatalf("the replacement pod %s reads %q, want the OLD config %q", replacement.Name, got, content(1))
	}
	t.Logf("then: kubectl delete pod %s; its replacement %s starts on the real node and reads revision 1: %s",
		old.Name, replacement.Name, content(1))
}

// What the project prevents, on a real kubelet: a pod whose ConfigMap is gone does not start (kwok's
// fake nodes would run it anyway).
func TestRealNodeKeepsAPodWithoutItsConfigMapFromStarting(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-realnode-missing")
	tmpl := realTemplate(n, "orphan", []string{"orphan-cm-deleted"})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
	_, err := e2e.cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	must(t, framework.Eventually(ctx, 60*time.Second, "a FailedMount event for pod orphan", func(ctx context.Context) (bool, string, error) {
		evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=orphan"})
		if err != nil {
			return false, "", err
		}
		var reasons []string
		for _, e := range evs.Items {
			if e.Reason == "FailedMount" && strings.Contains(e.Message, `configmap "orphan-cm-deleted" not found`) {
				t.Logf("then: %s: %s", e.Reason, e.Message)
				return true, "", nil
			}
			reasons = append(reasons, e.Reason)
		}
		return false, fmt.Sprintf("events %v", reasons), nil
	}))
	p, err := e2e.cluster.Kube.CoreV1().Pods(ns).Get(ctx, "orphan", metav1.GetOptions{})
	must(t, err)
	if framework.ReadyPods([]corev1.Pod{*p}) != 0 {
		t.Fatalf("the pod without its ConfigMap is Ready: %s", framework.DescribePod(p))
	}
	t.Logf("then: pod orphan stays %s", framework.DescribePod(p))
}

// The controller chart's Deployment as a real pod on the real node, the image imported into the node's
// containerd: it talks to the API server through its in-cluster configuration and attaches.
func TestRealNodeRunsTheControllerChart(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ref, archive := localImage(t)
	ctx := context.Background()
	must(t, n.Import(ctx, logWriter{t}, archive))
	repo, tag, _ := strings.Cut(ref, ":")
	t.Logf("given: %s imported into the real node's containerd", ref)

	ns := givenNamespace(t, "e2e-realnode-chart")
	appNS := givenNamespace(t, "e2e-realnode-chart-app")
	// Helm 3: the hostNetwork patch is a shell script, an executable post-renderer, which Helm 4 no
	// longer runs (its --post-renderer names a plugin).
	r := &chartRelease{t: t, name: "cma-real", ns: ns, helm: helm3CLI(t)}
	args := []string{"upgrade", "--install", r.name, chartPath("configmap-attacher"), "-n", ns, "--wait", "--timeout", "3m",
		"--post-renderer", hostNetworkPostRenderer(t), "--set", "image.repository=" + repo, "--set", "image.pullPolicy=Never",
		"--set-string", "image.tag=" + tag}
	args = append(args, realNodeControllerValues(t, appNS)...)
	start := time.Now()
	if _, err := r.helm.Run(ctx, args...); err != nil {
		pods, _ := e2e.cluster.Kubectl(ctx, "get", "pods", "-n", ns, "-o", "wide")
		logs, _ := e2e.cluster.Kubectl(ctx, "logs", "-n", ns, "deploy/"+r.fullname(), "--tail", "50")
		t.Fatalf("%v\npods:\n%s\nlogs:\n%s", err, pods, logs)
	}
	t.Cleanup(func() { _, _ = r.helm.Run(context.Background(), "uninstall", r.name, "-n", ns, "--wait") })
	t.Logf("given: the chart installed, its Deployment available in %s", time.Since(start).Round(time.Millisecond))
	d := r.deployment() // the hardening it promises, now enforced by runc
	pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	must(t, err)
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != n.Name {
		t.Fatalf("want one controller pod on %s, got %d", n.Name, len(pods.Items))
	}
	pod := pods.Items[0]
	t.Logf("given: controller pod %s on %s: %s", pod.Name, pod.Spec.NodeName, framework.DescribePod(&pod))

	v1 := configRevision(t, appNS, "demo-cm", "v1")
	a := givenRollout(t, appNS, "demo", []string{v1}, nil) // its own pods on kwok nodes
	rs1 := a.currentRS(v1)
	must(t, e2e.cluster.WaitAttached(ctx, 60*time.Second, appNS, refs.ConfigMap, v1, rs1))
	t.Logf("then: %s attached to ReplicaSet %s", v1, rs1.Name)
	deployed := time.Now()
	v2, rs2 := a.deploy("v2")
	must(t, e2e.cluster.WaitAttached(ctx, attachWithin, appNS, refs.ConfigMap, v2, rs2))
	t.Logf("then: after a deploy, %s attached to ReplicaSet %s in %s", v2, rs2.Name, time.Since(deployed).Round(time.Millisecond))

	// Its logs come from the container, through the kubelet.
	logs, err := e2e.cluster.Kubectl(ctx, "logs", "-n", ns, pod.Name)
	must(t, err)
	if !strings.Contains(logs, v2) {
		t.Fatalf("the controller pod's logs do not mention %s:\n%s", v2, logs)
	}
	t.Logf("then: kubectl logs %s mentions %s (%d lines)", pod.Name, v2, strings.Count(logs, "\n"))
	if _, err := e2e.cluster.Exec(ctx, ns, pod.Name, "", "/bin/sh", "-c", "true"); err == nil {
		t.Fatal("kubectl exec -- /bin/sh succeeded: the image must have no shell")
	}
}

// realNodeControllerValues are the controller chart's values, as helm flags, that run its pod on the
// real node watching watchNS. The local API server listens on loopback only and there is no
// kube-proxy (Service IPs route nowhere): the pod shares the host's network (a post-renderer adds
// hostNetwork, the chart has no such value; hostNetworkPostRenderer, hostNetworkPlugin) on free ports,
// and extraEnv points it at the API server, as kube-proxy's rules would.
func realNodeControllerValues(t *testing.T, watchNS string) []string {
	t.Helper()
	apiHost, apiPort, _ := apiServer(t) // its serving certificate covers apiHost
	sets := []string{
		"watchNamespaces={" + watchNS + "}", "rbac.ownerReferencesPermissionEnforcement=true",
		"nodeSelector." + framework.RealNodeLabel + "=" + framework.RealNodeValue,
		"tolerations[0].key=" + framework.RealNodeLabel, "tolerations[0].operator=Equal",
		"tolerations[0].value=" + framework.RealNodeValue, "tolerations[0].effect=NoSchedule",
		fmt.Sprintf("metrics.port=%d", freePort(t)), fmt.Sprintf("healthProbe.port=%d", freePort(t)),
	}
	setStrings := []string{ // strings even when they look like numbers (an EnvVar's value)
		"extraEnv[0].name=KUBERNETES_SERVICE_HOST", "extraEnv[0].value=" + apiHost,
		"extraEnv[1].name=KUBERNETES_SERVICE_PORT", "extraEnv[1].value=" + apiPort,
	}
	var args []string
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	for _, s := range setStrings {
		args = append(args, "--set-string", s)
	}
	return args
}

// hostNetworkScript adds hostNetwork: true to the Deployment's pod of the manifests on stdin.
const hostNetworkScript = `#!/bin/sh
exec awk '/^kind: /{dep = ($2 == "Deployment")} {print} dep && /^      serviceAccountName: /{print "      hostNetwork: true"; print "      dnsPolicy: ClusterFirstWithHostNet"}'
`

// hostNetworkPostRenderer writes hostNetworkScript as Helm 3's executable post-renderer.
func hostNetworkPostRenderer(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host-network.sh")
	must(t, os.WriteFile(path, []byte(hostNetworkScript), 0o755))
	return path
}

// hostNetworkPlugin installs hostNetworkScript into h as Helm 4's post-renderer plugin host-network
// (a local directory: a development install, which Helm does not verify) and returns its name.
func hostNetworkPlugin(t *testing.T, h framework.Helm) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "host-network")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "host-network.sh"), []byte(hostNetworkScript), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(`apiVersion: v1
type: postrenderer/v1
name: host-network
version: 0.1.0
runtime: subprocess
runtimeConfig:
  platformCommand:
    - command: ${HELM_PLUGIN_DIR}/host-network.sh
`), 0o644))
	helmRun(t, h, "plugin", "install", dir)
	return "host-network"
}

func freePort(t *testing.T) int {
	t.Helper()
	var port int
	_, err := fmt.Sscanf(freeLoopbackAddr(t), "127.0.0.1:%d", &port)
	must(t, err)
	return port
}
