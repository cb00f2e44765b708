package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

const ns = "team-a"

// rsReading is ReplicaSet web-5d8f (uid rs-1) of Deployment web, its pods reading app-config (a
// volume, optional or not) and nothing else.
func rsReading(name string, uid types.UID, optional bool) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Optional: ptr.To(optional)}}}},
		}}},
	}
}

func appConfig(labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns, UID: "cm-uid", Labels: labels},
		Data: map[string]string{"configuration.json": `{"v": 1}`}}
}

func metaOf(cm *corev1.ConfigMap) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: cm.ObjectMeta}
}

type tableFixture struct {
	ctl     *Controller
	kube    *kubefake.Clientset
	dynamic *dynamicfake.FakeDynamicClient
	meta    *metafake.FakeMetadataClient
	events  *record.FakeRecorder
	metrics *metrics.Metrics
	// clock is the controller's, standing still at the fixture's making until a test sets it.
	clock *clocktesting.FakePassiveClock
}

// newTableFixture: the caches show cachedRS and, as labelled for pinning, cachedPins; the API server
// holds live (typed objects, their metadata too) and the tables.
func newTableFixture(t *testing.T, cachedRS []*appsv1.ReplicaSet, cachedPins []runtime.Object, tables []*Table, live ...runtime.Object) *tableFixture {
	t.Helper()
	var users []*caches.User
	for _, rs := range cachedRS {
		u, err := caches.Reduce(rs)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	cs := caches.NewForTest(users, nil)
	enabled := []string{ns}
	for _, rs := range cachedRS {
		enabled = append(enabled, rs.Namespace)
	}
	cs.Pinning = caches.NewPinningForTest(cachedPins, nil, enabled...)
	var metas []runtime.Object
	for _, o := range live {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			metas = append(metas, metaOf(cm))
		}
	}
	meta := testutil.FakeMetadata(metas...)
	kube := kubefake.NewClientset(live...)
	scheme := runtime.NewScheme()
	var objs []runtime.Object
	for _, tb := range tables {
		u, err := tb.toUnstructured()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{GVR: Kind + "List"}, objs...)
	events := record.NewFakeRecorder(20)
	m := metrics.New()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	ctl, err := New(cs, Clients{Kube: kube, Dynamic: dyn}, &pinning.Taker{Kube: kube, Writer: &attach.Writer{Client: meta}},
		events, m, Options{Take: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs { // the tables' cache, as if synced
		if err := ctl.tables.Indexers()[0].Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return &tableFixture{ctl: ctl, kube: kube, dynamic: dyn, meta: meta, events: events, metrics: m, clock: clk}
}

func (f *tableFixture) table(t *testing.T) *Table {
	t.Helper()
	u, err := f.dynamic.Resource(GVR).Namespace(ns).Get(context.Background(), TableName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// The ordering hole: app-config and the Deployment came in one apply, and the ReplicaSet reached the
// cache before app-config's pin label did. The entry is written from what the API server says, so the
// revision is pinned, not recorded as reading app-config itself.
func TestTablePinsARevisionWhoseObjectTheCacheDoesNotShowLabelledYet(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, appConfig(map[string]string{api.PinLabel: api.PinValue}), rs)
	res, err := f.ctl.sync(context.Background(), ns)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("sync: %v, %+v", err, res)
	}
	e, ok := f.table(t).Spec.Revisions["rs-1"]
	if !ok {
		t.Fatalf("no entry for rs-1 in %+v", f.table(t).Spec)
	}
	snap, ok := e.Snapshot(refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})
	if !ok || !strings.HasPrefix(snap, "app-config-") || e.Revision != "ReplicaSet/web-5d8f" {
		t.Fatalf("entry %+v: want app-config pinned to its snapshot", e)
	}
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), snap, metav1.GetOptions{}); err != nil {
		t.Errorf("the snapshot %s the entry names: %v", snap, err)
	}
	if ev := <-f.events.Events; !strings.Contains(ev, pinning.ReasonPinned) {
		t.Errorf("event %q, want Pinned", ev)
	}
}

// An object the revision needs does not exist yet (the Deployment came first in the apply): no entry
// (its pods are refused, and could not start anyway) until it exists; an optional one is not waited for.
func TestTableWaitsForAnObjectTheRevisionCannotStartWithout(t *testing.T) {
	for _, optional := range []bool{false, true} {
		rs := rsReading("web-5d8f", "rs-1", optional)
		f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, rs)
		res, err := f.ctl.sync(context.Background(), ns)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := f.table(t).Spec.Revisions["rs-1"]
		if optional {
			if !ok || res.RequeueAfter != 0 {
				t.Errorf("optional app-config missing: entry %v, requeue %s; want an entry at once", ok, res.RequeueAfter)
			}
			continue
		}
		if ok || res.RequeueAfter == 0 {
			t.Errorf("app-config missing: entry %v, requeue %s; want no entry, and a look again", ok, res.RequeueAfter)
		}
		if ev := <-f.events.Events; !strings.Contains(ev, ReasonWaiting) || !strings.Contains(ev, "configmap/app-config") {
			t.Errorf("event %q, want PinWaiting naming configmap/app-config", ev)
		}
	}
}

// An entry stays while its revision exists on the API server, though the cache does not show it (a
// new leader's, or a lagging one), and goes once it is gone.
func TestTableRemovesAnEntryOnlyOnceItsRevisionIsGone(t *testing.T) {
	entry := Entry{Revision: "ReplicaSet/web-5d8f", ConfigMaps: map[string]string{"app-config": "app-config-0123456789"}}
	table := newTable(ns, TableName, TableSpec{Revisions: map[string]Entry{"rs-1": entry}})
	table.ResourceVersion = "7"
	rs := rsReading("web-5d8f", "rs-1", false)

	f := newTableFixture(t, nil, nil, []*Table{table}, rs)
	if _, err := f.ctl.sync(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.table(t).Spec.Revisions["rs-1"]; !ok {
		t.Error("the entry went while its ReplicaSet exists")
	}

	f = newTableFixture(t, nil, nil, []*Table{table})
	if _, err := f.ctl.sync(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if got := f.table(t).Spec.Revisions; len(got) != 0 {
		t.Errorf("entries %v; want none once the ReplicaSet is gone", got)
	}
}

// A namespace that turned pinning off keeps its table as it was (the policies do not look there):
// turned on again, its revisions' entries answer at once.
func TestTableStaysWhilePinningIsOff(t *testing.T) {
	table := newTable("other", TableName, TableSpec{Revisions: map[string]Entry{"rs-9": {Revision: "ReplicaSet/x"}}})
	f := newTableFixture(t, nil, nil, []*Table{table})
	if _, err := f.ctl.sync(context.Background(), "other"); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.dynamic.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("%s of a table in a namespace without pinning", a.GetVerb())
		}
	}
}

// What was written is read back before the cache shows it: a second sync right after the first
// writes nothing (no conflict, no write of a stale table).
func TestTableReadsItsOwnWrites(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, appConfig(map[string]string{api.PinLabel: api.PinValue}), rs)
	for i, want := range []int{2, 0} { // the namespace's empty table first, then the entry; then nothing
		f.dynamic.ClearActions()
		if _, err := f.ctl.sync(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		if got := tableWrites(f); got != want {
			t.Errorf("sync %d: %d writes of the table, want %d", i+1, got, want)
		}
	}
}

func tableWrites(f *tableFixture) int {
	writes := 0
	for _, a := range f.dynamic.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "delete" {
			writes++
		}
	}
	return writes
}

// Every kind of object the controller follows brings its namespace back: revisions as the caches keep
// them, pinned objects, snapshots, tables.
func TestTableEventsQueueTheirNamespace(t *testing.T) {
	f := newTableFixture(t, nil, nil, nil)
	u, err := caches.Reduce(rsReading("web-5d8f", "rs-1", false))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []any{u, cache.DeletedFinalStateUnknown{Obj: u}, appConfig(nil), metaOf(appConfig(nil))} {
		f.ctl.enqueue(obj)
		if f.ctl.loop.Queue.Len() != 1 {
			t.Fatalf("%T queued %d keys", obj, f.ctl.loop.Queue.Len())
		}
		key, _ := f.ctl.loop.Queue.Get()
		f.ctl.loop.Queue.Done(key)
		if key != ns {
			t.Errorf("%T queued %q, want %q", obj, key, ns)
		}
	}
}

// A controller limited to some namespaces (-namespaces) keeps no table elsewhere: the namespace cache
// is cluster-wide, and another release keeps the others'.
func TestTableOnlyInItsNamespaces(t *testing.T) {
	f := newTableFixture(t, nil, nil, nil)
	f.ctl.opts.Namespaces = []string{"team-b"}
	if _, err := f.ctl.sync(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if n := len(f.dynamic.Actions()); n != 0 {
		t.Errorf("%d API calls for a namespace out of scope: %v", n, f.dynamic.Actions())
	}
}
