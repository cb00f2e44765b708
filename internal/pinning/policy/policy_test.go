package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
)

// The places a pod reads config by name, written out by hand from the Pod API: the policy must
// rewrite every one of them, and nothing else (never imagePullSecrets, the kubelet's registry
// credentials).
func TestPatternsAreWherePodsReadConfig(t *testing.T) {
	want := []string{
		"ConfigMap containers.*.env.*.valueFrom.configMapKeyRef.name",
		"ConfigMap containers.*.envFrom.*.configMapRef.name",
		"ConfigMap initContainers.*.env.*.valueFrom.configMapKeyRef.name",
		"ConfigMap initContainers.*.envFrom.*.configMapRef.name",
		"ConfigMap volumes.*.configMap.name",
		"ConfigMap volumes.*.projected.sources.*.configMap.name",
		"Secret containers.*.env.*.valueFrom.secretKeyRef.name",
		"Secret containers.*.envFrom.*.secretRef.name",
		"Secret initContainers.*.env.*.valueFrom.secretKeyRef.name",
		"Secret initContainers.*.envFrom.*.secretRef.name",
		"Secret volumes.*.azureFile.secretName",
		"Secret volumes.*.cephfs.secretRef.name",
		"Secret volumes.*.cinder.secretRef.name",
		"Secret volumes.*.csi.nodePublishSecretRef.name",
		"Secret volumes.*.flexVolume.secretRef.name",
		"Secret volumes.*.iscsi.secretRef.name",
		"Secret volumes.*.projected.sources.*.secret.name",
		"Secret volumes.*.rbd.secretRef.name",
		"Secret volumes.*.scaleIO.secretRef.name",
		"Secret volumes.*.secret.secretName",
		"Secret volumes.*.storageos.secretRef.name",
	}
	var got []string
	for _, p := range Patterns() {
		got = append(got, p.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("patterns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestForEachWalksEveryListOnTheWay(t *testing.T) {
	p := Pattern{Kind: "ConfigMap", Segments: []string{"volumes", "*", "projected", "sources", "*", "configMap", "name"}}
	got := forEach(p, func(name, _ string) string { return name + " != ''" }, func(name, ptr string) string { return "[" + name + ", " + ptr + "]" })
	want := "object.spec.?volumes.orValue([]).transformList(i0, v0, has(v0.projected) && has(v0.projected.sources), " +
		"v0.projected.sources.transformList(i1, v1, has(v1.configMap) && has(v1.configMap.name) && v1.configMap.name != '', " +
		"[v1.configMap.name, '/spec/volumes/' + string(i0) + '/projected/sources/' + string(i1) + '/configMap/name'])).flatten()"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRevisionOf(t *testing.T) {
	owner := func(kind, name, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid)}
	}
	for _, tc := range []struct {
		kind, name, uid string
		owner           *metav1.OwnerReference
		key, route      string
		ok              bool
	}{
		// A pod carries its ReplicaSet's uid; the route strips the pod-template hash, as the policy does from the pod's labels.
		{"ReplicaSet", "web-7d9f8c6b5", "rs-uid", owner("Deployment", "web", "d-uid"), "rs-uid", "ReplicaSet/web", true},
		{"ReplicaSet", "web-7d9f8c6b5", "rs-uid", owner("Rollout", "web", "r-uid"), "rs-uid", "ReplicaSet/web", true},
		{"ReplicaSet", "bare", "rs-uid", nil, "rs-uid", "ReplicaSet/bare", true},
		// A StatefulSet's pods carry the revision's name in controller-revision-hash; a DaemonSet's the hash alone.
		{"ControllerRevision", "db-5f7c9d8b4", "cr-uid", owner("StatefulSet", "db", "s-uid"), "s-uid/db-5f7c9d8b4", "StatefulSet/db", true},
		{"ControllerRevision", "agent-6c8d7f9b5", "cr-uid", owner("DaemonSet", "agent", "ds-uid"), "ds-uid/6c8d7f9b5", "DaemonSet/agent", true},
		{"ControllerRevision", "x-1", "cr-uid", nil, "", "", false},
		{"ControllerRevision", "x-1", "cr-uid", &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "CloneSet", Name: "x"}, "", "", false},
	} {
		r, ok := RevisionOf(tc.kind, tc.name, types.UID(tc.uid), tc.owner)
		if ok != tc.ok || (ok && (r.Key != tc.key || r.Route != tc.route)) {
			t.Errorf("RevisionOf(%s %s) = %q, %q, %v; want %q, %q, %v", tc.kind, tc.name, r.Key, r.Route, ok, tc.key, tc.route, tc.ok)
		}
	}
}

// The chart installs what the controller's code generates: run `go run ./internal/pinning/policy/gen`
// after changing either.
func TestChartFilesAreGenerated(t *testing.T) {
	files, err := ChartFiles()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "configmap-attacher", path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/configmap-attacher/%s is not what internal/pinning/policy generates: run `go run ./internal/pinning/policy/gen`", path)
		}
	}
}

// The bindings select what the webhook does: the same namespaces, never the controller's own nor
// kube-system, the same escape label, and the policies the same match condition. Each policy's own
// constraints carry the selectors too: kube-apiserver raises a policy's configuration error (its
// paramKind gone with the CRD) for every pod its own constraints match, bindings aside.
func TestPoliciesSelectWhatTheWebhookDoes(t *testing.T) {
	objs := Build(Config{Name: "cma", OwnNamespace: "tools", Namespaces: []string{"team-a"}})
	w := pinning.Registration{OwnNamespace: "tools", Namespaces: []string{"team-a"}}.Webhook(nil)
	for name, got := range map[string]*admissionregistrationv1.MatchResources{
		"mutating binding": objs.MutatingBinding.Spec.MatchResources, "validating binding": objs.ValidatingBinding.Spec.MatchResources,
		"tables binding":  objs.TablesBinding.Spec.MatchResources,
		"mutating policy": objs.Mutating.Spec.MatchConstraints, "validating policy": objs.Validating.Spec.MatchConstraints,
		"tables policy": objs.Tables.Spec.MatchConstraints,
	} {
		if got == nil || got.NamespaceSelector.String() != w.NamespaceSelector.String() {
			t.Errorf("%s: namespaces %v, want the webhook's %v", name, got, w.NamespaceSelector)
			continue
		}
		if got.ObjectSelector.String() != w.ObjectSelector.String() {
			t.Errorf("%s: object selector %v, want the webhook's %v", name, got.ObjectSelector, w.ObjectSelector)
		}
	}
	for name, got := range map[string][]admissionregistrationv1.MatchCondition{
		"mutating": objs.Mutating.Spec.MatchConditions, "validating": objs.Validating.Spec.MatchConditions, "tables": objs.Tables.Spec.MatchConditions,
	} {
		if len(got) != 1 || got[0].Expression != pinning.MatchOwnedByARevision {
			t.Errorf("%s: match conditions %v, want the webhook's owned-by-a-revision", name, got)
		}
	}
}

// What is missing of ours never refuses a pod that reads nothing: the gate reads no PinTable (no
// param error can reach it) and fails closed; the policies that read PinTables fail open and take
// a namespace without tables as nothing to do (the gate refuses what needs an entry).
func TestOnlyTheGateRefusesAndItReadsNoTable(t *testing.T) {
	objs := Build(Config{Name: "cma", OwnNamespace: "tools"})
	if objs.Validating.Spec.ParamKind != nil || objs.ValidatingBinding.Spec.ParamRef != nil {
		t.Errorf("the gate reads params: %v, %v", objs.Validating.Spec.ParamKind, objs.ValidatingBinding.Spec.ParamRef)
	}
	if *objs.Validating.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("the gate fails %s, want Fail", *objs.Validating.Spec.FailurePolicy)
	}
	if *objs.Mutating.Spec.FailurePolicy != admissionregistrationv1.Ignore || *objs.Tables.Spec.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("the policies reading PinTables fail %s and %s, want Ignore", *objs.Mutating.Spec.FailurePolicy, *objs.Tables.Spec.FailurePolicy)
	}
	for name, ref := range map[string]*admissionregistrationv1.ParamRef{"mutating": objs.MutatingBinding.Spec.ParamRef, "tables": objs.TablesBinding.Spec.ParamRef} {
		if ref == nil || *ref.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
			t.Errorf("%s binding: paramRef %v, want parameterNotFoundAction Allow", name, ref)
		}
	}
	if objs.Tables.Name != "cma-tables" || objs.TablesBinding.Spec.PolicyName != "cma-tables" {
		t.Errorf("the tables policy is %s bound as %s", objs.Tables.Name, objs.TablesBinding.Spec.PolicyName)
	}
}

// auto is policy only where the API server serves the policies and the PinTable CRD is installed:
// without the CRD (an upgrade from a chart that had none) it stays at the webhook, as the chart and
// docs/pinning.md say; policy says what is missing.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		asked         Mode
		served, table bool
		want          Mode
		err           string
	}{
		{Auto, true, true, Policy, ""},
		{Auto, true, false, Webhook, ""},
		{Auto, false, false, Webhook, ""},
		{Webhook, true, true, Webhook, ""},
		{Policy, true, true, Policy, ""},
		{Policy, true, false, "", "policy mode needs the PinTable CRD"},
		{Policy, false, false, "", "use -pinning-admission=webhook"},
	} {
		kube := kubefake.NewClientset()
		d := kube.Discovery().(*fakediscovery.FakeDiscovery)
		policies := metav1.APIResource{Name: "validatingadmissionpolicies"}
		if tc.served {
			policies = metav1.APIResource{Name: "mutatingadmissionpolicies"}
		}
		d.Resources = []*metav1.APIResourceList{{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{policies}}}
		if tc.table {
			d.Resources = append(d.Resources, &metav1.APIResourceList{GroupVersion: Group + "/" + Version, APIResources: []metav1.APIResource{{Name: Resource}}})
		}
		got, err := Resolve(tc.asked, d)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Resolve(%s, served %v, CRD %v) = %q, %v; want %q, %q", tc.asked, tc.served, tc.table, got, err, tc.want, tc.err)
		}
	}
	if _, err := ParseMode("Policy"); err == nil {
		t.Error("ParseMode takes the exact words auto, policy, webhook")
	}
}
