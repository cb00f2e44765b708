package pinning

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// A revision created with content an older, pruned revision had (a revert) needs the snapshot name
// that older revision's snapshot has, and that snapshot may be going away: the garbage collector
// deleted it with its revision and in-use protection lets it go at any moment. Its deletion can
// complete after our create was refused as AlreadyExists, before or after we read it. Either way
// the revision must end up with a snapshot that exists: the webhook must not admit the pod unpinned
// (reading the live object, the very thing pinning prevents), nor pin it to a name that no longer
// exists (its volume would never mount).
func TestTakeRecreatesASnapshotDeletedWhileItWasTaken(t *testing.T) {
	cm, _ := SnapshotName(appConfig("v1"))
	sec, _ := SnapshotName(appSecret())
	notFound := func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(corev1.Resource("configmaps"), cm)
	}
	for _, tt := range []struct {
		name string
		// inAPI: what the metadata reads show of the old snapshot after the refused create.
		inAPI []runtime.Object
		// patch reacts to the attach of the new revision to it (nil: the fake's own).
		patch k8stesting.ReactionFunc
	}{
		{name: "deleted between the refused create and the read"},
		{name: "deleted between the read and the attach", inAPI: []runtime.Object{snapshot(refs.ConfigMap, cm, "app-config", "rs-pruned")},
			patch: notFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil, appConfig("v1"), appSecret())
			for _, o := range tt.inAPI {
				if err := f.meta.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			if tt.patch != nil {
				f.meta.PrependReactor("patch", "configmaps", tt.patch)
			}
			refused := false // the first create of the ConfigMap snapshot meets the old one, still there
			f.kube.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				if refused {
					return false, nil, nil
				}
				refused = true
				return true, nil, apierrors.NewAlreadyExists(corev1.Resource("configmaps"), cm)
			})

			resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil), false)
			if !resp.Allowed || !maps.Equal(got, wantPinnedTo(cm, sec)) {
				t.Errorf("allowed %v, patch %v; want the pod pinned to %s and %s", resp.Allowed, got, cm, sec)
			}
			snap, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cm, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the pod's snapshot %s: %v", cm, err)
			}
			if !revision.OwnedBy(&snap.ObjectMeta, "rs-uid") || snap.Data["config.json"] != "v1" {
				t.Errorf("snapshot %s: owners %v, data %v; want rs-uid's copy of v1", cm, snap.OwnerReferences, snap.Data)
			}
		})
	}
}
