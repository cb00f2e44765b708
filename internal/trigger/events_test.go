package trigger

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// What the workload's sync waits for arrives after it, on another watch: each arrival brings the
// workload back, so nothing waits for an event that already went by. (A sync that finds no revision
// yet, or its newest revision without its snapshot, returns: these events are what bring it back.)
func TestWhatASyncWaitsForBringsTheWorkloadBack(t *testing.T) {
	web := caches.Key(caches.Deployment, ns, "web")
	demo := caches.Key(caches.Rollout, ns, "demo")
	snapshotOf := func(rs *appsv1.ReplicaSet) *metav1.PartialObjectMetadata {
		m := testutil.ConfigMeta(refs.ConfigMap, "app-config-1f2e3d4c5b", true)
		m.Labels[api.SnapshotLabel] = api.SnapshotValue
		m.Annotations = map[string]string{api.OriginalNameAnnotation: "app-config"}
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}
		return m
	}
	for _, tt := range []struct {
		name  string
		event func(f *fixture)
		want  []string
	}{
		{name: "its first (or a new) revision appears", want: []string{web}, event: func(f *fixture) {
			rs := testutil.ReplicaSet(f.deployment, workload.Deployment, "h9", 9, f.deployment.Spec.Template.Spec)
			u, _ := caches.Reduce(rs)
			f.c.revisionHandler().OnAdd(u, false)
		}},
		{name: "its newest revision's snapshot is taken", want: []string{web}, event: func(f *fixture) {
			f.c.configHandler(refs.ConfigMap).OnAdd(snapshotOf(f.revisions[0]), false)
		}},
		{name: "a snapshot of a revision the cache has not shown yet: its revision's add brings the workload", event: func(f *fixture) {
			unseen := testutil.ReplicaSet(f.deployment, workload.Deployment, "h9", 9, f.deployment.Spec.Template.Spec)
			unseen.UID = types.UID("uid-unseen")
			f.c.configHandler(refs.ConfigMap).OnAdd(snapshotOf(unseen), false)
		}},
		{name: "the Deployment a Rollout's workloadRef names appears", want: []string{demo}, event: func(f *fixture) {
			ro := &caches.User{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
				Name: "demo", Namespace: ns, UID: "uid-demo", Annotations: auto,
				Status: &caches.WorkloadStatus{TemplateRef: "web"}}
			if err := f.store(caches.Rollout).Indexers()[0].Add(ro); err != nil {
				t.Fatal(err)
			}
			u, _ := caches.Reduce(f.deployment) // no annotations of its own: only the Rollout is due
			f.c.workloadHandler().OnAdd(u, false)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, configMap("app-config", "v1", nil))
			tt.event(f)
			var got []string
			for f.c.loop.Queue.Len() > 0 {
				k, _ := f.c.loop.Queue.Get()
				f.c.loop.Queue.Done(k)
				got = append(got, k)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
}

// The order "our last write of the record, then a sync before the cache shows it": the sync decides
// from the older record the cache shows. Its write is conditional on that version, so it cannot
// overwrite the newer record: refused as a conflict, and the sync is retried.
func TestARecordWrittenFromAStaleCacheIsRefused(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync() // the record is created, and the cache shows it
	cms := f.kube.CoreV1().ConfigMaps(ns)
	rec, err := cms.Get(context.Background(), recordName(mustUser(t, f.store(caches.Deployment), "web")), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const newer = `{"acknowledged":{"revision":"written-a-moment-ago"}}`
	rec.Annotations[api.RecordAnnotation] = newer
	f.rv++
	rec.ResourceVersion = strconv.Itoa(f.rv) // on the API server only: the cache has not seen it
	if _, err := cms.Update(context.Background(), rec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.kube.PrependReactor("patch", "configmaps", testutil.VersionPrecondition(rec.ResourceVersion))

	f.edit("app-config", "v2")
	f.tick(time.Minute)
	if _, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web")); !apierrors.IsConflict(err) {
		t.Errorf("sync from the stale record: %v, want a conflict (retried)", err)
	}
	got, err := cms.Get(context.Background(), rec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[api.RecordAnnotation] != newer {
		t.Errorf("record %s, want the newer one kept", got.Annotations[api.RecordAnnotation])
	}
}
