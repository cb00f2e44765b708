//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The write-up's own deploy path: an Argo CD Application deploys an app again and again (config
// changes and image-only changes, each a canary paused at one pod, then promoted) and after every
// step we check what the project promises, and what Argo CD says about it.
//
// Pieces are separate so the next stories only swap one: where the Application's manifests come from
// (argoStory.values: base-app's values today; a third-party chart through the render Config
// Management Plugin later, with its own HelmApp/source), and who attaches (argoStory.attach: the Sync
// hook Job, or a running controller; zero-touch pinning later).

// argoSyncWait bounds every wait on Argo CD or on what it deploys: the CI machine has 2 cores shared
// with the rest of the suite; Argo CD itself takes seconds.
const argoSyncWait = 3 * time.Minute

// sharedTool is a deploy tool running next to the test cluster (Argo CD, Flux) that parallel tests
// share: the first user starts it, and on a cluster the tests started the last one to finish stops
// it, so later tests do not share the 2 CI cores with it.
type sharedTool struct {
	name        string
	start, stop func(c *framework.Cluster, ctx context.Context, progress io.Writer) error

	mu    sync.Mutex
	users int
}

var argoCD = &sharedTool{name: "Argo CD (application controller, repo server, redis)",
	start: (*framework.Cluster).EnsureArgoCD, stop: (*framework.Cluster).StopArgoCD}

// use runs the tool on the test cluster for the test.
func (s *sharedTool) use(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	must(t, s.start(e2e.cluster, context.Background(), logWriter{t}))
	t.Logf("given: %s ready in %s", s.name, time.Since(start).Round(time.Millisecond))
	s.users++
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.users--; s.users == 0 && e2e.cluster.Owned() {
			_ = s.stop(e2e.cluster, context.Background(), logWriter{t})
		}
	})
}

// useArgoCD runs Argo CD on the test cluster for the test.
func useArgoCD(t *testing.T) { argoCD.use(t) }

// serveCharts serves the repository's charts (by name, from charts/) from a Helm repository on
// loopback for the test, and returns it with each chart's version.
func serveCharts(t *testing.T, charts ...string) (*framework.ChartRepo, map[string]string) {
	t.Helper()
	repo, err := framework.ServeChartRepo(helmCLI(t), "")
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	versions := map[string]string{}
	for _, c := range charts {
		v, err := repo.Add(context.Background(), chartPath(c), "")
		must(t, err)
		versions[c] = v
	}
	return repo, versions
}

// givenApplication creates the Application (deleting a leftover first) and deletes it, with what it
// deployed (Cascade), at the end of the test.
func givenApplication(t *testing.T, app framework.HelmApp) {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.DeleteApplication(ctx, argoSyncWait, app.Name))
	must(t, e2e.cluster.ApplyApplication(ctx, app))
	t.Cleanup(func() {
		if t.Failed() {
			if st, err := e2e.cluster.ApplicationStatus(context.Background(), app.Name); err == nil {
				t.Logf("Application %s at the end: %s", app.Name, st)
			}
		}
		if err := e2e.cluster.DeleteApplication(context.Background(), argoSyncWait, app.Name); err != nil {
			t.Log(err)
		}
	})
}

// argoDeploy is one deploy: which config revision and which application image.
type argoDeploy struct {
	Config int
	Image  string
}

// argoDeploys are the write-up's deploys and more: three config revisions, each followed by an
// image-only deploy (a new ReplicaSet mounting the same ConfigMap, which then has two owners).
var argoDeploys = []argoDeploy{{0, "1.27"}, {1, "1.27"}, {1, "1.28"}, {2, "1.28"}, {2, "1.29"}}

// baseAppValues are charts/base-app's values for a deploy: the write-up's demo service, whose
// ConfigMap's content is the config revision.
func baseAppValues(d argoDeploy, attacher string, job map[string]any) map[string]any {
	v := map[string]any{
		"appName": "demo", "replicas": int64(3), "revisionHistoryLimit": int64(2), "strategy": "manual-canary-1-pod",
		"image":    map[string]any{"repository": "nginx", "tag": d.Image},
		"attacher": attacher,
		"configmaps": map[string]any{"cm": map[string]any{
			"kv_data": map[string]any{"key-1": "value-1", "revision": fmt.Sprint(d.Config)},
			"raw_data": map[string]any{"configuration.json": `{"general": {"projectName": "{{ .Values.appName }} service", "revision": ` +
				fmt.Sprint(d.Config) + `}}`},
		}},
	}
	if job != nil {
		v["job"] = job
	}
	return v
}

// attachMode is who attaches, as far as the story can see it.
type attachMode int

const (
	// attachByHookAfterPromotion: base-app's Sync hook Job in wave 1. Argo CD starts it once the
	// Rollout (wave 0) is Healthy; a paused canary is Suspended, so it runs after the promotion.
	attachByHookAfterPromotion attachMode = iota
	// attachByController: a running controller attaches as soon as a ReplicaSet exists; the sync
	// does not wait for anything.
	attachByController
	// attachByHookDuringPause: the Sync hook Job in wave 0 (base-app's job.syncWave), started with the
	// Rollout: it waits for the new ReplicaSet and attaches during the pause.
	attachByHookDuringPause
)

func (m attachMode) hook() bool { return m != attachByController }

// argoStory deploys argoDeploys through one Application and checks every step.
type argoStory struct {
	*helmStory // its waits and checks on the Rollout and its ReplicaSets (s.deploy/check unused)
	app        framework.HelmApp
	values     func(argoDeploy) map[string]any
	attach     attachMode
	// automated: the Application syncs itself (spec.syncPolicy.automated); otherwise each deploy asks
	// for a sync with prune, as `argocd app sync --prune` would.
	automated bool
	// afterSync, when set, runs after each deploy has fully synced, with the revision it made current.
	afterSync func(d argoDeploy, cur revisionOf)

	hooks []*batchv1.Job // the Sync hook Jobs Argo CD created, one per sync
	// hookRecorded: the running sync's hook is in hooks already (it ran during the pause).
	hookRecorded bool
	last         *argoDeploy
	spotDone     bool
}

func newArgoStory(t *testing.T, ns string, app framework.HelmApp, values func(argoDeploy) map[string]any, attach attachMode) *argoStory {
	return &argoStory{helmStory: &helmStory{t: t, ns: ns, rollout: "demo", attachWait: attachWithin}, app: app, values: values, attach: attach}
}

// run deploys each of deploys in turn; the first installs.
func (s *argoStory) run(deploys []argoDeploy) {
	var prev *revisionOf
	var kept []revisionOf // revisions whose config left git while their ReplicaSet stays
	for i, d := range deploys {
		cur := s.deploy(i, d, prev)
		if prev != nil && prev.cm != cur.cm {
			kept = append(kept, *prev)
		}
		kept = s.expectLeftGitButKept(kept)
		if s.afterSync != nil {
			s.afterSync(d, cur)
		}
		s.expectArgoView(cur)
		prev = &cur
	}
	s.expectNoLeak()
}

// deploy puts d into the Application, syncs, and walks the canary through: pause (with a spot
// replacement on the first one), promotion, attach. It returns the revision d made current.
func (s *argoStory) deploy(i int, d argoDeploy, prev *revisionOf) revisionOf {
	t, ctx := s.t, context.Background()
	what := fmt.Sprintf("config revision %d, image nginx:%s", d.Config, d.Image)
	if s.last != nil && s.last.Config == d.Config {
		what = "image-only, " + what
	}
	s.last = &d
	if prev == nil {
		t.Logf("given: the Application installs %s", what)
	} else {
		t.Logf("when: deploy #%d through Argo CD: %s", i, what)
	}
	requested := time.Now()
	must(t, e2e.cluster.SetApplicationValues(ctx, s.app.Name, s.values(d)))
	if !s.automated {
		s.requestSync()
	}

	if prev == nil {
		cur := s.waitNewRevision(nil, 3)
		st := s.waitSynced(requested)
		t.Logf("then: Rollout %s runs ReplicaSet %s mounting %s; %s", s.rollout, cur.rs.Name, cur.cm, describeSync(st, requested, "the request"))
		s.expectAttachedNow(cur, "the first deploy is no canary, the Rollout is Healthy at once")
		return cur
	}

	cur := s.waitNewRevision(prev.rs, 1)
	must(t, s.waitPaused())
	paused := time.Now()
	t.Logf("then: the canary paused: ReplicaSet %s runs 1 pod mounting %s; ReplicaSet %s keeps 2 mounting %s",
		cur.rs.Name, cur.cm, prev.rs.Name, prev.cm)
	s.duringPause(cur, *prev)
	if !s.spotDone && prev.cm != cur.cm {
		// The write-up's spot replacement, on the first config change.
		s.spotReplacement(*prev, cur)
		s.spotDone = true
	}

	t.Logf("when: kubectl argo rollouts promote %s (paused for %s)", s.rollout, time.Since(paused).Round(time.Second))
	promoted := time.Now()
	promotePaused(t, s.ns, s.rollout)
	must(t, e2e.cluster.WaitPods(ctx, argoSyncWait, cur.rs, 3))
	must(t, e2e.cluster.WaitPods(ctx, argoSyncWait, prev.rs, 0))
	st := s.waitSynced(promoted)
	t.Logf("then: all 3 pods run ReplicaSet %s; %s", cur.rs.Name, describeSync(st, promoted, "the promotion"))
	s.expectAttachedNow(cur, "after the promotion")
	return cur
}

// requestSync asks for a sync with prune once the previous operation is over.
func (s *argoStory) requestSync() {
	s.t.Helper()
	ctx := context.Background()
	_, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, s.app.Name, "to have no operation running", func(st framework.AppStatus) bool {
		return !st.OperationPending
	})
	must(s.t, err)
	must(s.t, e2e.cluster.SyncApplication(ctx, s.app.Name, true, nil))
}

// waitSynced waits until a sync of the Application's current spec is over and it is Synced and
// Healthy; in hook mode it records the Sync hook Job that sync ran.
func (s *argoStory) waitSynced(since time.Time) framework.AppStatus {
	s.t.Helper()
	ctx := context.Background()
	st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, s.app.Name, "to finish syncing its current spec",
		func(st framework.AppStatus) bool {
			return !st.OperationPending && st.Deployed && st.OperationPhase != "Running"
		})
	must(s.t, err)
	if st.OperationPhase != "Succeeded" {
		s.t.Fatalf("the sync ended %s: %s", st.OperationPhase, st)
	}
	st, err = e2e.cluster.WaitSynced(ctx, argoSyncWait, s.app.Name)
	must(s.t, err)
	if s.attach.hook() && !s.hookRecorded {
		s.recordHook(st)
	}
	s.hookRecorded = false
	return st
}

// describeSync says how the last sync went and when it ended relative to the user's action (the
// Application's times have one-second resolution).
func describeSync(st framework.AppStatus, since time.Time, action string) string {
	when := fmt.Sprintf("finished %s after %s", st.OperationFinished.Sub(since.Truncate(time.Second)).Round(time.Second), action)
	if st.OperationFinished.Before(since.Truncate(time.Second)) {
		when = "had finished before " + action
	}
	return fmt.Sprintf("Argo CD: sync %s (%q), %s, ran for %s; the Application is %s and %s",
		st.OperationPhase, st.OperationMessage, when, st.OperationFinished.Sub(st.OperationStarted).Round(time.Second), st.Sync, st.Health)
}

// recordHook checks the sync ran the Sync hook, reads the live Job it created, and checks it is a new
// one (BeforeHookCreation replaced the previous sync's).
func (s *argoStory) recordHook(st framework.AppStatus) {
	s.t.Helper()
	var hook *framework.SyncResult
	for i, r := range st.SyncResults {
		if r.HookType == "Sync" && r.Kind == "Job" {
			hook = &st.SyncResults[i]
		}
	}
	if hook == nil || hook.HookPhase != "Succeeded" {
		s.t.Fatalf("the sync did not run the Sync hook Job to success: %v", st.SyncResults)
	}
	job, err := e2e.cluster.Kube.BatchV1().Jobs(s.ns).Get(context.Background(), hook.Name, metav1.GetOptions{})
	must(s.t, err)
	if s.isOldHook(job) {
		s.t.Fatalf("the sync reports hook Job %s, but the live one is the previous sync's (uid %s)", job.Name, job.UID)
	}
	s.hooks = append(s.hooks, job)
}

func (s *argoStory) isOldHook(job *batchv1.Job) bool {
	return slices.ContainsFunc(s.hooks, func(old *batchv1.Job) bool { return old.UID == job.UID })
}

// lastHook is the live Sync hook Job (nil if none).
func (s *argoStory) liveHook(ctx context.Context) (*batchv1.Job, error) {
	jobs, err := e2e.cluster.Kube.BatchV1().Jobs(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		if jobs.Items[i].Annotations["argocd.argoproj.io/hook"] == "Sync" {
			return &jobs.Items[i], nil
		}
	}
	return nil, nil
}

// pauseWatch is how long the story watches Argo CD during a canary pause before promoting: long
// enough for several reconciliations of the Application (the controller re-checks a running sync
// within seconds), so "the hook has not run" means it waits, not that it is slow.
const pauseWatch = 20 * time.Second

// duringPause checks what Argo CD and the attacher do while the canary waits for a human.
func (s *argoStory) duringPause(cur, prev revisionOf) {
	t, ctx := s.t, context.Background()
	switch s.attach {
	case attachByController:
		must(t, e2e.cluster.WaitAttached(ctx, s.attachWait, s.ns, refs.ConfigMap, cur.cm, cur.rs))
		st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, s.app.Name, "to finish its sync and show the Rollout Suspended",
			func(st framework.AppStatus) bool {
				return st.Current && !st.OperationPending && st.OperationPhase == "Succeeded" && st.Health == "Suspended" && st.Sync == "Synced"
			})
		must(t, err)
		t.Logf("then: during the pause %s is attached to the canary ReplicaSet %s by the controller; Argo CD's sync is over (%s %q), the Application %s and %s",
			cur.cm, cur.rs.Name, st.OperationPhase, st.OperationMessage, st.Sync, st.Health)
	case attachByHookDuringPause:
		var job *batchv1.Job
		must(t, framework.Eventually(ctx, argoSyncWait, "the sync's hook Job to complete during the pause", func(ctx context.Context) (bool, string, error) {
			j, err := s.liveHook(ctx)
			if err != nil || j == nil || s.isOldHook(j) {
				return false, "no new hook Job", err
			}
			job = j
			return j.Status.Succeeded > 0, fmt.Sprintf("hook Job %s: %d active, %d failed", j.Name, j.Status.Active, j.Status.Failed), nil
		}))
		s.hooks, s.hookRecorded = append(s.hooks, job), true
		must(t, e2e.cluster.WaitAttached(ctx, s.attachWait, s.ns, refs.ConfigMap, cur.cm, cur.rs))
		st, err := e2e.cluster.ApplicationStatus(ctx, s.app.Name)
		must(t, err)
		t.Logf("then: during the pause the Sync hook Job %s (wave 0) ran and attached %s to the canary %s; Argo CD's sync is %s: %q; the Application is %s",
			job.Name, cur.cm, cur.rs.Name, st.OperationPhase, st.OperationMessage, st.Health)
	case attachByHookAfterPromotion:
		before, err := s.liveHook(ctx)
		must(t, err)
		st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, s.app.Name, "to wait for the Rollout in its sync",
			func(st framework.AppStatus) bool {
				return st.OperationPending && st.OperationPhase == "Running" && st.Health == "Suspended" &&
					strings.Contains(st.OperationMessage, "argoproj.io/Rollout/"+s.rollout)
			})
		must(t, err)
		t.Logf("then: Argo CD's sync is %s: %q; the Application is %s", st.OperationPhase, st.OperationMessage, st.Health)
		// Watch: the hook must not start, and nothing else happens to the config, for pauseWatch.
		deadline := time.Now().Add(pauseWatch)
		polls := 0
		for time.Now().Before(deadline) {
			polls++
			job, err := s.liveHook(ctx)
			must(t, err)
			if job != nil && (before == nil || job.UID != before.UID) {
				t.Fatalf("a Sync hook Job (%s, args %q) was created while the Rollout is Suspended: Argo CD did not wait for wave 0",
					job.Name, job.Spec.Template.Spec.Containers[0].Args)
			}
			st, err = e2e.cluster.ApplicationStatus(ctx, s.app.Name)
			must(t, err)
			if !st.OperationPending || st.OperationPhase != "Running" {
				t.Fatalf("Argo CD's sync stopped waiting for the Rollout during the pause: %s", st)
			}
			time.Sleep(500 * time.Millisecond)
		}
		owners := configOwners(t, s.ns, cur.cm)
		if framework.CheckAttached(owners, cur.rs) == nil {
			t.Fatalf("%s is attached to the canary %s although no hook ran", cur.cm, cur.rs.Name)
		}
		hookArgs := "none"
		if before != nil {
			hookArgs = strings.Join(before.Spec.Template.Spec.Containers[0].Args, " ")
		}
		t.Logf("then: for %s of pause (%d checks) the sync stays Running on wave 0 and creates no Sync hook (wave 1): "+
			"the live hook Job is still the previous sync's (%s); %s is NOT attached to the canary %s (owners: %d), "+
			"but exists: it is in git, Argo CD manages it", pauseWatch, polls, hookArgs, cur.cm, cur.rs.Name, len(owners))
	}
	// Whoever attaches, the previous revision left git (unless image-only) and is still there, attached.
	must(t, e2e.cluster.WaitAttached(ctx, s.attachWait, s.ns, refs.ConfigMap, prev.cm, prev.rs))
	if prev.cm != cur.cm {
		st, err := e2e.cluster.ApplicationStatus(ctx, s.app.Name)
		must(t, err)
		for _, r := range st.Resources {
			if r.Kind == "ConfigMap" && r.Name == prev.cm {
				t.Fatalf("the Application still lists %s (%s) after it left git", prev.cm, r)
			}
		}
		t.Logf("then: %s, which left git with this deploy, is still there attached to %s, and the Application does not list it (no prune, not OutOfSync)",
			prev.cm, prev.rs.Name)
	}
}

// expectAttachedNow checks every ReplicaSet of the Rollout has its config, attached, now that the
// sync (and its hook, if any) is over.
func (s *argoStory) expectAttachedNow(cur revisionOf, when string) {
	s.t.Helper()
	s.expectEveryReplicaSetHasItsConfig()
	owners := configOwners(s.t, s.ns, cur.cm)
	by := "the controller"
	if s.attach.hook() {
		job := s.hooks[len(s.hooks)-1]
		by = fmt.Sprintf("the Sync hook Job %s (configmap-attacher %s)", job.Name, strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "))
	}
	s.t.Logf("then: %s: %s is attached to %s by %s (%d owner(s)); every ReplicaSet of %s finds its config, attached",
		when, cur.cm, cur.rs.Name, by, len(owners), s.rollout)
}

// expectLeftGitButKept checks the config revisions that left git are neither pruned nor listed by
// the Application while their ReplicaSet exists; it returns those whose ReplicaSet still exists.
// Once Argo Rollouts prunes a ReplicaSet (revisionHistoryLimit), the garbage collector deletes its
// config: that, not Argo CD, is what removes old config.
func (s *argoStory) expectLeftGitButKept(kept []revisionOf) []revisionOf {
	s.t.Helper()
	ctx := context.Background()
	var still []revisionOf
	for _, r := range kept {
		_, err := e2e.cluster.Kube.AppsV1().ReplicaSets(s.ns).Get(ctx, r.rs.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			must(s.t, e2e.cluster.WaitGone(ctx, freedWithin, s.ns, refs.ConfigMap, r.cm))
			s.t.Logf("then: Argo Rollouts pruned ReplicaSet %s (revisionHistoryLimit) and the garbage collector deleted %s with it", r.rs.Name, r.cm)
			continue
		}
		must(s.t, err)
		configOwners(s.t, s.ns, r.cm) // fails if Argo CD pruned it
		must(s.t, e2e.cluster.WaitAttached(ctx, s.attachWait, s.ns, refs.ConfigMap, r.cm, r.rs))
		still = append(still, r)
	}
	if len(still) > 0 {
		var names []string
		for _, r := range still {
			names = append(names, r.cm+" (ReplicaSet "+r.rs.Name+")")
		}
		s.t.Logf("then: config that left git but whose ReplicaSet is kept for rollback is still there, attached: %s", strings.Join(names, ", "))
	}
	return still
}

// expectArgoView checks what the Application reports: Synced and Healthy, every listed resource
// Synced, the only ConfigMap it manages the current revision, nothing to prune.
func (s *argoStory) expectArgoView(cur revisionOf) {
	s.t.Helper()
	st, err := e2e.cluster.WaitSynced(context.Background(), argoSyncWait, s.app.Name)
	must(s.t, err)
	var cms []string
	for _, r := range st.Resources {
		if r.Hook {
			continue // the last Sync hook Job: a hook, not a managed resource
		}
		if r.Status != "Synced" || r.RequiresPruning {
			s.t.Fatalf("the Application lists %s: want every resource Synced, none to prune (%s)", r, st)
		}
		if r.Kind == "ConfigMap" {
			cms = append(cms, r.Name)
		}
	}
	if !slices.Equal(cms, []string{cur.cm}) {
		s.t.Fatalf("the Application manages ConfigMaps %v, want only the current revision %s", cms, cur.cm)
	}
	m, err := e2e.cluster.Meta(context.Background(), s.ns, refs.ConfigMap, cur.cm)
	must(s.t, err)
	s.t.Logf("then: the Application is %s and %s, manages only %s among ConfigMaps (live with %d ownerReference(s) and finalizers %v, "+
		"neither in git: no OutOfSync), nothing to prune", st.Sync, st.Health, cur.cm, len(m.OwnerReferences), m.Finalizers)
}

// expectNoLeak checks that exactly the config of the ReplicaSets left exists.
func (s *helmStory) expectNoLeak() {
	s.t.Helper()
	ctx := context.Background()
	res, err := e2e.cluster.Resolve(ctx, s.ns, s.rollout)
	must(s.t, err)
	var want []string
	for _, rs := range res.Owned {
		cm, err := mountedConfigMap(rs)
		must(s.t, err)
		if !slices.Contains(want, cm) {
			want = append(want, cm)
		}
	}
	slices.Sort(want)
	must(s.t, framework.Eventually(ctx, freedWithin, fmt.Sprintf("only %v left", want), func(ctx context.Context) (bool, string, error) {
		got, err := s.revisionedConfigMaps(ctx)
		return slices.Equal(got, want), fmt.Sprint(got), err
	}))
	s.t.Logf("then: only the config of the %d ReplicaSets left exists: %v", len(res.Owned), want)
}

// watchInUse checks, every 200 ms until the test ends, that every ConfigMap a ReplicaSet of ns
// references exists: "no config in use is lost", between the steps too, not only at them. Each check
// lists ConfigMaps, then ReplicaSets at exactly the ConfigMaps' resourceVersion (etcd's revision is
// global), so both lists are one snapshot of the namespace and a ConfigMap deleted with its ReplicaSet
// is never mistaken for a loss.
func watchInUse(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var checks, failed int
	var lost []string
	var lastErr error
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := inUseLost(ctx, ns)
			switch {
			case err != nil:
				failed, lastErr = failed+1, err
			default:
				checks++
				for _, m := range l {
					if !slices.Contains(lost, m) {
						lost = append(lost, m)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		switch {
		case len(lost) > 0:
			t.Errorf("config in use was lost: %s", strings.Join(lost, "; "))
		case checks == 0:
			t.Errorf("the in-use watch never read the namespace: %v", lastErr)
		default:
			t.Logf("then: in %d snapshots of %s taken every 200 ms (%d failed reads), every ConfigMap a ReplicaSet referenced existed", checks, ns, failed)
		}
	})
}

// inUseLost lists what ReplicaSets of ns reference that does not exist, in one snapshot.
func inUseLost(ctx context.Context, ns string) ([]string, error) {
	cms, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{
		ResourceVersion: cms.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		return nil, err
	}
	exists := map[string]bool{}
	for _, cm := range cms.Items {
		exists[cm.Name] = true
	}
	var lost []string
	for _, rs := range rss.Items {
		if rs.DeletionTimestamp != nil {
			continue
		}
		for r := range refs.FromPodSpec(&rs.Spec.Template.Spec) {
			if r.Kind == refs.ConfigMap && !exists[r.Name] {
				lost = append(lost, fmt.Sprintf("ReplicaSet %s (%d replicas) references ConfigMap %s, missing at resourceVersion %s",
					rs.Name, ptrOr(rs.Spec.Replicas, 1), r.Name, cms.ResourceVersion))
			}
		}
	}
	return lost, nil
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// expectHookRanOnRealNode checks the Sync hook's pod ran the project's image on the real node, as its
// ServiceAccount, and exited 0; it logs what the binary printed.
func expectHookRanOnRealNode(t *testing.T, n *framework.RealNode, job *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	pods, err := e2e.cluster.Kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/controller-uid=" + string(job.UID)})
	must(t, err)
	var ok *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != n.Name {
			t.Fatalf("hook pod %s ran on %q, not the real node %s", p.Name, p.Spec.NodeName, n.Name)
		}
		if p.Status.Phase == corev1.PodSucceeded {
			ok = p
		}
	}
	if ok == nil {
		t.Fatalf("hook Job %s has no Succeeded pod: %d pods", job.Name, len(pods.Items))
	}
	cs := ok.Status.ContainerStatuses[0]
	if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
		t.Fatalf("hook pod %s: %s", ok.Name, framework.DescribePod(ok))
	}
	logs, err := e2e.cluster.Kubectl(ctx, "logs", "-n", job.Namespace, ok.Name)
	must(t, err)
	if !strings.Contains(logs, `"msg":"done"`) && !strings.Contains(logs, "msg=done") {
		t.Fatalf("hook pod %s's logs do not end the attach:\n%s", ok.Name, logs)
	}
	term := cs.State.Terminated
	t.Logf("then: hook pod %s ran %s on %s as ServiceAccount %s, exit 0 in %s; kubectl logs:\n%s", ok.Name, cs.Image, ok.Spec.NodeName,
		ok.Spec.ServiceAccountName, term.FinishedAt.Sub(term.StartedAt.Time), strings.TrimSpace(logs))
}

// onRealNode are base-app's job values that run the Sync hook's pod on the real node with the
// project's image (imported into its containerd): its nodeSelector and toleration, and, because the
// local cluster has no kube-proxy and its API server listens on loopback, the host's network and the
// API server's address (as the controller chart's pod in TestRealNodeRunsTheControllerChart).
func onRealNode(t *testing.T, n *framework.RealNode, enforced bool) map[string]any {
	t.Helper()
	ref, archive := localImage(t)
	must(t, n.Import(context.Background(), logWriter{t}, archive))
	repo, tag, _ := strings.Cut(ref, ":")
	host, port, _ := apiServer(t)
	t.Logf("given: %s imported into the real node's containerd", ref)
	return map[string]any{
		"image":        map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"nodeSelector": map[string]any{framework.RealNodeLabel: framework.RealNodeValue},
		"tolerations": []any{map[string]any{"key": framework.RealNodeLabel, "operator": "Equal",
			"value": framework.RealNodeValue, "effect": "NoSchedule"}},
		"hostNetwork": true,
		"extraEnv": []any{
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": host},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": port},
		},
		"ownerReferencesPermissionEnforcement": enforced,
	}
}

// enforcesOwnerRefPermissions reports whether the cluster runs OwnerReferencesPermissionEnforcement
// (the local one does, as OpenShift): the hook's Role then needs delete on ConfigMaps.
func enforcesOwnerRefPermissions(t *testing.T, ns string) bool {
	t.Helper()
	enforced, err := e2e.cluster.EnforcesOwnerReferencePermissions(context.Background(), ns, t.TempDir())
	must(t, err)
	return enforced
}

// expectProtected checks the controller's in-use finalizer is on the current revision.
func expectProtected(t *testing.T, ns, cm string) {
	t.Helper()
	must(t, e2e.cluster.WaitProtected(context.Background(), attachWithin, ns, refs.ConfigMap, cm))
	t.Logf("then: %s carries %s", cm, api.InUseFinalizer)
}
