//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Upgrading ourselves: the chart's controller pods run for real (chartPods) while the Deployment
// controller rolls them, beside the write-up's paused canary and its spot-replaced pod, and while many
// Rollouts deploy at once.

// auditConfig watches every ConfigMap of the namespaces until the test ends and records what must never
// happen: our finalizer taken off an object that is not being deleted, an ownerReference removed or
// written twice.
type auditConfig struct {
	mu       sync.Mutex
	problems []string
	refsSeen map[string]int // "ns/cm uid": ownerReferences of that uid added
}

func startAudit(t *testing.T, namespaces ...string) *auditConfig {
	t.Helper()
	a := &auditConfig{refsSeen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ns := range namespaces {
		w, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		must(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]*corev1.ConfigMap{}
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				a.observe(last[cm.Name], cm)
				last[cm.Name] = cm
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *auditConfig) observe(before, after *corev1.ConfigMap) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := after.Namespace + "/" + after.Name
	if before != nil && slices.Contains(before.Finalizers, api.InUseFinalizer) && !slices.Contains(after.Finalizers, api.InUseFinalizer) &&
		after.DeletionTimestamp == nil && after.Labels[api.RevisionedLabel] == api.RevisionedValue {
		a.problems = append(a.problems, key+": our finalizer was removed from an opted-in object nobody deleted")
	}
	had := map[types.UID]bool{}
	if before != nil {
		for _, o := range before.OwnerReferences {
			had[o.UID] = true
		}
	}
	seen := map[types.UID]bool{}
	for _, o := range after.OwnerReferences {
		if seen[o.UID] {
			a.problems = append(a.problems, fmt.Sprintf("%s: two ownerReferences to %s %s", key, o.Kind, o.Name))
		}
		seen[o.UID] = true
		if !had[o.UID] {
			a.refsSeen[key+" "+string(o.UID)]++
			if a.refsSeen[key+" "+string(o.UID)] > 1 {
				a.problems = append(a.problems, fmt.Sprintf("%s: the ownerReference to %s %s was written again after it was removed", key, o.Kind, o.Name))
			}
		}
	}
	for uid := range had {
		if !seen[uid] {
			a.problems = append(a.problems, fmt.Sprintf("%s: an ownerReference (uid %s) was removed", key, uid))
		}
	}
}

func (a *auditConfig) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.problems) > 0 {
		t.Fatalf("the audit of every ConfigMap change saw:\n%s", strings.Join(a.problems, "\n"))
	}
	t.Logf("then: the audit of every ConfigMap change saw no finalizer removed from a live object, no ownerReference removed or written twice (%d written)", len(a.refsSeen))
}

// storm is n Rollouts of 1 replica, each on a config revision of its own.
type storm struct {
	t  *testing.T
	ns string
	n  int
}

func givenStorm(t *testing.T, ns string, n int) *storm {
	t.Helper()
	s := &storm{t: t, ns: ns, n: n}
	s.each(func(ctx context.Context, i int) error {
		cm, err := e2e.cluster.CreateConfigRevision(ctx, ns, fmt.Sprintf("app-%03d-cm", i), map[string]string{"v": "1"}, true)
		if err != nil {
			return err
		}
		return e2e.cluster.CreateRollout(ctx, ns, fmt.Sprintf("app-%03d", i), framework.RolloutSpec{Replicas: 1, ConfigMaps: []string{cm.Name}})
	})
	return s
}

// each runs f for every Rollout, 16 at a time, retrying conflicts.
func (s *storm) each(f func(ctx context.Context, i int) error) {
	s.t.Helper()
	ctx := context.Background()
	sem := make(chan struct{}, 16)
	errs := make(chan error, s.n)
	var wg sync.WaitGroup
	for i := range s.n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error { return f(ctx, i) })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(s.t, err)
	}
}

// deploy gives every Rollout a new config revision, content v.
func (s *storm) deploy(v string) {
	s.each(func(ctx context.Context, i int) error {
		cm, err := e2e.cluster.CreateConfigRevision(ctx, s.ns, fmt.Sprintf("app-%03d-cm", i), map[string]string{"v": v}, true)
		if err != nil {
			return err
		}
		return e2e.cluster.SetRolloutConfig(ctx, s.ns, fmt.Sprintf("app-%03d", i), []string{cm.Name}, nil)
	})
}

// expectAttachedAndProtected waits until every ReplicaSet of the storm has every config revision its
// template uses attached, each exactly once, and every revision carries our finalizer.
func (s *storm) expectAttachedAndProtected(within time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	must(s.t, framework.Eventually(ctx, within, "every ReplicaSet's config attached and protected", func(ctx context.Context) (bool, string, error) {
		rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		cms, err := e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		byName := map[string]corev1.ConfigMap{}
		for _, cm := range cms.Items {
			byName[cm.Name] = cm
		}
		waiting := 0
		var first string
		for _, rs := range rss.Items {
			for r := range refs.FromPodSpec(&rs.Spec.Template.Spec) {
				cm, ok := byName[r.Name]
				if !ok {
					return false, "", fmt.Errorf("ConfigMap %s, used by ReplicaSet %s, is gone", r.Name, rs.Name)
				}
				n := 0
				for _, o := range cm.OwnerReferences {
					if o.UID == rs.UID {
						n++
					}
				}
				if n != 1 || !slices.Contains(cm.Finalizers, api.InUseFinalizer) {
					waiting++
					first = fmt.Sprintf("%s on %s: %d references, finalizers %v", cm.Name, rs.Name, n, cm.Finalizers)
				}
			}
		}
		return waiting == 0 && len(rss.Items) >= 2*s.n, fmt.Sprintf("%d ReplicaSets, %d pairs waiting (%s)", len(rss.Items), waiting, first), nil
	}))
	s.t.Logf("then: all %d Rollouts' ReplicaSets have their config attached exactly once, and every revision carries %s", s.n, api.InUseFinalizer)
}

// A helm upgrade of our chart (a new image, 1 → 2 replicas, pinning turned on) and then a rolling
// restart, both while 200 Rollouts deploy a new config revision each, beside a paused canary whose old
// pod a spot node takes: nothing is lost, no finalizer is removed, every attach is written once.
func TestUpgradeAndRollingRestartDuringAStormLoseNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-upgrade")
	appNS := givenNamespace(t, "e2e-upgrade-app")
	stormNS := givenNamespace(t, "e2e-upgrade-storm")
	for _, n := range []string{appNS, stormNS} {
		must(t, e2e.cluster.EnablePinning(ctx, n)) // the webhook, once on, sees every pod created there
	}
	old, current := "localhost/configmap-attacher:e2e-previous", "localhost/configmap-attacher:e2e-current"
	sets := []string{"watchNamespaces={" + appNS + "," + stormNS + "}", "rbac.ownerReferencesPermissionEnforcement=true",
		"image.repository=localhost/configmap-attacher", "image.pullPolicy=Never"}
	r := installChart(t, "cma-upgrade", ns, append(sets, "image.tag=e2e-previous", "replicas=1")...)
	t.Cleanup(func() {
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), r.fullname(), metav1.DeleteOptions{})
	})
	pods := runChartPods(t, r, map[string]string{old: e2e.bin.Path, current: e2e.bin.Path})
	pods.waitRunning(1, old)
	c := givenPausedCanary(t, appNS)
	const n = 200
	start := time.Now()
	s := givenStorm(t, stormNS, n)
	s.expectAttachedAndProtectedFirst(3 * time.Minute)
	t.Logf("given: the chart (1 replica, %s), the paused canary, %d Rollouts on their first revision (%s)", old, n, time.Since(start).Round(time.Second))
	audit := startAudit(t, appNS, stormNS)

	t.Logf("when: the %d Rollouts deploy, and meanwhile helm upgrade (%s, 2 replicas, pinning on)", n, current)
	stormDone := make(chan struct{})
	go func() { defer close(stormDone); s.deploy("2") }()
	r.upgrade(append(sets, "image.tag=e2e-current", "replicas=2", "pinning.enabled=true", "pinning.admission=webhook")...)
	pods.waitRunning(2, current)
	c.spotReplace("during the storm, after the upgrade")
	t.Log("when: kubectl rollout restart of the controller, the storm still deploying")
	_, err := e2e.cluster.Kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/"+r.fullname())
	must(t, err)
	<-stormDone
	must(t, framework.Eventually(ctx, 3*time.Minute, "the restart rolled out", func(ctx context.Context) (bool, string, error) {
		d, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Get(ctx, r.fullname(), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		done := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.Replicas == 2 && d.Status.AvailableReplicas == 2
		return done, fmt.Sprintf("updated %d of %d", d.Status.UpdatedReplicas, d.Status.Replicas), nil
	}))
	pods.waitRunning(2, current)
	t.Logf("then: the storm and the restart are done after %s; running: %v", time.Since(start).Round(time.Second), pods.running())

	s.expectAttachedAndProtected(3 * time.Minute)
	c.spotReplace("then")
	c.expectIntact("then")
	audit.check(t)
}

// expectAttachedAndProtectedFirst waits for the first revisions only (one ReplicaSet per Rollout).
func (s *storm) expectAttachedAndProtectedFirst(within time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	must(s.t, framework.Eventually(ctx, within, "every first revision attached and protected", func(ctx context.Context) (bool, string, error) {
		cms, err := e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: api.RevisionedLabel + "=" + api.RevisionedValue})
		if err != nil {
			return false, "", err
		}
		ok := 0
		for _, cm := range cms.Items {
			if len(cm.OwnerReferences) == 1 && slices.Contains(cm.Finalizers, api.InUseFinalizer) {
				ok++
			}
		}
		return ok == s.n, fmt.Sprintf("%d of %d", ok, s.n), nil
	}))
}

// previousRelease builds the binary and charts of the commit before HEAD: what its release holds (its
// image is FROM scratch with nothing but that binary; the image tests prove the image runs as the
// chart's pod). Skipped, saying so, in a checkout without history.
func previousRelease(t *testing.T) (commit, binary, charts string) {
	t.Helper()
	out, err := exec.Command("git", "-C", e2e.root, "rev-parse", "--short", "HEAD~1").Output()
	if err != nil {
		t.Skipf("SKIPPED: no previous commit in this checkout (%v)", err)
	}
	commit = strings.TrimSpace(string(out))
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", e2e.root, commit, dir))
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, b)
	}
	binary = filepath.Join(dir, "configmap-attacher")
	start := time.Now()
	build := exec.Command("go", "build", "-o", binary, "./cmd/configmap-attacher")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", commit, err, b)
	}
	t.Logf("given: the previous commit %s built in %s", commit, time.Since(start).Round(time.Second))
	return commit, binary, filepath.Join(dir, "charts")
}

// The previous commit's release, pinning on, upgraded to this one: for a minute the previous
// controller leads while this one's webhook answers (the Deployment waits minReadySeconds before
// counting a new pod, so the old pods stay that long). Nothing is lost: the paused pinned canary's old
// pods, replaced by a spot node during the skew and after, read their revision's snapshot.
func TestUpgradeFromThePreviousReleaseLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	commit, prevBin, prevCharts := previousRelease(t)
	ns := givenNamespace(t, "e2e-skew")
	appNS := givenNamespace(t, "e2e-skew-app")
	must(t, e2e.cluster.EnablePinning(ctx, appNS))
	prev, current := "localhost/configmap-attacher:"+commit, "localhost/configmap-attacher:e2e-current"
	sets := []string{"watchNamespaces={" + appNS + "}", "rbac.ownerReferencesPermissionEnforcement=true", "pinning.enabled=true",
		"image.repository=localhost/configmap-attacher", "image.pullPolicy=Never"}
	r := &chartRelease{t: t, name: "cma-skew", ns: ns, helm: helmCLI(t)}
	args := []string{"upgrade", "--install", r.name, filepath.Join(prevCharts, "configmap-attacher"), "-n", ns, "--wait", "--timeout", "2m",
		"--set-string", "image.tag=" + commit} // a short hash of digits only (9358371) is a number to --set
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	helmRun(t, r.helm, args...)
	t.Cleanup(func() {
		_, _ = r.helm.Run(context.Background(), "uninstall", r.name, "-n", ns, "--wait", "--no-hooks", "--ignore-not-found")
		_ = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), r.fullname(), metav1.DeleteOptions{})
	})
	pods := runChartPods(t, r, map[string]string{prev: prevBin, current: e2e.bin.Path})
	pods.waitRunning(2, prev)
	must(t, e2e.cluster.PutPinnedConfigMap(ctx, appNS, "app-config", pinV1))
	tmpl := framework.PinnedTemplate("demo", []string{"app-config"}, pinV1)
	must(t, e2e.cluster.CreateRollout(ctx, appNS, "demo", framework.RolloutSpec{Replicas: 3, Template: &tmpl}))
	pr := pinnedRollout{t: t, ns: appNS}
	stable := pr.current(pinV1, 3)
	pr.expectReads(stable, pinV1)
	pr.deploy(pinV2)
	must(t, e2e.cluster.WaitPaused(ctx, 90*time.Second, appNS, "demo"))
	canary := pr.current(pinV2, 1)
	pr.spotKill(stable, 2)
	pr.expectReads(stable, pinV1)
	t.Logf("given: the release of %s (2 replicas, pinning on), the pinned canary paused: %s reads v1, %s reads v2", commit, stable.Name, canary.Name)

	// The Deployment counts a new pod available only after 30 s: each of the two steps of the roll keeps
	// an old pod that long beside the new ones.
	_, err := e2e.cluster.Kube.AppsV1().Deployments(ns).Patch(ctx, r.fullname(), types.MergePatchType, []byte(`{"spec":{"minReadySeconds":30}}`), metav1.PatchOptions{})
	must(t, err)
	t.Log("when: helm upgrade to this commit's chart and image")
	// The previous release ran the webhook; this chart would pick policy mode where the cluster serves it
	// and the PinTable CRD is installed: the skew story is about the webhook.
	pods.upgrade(chartPath("configmap-attacher"), append(sets, "image.tag=e2e-current", "pinning.admission=webhook")...)
	must(t, framework.Eventually(ctx, 2*time.Minute, "a new pod beside the old ones", func(context.Context) (bool, string, error) {
		now := pods.running()
		mixed := slices.ContainsFunc(now, func(s string) bool { return strings.HasSuffix(s, "="+prev) }) &&
			slices.ContainsFunc(now, func(s string) bool { return strings.HasSuffix(s, "="+current) })
		return mixed, strings.Join(now, " "), nil
	}))
	t.Logf("then: the previous and this controller run side by side: %v", pods.running())
	pr.spotKill(stable, 2)
	pr.expectReads(stable, pinV1)
	pr.expectReads(canary, pinV2)
	pods.waitRunning(2, current)
	t.Logf("then: the roll is over: %v", pods.running())
	pr.spotKill(stable, 2)
	pr.expectReads(stable, pinV1)
	pr.expectReads(canary, pinV2)
	for _, rs := range []*appsv1.ReplicaSet{stable, canary} {
		snap, err := e2e.cluster.SnapshotOf(ctx, appNS, "app-config", rs.UID)
		must(t, err)
		must(t, e2e.cluster.WaitProtected(ctx, attachWithin, appNS, refs.ConfigMap, snap.Name))
	}
	t.Log("then: both revisions' snapshots still carry the in-use finalizer")
}
