//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Months in production, compressed: the pinning webhook's certificates are replaced all the time and
// nothing that creates pods notices.

// webhookReplicas are controller replicas behind one address, as pods behind a Service.
type webhookReplicas struct {
	t        *testing.T
	ctx      context.Context
	ns, home string // pinning namespace, the controllers' own (Lease, certificate Secret)
	name     string // the webhook configuration
	proxy    *framework.ServiceProxy
	replicas []*webhookReplica
	// backends are the replicas' webhook addresses (by index); procs their processes.
	backends []string
	procs    []*framework.Process
}

// webhookReplica is one replica: where it serves the webhook and its probes.
type webhookReplica struct {
	backend, probes string
	p               *framework.Process
}

// givenWebhookReplicas starts n leader-elected replicas for ns, each serving the webhook on its own
// loopback port behind a proxy whose URL they register (-webhook-bind-address with -webhook-url),
// with serving certificates of validity.
func givenWebhookReplicas(t *testing.T, ns, home string, n int, validity time.Duration, extraArgs ...string) *webhookReplicas {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	must(t, e2e.cluster.EnablePinning(ctx, ns))
	proxy, err := framework.StartServiceProxy(ctx)
	must(t, err)
	r := &webhookReplicas{t: t, ctx: ctx, ns: ns, home: home, name: "pin-" + ns, proxy: proxy}
	t.Cleanup(func() {
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), r.name, metav1.DeleteOptions{})
	})
	for range n {
		r.start(validity, extraArgs...)
	}
	r.route(r.replicas...)
	for _, rep := range r.replicas {
		r.waitServing(rep)
	}
	t.Logf("given: %d controller replicas serving the webhook at https://%s (a proxy to %s), failurePolicy Fail, certificates of %s",
		n, proxy.Addr, strings.Join(r.backends, ", "), validity)
	return r
}

// start runs one more replica (not routed to yet).
func (r *webhookReplicas) start(validity time.Duration, extraArgs ...string) *webhookReplica {
	r.t.Helper()
	ports := make([]int, 2)
	for i := range ports {
		port, err := framework.FreeLoopbackPort()
		must(r.t, err)
		ports[i] = port
	}
	rep := &webhookReplica{backend: fmt.Sprintf("127.0.0.1:%d", ports[0]), probes: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	rep.p = startController(r.t, append([]string{"-leader-elect=true", "-leader-election-namespace=" + r.home, "-leader-election-id=" + r.name,
		"-health-probe-bind-address=" + rep.probes, "-pinning", "-pinning-admission=webhook", "-webhook-url=https://" + r.proxy.Addr, "-webhook-bind-address=" + rep.backend,
		"-webhook-configuration-name=" + r.name, "-webhook-failure-policy=Fail", "-webhook-cert-validity=" + validity.String()}, extraArgs...), r.ns)
	r.replicas = append(r.replicas, rep)
	r.backends = append(r.backends, rep.backend)
	r.procs = append(r.procs, rep.p)
	return rep
}

// route sends new connections to these replicas, as a Service's endpoints do.
func (r *webhookReplicas) route(reps ...*webhookReplica) {
	var backends []string
	for _, rep := range reps {
		backends = append(backends, rep.backend)
	}
	r.proxy.SetBackends(backends...)
}

// waitServing waits until rep is ready and serves a certificate the registered caBundle verifies.
func (r *webhookReplicas) waitServing(rep *webhookReplica) {
	r.t.Helper()
	must(r.t, framework.Eventually(r.ctx, 60*time.Second, "replica "+rep.backend+" serving a certificate the registered caBundle verifies", func(ctx context.Context) (bool, string, error) {
		if rep.p.Exited() {
			return false, "", fmt.Errorf("replica %s exited:\n%s", rep.backend, rep.p.Logs())
		}
		if !rep.ready() {
			return false, "not ready", nil
		}
		leaf, err := framework.ServedCertificate(rep.backend)
		if err != nil {
			return false, err.Error(), nil
		}
		if err := framework.VerifyServing(leaf, r.caBundle(ctx), "127.0.0.1"); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	}))
}

// ready reports whether the replica's /readyz answers 200.
func (rep *webhookReplica) ready() bool {
	resp, err := http.Get("http://" + rep.probes + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (r *webhookReplicas) caBundle(ctx context.Context) []byte {
	cfg, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.name, metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) == 0 {
		return nil
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

// givenPinnedWeb creates app-config (pinned, pinV1) and a Deployment web reading it in ns, whose namespace
// pins, and waits for its pod to read its revision's snapshot.
func givenPinnedWeb(t *testing.T, ns string) *appsv1.ReplicaSet {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	web, err := e2e.cluster.CreateDeployment(ctx, ns, "web", framework.PinnedTemplate("web", []string{"app-config"}, pinV1), nil)
	must(t, err)
	rs := deploymentReplicaSet(t, ns, web)
	must(t, e2e.cluster.WaitPods(ctx, 90*time.Second, rs, 1))
	pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
	return rs
}

// refusals are the FailedCreate Events in ns that name the webhook.
func refusals(ctx context.Context, t *testing.T, ns string) []string {
	t.Helper()
	return refusalsOutside(ctx, t, ns, time.Time{}, time.Time{})
}

// refusalsOutside are the FailedCreate Events in ns that name the webhook, but those whose every
// occurrence fell within [from, to] (whole seconds, as Events keep time).
func refusalsOutside(ctx context.Context, t *testing.T, ns string, from, to time.Time) []string {
	t.Helper()
	evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	var out []string
	for _, e := range evs.Items {
		if e.Reason != "FailedCreate" || !strings.Contains(e.Message, pinning.WebhookName) {
			continue
		}
		first, last := e.FirstTimestamp.Time, e.LastTimestamp.Time
		if !from.IsZero() && !first.Before(from.Truncate(time.Second)) && !last.After(to) {
			continue
		}
		out = append(out, fmt.Sprintf("%s ×%d at %s: %s", e.InvolvedObject.Name, e.Count, last.Format(time.TimeOnly), e.Message))
	}
	return out
}

// churned is what churn saw: the pods it deleted, each admitted (created) through the pod path at
// its creationTimestamp.
type churned struct {
	mu   sync.Mutex
	born []time.Time
}

func (c *churned) add(p corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.born = append(c.born, p.CreationTimestamp.Time)
}

// Load is how many pods churn deleted, each one its ReplicaSet created again.
func (c *churned) Load() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.born))
}

// longestWait is the longest time within [from, to] in which no pod was admitted, and when it began:
// how long the pod path went without a creation, whatever the pace the control plane kept.
func (c *churned) longestWait(from, to time.Time, alive []corev1.Pod) (time.Duration, time.Time) {
	c.mu.Lock()
	times := append([]time.Time{from, to}, c.born...)
	c.mu.Unlock()
	for _, p := range alive {
		times = append(times, p.CreationTimestamp.Time)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	var began time.Time
	for i := 1; i < len(times); i++ {
		if times[i].Before(from) || times[i-1].After(to) {
			continue
		}
		lo, hi := times[i-1], times[i]
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if d := hi.Sub(lo); d > longest {
			longest, began = d, lo
		}
	}
	return longest, began
}

// churn deletes a pod of rs every interval until ctx ends, as spot interruptions do: its ReplicaSet
// creates each again through the pod path. With more ReplicaSets (others), one of them in turn.
func churn(ctx context.Context, rs *appsv1.ReplicaSet, interval time.Duration, others ...*appsv1.ReplicaSet) *churned {
	c := new(churned)
	all := append([]*appsv1.ReplicaSet{rs}, others...)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rs := all[i%len(all)]
			pods, err := e2e.cluster.PodsOf(ctx, rs)
			if err != nil || len(pods) == 0 {
				continue
			}
			if e2e.cluster.Kube.CoreV1().Pods(rs.Namespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}) == nil {
				c.add(pods[0])
			}
		}
	}()
	return c
}

func fingerprint(pem []byte) string {
	sum := sha256.Sum256(pem)
	return hex.EncodeToString(sum[:6])
}

// Two replicas serve one webhook address under Fail, their serving certificates replaced every ~20 s
// for three minutes while a pod is created every second; the certificate Secret is deleted (a new CA
// comes in) and the caBundle wiped on the way. No pod is refused, every pod is pinned, and each replica's
// certificate verifies against the registered caBundle at every sample.
func TestPinningWebhookRotatesCertificatesUnderLoadAndRefusesNoPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "wh-rotate")
	home := givenNamespace(t, "wh-rotate-home")
	r := givenWebhookReplicas(t, ns, home, 2, 30*time.Second)
	rs := givenPinnedWeb(t, ns)

	const run = 3 * time.Minute
	t.Logf("when: for %s a pod of %s is deleted every second (its ReplicaSet creates another through the webhook), "+
		"the certificate Secret is deleted at 40 s and the caBundle wiped at 120 s", run, rs.Name)
	runCtx, stop := context.WithTimeout(ctx, run)
	defer stop()
	created := churn(runCtx, rs, time.Second)
	var (
		samples, wiped  int
		serials, blobs  = map[string]bool{}, map[string]bool{}
		failures        []string
		restoredAfter   time.Duration
		deleted, wipeAt bool
		wipedAt         time.Time
	)
	start := time.Now()
	for runCtx.Err() == nil {
		time.Sleep(time.Second)
		since := time.Since(start)
		switch {
		case since > 40*time.Second && !deleted:
			deleted = true
			must(t, e2e.cluster.Kube.CoreV1().Secrets(home).Delete(ctx, r.name+"-webhook-tls", metav1.DeleteOptions{}))
			t.Logf("at %s: deleted Secret %s/%s-webhook-tls", since.Round(time.Second), home, r.name)
		case since > 120*time.Second && !wipeAt:
			wipeAt = true
			patch := `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":""}]`
			_, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, r.name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			must(t, err)
			wiped := time.Now()
			wipedAt = wiped
			for len(r.caBundle(ctx)) == 0 && time.Since(wiped) < 30*time.Second {
				time.Sleep(10 * time.Millisecond)
			}
			restoredAfter = time.Since(wiped)
			t.Logf("at %s: wiped the caBundle; restored %s later", since.Round(time.Second), restoredAfter.Round(time.Millisecond))
		}
		bundle := r.caBundle(ctx)
		if len(bundle) == 0 {
			wiped++
			continue
		}
		blobs[fingerprint(bundle)] = true
		for i, b := range r.backends {
			leaf, err := framework.ServedCertificate(b)
			if err == nil {
				err = framework.VerifyServing(leaf, bundle, "127.0.0.1")
				serials[leaf.SerialNumber.String()] = true
			}
			samples++
			if err != nil {
				failures = append(failures, fmt.Sprintf("at %s replica %d: %v", since.Round(time.Second), i, err))
			}
		}
	}
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))

	t.Logf("then: %d pods created, %d connections from kube-apiserver to the replicas, %d certificate samples (%d skipped while the caBundle was empty), %d serving certificates and %d caBundles seen",
		created.Load(), r.proxy.Connections(), samples, wiped, len(serials), len(blobs))
	if len(failures) > 0 {
		t.Fatalf("%d samples did not verify against the registered caBundle: %s", len(failures), strings.Join(failures, "; "))
	}
	if len(serials) < 8 || len(blobs) < 2 {
		t.Fatalf("%d serving certificates and %d caBundles in %s; want one every ~20 s and the new CA of the deleted Secret", len(serials), len(blobs), run)
	}
	if !wipeAt || restoredAfter > 5*time.Second {
		t.Fatalf("the wiped caBundle came back after %s; want within seconds", restoredAfter)
	}
	// A pod created while the caBundle is wiped (until kube-apiserver has loaded the restored one, a
	// second or two) cannot be admitted by anyone: only the restore ends the wipe, and it is timed above.
	wipeWindow := wipedAt.Add(restoredAfter + 3*time.Second)
	if refused := refusalsOutside(ctx, t, ns, wipedAt, wipeWindow); len(refused) > 0 {
		t.Fatalf("pod creations refused by the webhook outside the wipe (%s to %s): %s", wipedAt.Format(time.TimeOnly), wipeWindow.Format(time.TimeOnly), strings.Join(refused, "; "))
	}
	if during := refusals(ctx, t, ns); len(during) > 0 {
		t.Logf("then: refused while the caBundle was wiped: %s", strings.Join(during, "; "))
	}
	// Pods throughout, not a pace: how fast a ReplicaSet creates pods again is the control plane's
	// (179 in 3 min alone, 78 among the suite's parallel stories on 2 cores); what the story needs is
	// pods admitted all along, so that no certificate (30 s) is served without one.
	alive, err := e2e.cluster.PodsOf(ctx, rs)
	must(t, err)
	wait, began := created.longestWait(start, start.Add(run), alive)
	if wait >= 30*time.Second {
		t.Fatalf("no pod created for %s from %s on: the story needs pods created throughout (%d in %s)", wait.Round(time.Second), began.Sub(start).Round(time.Second), created.Load(), run)
	}
	t.Logf("then: at most %s without a pod created (from %s on)", wait.Round(time.Second), began.Sub(start).Round(time.Second))
	pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
	t.Log("then: no pod creation refused, every pod of " + rs.Name + " reads its revision's snapshot")
}

// A rolling upgrade of two replicas under Fail while a pod is created every half second: each new
// replica is routed to once it serves (it loads the CA the Secret holds), each old one is told to stop,
// keeps answering while it drops out of the routing (-webhook-shutdown-delay; its readiness fails at
// once), and hands the Lease over; the new ones shorten the certificates' lifetime, which the new
// leader applies at once under the same CA. No pod is refused.
func TestPinningWebhookRollingUpgradeRefusesNoPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "wh-upgrade")
	home := givenNamespace(t, "wh-upgrade-home")
	r := givenWebhookReplicas(t, ns, home, 2, time.Hour, "-webhook-shutdown-delay=2s")
	rs := givenPinnedWeb(t, ns)
	before := r.caBundle(ctx)

	t.Log("when: a rolling upgrade replaces both replicas one at a time, the new ones with -webhook-cert-validity=30s, while a pod of web is deleted every half second")
	churnCtx, stop := context.WithCancel(ctx)
	created := churn(churnCtx, rs, 500*time.Millisecond)
	for i := range 2 {
		old := r.replicas[i]
		next := r.start(30*time.Second, "-webhook-shutdown-delay=2s")
		r.waitServing(next)
		r.route(r.replicas[i:]...)
		stopped := make(chan error, 1)
		go func() { stopped <- old.p.Stop() }()
		must(t, framework.Eventually(ctx, 10*time.Second, "replica "+old.backend+" no longer ready", func(context.Context) (bool, string, error) {
			return !old.ready(), "ready", nil
		}))
		r.route(r.replicas[i+1:]...) // the endpoints drop it; it still answers for 2 s
		must(t, <-stopped)
		t.Logf("then: replica %s replaced by %s", old.backend, next.backend)
	}
	must(t, framework.Eventually(ctx, 60*time.Second, "both new replicas serving a 30 s certificate", func(ctx context.Context) (bool, string, error) {
		for _, rep := range r.replicas[2:] {
			leaf, err := framework.ServedCertificate(rep.backend)
			if err != nil {
				return false, err.Error(), nil
			}
			// What it has left, not NotAfter - NotBefore: certificates are backdated an hour.
			if left := time.Until(leaf.NotAfter); left > 2*time.Minute {
				return false, fmt.Sprintf("%s serves a certificate with %s left", rep.backend, left.Round(time.Second)), nil
			}
			if err := framework.VerifyServing(leaf, r.caBundle(ctx), "127.0.0.1"); err != nil {
				return false, err.Error(), nil
			}
		}
		return true, "", nil
	}))
	stop()
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))

	t.Logf("then: %d pods created during the upgrade", created.Load())
	if refused := refusals(ctx, t, ns); len(refused) > 0 {
		t.Fatalf("pod creations refused during the upgrade: %s", strings.Join(refused, "; "))
	}
	if !bytes.Equal(before, r.caBundle(ctx)) {
		t.Fatal("the caBundle changed during the upgrade: a replica made a CA of its own")
	}
	pinnedRollout{t: t, ns: ns}.expectReads(rs, pinV1)
	t.Log("then: no pod creation refused, the same CA throughout, the new replicas serve certificates of the new lifetime, every pod pinned")
}

// The webhook never gates its own namespace nor kube-system: with every replica gone, a labelled
// home namespace still gets its pods. A pod labelled configmap-attacher.io/pinning: disabled is let
// through in a pinning namespace: the emergency escape.
func TestPinningWebhookNeverLocksItsOwnNamespaceAndHasAnEscape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "wh-lockout")
	home := givenNamespace(t, "wh-lockout-home")
	r := givenWebhookReplicas(t, ns, home, 1, time.Hour)
	must(t, e2e.cluster.EnablePinning(ctx, home))
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, ns, "app-config", pinV1))
	t.Log("when: its only replica is gone, under Fail, and Deployments are created in its own namespace (labelled for pinning) and, with the escape label, in the pinning namespace")
	must(t, r.procs[0].Stop())
	self, err := e2e.cluster.CreateDeployment(ctx, home, "controller", framework.PodTemplate("controller", nil, nil), nil)
	must(t, err)
	escape := framework.PinnedTemplate("escape", []string{"app-config"}, pinV1)
	escape.Labels["configmap-attacher.io/pinning"] = "disabled"
	esc, err := e2e.cluster.CreateDeployment(ctx, ns, "escape", escape, nil)
	must(t, err)
	for _, x := range []struct {
		ns string
		d  *appsv1.Deployment
	}{{home, self}, {ns, esc}} {
		must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, deploymentReplicaSet(t, x.ns, x.d), 1))
	}
	pods, err := e2e.cluster.PodsOf(ctx, deploymentReplicaSet(t, ns, esc))
	must(t, err)
	if got := framework.ReadsConfigMaps(&pods[0]); len(got) != 1 || got[0] != "app-config" {
		t.Fatalf("the escaped pod reads %v; want app-config itself (unpinned, as asked)", got)
	}
	t.Log("then: both run; the escaped pod reads app-config itself")
	if refused := refusals(ctx, t, home); len(refused) > 0 {
		t.Fatalf("the webhook gated its own namespace: %s", strings.Join(refused, "; "))
	}
}

// createProtected creates n ConfigMaps opted in (the controller puts the in-use finalizer on each),
// 16 at a time, and waits until all carry it.
func createProtected(t *testing.T, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("config-%05d", i), Namespace: ns,
				Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}}, Data: map[string]string{"n": fmt.Sprint(i)}}
			_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range n {
		must(t, <-errs)
	}
	must(t, framework.Eventually(ctx, 5*time.Minute, fmt.Sprintf("%d ConfigMaps protected", n), func(ctx context.Context) (bool, string, error) {
		got := len(finalizersIn(t, ns))
		return got >= n, fmt.Sprintf("%d protected", got), nil
	}))
}

// `helm uninstall` of a release with pinning on (a fail-closed webhook) and 5,000 protected objects,
// while a pinning namespace keeps creating pods: the hook takes the webhook out of the pod path first,
// so no pod is refused while the controller goes, then lifts every finalizer at the chart's rate.
func TestUninstallWithPinningRefusesNoPodAndReleasesEveryObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const objects = 5000
	ns := givenNamespace(t, "e2e-uninstall-pin")
	appNS := givenNamespace(t, "e2e-uninstall-pin-app")
	r := installChart(t, "cma-unpin", ns, "watchNamespaces={"+appNS+"}", "pinning.enabled=true", "pinning.admission=webhook")
	d := r.deployment()
	must(t, e2e.cluster.EnablePinning(ctx, appNS))
	p := r.runPinningController(d)
	rs := givenPinnedWeb(t, appNS)
	createProtected(t, appNS, objects)
	t.Logf("given: the chart with pinning (failurePolicy Fail), %d protected ConfigMaps in %s, a Deployment there whose pods are pinned", objects, appNS)

	t.Log("when: helm uninstall (its pre-delete hook, then the release's objects) while a pod of web is deleted every half second")
	churnCtx, stopChurn := context.WithCancel(ctx)
	created := churn(churnCtx, rs, 500*time.Millisecond)
	start := time.Now()
	res := r.runReleaseHook(p)
	hook := time.Since(start)
	helmRun(t, r.helm, "uninstall", r.name, "-n", ns, "--no-hooks", "--wait")
	after := created.Load()
	must(t, framework.Eventually(ctx, 30*time.Second, "pods created with nothing left of us", func(context.Context) (bool, string, error) {
		return created.Load() >= after+2, fmt.Sprintf("%d", created.Load()-after), nil
	}))
	stopChurn()
	must(t, e2e.cluster.WaitPods(ctx, 60*time.Second, rs, 1))

	t.Logf("then: the hook took %s (%d objects released: %s); %d pods created meanwhile", hook.Round(100*time.Millisecond), objects,
		lastLine(res.Stdout), created.Load())
	if refused := refusals(ctx, t, appNS); len(refused) > 0 {
		t.Fatalf("pod creations refused during the uninstall: %s", strings.Join(refused, "; "))
	}
	if left := finalizersIn(t, appNS); len(left) > 0 {
		t.Fatalf("after uninstall %d objects still carry the finalizer, e.g. %s", len(left), left[0])
	}
	if _, err := e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.fullname(), metav1.GetOptions{}); err == nil {
		t.Fatal("the webhook configuration is still there after uninstall")
	}
	if created.Load() < 4 {
		t.Fatalf("only %d pods created during the uninstall; the story needs pods created throughout", created.Load())
	}
	t.Log("then: no pod creation refused, no finalizer left, no webhook configuration left")
}

// The chart's pinning values, rendered: pinning.hostNetwork puts the pods in the node's network (DNS
// kept), pinning.timeoutSeconds and pinning.certificateValidity reach the webhook and the controller,
// and the release hook takes the webhook out first, at kubeAPI.qps, within its deadline.
func TestChartPinningValuesRender(t *testing.T) {
	t.Parallel()
	h := helmCLI(t)
	args := []string{"template", "cma", chartPath("configmap-attacher"), "-n", "cma-system", "--set", "pinning.enabled=true",
		"--set", "pinning.hostNetwork=true", "--set", "pinning.timeoutSeconds=7", "--set", "pinning.certificateValidity=720h",
		"--set", "releaseHook.activeDeadlineSeconds=300", "--set", "priorityClassName=system-cluster-critical"}
	objs, err := framework.ParseManifests(helmRun(t, h, args...))
	must(t, err)
	var d appsv1.Deployment
	var hook map[string]any
	var timeout string
	// number reads a number as the manifest parser decoded it (an int64 or a float64).
	number := func(obj map[string]any, fields ...string) string {
		v, _, _ := unstructured.NestedFieldNoCopy(obj, fields...)
		return fmt.Sprint(v)
	}
	for _, o := range objs {
		switch o.GetKind() + "/" + o.GetName() {
		case "Deployment/cma-configmap-attacher":
			must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
		case "Job/cma-configmap-attacher-release":
			hook = o.Object
		case "MutatingWebhookConfiguration/cma-configmap-attacher":
			ws, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			timeout = number(ws[0].(map[string]any), "timeoutSeconds")
		}
	}
	pod := d.Spec.Template.Spec
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("pinning.hostNetwork: hostNetwork %v, dnsPolicy %q; want true, ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if !slices.Contains(pod.Containers[0].Args, "-webhook-cert-validity=720h") {
		t.Errorf("pinning.certificateValidity: the controller's args %v lack -webhook-cert-validity=720h", pod.Containers[0].Args)
	}
	if timeout != "7" {
		t.Errorf("pinning.timeoutSeconds: the webhook's timeoutSeconds is %s; want 7", timeout)
	}
	deadline := number(hook, "spec", "activeDeadlineSeconds")
	containers, _, _ := unstructured.NestedSlice(hook, "spec", "template", "spec", "containers")
	cargs, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	prio, _, _ := unstructured.NestedString(hook, "spec", "template", "spec", "priorityClassName")
	if deadline != "300" || prio != "system-cluster-critical" || !slices.Contains(cargs, "-delete-webhook-configuration=cma-configmap-attacher") ||
		!slices.Contains(cargs, "-kube-api-qps=100") || slices.Index(cargs, "-delete-webhook-configuration=cma-configmap-attacher") > slices.Index(cargs, "-stop-controller=cma-system/cma-configmap-attacher") {
		t.Errorf("the release hook: deadline %s, priorityClassName %q, args %v; want 300, the controller's class, the webhook deleted before the controller stops, at kubeAPI.qps", deadline, prio, cargs)
	}
}
