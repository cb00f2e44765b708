package protection

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// The live check finds every live user of an object on the API server, of every kind, as the caches
// would reduce it: pods (not those the kubelet is done with), revisions, workloads, Rollouts.
func TestAPIUsersListsEveryKind(t *testing.T) {
	ns := testutil.Namespace
	pod := func(name string, phase corev1.PodPhase, cms ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: testutil.PodSpec(cms), Status: corev1.PodStatus{Phase: phase}}
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f", Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: testutil.PodSpec([]string{"app-config"})}}}
	other := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "api-7c9a", Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: testutil.PodSpec([]string{"other"})}}}
	kube := kubefake.NewClientset(pod("debug", corev1.PodPending, "app-config"), pod("done", corev1.PodSucceeded, "app-config"),
		pod("unrelated", corev1.PodRunning, "other"), rs, other)
	ro := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "canary", "namespace": ns, "uid": "ro-uid"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"volumes": []any{
			map[string]any{"name": "c", "configMap": map[string]any{"name": "app-config"}}}}}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{workload.RolloutGVR: "RolloutList"}, ro)
	users, err := APIUsers{Kube: kube, Dynamic: dyn, Rollouts: true}.Users(context.Background(), ns, refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(users), "pod/debug, replicaset/web-5d8f, rollout/canary"; got != want {
		t.Errorf("users %q, want %q", got, want)
	}
	if !slices.ContainsFunc(users, func(u *caches.User) bool { return u.Name == "canary" && u.UID == "ro-uid" }) {
		t.Error("the Rollout is not reduced with its uid")
	}
}
