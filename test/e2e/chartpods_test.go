//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// chartPods does for the chart's controller pods what kwok cannot, a kubelet's part: every pod of the
// release's Deployment that kwok runs gets a real process of the binary its image names, as the
// chart's ServiceAccount, with the pod's arguments and environment (listen addresses on free loopback
// ports); a pod deleted or being deleted gets SIGTERM, as the kubelet sends it, and its graceful
// shutdown hands the Lease over. So `helm upgrade` (a new image, more replicas) and `kubectl rollout
// restart` roll real controllers the way the Deployment controller rolls their pods.
//
// With pinning, each process serves its webhook at https://127.0.0.1:PORT and registers it there (the
// API server here cannot reach a Service); the chart's webhook configuration is first repointed from
// its Service to a URL, and when the process it points at goes, chartPods points it at another
// running one, as the Service would route to a live endpoint.
type chartPods struct {
	t      *testing.T
	r      *chartRelease
	images map[string]string // image -> binary
	dir    string            // the ServiceAccount kubeconfigs
	mu     sync.Mutex
	paused bool // a helm upgrade is applying the chart's webhook configuration as the chart writes it
	procs  map[types.UID]*podProcess
	gone   []*podProcess // stopped, for the logs
	// stopping counts the processes of pods gone that are still shutting down.
	stopping sync.WaitGroup
	stop     chan struct{}
	done     chan struct{}
}

type podProcess struct {
	pod, image string
	url        string // the webhook's, with pinning
	p          *framework.Process
}

// runChartPods starts mirroring the release's pods until the test ends; images maps each image the
// chart may name to the binary that image holds.
func runChartPods(t *testing.T, r *chartRelease, images map[string]string) *chartPods {
	t.Helper()
	c := &chartPods{t: t, r: r, images: images, dir: t.TempDir(), procs: map[types.UID]*podProcess{}, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	t.Cleanup(func() {
		close(c.stop)
		<-c.done
		c.stopping.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, pp := range c.procs {
			_ = pp.p.Stop()
			_ = letPodGo(context.Background(), r.ns, pp.pod)
			c.gone = append(c.gone, pp)
		}
		if t.Failed() {
			for _, pp := range c.gone {
				t.Logf("controller pod %s (%s) logs:\n%s", pp.pod, pp.image, pp.p.Logs())
			}
		}
	})
	return c
}

func (c *chartPods) loop() {
	defer close(c.done)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		if err := c.sync(context.Background()); err != nil {
			c.t.Logf("chart pods: %v", err)
		}
	}
}

// sync starts a process for each running pod that has none and stops those whose pod is gone or
// being deleted.
func (c *chartPods) sync(ctx context.Context) error {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "configmap-attacher", "app.kubernetes.io/instance": c.r.name})
	pods, err := e2e.cluster.Kube.CoreV1().Pods(c.r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	live := map[types.UID]corev1.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			live[p.UID] = p
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	stopped := false
	for uid, pp := range c.procs {
		if _, ok := live[uid]; !ok {
			delete(c.procs, uid)
			c.gone = append(c.gone, pp)
			stopped = true
			// Stopped beside the loop, as a kubelet stops a container: a webhook replica answers for
			// its shutdown delay first; its pod goes once it has exited.
			c.stopping.Add(1)
			go func() {
				defer c.stopping.Done()
				_ = pp.p.Stop()
				if err := letPodGo(context.Background(), c.r.ns, pp.pod); err != nil {
					c.t.Logf("chart pods: letting pod %s go: %v", pp.pod, err)
				}
			}()
		}
	}
	for uid, p := range live {
		if c.paused {
			break // started once Helm has applied the chart: a new process would register its URL meanwhile
		}
		if pp, ok := c.procs[uid]; ok && !pp.p.Exited() {
			continue
		} else if ok {
			// A container that exits is restarted (restartPolicy Always), as the kubelet would.
			c.t.Logf("chart pods: the process of pod %s exited; restarting it:\n%s", pp.pod, pp.p.Logs())
			c.gone = append(c.gone, pp)
			delete(c.procs, uid)
		}
		if err := holdPod(ctx, c.r.ns, p.Name); err != nil {
			return err
		}
		pp, err := c.start(ctx, p)
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		c.procs[uid] = pp
	}
	if stopped && !c.paused {
		return c.repoint(ctx)
	}
	return nil
}

// upgrade runs helm upgrade with these values, the chart's webhook configuration first put back as the
// chart writes it (behind its Service): otherwise Helm's three-way patch adds the Service back beside
// the URL, which the API server refuses. The upgrade does not wait for the roll; the configuration is
// pointed at a running process again as soon as Helm has applied the chart (a few seconds during which
// a pod creation in a pinning namespace may be refused and retried).
func (c *chartPods) upgrade(chart string, sets ...string) {
	c.t.Helper()
	c.upgradeWith(true, chart, sets...)
}

// upgradeToPolicy is upgrade to pinning.admission=policy: during the switch the chart renders the
// webhook configuration as it is live (its URL here), so it is not put back behind its Service first,
// and the running processes keep answering at its URL until the policy-mode leader deletes it.
func (c *chartPods) upgradeToPolicy(chart string, sets ...string) {
	c.t.Helper()
	c.upgradeWith(false, chart, sets...)
}

func (c *chartPods) upgradeWith(behindService bool, chart string, sets ...string) {
	c.t.Helper()
	ctx := context.Background()
	c.mu.Lock()
	c.paused = true
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, c.r.fullname(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || !behindService {
		err = nil // no webhook: pinning off, or the API server pins (pinning.admission=policy)
	} else if err == nil && cfg.Webhooks[0].ClientConfig.URL != nil {
		svc := fmt.Sprintf(`{"name":%q,"namespace":%q,"path":"/pin-pods","port":443}`, c.r.fullname()+"-webhook", c.r.ns)
		patch := `[{"op":"remove","path":"/webhooks/0/clientConfig/url"},{"op":"add","path":"/webhooks/0/clientConfig/service","value":` + svc + `}]`
		_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, c.r.fullname(), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	}
	c.mu.Unlock()
	must(c.t, err)
	args := []string{"upgrade", "--install", c.r.name, chart, "-n", c.r.ns}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	helmRun(c.t, c.r.helm, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = false
	must(c.t, c.toURL(ctx))
	must(c.t, c.repoint(ctx))
}

// start runs the pod's container as a process: the chart's arguments, its listen addresses on free
// loopback ports, the webhook at a URL instead of behind the Service.
func (c *chartPods) start(ctx context.Context, pod corev1.Pod) (*podProcess, error) {
	ctr := pod.Spec.Containers[0]
	bin, ok := c.images[ctr.Image]
	if !ok {
		return nil, fmt.Errorf("image %s: no binary for it", ctr.Image)
	}
	pp := &podProcess{pod: pod.Name, image: ctr.Image}
	// In policy mode the Service only names what the leader deletes after a switch: nothing is served.
	byWebhook := !slices.Contains(ctr.Args, "-pinning-admission=policy")
	var args []string
	for _, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "-metrics-bind-address="):
			a = "-metrics-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "-health-probe-bind-address="):
			a = "-health-probe-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "-webhook-bind-address="):
			continue
		case strings.HasPrefix(a, "-webhook-service=") && byWebhook:
			port, err := framework.FreeLoopbackPort()
			if err != nil {
				return nil, err
			}
			pp.url = fmt.Sprintf("https://127.0.0.1:%d", port)
			if err := c.toURL(ctx); err != nil {
				return nil, err
			}
			a = "-webhook-url=" + pp.url
		}
		args = append(args, a)
	}
	if pp.url != "" {
		args = append(args, "-webhook-failure-policy="+c.failurePolicy(ctx))
		// Behind the chart's Service a replica told to stop keeps answering while the endpoints drop
		// it (the default for -webhook-service); at a URL the default is none. The pods' processes
		// keep the Service's, as the chart runs them: a switch to policy mode relies on it (the old
		// replicas answer until kube-apiserver applies the new policies).
		if !slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "-webhook-shutdown-delay=") }) {
			args = append(args, "-webhook-shutdown-delay=5s")
		}
	}
	// The process authenticates as the pod's ServiceAccount through a kubeconfig, not the pod's mount.
	env := []string{"POD_NAMESPACE=" + c.r.ns, "LOG_FORMAT=text"}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil && e.Name != "LOG_FORMAT" && e.Name != "IS_IN_CLUSTER" {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	kubeconfig, err := e2e.cluster.ServiceAccountKubeconfig(ctx, c.r.ns, pod.Spec.ServiceAccountName, c.dir)
	if err != nil {
		return nil, err
	}
	p, err := framework.Binary{Path: bin, Kubeconfig: kubeconfig}.Start(ctx, env, args...)
	if err != nil {
		return nil, err
	}
	pp.p = p
	c.t.Logf("chart pods: pod %s (%s) runs: configmap-attacher %s", pod.Name, ctr.Image, strings.Join(args, " "))
	return pp, nil
}

// toURL repoints the chart's webhook configuration from its Service to a URL, once: the controller's
// own apply (URL mode) writes the rest.
func (c *chartPods) toURL(ctx context.Context) error {
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, c.r.fullname(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // no webhook (pinning.admission=policy)
	}
	if err != nil || cfg.Webhooks[0].ClientConfig.Service == nil {
		return err
	}
	patch := `[{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://127.0.0.1:1/pin-pods"}]`
	_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, c.r.fullname(), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (c *chartPods) failurePolicy(ctx context.Context) string {
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, c.r.fullname(), metav1.GetOptions{})
	if err == nil && cfg.Webhooks[0].FailurePolicy != nil {
		return string(*cfg.Webhooks[0].FailurePolicy)
	}
	return "Fail"
}

// repoint points the webhook configuration at a running process when the one it names has gone.
func (c *chartPods) repoint(ctx context.Context) error {
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, c.r.fullname(), metav1.GetOptions{})
	if err != nil || cfg.Webhooks[0].ClientConfig.URL == nil {
		return nil // no pinning
	}
	current := strings.TrimSuffix(*cfg.Webhooks[0].ClientConfig.URL, "/pin-pods")
	var urls []string
	for _, pp := range c.procs {
		if pp.url != "" {
			urls = append(urls, pp.url)
		}
	}
	if len(urls) == 0 || slices.Contains(urls, current) {
		return nil
	}
	slices.Sort(urls)
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":%q}]`, urls[0]+"/pin-pods")
	_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, c.r.fullname(), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// running lists the processes running now, as pod=image.
func (c *chartPods) running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, pp := range c.procs {
		out = append(out, pp.pod+"="+pp.image)
	}
	slices.Sort(out)
	return out
}

// waitRunning waits until n processes run, all of image.
func (c *chartPods) waitRunning(n int, image string) {
	c.t.Helper()
	must(c.t, framework.Eventually(context.Background(), 3*time.Minute, fmt.Sprintf("%d controller pods of %s running", n, image), func(context.Context) (bool, string, error) {
		now := c.running()
		ok := len(now) == n
		for _, r := range now {
			ok = ok && strings.HasSuffix(r, "="+image)
		}
		return ok, strings.Join(now, " "), nil
	}))
}

// kubeletFinalizer keeps a pod whose process runs here from vanishing before the process has stopped,
// as a real pod stays Terminating until the kubelet has stopped its containers: whoever waits for the
// pod to be gone (the release hook, the Deployment controller) then waits for the process too.
const kubeletFinalizer = "e2e.configmap-attacher.io/kubelet"

func holdPod(ctx context.Context, ns, name string) error {
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, kubeletFinalizer)
	_, err := e2e.cluster.Kube.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func letPodGo(ctx context.Context, ns, name string) error {
	patch := fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, kubeletFinalizer)
	_, err := e2e.cluster.Kube.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
