//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The image (hack/image/build.sh, `make image`: FROM scratch, the static binary, nonroot) run with
// podman exactly as the chart's pod runs: in-cluster configuration from a mounted service account
// (a TokenRequest token, the cluster CA, the namespace) and KUBERNETES_SERVICE_HOST/PORT, a read-only
// root filesystem, uid/gid 65532, every capability dropped, no privilege escalation. The container
// shares the host's network so 127.0.0.1 reaches the local kube-apiserver.

// saMountPath is where the kubelet mounts a pod's service account, and where client-go's in-cluster
// configuration reads it.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// podmanGlobalFlags are the global flags this project's machines need (cgroup v1, no systemd: crun
// and the systemd cgroup manager fail). PODMAN_FLAGS overrides them, as for hack/image/build.sh.
func podmanGlobalFlags() []string {
	if f, ok := os.LookupEnv("PODMAN_FLAGS"); ok {
		return strings.Fields(f)
	}
	return []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}
}

// podmanRunFlags are `podman run` flags every container here needs: the default ulimits (nofile
// 1048576) are refused on these machines.
var podmanRunFlags = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// requirePodman skips when podman is not installed, saying so; on CI (CI set) that is a failure:
// .ci/run installs podman, so its absence there is a broken setup, not a reason to skip.
func requirePodman(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		msg := "SKIPPED: podman is not installed, so the image is neither built nor run (Debian: apt-get install " +
			"--no-install-recommends podman runc; .ci/run installs them)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + ", and CI must run these tests")
		}
		t.Skip(msg)
	}
}

func podman(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "podman", append(podmanGlobalFlags(), args...)...)
}

var image struct {
	once         sync.Once
	ref, archive string
	err          error
}

// localImage builds the image once per test run with hack/image/build.sh (go build, podman build,
// podman save) and returns its reference and docker-archive path.
func localImage(t *testing.T) (ref, archive string) {
	t.Helper()
	requirePodman(t)
	image.once.Do(func() {
		start := time.Now()
		cmd := exec.Command(filepath.Join(e2e.root, "hack/image/build.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			image.err = fmt.Errorf("hack/image/build.sh: %w\n%s", err, stderr.String())
			return
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "IMAGE="); ok {
				image.ref = v
			} else if v, ok := strings.CutPrefix(l, "ARCHIVE="); ok {
				image.archive = v
			}
		}
		if image.ref == "" || image.archive == "" {
			image.err = fmt.Errorf("hack/image/build.sh printed no IMAGE=/ARCHIVE= lines:\n%s\n%s", out, stderr.String())
			return
		}
		t.Logf("image %s built in %s:\n%s", image.ref, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	})
	if image.err != nil {
		t.Fatal(image.err)
	}
	return image.ref, image.archive
}

func TestImageIsMinimalNonrootAndHasNoShell(t *testing.T) {
	t.Parallel()
	ref, archive := localImage(t)
	ctx := context.Background()

	out, err := podman(ctx, "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}} {{.Size}}", ref).Output()
	must(t, err)
	var user, entrypoint string
	var size int64
	if _, err := fmt.Sscan(string(out), &user, &entrypoint, &size); err != nil {
		t.Fatalf("podman image inspect: %q: %v", out, err)
	}
	if user != "65532:65532" || entrypoint != `["/configmap-attacher"]` {
		t.Fatalf("image config: user %q entrypoint %s; want 65532:65532 and [\"/configmap-attacher\"]", user, entrypoint)
	}
	st, err := os.Stat(archive)
	must(t, err)
	t.Logf("given: %s, user %s, entrypoint %s, %d bytes (%.1f MiB); archive %s %.1f MiB", ref, user, entrypoint,
		size, float64(size)/(1<<20), archive, float64(st.Size())/(1<<20))

	files := archiveFiles(t, archive)
	want := []string{"configmap-attacher", "etc/", "etc/group", "etc/passwd"}
	if !slices.Equal(files, want) {
		t.Fatalf("the image holds %q; want exactly %q", files, want)
	}
	t.Logf("then: the image holds only %q", files)

	// No shell: `kubectl exec -- sh` and friends have nothing to run.
	var stderr bytes.Buffer
	cmd := podman(ctx, append(append([]string{"run", "--rm", "--network", "none"}, podmanRunFlags...), "--entrypoint", "/bin/sh", ref, "-c", "true")...)
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(stderr.String(), "/bin/sh") {
		t.Fatalf("podman run --entrypoint /bin/sh: want a failure naming /bin/sh, got err=%v, stderr:\n%s", err, stderr.String())
	}
	t.Logf("then: podman run --entrypoint /bin/sh fails (exit %d): %s", ee.ExitCode(), lastLine(stderr.String()))
}

// archiveFiles lists the files in a docker-archive's layers, sorted.
func archiveFiles(t *testing.T, archive string) []string {
	t.Helper()
	f, err := os.Open(archive)
	must(t, err)
	defer f.Close()
	layers := map[string][]string{}
	var manifest []struct{ Layers []string }
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		switch {
		case h.Name == "manifest.json":
			must(t, json.NewDecoder(tr).Decode(&manifest))
		case strings.HasSuffix(h.Name, ".tar"):
			var names []string
			lr := tar.NewReader(tr)
			for {
				lh, err := lr.Next()
				if err == io.EOF {
					break
				}
				must(t, err)
				names = append(names, strings.TrimPrefix(lh.Name, "./"))
			}
			layers[h.Name] = names
		}
	}
	if len(manifest) != 1 {
		t.Fatalf("%s: want one image in manifest.json, got %d", archive, len(manifest))
	}
	var files []string
	for _, l := range manifest[0].Layers {
		files = append(files, layers[l]...)
	}
	sort.Strings(files)
	return files
}

func lastLine(s string) string { return lastLines(s, 1) }

// inCluster is what a pod gets to talk to the API server: the service account mount and the
// KUBERNETES_SERVICE_* variables.
type inCluster struct {
	saDir      string
	host, port string
}

// podEnvironment writes a pod's service account mount for ns/sa (a TokenRequest token, as the kubelet
// projects it; the cluster CA; the namespace) next to the API server's address.
func podEnvironment(t *testing.T, ns, sa string) inCluster {
	t.Helper()
	hour := int64(3600)
	tok, err := e2e.cluster.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	must(t, err)
	host, port, ca := apiServer(t)
	dir := t.TempDir()
	// The container runs as 65532: the mount must be readable by others, as the kubelet's is.
	must(t, os.Chmod(dir, 0o755))
	for name, data := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": ca, "namespace": []byte(ns)} {
		must(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	return inCluster{saDir: dir, host: host, port: port}
}

// apiServer returns the API server's host, port and CA from the cluster's kubeconfig, checking that its
// serving certificate covers that host (client-go verifies it against a pod's ca.crt).
func apiServer(t *testing.T) (host, port string, ca []byte) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e2e.cluster.Kubeconfig)
	must(t, err)
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil {
		t.Fatalf("%s: no current context/cluster", e2e.cluster.Kubeconfig)
	}
	cluster := cfg.Clusters[kctx.Cluster]
	ca = cluster.CertificateAuthorityData
	if len(ca) == 0 && cluster.CertificateAuthority != "" {
		ca, err = os.ReadFile(cluster.CertificateAuthority)
		must(t, err)
	}
	if len(ca) == 0 {
		t.Fatalf("%s: the cluster has no CA (a pod's ca.crt)", e2e.cluster.Kubeconfig)
	}
	u, err := url.Parse(cluster.Server)
	must(t, err)
	host, port = u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	checkServingCert(t, ca, host, port)
	return host, port, ca
}

// checkServingCert fails, listing the certificate's names, when the API server's serving certificate
// does not cover host (kwokctl's covers localhost, 127.0.0.1 and the machine's addresses).
func checkServingCert(t *testing.T, ca []byte, host, port string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the cluster CA is not PEM")
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(host, port),
		&tls.Config{RootCAs: pool, InsecureSkipVerify: true})
	must(t, err)
	defer conn.Close()
	cert := conn.ConnectionState().PeerCertificates[0]
	if err := cert.VerifyHostname(host); err != nil {
		t.Fatalf("the API server's certificate does not cover %s (DNS %v, IP %v): %v", host, cert.DNSNames, cert.IPAddresses, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
		t.Fatalf("the API server's certificate does not verify against the cluster CA: %v", err)
	}
}

// podmanArgs is `podman run` as the chart's pod runs the container: read-only root filesystem with no
// tmpfs added (Kubernetes adds none), uid/gid 65532, no capabilities, no privilege escalation, the
// service account mounted read-only, KUBERNETES_SERVICE_* pointing at the API server.
func (p inCluster) podmanArgs(name string, env []string) []string {
	args := []string{"run", "--rm", "--name", name, "--network", "host",
		"--read-only", "--read-only-tmpfs=false", "--user", "65532:65532",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-v", p.saDir + ":" + saMountPath + ":ro",
		"-e", "KUBERNETES_SERVICE_HOST=" + p.host, "-e", "KUBERNETES_SERVICE_PORT=" + p.port}
	args = append(args, podmanRunFlags...)
	for _, e := range env {
		args = append(args, "-e", e)
	}
	return args
}

// containerName is unique per test; a leftover of an interrupted run is removed first.
func containerName(t *testing.T, suffix string) string {
	name := "cma-e2e-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + "-" + suffix
	if len(name) > 63 {
		name = name[:63]
	}
	_ = podman(context.Background(), "rm", "-f", "--ignore", name).Run()
	return name
}

// The original Job, in the image: `-rollout R -namespace N -configmaps a,b` with the Job's environment,
// as the chart's jobRBAC ServiceAccount.
func TestImageJobModeAttachesInCluster(t *testing.T) {
	t.Parallel()
	ref, _ := localImage(t)
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-image-job")
	appNS := givenNamespace(t, "e2e-image-job-app")
	r := installChart(t, "cma-image-job", ns, "controller.enabled=false", "jobRBAC.enabled=true",
		"watchNamespaces={"+appNS+"}", "rbac.ownerReferencesPermissionEnforcement=true")
	a := configRevision(t, appNS, "demo-a", "a-v1")
	b := configRevision(t, appNS, "demo-b", "b-v1")
	rs := givenRollout(t, appNS, "demo", []string{a, b}, nil).currentRS(a, b)
	t.Logf("given: Rollout %s/demo on ReplicaSet %s mounting %s and %s; the chart's jobRBAC ServiceAccount %s/%s-job",
		appNS, rs.Name, a, b, ns, r.fullname())

	pod := podEnvironment(t, ns, r.fullname()+"-job")
	name := containerName(t, "job")
	args := append(pod.podmanArgs(name, []string{"VERSION=0.1.0"}), ref, "-rollout", "demo", "-namespace", appNS, "-configmaps", a+","+b)
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := podman(runCtx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	t.Logf("when: podman %s\n(exit %v after %s)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err,
		took.Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("the Job container failed: %v", err)
	}
	for _, cm := range []string{a, b} {
		must(t, framework.CheckAttached(configOwners(t, appNS, cm), rs))
	}
	t.Logf("then: it exits 0 in %s (container start included) and %s, %s are attached to ReplicaSet %s",
		took.Round(time.Millisecond), a, b, rs.Name)
}

// The controller chart's container: its Deployment's arguments (leader election included) and
// environment, as the chart's ServiceAccount.
func TestImageControllerAttachesInCluster(t *testing.T) {
	t.Parallel()
	ref, _ := localImage(t)
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-image-ctl")
	appNS := givenNamespace(t, "e2e-image-ctl-app")
	r := installChart(t, "cma-image-ctl", ns, "watchNamespaces={"+appNS+"}", "rbac.ownerReferencesPermissionEnforcement=true")
	d := r.deployment() // checks the pod hardening the container flags below reproduce
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]

	// Listen addresses on free loopback ports (host network); everything else as the chart says.
	metricsAddr, probeAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "-metrics-bind-address="):
			a = "-metrics-bind-address=" + metricsAddr
		case strings.HasPrefix(a, "-health-probe-bind-address="):
			a = "-health-probe-bind-address=" + probeAddr
		}
		args = append(args, a)
	}
	if !slices.Contains(args, "-leader-elect=true") {
		t.Fatalf("the chart's args %q: want -leader-elect=true", args)
	}
	env := containerEnv(t, c, ns)
	// The chart's memory limit, as the kubelet sets it: the container's cgroup, where the controller
	// reads it for the Go runtime's soft limit (-memory-limit-ratio).
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || !slices.Contains(args, "-memory-limit-ratio=0.8") {
		t.Fatalf("the chart's container: memory limit %v, args %q: want a limit and -memory-limit-ratio=0.8", c.Resources.Limits, args)
	}

	// A revision waits to be attached before the container starts: its attach measures start-up.
	v1 := configRevision(t, appNS, "demo-cm", "v1")
	a := givenRollout(t, appNS, "demo", []string{v1}, nil)
	rs1 := a.currentRS(v1)

	in := podEnvironment(t, ns, pod.ServiceAccountName)
	name := containerName(t, "controller")
	full := append(append(append(in.podmanArgs(name, env), "--memory", fmt.Sprint(limit.Value())), ref), args...)
	p := startContainer(t, name, full)
	t.Logf("when: podman %s", strings.Join(full, " "))

	must(t, e2e.cluster.WaitAttached(ctx, 60*time.Second, appNS, refs.ConfigMap, v1, rs1))
	firstAttach := time.Since(p.start)
	t.Logf("then: %s attached to ReplicaSet %s %s after the container started", v1, rs1.Name, firstAttach.Round(time.Millisecond))
	r.expectLeaderIn(p)
	// 80% of the 512Mi limit, rounded down: 536870912 * 8 / 10.
	if want := `"bytes":429496729`; !strings.Contains(p.logs(), want) {
		t.Fatalf("the controller did not take its soft memory limit from the container's (want %s in its log):\n%s", want, p.logs())
	}
	t.Logf("then: its soft memory limit is 80%% of the container's %s", limit.String())
	waitHTTP(t, "http://"+probeAddr+"/readyz")
	waitHTTP(t, "http://"+metricsAddr+"/metrics")
	t.Logf("then: it holds the Lease %s/%s; /readyz and /metrics answer 200", ns, r.fullname())

	// A deploy: the controller attaches the new revision to the new ReplicaSet.
	deployed := time.Now()
	v2, rs2 := a.deploy("v2")
	must(t, e2e.cluster.WaitAttached(ctx, attachWithin, appNS, refs.ConfigMap, v2, rs2))
	t.Logf("then: after a deploy, %s is attached to ReplicaSet %s %s after the Rollout changed", v2, rs2.Name,
		time.Since(deployed).Round(time.Millisecond))
	if p.exited() {
		t.Fatalf("the container exited:\n%s", p.logs())
	}
}

// containerEnv resolves the chart's env for a container outside a pod: literal values as they are,
// POD_NAMESPACE (the downward API's metadata.namespace) as the release namespace.
func containerEnv(t *testing.T, c corev1.Container, ns string) []string {
	t.Helper()
	var out []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			out = append(out, e.Name+"="+ns)
		default:
			t.Fatalf("the chart's env %s: cannot resolve %+v outside a pod", e.Name, e.ValueFrom)
		}
	}
	return out
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

func waitHTTP(t *testing.T, u string) {
	t.Helper()
	must(t, framework.Eventually(context.Background(), 30*time.Second, "GET "+u+" to answer 200", func(ctx context.Context) (bool, string, error) {
		return framework.HTTPOK(ctx, u)
	}))
}

// container is a `podman run` in the background; its output is kept for the test log.
type container struct {
	name  string
	cmd   *exec.Cmd
	start time.Time
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{}
}

func (c *container) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(b)
}

func (c *container) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// startContainer runs podman with args in the background and stops the container (SIGTERM, then
// kill after 10 s) at the end of the test.
func startContainer(t *testing.T, name string, args []string) *container {
	t.Helper()
	c := &container{name: name, done: make(chan struct{})}
	c.cmd = exec.Command("podman", append(podmanGlobalFlags(), args...)...)
	c.cmd.Stdout, c.cmd.Stderr = c, c
	c.start = time.Now()
	must(t, c.cmd.Start())
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = podman(context.Background(), "stop", "--ignore", "-t", "10", name).Run()
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
		}
		_ = podman(context.Background(), "rm", "-f", "--ignore", name).Run()
		t.Logf("container %s logs:\n%s", name, c.logs())
	})
	return c
}

// expectLeaderIn waits for the container to hold the chart's Lease.
func (r *chartRelease) expectLeaderIn(c *container) {
	r.t.Helper()
	must(r.t, framework.Eventually(context.Background(), 30*time.Second, "the Lease "+r.fullname()+" to be held", func(ctx context.Context) (bool, string, error) {
		if c.exited() {
			return false, "", fmt.Errorf("the container exited:\n%s", c.logs())
		}
		l, err := e2e.cluster.Kube.CoordinationV1().Leases(r.ns).Get(ctx, r.fullname(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder", nil
	}))
}
