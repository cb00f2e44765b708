//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	must(t, e2e.cluster.Promote(ctx, ns, "demo"))
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

	// What Argo CD does next: the sync is still in wave 0, waiting for the Rollout (and for the
	// ConfigMap it applied, now gone).
	st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, app.Name, "to end its sync", func(st framework.AppStatus) bool {
		return !st.OperationPending && st.Deployed
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
		ran = fmt.Sprintf("Job %s was created (%d succeeded, %d failed)", hook.Name, hook.Status.Succeeded, hook.Status.Failed)
	}
	t.Logf("then: Argo CD's sync ended %s: %q; the Application is %s and %s, %v; the wave-1 hook %s. "+
		"A spot-replaced pod of %s would not start (FailedMount) until another sync recreates the ConfigMap",
		st.OperationPhase, st.OperationMessage, st.Sync, st.Health, missing, ran, canary.rs.Name)
}

// job.syncWave: 0: the hook starts with the Rollout, waits for the new ReplicaSet and attaches during
// the pause, so the same promotion finds the config owned by the new ReplicaSet too. Argo CD's sync
// still waits for the Rollout before it ends (the hook's RBAC is in wave -1, so the sync has several
// waves), but nothing waits for it.
func TestArgoCDSyncHookInWaveZeroAttachesDuringThePause(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ns := givenNamespace(t, "e2e-argocd-wave-zero")
	useArgoCD(t)
	repo, versions := serveCharts(t, "base-app")
	job := onRealNode(t, n, enforcesOwnerRefPermissions(t, ns))
	job["syncWave"] = int64(0)
	values := func(d argoDeploy) map[string]any {
		v := baseAppValues(d, "job", job)
		v["revisionHistoryLimit"] = int64(0)
		return v
	}
	app := framework.HelmApp{Name: "e2e-wave-zero", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true}
	givenApplication(t, app)
	watchInUse(t, ns)
	t.Log("given: base-app with revisionHistoryLimit: 0 and job.syncWave: 0")
	s := newArgoStory(t, ns, app, values, attachByHookDuringPause)
	s.afterSync = func(_ argoDeploy, _ revisionOf) { expectHookRanOnRealNode(t, n, s.hooks[len(s.hooks)-1]) }
	// Install, an image-only deploy, a config change.
	s.run([]argoDeploy{{0, "1.27"}, {0, "1.28"}, {1, "1.28"}})
}
