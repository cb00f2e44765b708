//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// Flux's helm-controller (Helm 4 inside) deploys the charts from a HelmRepository that
// source-controller reads from a Helm repository on loopback (hack/cluster/flux.sh). Every Flux test's
// name contains "Flux": `go test -tags e2e -run Flux ./test/e2e/` runs them all.

// fluxWait bounds every wait on Flux or on what it deploys (the CI machine has 2 cores).
const fluxWait = 3 * time.Minute

var fluxTool = &sharedTool{name: "Flux (source-controller, helm-controller)",
	start: (*framework.Cluster).EnsureFlux, stop: (*framework.Cluster).StopFlux}

// useFlux runs Flux on the test cluster for the test.
func useFlux(t *testing.T) { fluxTool.use(t) }

// fluxRepository serves charts (from charts/, or test/e2e/testdata/charts) in a Helm repository on
// loopback and declares it to Flux as a HelmRepository named name in framework.FluxNamespace. It
// returns each chart's version.
func fluxRepository(t *testing.T, name string, charts ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	repo, err := framework.ServeChartRepo(helmCLI(t), "")
	must(t, err)
	t.Cleanup(func() { _ = repo.Close() })
	versions := map[string]string{}
	for _, c := range charts {
		dir := chartPath(c)
		if strings.Contains(c, "/") {
			dir = testdataPath(c)
		}
		v, err := repo.Add(ctx, dir, "")
		must(t, err)
		versions[c[strings.LastIndex(c, "/")+1:]] = v
	}
	must(t, e2e.cluster.ApplyHelmRepository(ctx, framework.FluxNamespace, name, repo.URL, time.Minute))
	t.Cleanup(func() {
		_ = e2e.cluster.Dynamic.Resource(framework.HelmRepositoryGVR).Namespace(framework.FluxNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	t.Logf("given: HelmRepository %s/%s: %v served at %s", framework.FluxNamespace, name, versions, repo.URL)
	return versions
}

// givenHelmRelease creates the HelmRelease (deleting a leftover first) and deletes it, uninstalling the
// release, at the end of the test.
func givenHelmRelease(t *testing.T, hr framework.HelmRelease) {
	t.Helper()
	ctx := context.Background()
	must(t, e2e.cluster.DeleteHelmRelease(ctx, fluxWait, hr.Namespace, hr.Name))
	must(t, e2e.cluster.ApplyHelmRelease(ctx, hr))
	t.Cleanup(func() {
		if t.Failed() {
			if st, err := e2e.cluster.HelmReleaseStatus(context.Background(), hr.Namespace, hr.Name); err == nil {
				t.Logf("HelmRelease %s at the end: %s", hr.Name, st)
			}
		}
		if err := e2e.cluster.DeleteHelmRelease(context.Background(), fluxWait, hr.Namespace, hr.Name); err != nil {
			t.Log(err)
		}
	})
}

// rolloutHealth is the recipes' spec.healthCheckExprs: how Flux judges an Argo Rollout.
var rolloutHealth = framework.RolloutHealthChecks()

// expectNoDrift checks Flux's drift detection found nothing to correct in the objects we write on
// (ownerReferences and finalizers on the chart's ConfigMaps; snapshots and pods are not the chart's):
// the Drifted condition says so and no DriftDetected or DriftCorrected Event was ever recorded.
func expectNoDrift(t *testing.T, ns, name string) {
	t.Helper()
	expectNoDriftBut(t, ns, name, "")
}

// expectNoDriftBut is expectNoDrift, but for DriftDetected and DriftCorrected Events that name raced
// alone (a "Kind/namespace/name"; "" for none). helm-controller reads the live object and dry-runs its
// manifest in two requests (fluxcd/pkg/ssa jsondiff.Unstructured); an Argo Rollout that makes a new
// ReplicaSet between them (it writes its revision annotation then) shows as changed though nothing
// Flux applied changed. The caller proves that: the Rollout's spec (its generation) and the template
// it runs.
func expectNoDriftBut(t *testing.T, ns, name, raced string) {
	t.Helper()
	ctx := context.Background()
	st, err := e2e.cluster.HelmReleaseStatus(ctx, ns, name)
	must(t, err)
	for _, reason := range []string{"DriftDetected", "DriftCorrected"} {
		events, err := e2e.cluster.Events(ctx, ns, refs.Kind("HelmRelease"), name, reason)
		must(t, err)
		var other []string
		for _, e := range events {
			if raced == "" || !namesOnly(e, raced) {
				other = append(other, e)
			}
		}
		if len(other) > 0 {
			t.Fatalf("Flux reported drift on HelmRelease %s: %s %q (%s)", name, reason, other, st)
		}
		if len(events) > 0 {
			t.Logf("Flux's drift detection raced %s's own write (its new ReplicaSet between Flux's read and its dry run): %s %q", raced, reason, events)
		}
	}
	if d, ok := st.Conditions["Drifted"]; ok && d.Status == "True" {
		t.Fatalf("HelmRelease %s is Drifted: %s", name, st)
	}
	t.Logf("then: Flux's drift detection finds nothing to correct (Drifted: %s %q); no DriftDetected or DriftCorrected Event",
		st.Conditions["Drifted"].Status, st.Conditions["Drifted"].Message)
}

// namesOnly reports whether a drift Event's message names obj and no other object: its first line
// says which release, each further line one object.
func namesOnly(message, obj string) bool {
	lines := strings.Split(strings.TrimSpace(message), "\n")
	if len(lines) < 2 {
		return false
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(strings.TrimSpace(l), obj+" ") {
			return false
		}
	}
	return true
}

// describeFlux says what Flux did last, for the narration.
func describeFlux(st framework.FluxStatus) string {
	r := st.Conditions["Released"]
	return fmt.Sprintf("Flux: %s %s (%q); Ready %s", st.LastAction, r.Reason, r.Message, st.Conditions["Ready"].Status)
}
