package caches

import (
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func TestReducedPodsShareTheirRevisionsStrings(t *testing.T) {
	a, b := benchPod(0), benchPod(10) // same namespace, owner and config; separate copies of each string
	ua, err := transform(false)(a)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := transform(false)(b)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := ua.(*User), ub.(*User)
	want := []refs.Ref{{Kind: refs.ConfigMap, Name: "settings"}, {Kind: refs.ConfigMap, Name: "web-config-v3"}, {Kind: refs.Secret, Name: "web-secret"}}
	for _, u := range []*User{pa, pb} {
		if u.Namespace != "tenant-0000" || len(u.OwnerReferences) != 1 || u.OwnerReferences[0].Name != "web-0-7d9f8b6c4d" ||
			u.OwnerReferences[0].Kind != "ReplicaSet" || u.OwnerReferences[0].APIVersion != "apps/v1" ||
			u.OwnerReferences[0].UID != "5c3b2a19-0b7a-4c39-9e2d-000000000000" || u.Labels != nil {
			t.Fatalf("reduced pod %s: namespace %q, owners %+v, labels %v", u.Name, u.Namespace, u.OwnerReferences, u.Labels)
		}
		if len(u.Refs) != len(want) {
			t.Fatalf("refs %v, want %v", u.Refs, want)
		}
		for i := range want {
			if u.Refs[i] != want[i] {
				t.Fatalf("refs %v, want %v", u.Refs, want)
			}
		}
	}
	same := func(what, x, y string) {
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: each pod keeps its own copy", what)
		}
	}
	same("namespace", pa.Namespace, pb.Namespace)
	same("owner name", pa.OwnerReferences[0].Name, pb.OwnerReferences[0].Name)
	same("owner uid", string(pa.OwnerReferences[0].UID), string(pb.OwnerReferences[0].UID))
	same("config name", pa.Refs[1].Name, pb.Refs[1].Name)
	if pa.Name == pb.Name || pa.UID == pb.UID {
		t.Errorf("two pods reduced to one identity: %s %s", pa.Name, pa.UID)
	}
}

func TestReduceKeepsOnlyTheLabelsRead(t *testing.T) {
	labels := map[string]string{"team": "payments"}
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: types.UID("u"), Labels: labels}
	for _, tc := range []struct {
		name       string
		obj        any
		keepLabels bool
		want       bool
	}{
		{"ReplicaSet, a selector set", &appsv1.ReplicaSet{ObjectMeta: meta}, true, true},
		{"ReplicaSet, no selector", &appsv1.ReplicaSet{ObjectMeta: meta}, false, false},
		{"Deployment", &appsv1.Deployment{ObjectMeta: meta}, true, false},
		{"Pod", &corev1.Pod{ObjectMeta: meta}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := reduceObject(tc.obj, tc.keepLabels)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.Labels["team"] == "payments"; got != tc.want {
				t.Errorf("labels kept: %v, want %v", got, tc.want)
			}
		})
	}
}
