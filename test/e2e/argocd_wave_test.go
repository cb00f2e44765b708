//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// What base-app's sync-wave for its Sync hook decides, on the deploy where it matters most: an
// image-only deploy (the new ReplicaSet mounts the same ConfigMap, attached so far to the old
// ReplicaSet only) with revisionHistoryLimit: 0, where the promotion deletes the old ReplicaSet at once
// and the garbage collector deletes whatever only it owned. Both run the hook's pod on the real node.

// The default, wave 1: Argo CD starts the hook only once the Rollout is Healthy, i.e. after the
// promotion, and by then the old ReplicaSet (the config's only owner) is gone, and so is the config
// the new ReplicaSet's pods mount. Negative control for job.syncWave 0 below; with revisionHistoryLimit
// of 1 or more (the chart's default is 10) the previous ReplicaSet stays and nothing is lost
// (TestArgoCDBaseAppWithTheSyncHookJob).
func TestArgoCDSyncHookInWaveOneComesTooLateWithoutHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := realNode(t)
	ns := givenNamespace(t, "e2e-argocd-wave-one")
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	job := onRealNode(t, n, enforcesOwnerRefPermissions(t, ns))
	// If the hook starts at all, it waits for the missing ConfigMap: let it give up soon, once.
	job["timeout"], job["backoffLimit"] = "20s", int64(0)
	values := func(d argoDeploy) map[string]any {
		v := baseAppValues(d, "job", job)
		v["revisionHistoryLimit"] = int64(0)
		return v
	}
	app := framework.HelmApp{Name: "e2e-wave-one", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true}
	givenApplication(t, app)
	s := newArgoStory(t, ns, app, values, attachByHookAfterPromotion)
	t.Log("given: base-app with revisionHistoryLimit: 0 and the Sync hook in its default wave 1")
	old := s.deploy(0, argoDeploy{0, "1.27"}, nil)

	t.Logf("when: an image-only deploy (nginx:1.28): the canary mounts %s too", old.cm)
	must(t, e2e.cluster.SetApplicationValues(ctx, app.Name, values(argoDeploy{0, "1.28"})))
	s.requestSync()
	canary := s.waitNewRevision(old.rs, 1)
	must(t, s.waitPaused())
	if canary.cm != old.cm {
		t.Fatalf("an image-only deploy changed the config: %s -> %s", old.cm, canary.cm)
	}
	owners := configOwners(t, ns, old.cm)
	if framework.CheckAttached(owners, canary.rs) == nil {
		t.Fatalf("%s is attached to the canary %s before the hook could run", old.cm, canary.rs.Name)
	}
	t.Logf("then: during the pause %s has %d owner, ReplicaSet %s; the hook (wave 1) waits for the Rollout", old.cm, len(owners), old.rs.Name)

	t.Log("when: kubectl argo rollouts promote demo")
	promoted := time.Now()
	promotePaused(t, ns, "demo")
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, argoSyncWait, ns, old.rs.Name))
	must(t, e2e.cluster.WaitGone(ctx, argoSyncWait, ns, refs.ConfigMap, old.cm))
	lostAfter := time.Since(promoted)
	pods, err := e2e.cluster.PodsOf(ctx, canary.rs)
	must(t, err)
	t.Logf("then: revisionHistoryLimit 0 deleted ReplicaSet %s and the garbage collector deleted %s with it, %s after the promotion, "+
		"while the %d pods of ReplicaSet %s mount it: config in use is lost", old.rs.Name, old.cm, lostAfter.Round(time.Millisecond), len(pods), canary.rs.Name)
	if lost, err := inUseLost(ctx, ns); err == nil {
		t.Logf("then: %v", lost)
	}

	// What Argo CD does next depends on timing: if wave 0 is still being checked, its ConfigMap is
	// missing and the sync fails; if wave 0 was done, the hook starts, waits for the missing ConfigMap
	// and fails after its -timeout (20 s here, 3 min by default), and so does the sync.
	st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, app.Name, "to end its sync", func(st framework.AppStatus) bool {
		return !st.OperationPending && st.Deployed
	})
	must(t, err)
	if st.OperationPhase == "Succeeded" {
		t.Fatalf("the sync succeeded although the config it applied is gone: %s", st)
	}
	sync := fmt.Sprintf("%s: %q", st.OperationPhase, st.OperationMessage)
	must(t, e2e.cluster.RefreshApplication(ctx, app.Name))
	st, err = e2e.cluster.WaitApplication(ctx, argoSyncWait, app.Name, "to show the ConfigMap missing", func(st framework.AppStatus) bool {
		return st.Sync == "OutOfSync"
	})
	must(t, err)
	var missing []string
	for _, r := range st.Resources {
		if r.Kind == "ConfigMap" && r.Status != "Synced" {
			missing = append(missing, r.String())
		}
	}
	hook, err := s.liveHook(ctx)
	must(t, err)
	ran := "did not run: no new Sync hook Job was created"
	if hook != nil && !s.isOldHook(hook) {
		// The sync may have failed before the Job's pod ran (or after Argo CD removed it): its logs
		// tell the story when there are some, they are not what this test proves.
		said := "no logs"
		if out, err := e2e.cluster.Kubectl(ctx, "logs", "-n", hook.Namespace, "job/"+hook.Name, "--pod-running-timeout=5s"); err == nil {
			said = "its binary's last line: " + lastLine(strings.TrimSpace(out))
		}
		ran = fmt.Sprintf("Job %s was created (%d active, %d succeeded, %d failed), %s", hook.Name, hook.Status.Active, hook.Status.Succeeded, hook.Status.Failed, said)
	}
	t.Logf("then: Argo CD's sync ended %s; the Application is %s and %s, %v; the wave-1 hook %s. "+
		"A spot-replaced pod of %s would not start (FailedMount) until another sync recreates the ConfigMap",
		sync, st.Sync, st.Health, missing, ran, canary.rs.Name)
}

// job.syncWave: 0 puts the hook in the Rollout's wave: Argo CD creates the Job in the same pass as it
// applies the Rollout, so the binary starts during the canary, not after it.
//
// A config change: the binary waits for the ReplicaSet that mounts the new ConfigMap name, and
// attaches during the pause (asserted). An image-only deploy: the name does not change, and
// gitops-engine applies a wave's objects kind by kind, known kinds first (the Job) and custom ones
// (the Rollout) last, so the hook's pod may look before the Rollout is applied, find the OLD
// ReplicaSet current, and exit "already attached". Which way it goes is a race, so the test asserts
// the order Argo CD used and reports the outcome; revisionHistoryLimit 2 keeps the config either way.
func TestArgoCDSyncHookInWaveZeroAttachesDuringThePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := realNode(t)
	ns := givenNamespace(t, "e2e-argocd-wave-zero")
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	job := onRealNode(t, n, enforcesOwnerRefPermissions(t, ns))
	job["syncWave"] = int64(0)
	values := func(d argoDeploy) map[string]any { return baseAppValues(d, "job", job) }
	app := framework.HelmApp{Name: "e2e-wave-zero", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true}
	givenApplication(t, app)
	watchInUse(t, ns)
	t.Log("given: base-app with job.syncWave: 0")
	s := newArgoStory(t, ns, app, values, attachByHookDuringPause)
	s.afterSync = func(_ argoDeploy, _ revisionOf) { expectHookRanOnRealNode(t, n, s.hooks[len(s.hooks)-1]) }
	v0 := s.deploy(0, argoDeploy{0, "1.27"}, nil)
	v1 := s.deploy(1, argoDeploy{1, "1.27"}, &v0) // a config change: attached during the pause
	s.afterSync(argoDeploy{}, v1)

	t.Log("when: an image-only deploy (nginx:1.28)")
	must(t, e2e.cluster.SetApplicationValues(ctx, app.Name, values(argoDeploy{1, "1.28"})))
	s.requestSync()
	canary := s.waitNewRevision(v1.rs, 1)
	must(t, s.waitPaused())
	var hook *batchv1.Job
	must(t, framework.Eventually(ctx, argoSyncWait, "the sync's hook Job to finish", func(ctx context.Context) (bool, string, error) {
		j, err := s.liveHook(ctx)
		if err != nil || j == nil || s.isOldHook(j) {
			return false, "no new hook Job", err
		}
		hook = j
		return j.Status.Succeeded > 0 || j.Status.Failed > 0, "running", nil
	}))
	s.hooks = append(s.hooks, hook)
	st, err := e2e.cluster.ApplicationStatus(ctx, app.Name)
	must(t, err)
	order := map[string]int{}
	var kinds []string
	for i, r := range st.SyncResults {
		order[r.Kind] = i
		kinds = append(kinds, r.Kind+"/"+r.Name)
	}
	if order["Job"] > order["Rollout"] {
		t.Fatalf("Argo CD applied the Rollout before creating the wave-0 hook Job: %v", st.SyncResults)
	}
	t.Logf("then: in wave 0 Argo CD created the hook Job before it applied the Rollout (sync results in order: %s)", strings.Join(kinds, ", "))
	attached := framework.CheckAttached(configOwners(t, ns, canary.cm), canary.rs) == nil
	logs := hookLogs(t, hook)
	if attached {
		t.Logf("then: this time the hook's binary saw the new ReplicaSet: %s attached to the canary %s during the pause:\n%s", canary.cm, canary.rs.Name, logs)
	} else {
		t.Logf("then: this time the hook's binary looked before the Rollout changed: it found %s current and exited; %s is NOT attached to the canary %s, "+
			"and no other hook runs for this deploy:\n%s", v1.rs.Name, canary.cm, canary.rs.Name, logs)
	}
	promotePaused(t, ns, "demo")
	must(t, e2e.cluster.WaitPods(ctx, argoSyncWait, canary.rs, 3))
	_, err = e2e.cluster.WaitApplication(ctx, argoSyncWait, app.Name, "to end its sync", func(st framework.AppStatus) bool {
		return !st.OperationPending && st.Deployed
	})
	must(t, err)
	owners := configOwners(t, ns, canary.cm)
	t.Logf("then: promoted; %s has %d owner(s), attached to the now stable %s: %v (with the old ReplicaSets pruned, an unattached current "+
		"revision would go with them although in use)", canary.cm, len(owners), canary.rs.Name, framework.CheckAttached(owners, canary.rs) == nil)
}

// hookLogs returns the logs of the hook Job's pods (they ran on the real node).
func hookLogs(t *testing.T, job *batchv1.Job) string {
	t.Helper()
	out, err := e2e.cluster.Kubectl(context.Background(), "logs", "-n", job.Namespace, "job/"+job.Name)
	must(t, err)
	return strings.TrimSpace(out)
}

// Negative control for "Argo CD does not prune attached config": the same Sync hook Job, but nothing
// runs it (its pod lands on a kwok node, which marks it complete without running a container), so
// no revision is ever attached. Argo CD then counts the previous revision as its own, and the next
// sync with prune deletes it while the old ReplicaSet's pods mount it, `helm.sh/resource-policy:
// keep` notwithstanding.
func TestArgoCDPrunesConfigThatWasNeverAttached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-argocd-never-attached")
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	values := func(d argoDeploy) map[string]any {
		return baseAppValues(d, "job", map[string]any{"ownerReferencesPermissionEnforcement": true})
	}
	app := framework.HelmApp{Name: "e2e-never-attached", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true}
	givenApplication(t, app)
	s := newArgoStory(t, ns, app, values, attachByHookAfterPromotion)
	t.Log("given: base-app with its Sync hook Job, whose pod kwok completes without running anything")
	must(t, e2e.cluster.SetApplicationValues(ctx, app.Name, values(argoDeploys[0])))
	s.requestSync()
	old := s.waitNewRevision(nil, 3)
	_, err := e2e.cluster.WaitSynced(ctx, argoSyncWait, app.Name)
	must(t, err)
	if owners := configOwners(t, ns, old.cm); len(owners) != 0 {
		t.Fatalf("%s has owners %v: something attached it", old.cm, owners)
	}
	t.Logf("then: the sync Succeeded (the hook Job \"completed\"), and %s has no ownerReference", old.cm)

	t.Log("when: a config change is synced with prune")
	must(t, e2e.cluster.SetApplicationValues(ctx, app.Name, values(argoDeploys[1])))
	s.requestSync()
	cur := s.waitNewRevision(old.rs, 1)
	must(t, e2e.cluster.WaitGone(ctx, argoSyncWait, ns, refs.ConfigMap, old.cm))
	st, err := e2e.cluster.ApplicationStatus(ctx, app.Name)
	must(t, err)
	var pruned []string
	for _, r := range st.SyncResults {
		if r.Status == "Pruned" {
			pruned = append(pruned, r.Kind+"/"+r.Name)
		}
	}
	pods, err := e2e.cluster.PodsOf(ctx, old.rs)
	must(t, err)
	if len(pods) == 0 {
		t.Fatalf("the old ReplicaSet %s runs no pods any more: nothing to show", old.rs.Name)
	}
	t.Logf("then: Argo CD pruned %v (%s gone) while %d pods of the old ReplicaSet %s mount it; the canary %s runs %s",
		pruned, old.cm, len(pods), old.rs.Name, cur.rs.Name, cur.cm)
}
