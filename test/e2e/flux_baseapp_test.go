//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// fluxBaseApp is the docs/flux.md recipe for charts/base-app: a HelmRelease with `attacher:
// controller` (the controller runs in the cluster), drift detection on, Flux told how to judge a
// Rollout (rolloutHealth: it waits for a paused canary, fails on an aborted one), and an upgrade that
// fails is rolled back (remediation strategy rollback, on the last failure too).
func fluxBaseApp(name, ns, repo, version string, values map[string]any) framework.HelmRelease {
	return framework.HelmRelease{
		Name: name, Namespace: ns, Repository: repo, Chart: "base-app", Version: version, Values: values,
		Spec: map[string]any{
			"timeout":          "5m",
			"driftDetection":   map[string]any{"mode": "enabled"},
			"healthCheckExprs": rolloutHealth,
			"upgrade": map[string]any{"remediation": map[string]any{
				"retries": int64(0), "remediateLastFailure": true, "strategy": "rollback"}},
		},
	}
}

// fluxStory walks base-app's Rollout through deploys made by changing the HelmRelease's values.
type fluxStory struct {
	*helmStory
	hr framework.HelmRelease
}

// deploy sets the values for config revision config and waits for the canary to pause on its new
// ReplicaSet, Flux waiting for the Rollout meanwhile.
func (s *fluxStory) deploy(config int, prev revisionOf) revisionOf {
	t, ctx := s.t, context.Background()
	t.Logf("when: the HelmRelease's values change to config revision %d (a commit in Git, applied by Flux)", config)
	must(t, e2e.cluster.SetHelmReleaseValues(ctx, s.ns, s.hr.Name, baseAppValues(argoDeploy{config, "1.27"}, "controller", nil)))
	cur := s.waitNewRevision(prev.rs, 1)
	must(t, s.waitPaused())
	st, err := e2e.cluster.WaitHelmRelease(ctx, fluxWait, s.ns, s.hr.Name, "to wait for the paused Rollout", func(st framework.FluxStatus) bool {
		return st.Attempted && st.Conditions["Ready"].Status == "Unknown"
	})
	must(t, err)
	t.Logf("then: the canary paused: ReplicaSet %s runs 1 pod mounting %s; ReplicaSet %s keeps 2 mounting %s; Flux waits (Ready %s: %q)",
		cur.rs.Name, cur.cm, prev.rs.Name, prev.cm, st.Conditions["Ready"].Status, st.Conditions["Ready"].Message)
	s.expectEveryReplicaSetHasItsConfig()
	return cur
}

// promote continues the canary and waits for Flux to call the upgrade a success.
func (s *fluxStory) promote(cur, prev revisionOf) {
	t, ctx := s.t, context.Background()
	t.Logf("when: kubectl argo rollouts promote %s", s.rollout)
	promotePaused(t, s.ns, s.rollout)
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, cur.rs, 3))
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, prev.rs, 0))
	st, err := e2e.cluster.WaitHelmReleaseReady(ctx, fluxWait, s.ns, s.hr.Name)
	must(t, err)
	t.Logf("then: all 3 pods run ReplicaSet %s; %s", cur.rs.Name, describeFlux(st))
	s.expectEveryReplicaSetHasItsConfig()
	expectProtected(t, s.ns, cur.cm)
}

// givenFluxBaseApp installs recipe 1 (reconciled every interval; 1m when zero) in a new namespace with
// the controller running, and returns the story with its first revision running 3 pods, attached and
// protected. A watcher checks all along that no ConfigMap a ReplicaSet references goes missing.
func givenFluxBaseApp(t *testing.T, namespace string, interval time.Duration) (*fluxStory, revisionOf) {
	t.Helper()
	ns := givenNamespace(t, namespace)
	useFlux(t)
	startController(t, nil, ns)
	versions := fluxRepository(t, ns, "base-app")
	hr := fluxBaseApp("demo", ns, ns, versions["base-app"], baseAppValues(argoDeploy{0, "1.27"}, "controller", nil))
	hr.Interval = cmp.Or(interval, time.Minute)
	watchInUse(t, ns)
	s := &fluxStory{helmStory: &helmStory{t: t, ns: ns, rollout: "demo", attachWait: attachWithin}, hr: hr}

	t.Logf("given: the HelmRelease installs base-app, config revision 0 (revisionHistoryLimit 2, reconciled every %s)", hr.Interval)
	givenHelmRelease(t, hr)
	st, err := e2e.cluster.WaitHelmReleaseReady(context.Background(), fluxWait, ns, hr.Name)
	must(t, err)
	rev0 := s.waitNewRevision(nil, 3)
	s.expectEveryReplicaSetHasItsConfig()
	expectProtected(t, ns, rev0.cm)
	t.Logf("then: ReplicaSet %s runs 3 pods mounting %s; %s", rev0.rs.Name, rev0.cm, describeFlux(st))
	return s, rev0
}

// charts/base-app through Flux with the controller: each config change is a canary Flux waits for; old
// pods read old config (a spot-replaced pod of the old ReplicaSet mounts the old revision); promotion,
// an abort (which fails Flux's upgrade, and Flux's remediation rolls the release back) and pruning by
// revisionHistoryLimit leave every ConfigMap a ReplicaSet references in place, and the garbage collector
// deletes the config of pruned ReplicaSets. Drift detection finds nothing to correct throughout.
func TestFluxBaseAppWithTheController(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rev0 := givenFluxBaseApp(t, "e2e-flux-base-app", 0)
	ns, hr := s.ns, s.hr

	rev1 := s.deploy(1, rev0)
	s.spotReplacement(rev0, rev1)
	s.promote(rev1, rev0)

	rev2 := s.deploy(2, rev1)
	t.Logf("when: the config is faulty: kubectl argo rollouts abort %s", s.rollout)
	must(t, e2e.cluster.Abort(ctx, ns, s.rollout))
	st, err := e2e.cluster.WaitHelmRelease(ctx, fluxWait, ns, hr.Name, "to fail the upgrade and roll back", func(st framework.FluxStatus) bool {
		return st.Current && st.Is("Remediated") && st.Conditions["Released"].Status == "False" && len(st.History) > 0 && st.History[0].Status == "deployed"
	})
	must(t, err)
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rev1.rs, 3))
	must(t, e2e.cluster.WaitPods(ctx, fluxWait, rev2.rs, 0))
	back := s.waitNewRevision(rev2.rs, 3)
	if back.rs.UID != rev1.rs.UID {
		t.Fatalf("after Flux's rollback the Rollout runs ReplicaSet %s, want %s back", back.rs.Name, rev1.rs.Name)
	}
	t.Logf("then: the aborted Rollout fails Flux's upgrade and Flux rolls the release back (%s: %q; history %v); ReplicaSet %s runs 3 pods mounting %s again",
		st.Conditions["Remediated"].Reason, st.Conditions["Remediated"].Message, st.History, rev1.rs.Name, rev1.cm)
	s.expectEveryReplicaSetHasItsConfig()
	configOwners(t, ns, rev2.cm) // the faulty revision's config stays with its ReplicaSet (kept for history)
	t.Logf("then: %s (the faulty config) is still there, attached to ReplicaSet %s; %s and %s too", rev2.cm, rev2.rs.Name, rev1.cm, rev0.cm)

	rev3 := s.deploy(3, rev1)
	s.promote(rev3, rev1)
	t.Logf("then: revisionHistoryLimit 2 prunes ReplicaSet %s, and the garbage collector deletes %s with it", rev0.rs.Name, rev0.cm)
	must(t, e2e.cluster.WaitReplicaSetGone(ctx, fluxWait, ns, rev0.rs.Name))
	must(t, e2e.cluster.WaitGone(ctx, freedWithin, ns, refs.ConfigMap, rev0.cm))
	s.expectNoLeak()
	expectNoDrift(t, ns, hr.Name)
}
