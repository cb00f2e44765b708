package caches

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// snap is a snapshot of app-config in ns "app", created at second s, owned by the revisions owners.
func snap(name string, s int, owners ...types.UID) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app",
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 21, 0, 0, s, 0, time.UTC)),
		Annotations:       map[string]string{api.OriginalNameAnnotation: "app-config"}}}
	for _, o := range owners {
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{Kind: "ReplicaSet", Name: "rs", UID: o})
	}
	return m
}

func TestPinAmong(t *testing.T) {
	deleting := snap("app-config-deleting", 0, "rs-1")
	deleting.DeletionTimestamp = &deleting.CreationTimestamp
	otherNS := snap("app-config-elsewhere", 0, "rs-1")
	otherNS.Namespace = "other"
	otherObject := snap("env-0000000001", 0, "rs-1")
	otherObject.Annotations[api.OriginalNameAnnotation] = "env"

	for _, tc := range []struct {
		name  string
		snaps []*metav1.PartialObjectMetadata
		want  string // "" for none
	}{
		{"none", nil, ""},
		{"owned by another revision", []*metav1.PartialObjectMetadata{snap("app-config-a", 0, "rs-2")}, ""},
		{"the one it owns, among others' owners", []*metav1.PartialObjectMetadata{snap("app-config-a", 0, "rs-2", "rs-1")}, "app-config-a"},
		{"being deleted, and no other: still its pin (held while the revision lives)", []*metav1.PartialObjectMetadata{deleting}, "app-config-deleting"},
		{"being deleted, and a newer one: the newer",
			[]*metav1.PartialObjectMetadata{deleting, snap("app-config-newer", 9, "rs-1")}, "app-config-newer"},
		{"in another namespace", []*metav1.PartialObjectMetadata{otherNS}, ""},
		{"a copy of another object", []*metav1.PartialObjectMetadata{otherObject}, ""},
		{"two after a race: the older, whatever the names",
			[]*metav1.PartialObjectMetadata{snap("app-config-a", 5, "rs-1"), snap("app-config-b", 3, "rs-1")}, "app-config-b"},
		{"two of the same second: by name",
			[]*metav1.PartialObjectMetadata{snap("app-config-b", 3, "rs-1"), snap("app-config-a", 3, "rs-1")}, "app-config-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PinAmong(tc.snaps, "app", "rs-1", refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("PinAmong = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}
