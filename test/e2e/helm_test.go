//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The charts and the post-renderer, deployed with the real helm (Helm 4, with the post-renderer
// plugin installed; Helm 3 where a story says so) on the local control plane. kwok runs no container,
// so Helm hooks (the attacher Job) never complete here: Job-mode tests install with --no-hooks and run
// the real binary with exactly the hook Job's arguments and environment.

const helmWait = 90 * time.Second

// helmCLI is the real Helm 4 pointed at the test cluster, with a Helm home of its own and the
// post-renderer plugin installed (TestMain: `helm plugin install <make helm-plugin's package>`).
func helmCLI(t *testing.T) framework.Helm {
	t.Helper()
	path, err := framework.HelmBinary(e2e.root, framework.Helm4)
	must(t, err)
	return framework.Helm{Path: path, Kubeconfig: e2e.cluster.Kubeconfig, Home: t.TempDir(), Env: []string{"HELM_PLUGINS=" + e2e.helmPlugins}}
}

// helm3CLI is the real Helm 3, with the configmap-attacher binary on its PATH: Helm 3's
// --post-renderer runs that executable.
func helm3CLI(t *testing.T) framework.Helm {
	t.Helper()
	path, err := framework.HelmBinary(e2e.root, framework.Helm3)
	must(t, err)
	return framework.Helm{Path: path, Kubeconfig: e2e.cluster.Kubeconfig, Home: t.TempDir(),
		Env: []string{"PATH=" + filepath.Dir(e2e.bin.Path) + string(os.PathListSeparator) + os.Getenv("PATH")}}
}

func helmRun(t *testing.T, h framework.Helm, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := h.Run(context.Background(), args...)
	must(t, err)
	t.Logf("helm %s (%s)", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

func chartPath(name string) string { return filepath.Join(e2e.root, "charts", name) }

func testdataPath(name string) string { return filepath.Join(e2e.root, "test/e2e/testdata", name) }

// postRenderer is the flags that revision a chart's ConfigMaps through the real binary: the README's
// recipe, the same for Helm 4 (the plugin) and Helm 3 (the executable on PATH).
func postRenderer(ns string, extra ...string) []string {
	args := []string{"--post-renderer", "configmap-attacher", "--post-renderer-args", "render", "--post-renderer-args=-namespace=" + ns}
	for _, a := range extra {
		args = append(args, "--post-renderer-args="+a)
	}
	return args
}

// helmStory is the write-up told through helm: an install, then three upgrades that change the config.
// Each upgrade is a canary paused at one pod, during which a pod of the old ReplicaSet is replaced;
// then it is promoted. revisionHistoryLimit is 1, so each promotion from the third deploy on prunes a
// ReplicaSet, and its config must go with it.
type helmStory struct {
	t       *testing.T
	ns      string
	rollout string
	// deploy runs `helm install` (i == 0) or `helm upgrade` with the i-th config.
	deploy func(i int)
	// check, when set, is called with every new revision's ConfigMap name.
	check func(cm string)
	// attachWait bounds each wait for a ReplicaSet's config to be attached (30 s when zero).
	attachWait time.Duration
}

// revisionOf is one deploy: its ReplicaSet and the ConfigMap that ReplicaSet mounts.
type revisionOf struct {
	rs     *appsv1.ReplicaSet
	cm     string
	deploy int // the deploy(i) that created it
}

func (s *helmStory) run() []revisionOf {
	t, ctx := s.t, context.Background()

	t.Log("given: the chart installed")
	s.deploy(0)
	revs := []revisionOf{s.waitNewRevision(nil, 3)}
	s.expectEveryReplicaSetHasItsConfig()

	for i := 1; i <= 3; i++ {
		prev := revs[len(revs)-1]
		t.Logf("when: helm upgrade with config change #%d", i)
		s.deploy(i)
		cur := s.waitNewRevision(prev.rs, 1)
		must(t, s.waitPaused())
		if cur.cm == prev.cm {
			t.Fatalf("then: a config change must create a new ConfigMap, but revision %s still mounts %s", framework.RevisionOf(cur.rs), cur.cm)
		}
		t.Logf("then: the canary (%s) mounts %s, the old pods (%s) keep %s; both exist, each attached to its ReplicaSet",
			cur.rs.Name, cur.cm, prev.rs.Name, prev.cm)
		s.expectEveryReplicaSetHasItsConfig()

		if i == 1 {
			s.spotReplacement(prev, cur)
		}

		t.Log("when: the canary is promoted")
		promotePaused(t, s.ns, s.rollout)
		must(t, e2e.cluster.WaitPods(ctx, helmWait, cur.rs, 3))
		must(t, e2e.cluster.WaitPods(ctx, helmWait, prev.rs, 0))
		cur.deploy = i
		revs = append(revs, cur)

		if len(revs) > 2 {
			pruned := s.waitPruned(revs[:len(revs)-1])
			t.Logf("then: revisionHistoryLimit 1 prunes ReplicaSet %s, and the garbage collector deletes %s with it", pruned.rs.Name, pruned.cm)
			must(t, e2e.cluster.WaitGone(ctx, helmWait, s.ns, refs.ConfigMap, pruned.cm))
			revs = slices.DeleteFunc(revs, func(r revisionOf) bool { return r.rs.UID == pruned.rs.UID })
		}
		s.expectEveryReplicaSetHasItsConfig()
	}

	// Nothing leaks: exactly the config of the two ReplicaSets left.
	want := slices.Sorted(func(yield func(string) bool) {
		for _, r := range revs {
			if !yield(r.cm) {
				return
			}
		}
	})
	must(t, framework.Eventually(ctx, helmWait, fmt.Sprintf("only %v left", want), func(ctx context.Context) (bool, string, error) {
		got, err := s.revisionedConfigMaps(ctx)
		return slices.Equal(got, want), fmt.Sprint(got), err
	}))
	t.Logf("then: only %v are left", want)
	return revs
}

// waitPruned waits until Argo Rollouts has deleted exactly one of the old revisions and returns it.
// Which one is Argo's business (it sorts by creationTimestamp, whose one-second resolution makes ties
// common in a fast test, broken by name); ours is that the config goes with it.
func (s *helmStory) waitPruned(old []revisionOf) revisionOf {
	s.t.Helper()
	var pruned revisionOf
	must(s.t, framework.Eventually(context.Background(), helmWait, "revisionHistoryLimit 1 to prune one old ReplicaSet", func(ctx context.Context) (bool, string, error) {
		var gone []revisionOf
		for _, r := range old {
			_, err := e2e.cluster.Kube.AppsV1().ReplicaSets(s.ns).Get(ctx, r.rs.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				gone = append(gone, r)
			} else if err != nil {
				return false, "", err
			}
		}
		if len(gone) == 1 {
			pruned = gone[0]
		}
		return len(gone) == 1, fmt.Sprintf("%d of %d old ReplicaSets deleted", len(gone), len(old)), nil
	}))
	return pruned
}

// waitNewRevision waits until the Rollout's current ReplicaSet is not prev and runs `ready` ready pods.
func (s *helmStory) waitNewRevision(prev *appsv1.ReplicaSet, ready int) revisionOf {
	s.t.Helper()
	rs := waitCurrentRevision(s.t, workload.Ref{Kind: workload.Rollout, Namespace: s.ns, Name: s.rollout}, prev, ready, false)
	cm, err := mountedConfigMap(rs)
	must(s.t, err)
	r := revisionOf{rs: rs, cm: cm}
	if s.check != nil {
		s.check(r.cm)
	}
	return r
}

// mountedConfigMap is the one ConfigMap a ReplicaSet's pods use (volume and envFrom may both name it).
func mountedConfigMap(rs *appsv1.ReplicaSet) (string, error) {
	var names []string
	for r := range refs.FromPodSpec(&rs.Spec.Template.Spec) {
		if r.Kind == refs.ConfigMap && !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("ReplicaSet %s uses ConfigMaps %v, want exactly one", rs.Name, names)
	}
	return names[0], nil
}

func (s *helmStory) waitPaused() error {
	return e2e.cluster.WaitPaused(context.Background(), helmWait, s.ns, s.rollout)
}

// expectEveryReplicaSetHasItsConfig is the promise: every ReplicaSet of the Rollout (current, stable
// or kept for rollback) finds the ConfigMap its pods mount, attached to it.
func (s *helmStory) expectEveryReplicaSetHasItsConfig() {
	s.t.Helper()
	ctx := context.Background()
	res, err := e2e.cluster.Resolve(ctx, s.ns, s.rollout)
	must(s.t, err)
	for _, rs := range res.Owned {
		cm, err := mountedConfigMap(rs)
		must(s.t, err)
		must(s.t, e2e.cluster.WaitAttached(ctx, cmp.Or(s.attachWait, 30*time.Second), s.ns, refs.ConfigMap, cm, rs))
	}
}

// spotReplacement deletes a pod of the old ReplicaSet during the canary pause, as a spot interruption
// would, and checks its replacement mounts the old revision, which still exists.
func (s *helmStory) spotReplacement(old, canary revisionOf) {
	t, ctx := s.t, context.Background()
	pods, err := e2e.cluster.PodsOf(ctx, old.rs)
	must(t, err)
	if len(pods) == 0 {
		t.Fatalf("old ReplicaSet %s has no pod to replace", old.rs.Name)
	}
	victim := pods[0].Name
	t.Logf("when: a spot node goes away with pod %s of the old ReplicaSet", victim)
	must(t, e2e.cluster.Kube.CoreV1().Pods(s.ns).Delete(ctx, victim, metav1.DeleteOptions{}))
	must(t, framework.Eventually(ctx, helmWait, "a replacement pod of "+old.rs.Name, func(ctx context.Context) (bool, string, error) {
		rs, err := e2e.cluster.Kube.AppsV1().ReplicaSets(s.ns).Get(ctx, old.rs.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pods, err := e2e.cluster.PodsOf(ctx, rs)
		if err != nil {
			return false, "", err
		}
		for _, p := range pods {
			if p.Name == victim {
				return false, "the deleted pod is still listed", nil
			}
		}
		want := int(*rs.Spec.Replicas)
		return len(pods) == want && framework.ReadyPods(pods) == want, fmt.Sprintf("%d pods, %d ready, want %d", len(pods), framework.ReadyPods(pods), want), nil
	}))
	pods, err = e2e.cluster.PodsOf(ctx, old.rs)
	must(t, err)
	for _, p := range pods {
		got := map[string]bool{}
		for r := range refs.FromPodSpec(&p.Spec) {
			if r.Kind == refs.ConfigMap {
				got[r.Name] = true
			}
		}
		if !got[old.cm] || got[canary.cm] {
			t.Fatalf("pod %s of the old ReplicaSet mounts %v, want %s and not the canary's %s", p.Name, got, old.cm, canary.cm)
		}
	}
	if _, err := e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).Get(ctx, old.cm, metav1.GetOptions{}); err != nil {
		t.Fatalf("the replacement pods of %s mount %s: %v", old.rs.Name, old.cm, err)
	}
	t.Logf("then: the replacement pods of %s mount %s, which exists: the old config, not the canary's", old.rs.Name, old.cm)
}

func (s *helmStory) revisionedConfigMaps(ctx context.Context) ([]string, error) {
	list, err := e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: api.RevisionedLabel + "=" + api.RevisionedValue})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, cm := range list.Items {
		if cm.DeletionTimestamp == nil {
			names = append(names, cm.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// expectKept checks what makes a revision survive `helm upgrade`: the keep policy and the opt-in label.
func expectKept(t *testing.T, ns, name string) {
	t.Helper()
	cm, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	if cm.Annotations["helm.sh/resource-policy"] != "keep" || cm.Labels[api.RevisionedLabel] != api.RevisionedValue ||
		cm.Immutable == nil || !*cm.Immutable {
		t.Fatalf("ConfigMap %s: want helm.sh/resource-policy: keep, label %s=%s and immutable; got annotations %v labels %v immutable %v",
			name, api.RevisionedLabel, api.RevisionedValue, cm.Annotations, cm.Labels, cm.Immutable)
	}
}

// base-app with attacher: controller, the controller running (scoped to the test namespace).
func TestHelmBaseAppWithTheController(t *testing.T) {
	t.Parallel()
	ns := givenNamespace(t, "e2e-helm-base-app-controller")
	startController(t, nil, ns)
	h := helmCLI(t)
	s := &helmStory{t: t, ns: ns, rollout: "demo",
		deploy: func(i int) {
			helmRun(t, h, "upgrade", "--install", "demo", chartPath("base-app"), "-n", ns, "-f", testdataPath("base-app-values.yaml"),
				"--set", "attacher=controller", "--set-string", fmt.Sprintf("configmaps.cm.kv_data.revision=%d", i))
		},
		check: func(cm string) {
			expectKept(t, ns, cm)
			// raw_data went through tpl: the pod reads the rendered file.
			got, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cm, metav1.GetOptions{})
			must(t, err)
			if want := `"projectName": "demo service"`; !strings.Contains(got.Data["configuration.json"], want) {
				t.Fatalf("ConfigMap %s configuration.json = %q, want it rendered (containing %s)", cm, got.Data["configuration.json"], want)
			}
		},
	}
	revs := s.run()

	// Helm deleted nothing it kept, and re-adopts a kept revision when the release renders it again.
	back, last := revs[0], revs[1]
	t.Logf("when: helm upgrade goes back to config change #%d, still kept for ReplicaSet %s", back.deploy, back.rs.Name)
	s.deploy(back.deploy)
	again := s.waitNewRevision(last.rs, 1)
	if again.rs.UID != back.rs.UID || again.cm != back.cm {
		t.Fatalf("want the Rollout back on ReplicaSet %s mounting %s, got %s mounting %s", back.rs.Name, back.cm, again.rs.Name, again.cm)
	}
	s.expectEveryReplicaSetHasItsConfig()
	t.Logf("then: Helm adopts %s again and ReplicaSet %s scales up with it", back.cm, back.rs.Name)
}

// A chart that knows nothing about configmap-attacher, revisioned by the post-renderer: Helm 4's
// plugin.
func TestHelmPostRendererOnAPlainChart(t *testing.T) {
	t.Parallel()
	postRendererOnAPlainChart(t, helmCLI(t), "e2e-helm-post-renderer")
}

// The same story on Helm 3, whose --post-renderer runs the configmap-attacher executable on PATH: the
// same command line.
func TestHelm3PostRendererOnAPlainChart(t *testing.T) {
	t.Parallel()
	postRendererOnAPlainChart(t, helm3CLI(t), "e2e-helm3-post-renderer")
}

func postRendererOnAPlainChart(t *testing.T, h framework.Helm, ns string) {
	ns = givenNamespace(t, ns)
	startController(t, nil, ns)
	s := &helmStory{t: t, ns: ns, rollout: "app",
		deploy: func(i int) {
			args := []string{"upgrade", "--install", "plain", testdataPath("plain-chart"), "-n", ns,
				"--set", "revisionHistoryLimit=1", "--set-string", fmt.Sprintf("config.greeting=hello-%d", i)}
			// The chart does not label its ConfigMap: select it by name.
			helmRun(t, h, append(args, postRenderer(ns, "-select=configmap/app-config")...)...)
		},
		check: func(cm string) {
			if !strings.HasPrefix(cm, "app-config-") {
				t.Fatalf("the Rollout mounts %s, want the post-renderer's app-config-<hash>", cm)
			}
			expectKept(t, ns, cm)
		},
	}
	s.run()
}

// Negative control: a chart that hashes its ConfigMap names itself but does not ask Helm to keep them.
// Helm deletes the previous revision on upgrade although the old ReplicaSet still needs it, attached or
// not: the keep policy is what lets old and new config coexist.
// Without helm.sh/resource-policy: keep, helm upgrade deletes the previous revision of a renamed
// ConfigMap while the previous ReplicaSet still runs pods mounting it. With the controller, in-use
// protection holds the deletion until that ReplicaSet is gone.
func TestHelmUpgradeWithoutKeepIsHeldWhileTheConfigIsInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-helm-without-keep")
	startController(t, nil, ns)
	s, old, cur := helmUpgradeWithoutKeep(t, ns)

	t.Logf("then: Helm has deleted %s, but in-use protection holds it while ReplicaSet %s runs", old.cm, old.rs.Name)
	must(t, e2e.cluster.WaitHeld(ctx, 10*time.Second, ns, refs.ConfigMap, old.cm))
	stillThere(t, ns, refs.ConfigMap, old.cm, "ReplicaSet "+old.rs.Name+" still runs pods mounting it")

	t.Logf("when: the canary is promoted and ReplicaSet %s is pruned (revisionHistoryLimit)", old.rs.Name)
	promotePaused(t, ns, s.rollout)
	bg := metav1.DeletePropagationBackground
	must(t, e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Delete(ctx, old.rs.Name, metav1.DeleteOptions{PropagationPolicy: &bg}))
	t.Logf("then: %s goes, and %s stays", old.cm, cur.cm)
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, old.cm))
	stillThere(t, ns, refs.ConfigMap, cur.cm, "the current ReplicaSet uses it")
}

// The same upgrade with only the Job mode (no controller, so no in-use protection): Helm deletes the
// config the old ReplicaSet's pods mount. Why render sets keep, and what a Job-only setup stays exposed to.
func TestHelmUpgradeWithoutKeepDeletesConfigStillInUseWithoutTheController(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-helm-without-keep-job")
	_, old, cur := helmUpgradeWithoutKeep(t, ns)

	t.Logf("then: Helm has deleted %s, although ReplicaSet %s still runs pods mounting it", old.cm, old.rs.Name)
	_, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, old.cm, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("want ConfigMap %s deleted by helm upgrade, got err=%v", old.cm, err)
	}
	pods, err := e2e.cluster.PodsOf(ctx, old.rs)
	must(t, err)
	if len(pods) == 0 {
		t.Fatalf("want the old ReplicaSet %s still running pods during the canary", old.rs.Name)
	}
	t.Logf("then: a spot replacement of those %d pods would fail to mount %s (FailedMount); only the canary %s has its config %s",
		len(pods), old.cm, cur.rs.Name, cur.cm)
}

// helmUpgradeWithoutKeep installs a plain chart whose hashed, opted-in ConfigMap lacks keep, attaches
// it (the Job mode, as its arguments would), and upgrades with a config change: a canary starts.
func helmUpgradeWithoutKeep(t *testing.T, ns string) (s *helmStory, old, cur revisionOf) {
	t.Helper()
	h := helmCLI(t)
	s = &helmStory{t: t, ns: ns, rollout: "app"}
	deploy := func(verb string, i int) {
		helmRun(t, h, verb, "plain", testdataPath("plain-chart"), "-n", ns,
			"--set", "prehashedName=true", "--set", "optIn=true", "--set-string", fmt.Sprintf("config.greeting=hello-%d", i))
	}
	t.Log("given: a hashed, opted-in ConfigMap without helm.sh/resource-policy: keep, attached to its ReplicaSet")
	deploy("install", 0)
	old = s.waitNewRevision(nil, 3)
	if r := e2e.bin.Run(context.Background(), nil, "-rollout", s.rollout, "-namespace", ns, "-configmaps", old.cm); r.Code != 0 {
		t.Fatalf("attaching: %s", r)
	}
	s.expectEveryReplicaSetHasItsConfig()

	t.Log("when: helm upgrade changes the config (a canary starts)")
	deploy("upgrade", 1)
	cur = s.waitNewRevision(old.rs, 1)
	must(t, s.waitPaused())
	return s, old, cur
}

// base-app with attacher: job. The hook cannot complete on kwok, so: install/upgrade --no-hooks, read
// the hook Job from the release, and run the real binary with exactly its arguments and environment,
// authenticated as the chart's own per-release ServiceAccount (so its Role is proved too).
func TestHelmBaseAppWithTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-helm-base-app-job")
	h := helmCLI(t)
	dir := t.TempDir()
	s := &helmStory{t: t, ns: ns, rollout: "demo"}
	// On a cluster enforcing OwnerReferencesPermissionEnforcement (the local one does, as OpenShift),
	// the Job's Role needs delete on ConfigMaps: the chart's option; elsewhere the default suffices.
	enforced, err := e2e.cluster.EnforcesOwnerReferencePermissions(ctx, ns, dir)
	must(t, err)
	t.Logf("given: OwnerReferencesPermissionEnforcement enforced: %v (job.ownerReferencesPermissionEnforcement=%v)", enforced, enforced)
	deploy := func(verb string, i int) *batchv1.Job {
		helmRun(t, h, verb, "demo", chartPath("base-app"), "-n", ns, "-f", testdataPath("base-app-values.yaml"),
			"--set", "attacher=job", "--set-string", fmt.Sprintf("configmaps.cm.kv_data.revision=%d", i),
			"--set", fmt.Sprintf("job.ownerReferencesPermissionEnforcement=%v", enforced), "--no-hooks")
		job, err := framework.FindJob(helmRun(t, h, "get", "hooks", "demo", "-n", ns))
		must(t, err)
		return job
	}
	runJob := func(job *batchv1.Job) framework.Result {
		t.Helper()
		sa := job.Spec.Template.Spec.ServiceAccountName
		_, err := e2e.cluster.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
		must(t, err) // the chart, not the helper below, must have created it
		kubeconfig, err := e2e.cluster.ServiceAccountKubeconfig(ctx, ns, sa, dir)
		must(t, err)
		c := job.Spec.Template.Spec.Containers[0]
		var env []string
		for _, e := range c.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		env = append(env, "IS_IN_CLUSTER=false") // the only difference: not in a pod
		r := framework.Binary{Path: e2e.bin.Path, Kubeconfig: kubeconfig}.Run(ctx, env, append(c.Command, c.Args...)...)
		t.Logf("ran the hook Job as ServiceAccount %s: configmap-attacher %s: exit %d in %s", sa, strings.Join(c.Args, " "), r.Code, r.Duration.Round(time.Millisecond))
		if r.Code != 0 {
			t.Fatalf("the hook Job failed: %s", r)
		}
		return r
	}

	t.Log("given: base-app installed with attacher: job (hooks skipped: kwok runs no container)")
	job := deploy("install", 0)
	expectHookJob(t, job, "demo", ns)
	cur := s.waitNewRevision(nil, 3)
	if want := []string{"-rollout", "demo", "-namespace", ns, "-configmaps", cur.cm}; !slices.Equal(job.Spec.Template.Spec.Containers[0].Args, want) {
		t.Fatalf("hook Job args = %q, want the original Job's %q", job.Spec.Template.Spec.Containers[0].Args, want)
	}
	runJob(job)
	must(t, framework.CheckAttached(configOwners(t, ns, cur.cm), cur.rs))
	t.Logf("then: %s is attached to %s", cur.cm, cur.rs.Name)

	t.Log("when: helm upgrade changes the config, and the hook Job runs during the canary")
	prev := cur
	job = deploy("upgrade", 1)
	cur = s.waitNewRevision(prev.rs, 1)
	runJob(job)
	must(t, framework.CheckAttached(configOwners(t, ns, cur.cm), cur.rs))
	must(t, framework.CheckAttached(configOwners(t, ns, prev.cm), prev.rs))
	expectKept(t, ns, prev.cm)
	t.Logf("then: %s is attached to the canary %s; %s is still there, attached to %s", cur.cm, cur.rs.Name, prev.cm, prev.rs.Name)

	t.Log("when: the Job runs again (a retried hook)")
	runJob(job)
	must(t, framework.CheckAttached(configOwners(t, ns, cur.cm), cur.rs))

	t.Log("when: another release of base-app is installed in the same namespace")
	helmRun(t, h, "install", "other", chartPath("base-app"), "-n", ns, "-f", testdataPath("base-app-values.yaml"),
		"--set", "appName=other", "--set", "attacher=job", "--no-hooks")
	other, err := framework.FindJob(helmRun(t, h, "get", "hooks", "other", "-n", ns))
	must(t, err)
	for _, name := range []string{job.Spec.Template.Spec.ServiceAccountName, other.Spec.Template.Spec.ServiceAccountName} {
		if _, err := e2e.cluster.Kube.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("Role %s: %v", name, err)
		}
	}
	if other.Spec.Template.Spec.ServiceAccountName == job.Spec.Template.Spec.ServiceAccountName {
		t.Fatalf("two releases share ServiceAccount %s", other.Spec.Template.Spec.ServiceAccountName)
	}
	t.Logf("then: each release has its own Job RBAC (%s, %s)", job.Spec.Template.Spec.ServiceAccountName, other.Spec.Template.Spec.ServiceAccountName)
}

// expectHookJob checks the hook wiring: Helm and Argo CD hooks, cleanup, and the per-release identity.
func expectHookJob(t *testing.T, job *batchv1.Job, release, ns string) {
	t.Helper()
	want := map[string]string{
		"helm.sh/hook":                          "post-install,post-upgrade",
		"helm.sh/hook-delete-policy":            "before-hook-creation",
		"argocd.argoproj.io/hook":               "Sync",
		"argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
	}
	for k, v := range want {
		if job.Annotations[k] != v {
			t.Errorf("hook Job annotation %s = %q, want %q", k, job.Annotations[k], v)
		}
	}
	if job.Spec.TTLSecondsAfterFinished == nil {
		t.Error("hook Job has no ttlSecondsAfterFinished")
	}
	if sa := job.Spec.Template.Spec.ServiceAccountName; sa != release+"-configmap-attacher" {
		t.Errorf("hook Job ServiceAccount %q, want one named after the release", sa)
	}
	if job.Namespace != ns {
		t.Errorf("hook Job namespace %q, want %q", job.Namespace, ns)
	}
}

func configOwners(t *testing.T, ns, cm string) []metav1.OwnerReference {
	t.Helper()
	owners, exists, err := e2e.cluster.Owners(context.Background(), ns, refs.ConfigMap, cm)
	must(t, err)
	if !exists {
		t.Fatalf("ConfigMap %s/%s does not exist", ns, cm)
	}
	return owners
}

// The charts' rendering, checked with `helm template` (no cluster needed).
func TestHelmBaseAppTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := helmCLI(t)
	render := func(args ...string) (string, error) {
		return h.Run(ctx, append([]string{"template", "demo", chartPath("base-app"), "-n", "prod", "-f", testdataPath("base-app-values.yaml")}, args...)...)
	}
	configMapNames := func(manifests string) []string {
		objs, err := framework.ParseManifests(manifests)
		must(t, err)
		var names []string
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" {
				names = append(names, o.GetName())
			}
		}
		return names
	}

	t.Run("the name hashes the rendered data", func(t *testing.T) {
		// version.txt interpolates the image tag through tpl. The original chart hashed the values
		// before tpl, so a new tag kept the old name and the old pods got the new content.
		values := helmTempFile(t, "configmaps:\n  cm:\n    raw_data:\n      version.txt: \"{{ .Values.image.tag }}\"\n")
		a, err := render("-f", values, "--set-string", "image.tag=1.27")
		must(t, err)
		b, err := render("-f", values, "--set-string", "image.tag=1.28")
		must(t, err)
		na, nb := configMapNames(a), configMapNames(b)
		if len(na) != 1 || len(nb) != 1 || na[0] == nb[0] {
			t.Fatalf("image.tag 1.27 and 1.28 give ConfigMaps %v and %v: want one each, with different names", na, nb)
		}
	})

	t.Run("the post-renderer agrees with the chart's names", func(t *testing.T) {
		out, err := render()
		must(t, err)
		r := e2e.bin.Run(ctx, []string{"LOG_LEVEL=debug"}, "render", "-namespace=prod", helmTempFile(t, out))
		if r.Code != 0 {
			t.Fatal(r)
		}
		if got, want := configMapNames(r.Stdout), configMapNames(out); !slices.Equal(got, want) {
			t.Fatalf("render renamed %v to %v: the chart's hash must be the renderer's", want, got)
		}
	})

	t.Run("the Job gets the original arguments", func(t *testing.T) {
		out, err := render("--set", "attacher=job", "--set", "configmaps.extra.kv_data.other-key=x")
		must(t, err)
		job, err := framework.FindJob(out)
		must(t, err)
		names := configMapNames(out)
		want := []string{"-rollout", "demo", "-namespace", "prod", "-configmaps", strings.Join(names, ",")}
		if got := job.Spec.Template.Spec.Containers[0].Args; len(names) != 2 || !slices.Equal(got, want) {
			t.Fatalf("Job args %q, want %q", got, want)
		}
	})

	t.Run("no Job with the controller", func(t *testing.T) {
		out, err := render("--set", "attacher=controller")
		must(t, err)
		objs, err := framework.ParseManifests(out)
		must(t, err)
		for _, o := range objs {
			switch o.GetKind() {
			case "Job", "Role", "RoleBinding", "ServiceAccount":
				t.Fatalf("attacher: controller renders %s %s", o.GetKind(), o.GetName())
			}
		}
	})

	t.Run("predefined and custom strategies", func(t *testing.T) {
		for _, tc := range []struct {
			set, want string
		}{
			{"strategy=manual-canary-1-pod", "maxUnavailable: 1"},
			{"strategy=manual-canary-20-pct", "setWeight: 20"},
			{"strategy=custom,customStrategy.canary.steps[0].setWeight=50", "setWeight: 50"},
		} {
			out, err := render("--set", tc.set)
			must(t, err)
			if !strings.Contains(out, tc.want) {
				t.Errorf("--set %s: no %q in the Rollout", tc.set, tc.want)
			}
		}
	})

	t.Run("bad values are refused with a reason", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--set", "configmaps.extra.kv_data.key-1=x"}, `both have "key-1"`},
			{[]string{"--set", "strategy=rolling"}, "strategy"},
			{[]string{"--set", "strategy=custom"}, "customStrategy"},
			{[]string{"--set", "attacher=cronjob"}, "attacher"},
			{[]string{"--set", "appName=Not_A_Name"}, "appName"},
		} {
			_, err := render(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: want an error mentioning %q, got %v", tc.args, tc.want, err)
			}
		}
	})
}

func helmTempFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifests.yaml")
	must(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
