package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
// kube-system, the same escape label, and the policies the same match condition.
func TestPoliciesSelectWhatTheWebhookDoes(t *testing.T) {
	objs := Build(Config{Name: "cma", OwnNamespace: "tools", Namespaces: []string{"team-a"}})
	w := pinning.Registration{OwnNamespace: "tools", Namespaces: []string{"team-a"}}.Webhook(nil)
	for name, got := range map[string]*metav1.LabelSelector{
		"mutating namespaces": objs.MutatingBinding.Spec.MatchResources.NamespaceSelector, "validating namespaces": objs.ValidatingBinding.Spec.MatchResources.NamespaceSelector,
	} {
		if got.String() != w.NamespaceSelector.String() {
			t.Errorf("%s: %v, want the webhook's %v", name, got, w.NamespaceSelector)
		}
	}
	if got := objs.ValidatingBinding.Spec.MatchResources.ObjectSelector; got.String() != w.ObjectSelector.String() {
		t.Errorf("object selector %v, want the webhook's %v", got, w.ObjectSelector)
	}
	if got := objs.Mutating.Spec.MatchConditions; len(got) != 1 || got[0].Expression != pinning.MatchOwnedByARevision {
		t.Errorf("match conditions %v, want the webhook's owned-by-a-revision", got)
	}
	if *objs.MutatingBinding.Spec.ParamRef.ParameterNotFoundAction != "Allow" || *objs.ValidatingBinding.Spec.ParamRef.ParameterNotFoundAction != "Deny" {
		t.Error("a namespace without a table: the mutating policy has nothing to do, the validating one must refuse")
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		asked  Mode
		served bool
		want   Mode
		err    string
	}{
		{Auto, true, Policy, ""},
		{Auto, false, Webhook, ""},
		{Webhook, true, Webhook, ""},
		{Policy, true, Policy, ""},
		{Policy, false, "", "use -pinning-admission=webhook"},
	} {
		kube := kubefake.NewClientset()
		d := kube.Discovery().(*fakediscovery.FakeDiscovery)
		if tc.served {
			d.Resources = []*metav1.APIResourceList{{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "mutatingadmissionpolicies"}}}}
		} else {
			d.Resources = []*metav1.APIResourceList{{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "validatingadmissionpolicies"}}}}
		}
		got, err := Resolve(tc.asked, d)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Resolve(%s, served %v) = %q, %v; want %q, %q", tc.asked, tc.served, got, err, tc.want, tc.err)
		}
	}
	if _, err := ParseMode("Policy"); err == nil {
		t.Error("ParseMode takes the exact words auto, policy, webhook")
	}
}
