//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// The compatibility story: the write-up's canary told twice on one controller, the one the chart
// installs (pinning.enabled, run as the chart's ServiceAccount, with the chart's arguments): once with
// revisioned config the controller attaches, once zero-touch with a static ConfigMap pinned per
// revision. pinning.admission is left at auto: on Kubernetes 1.35 that is the webhook, on 1.36 and
// later the API server's admission policies over the controller's PinTables.
// Every API and RBAC rule the controller uses (ownerReferences under
// OwnerReferencesPermissionEnforcement, the in-use finalizer, snapshots, its certificate Secret, the
// MutatingWebhookConfiguration, the Lease) is exercised. `make test-e2e` runs it on the local control
// plane (KUBERNETES_VERSION) with the other stories, then again alone on the oldest Kubernetes minor
// still in support (KUBERNETES_COMPAT=1.35: hack/cluster/up.sh's compatibility control plane).
func TestCompatTheWriteUpWithTheChartsControllerAndPinning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, err := e2e.cluster.Kube.Discovery().ServerVersion()
	must(t, err)
	t.Logf("given: Kubernetes %s", v.GitVersion)
	if want := os.Getenv("KUBERNETES_COMPAT"); want != "" && v.Major+"."+v.Minor != want {
		t.Fatalf("KUBERNETES_COMPAT=%s, but the cluster runs Kubernetes %s", want, v.GitVersion)
	}
	ns := givenNamespace(t, "compat-controller")
	renamed := story(t, "compat-walkthrough", walkthrough.Controller{})
	pinned := story(t, "compat-zero-touch", walkthrough.Controller{}) // ZeroTouch uses no attacher
	must(t, e2e.cluster.EnablePinning(ctx, pinned.Namespace))
	r := installChart(t, "cma-compat", ns, "watchNamespaces={"+renamed.Namespace+","+pinned.Namespace+"}",
		"pinning.enabled=true", "rbac.ownerReferencesPermissionEnforcement=true")
	served, err := policy.PolicyServed(e2e.cluster.Kube.Discovery())
	must(t, err)
	_, err = e2e.cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.fullname(), metav1.GetOptions{})
	webhook := err == nil
	if webhook == served {
		t.Fatalf("pinning.admission=auto on Kubernetes %s (admission policies served: %v) rendered the webhook: %v", v.GitVersion, served, webhook)
	}
	if webhook {
		t.Log("given: auto chose the webhook (no admission policies in admissionregistration.k8s.io/v1 here)")
		r.runPinningController(r.deployment())
	} else {
		t.Log("given: auto chose policy mode (the API server pins)")
		r.expectLeader(r.runController(r.deployment()))
	}

	t.Log("when: the write-up, config revisioned by name, attached by the controller")
	must(t, renamed.Walkthrough(ctx))
	t.Log("when: the write-up, zero-touch: one static ConfigMap changed in place, pinned per revision")
	must(t, pinned.ZeroTouch(ctx))
}
