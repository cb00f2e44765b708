package caches

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func cm(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: labels}}
}

var optedIn = map[string]string{api.RevisionedLabel: api.RevisionedValue}

// notes are what a handler of tests got, in order: handlers run on goroutines of their own.
type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) note(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, s)
}

func (n *notes) events() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

// waitFor waits until the handler has got want, and fails the test, saying what it got, if it has not
// within 10 s.
func (n *notes) waitFor(t *testing.T, want []string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !slices.Equal(n.events(), want); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the handler got %q, want %q", n.events(), want)
		}
	}
}

// recorder notes the events a handler of config objects gets, as "add x", "update x", "delete x".
type recorder struct{ notes }

func (r *recorder) handler() cache.ResourceEventHandler {
	name := func(obj any) string {
		m, _ := MetaOf(obj)
		return m.Name
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.note("add " + name(obj)) },
		UpdateFunc: func(_, cur any) { r.note("update " + name(cur)) },
		DeleteFunc: func(obj any) { r.note("delete " + name(obj)) },
	}
}

// running makes an informer of tests hand what it processes to its handlers, as a running one does,
// until the test ends.
func running(t *testing.T, i *storeInformer) {
	i.startListeners()
	t.Cleanup(i.stopListeners)
}

// waitFor waits until cond holds (handlers run on goroutines of their own), and fails the test if it
// does not within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// The opted-in view of the widened config informer behaves like the label-selected informer the
// attach and protection controllers were written for: they never see an object without the label, an
// object losing it is deleted for them, and one gaining it is added.
func TestOptedInViewOfTheWidenedInformer(t *testing.T) {
	cs := NewForTest(nil, []*metav1.PartialObjectMetadata{cm("plain", nil), cm("ours", optedIn)})
	view := cs.Configs[refs.ConfigMap]
	all := cs.AllConfigs[refs.ConfigMap]

	if _, exists, _ := view.Get("app", "plain"); exists {
		t.Error("the view shows an object that is not opted in")
	}
	if _, exists, _ := all.Get("app", "plain"); !exists {
		t.Error("the widened informer lacks an object that is not opted in")
	}
	if got := view.List(); len(got) != 1 || got[0].Name != "ours" {
		t.Errorf("view lists %v, want only ours", got)
	}

	var r recorder
	h := filteringHandler[*metav1.PartialObjectMetadata]{view: view, h: r.handler()}
	h.OnAdd(cm("plain", nil), false)
	h.OnUpdate(cm("plain", nil), cm("plain", map[string]string{"team": "a"}))
	h.OnDelete(cm("plain", nil))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "app/plain", Obj: cm("plain", nil)})
	if len(r.got) != 0 {
		t.Fatalf("events of an object never opted in reached the handler: %v", r.got)
	}
	h.OnAdd(cm("ours", optedIn), true)
	h.OnUpdate(cm("ours", optedIn), cm("ours", optedIn))
	h.OnUpdate(cm("ours", optedIn), cm("ours", nil))   // opted out
	h.OnUpdate(cm("plain", nil), cm("plain", optedIn)) // opted in
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "app/plain", Obj: cm("plain", optedIn)})
	want := []string{"add ours", "update ours", "delete ours", "add plain", "delete plain"}
	if !slices.Equal(r.got, want) {
		t.Errorf("events %v, want %v", r.got, want)
	}
}

// A config object of the widened informers keeps what their readers need, and nothing a tool wrote.
func TestConfigRecordsForTheTrigger(t *testing.T) {
	r := newReducer(nil, false, true)
	m := cm("x", map[string]string{api.PinLabel: api.PinValue, "app.kubernetes.io/managed-by": "Helm"})
	m.Annotations = map[string]string{api.ReloaderMatch: "true", "meta.helm.sh/release-name": "r",
		"kubectl.kubernetes.io/last-applied-configuration": "{...}", api.OriginalNameAnnotation: "y"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "helm"}}
	got := r.config(m, keepForTrigger).meta(refs.ConfigMap)
	if len(got.Labels) != 1 || got.Labels[api.PinLabel] != api.PinValue {
		t.Errorf("labels %v, want only ours", got.Labels)
	}
	if len(got.Annotations) != 1 || got.Annotations[api.ReloaderMatch] != "true" {
		t.Errorf("annotations %v, want only Reloader's match (the name annotation only on snapshots)", got.Annotations)
	}
	if got.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	s := cm("x-0123456789", map[string]string{api.SnapshotLabel: api.SnapshotValue})
	s.Annotations = map[string]string{api.OriginalNameAnnotation: "x"}
	if r.config(s, keepForTrigger).meta(refs.ConfigMap).Annotations[api.OriginalNameAnnotation] != "x" {
		t.Error("a snapshot lost its original name: the pinning view indexes by it")
	}
}

// A config object's record says everything its metadata said that a reader reads: owners (each
// reference exactly as written), finalizers, deletion, creation, uid, resourceVersion.
func TestConfigRecordRoundTrip(t *testing.T) {
	yes, no := true, false
	deleted := metav1.NewTime(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	m := cm("app-config-v2", optedIn)
	m.UID, m.ResourceVersion = "0b7a4c39-9e2d-4c39-8a6f-4c3e00000042", "4711"
	m.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	m.DeletionTimestamp = &deleted
	m.Finalizers = []string{api.InUseFinalizer, "example.com/keep"}
	m.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "uid-web-1", Controller: &no},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-2", UID: "uid-web-2", BlockOwnerDeletion: &yes},
		{APIVersion: "example.com/v1", Kind: "Thing", Name: "t", UID: "uid-t", Controller: &yes, BlockOwnerDeletion: &no},
	}
	want := m.DeepCopy()
	want.Labels = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	got := newReducer(nil, false, true).config(m, keepNone).meta(refs.ConfigMap)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("view of the record:\n%+v\nwant\n%+v", got, want)
	}
}

func TestCountConfigsCountsEveryKind(t *testing.T) {
	obj := func(kind refs.Kind, name string, finalizers ...string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: string(kind)}, ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "app", Finalizers: finalizers, Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}}}
	}
	cs := NewForTest(nil, []*metav1.PartialObjectMetadata{
		obj(refs.ConfigMap, "a", api.InUseFinalizer),
		obj(refs.ConfigMap, "b"),
		obj(refs.Secret, "c", "example.com/other", api.InUseFinalizer),
		obj(refs.Secret, "d", "example.com/other"),
	})
	if n := cs.CountConfigs(protected); n != 2 {
		t.Fatalf("protected objects: %d; want 2 (a ConfigMap and a Secret)", n)
	}
}

func protected(f ConfigFacts) bool { return api.HasFinalizer(f.Finalizers, api.InUseFinalizer) }

// recordCaches are caches whose ConfigMap store holds the records the controller's informers keep.
func recordCaches(objs ...*metav1.PartialObjectMetadata) *Caches {
	inf := newTestInformer(nil)
	r := newReducer(nil, false, true)
	for _, o := range objs {
		_ = inf.store.Add(r.config(o, keepNone))
	}
	return &Caches{Configs: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{refs.ConfigMap: newViewInformer(configView(refs.ConfigMap), inf)}}
}

// A look at every config object reads each one's record as it is: the facts below are written out by
// hand from the objects.
func TestEachConfigReadsTheRecords(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	held := cm("held", optedIn)
	held.Namespace, held.DeletionTimestamp, held.Finalizers = "shop", &deleted, []string{api.InUseFinalizer}
	cs := recordCaches(cm("plain", optedIn), held, cm("not-opted-in", nil)) // the config trigger's stores hold every object
	var got []string
	cs.EachConfig(func(f ConfigFacts) {
		ns, name := f.NamespaceName()
		got = append(got, fmt.Sprintf("%s %s/%s %v %v", f.Kind, ns, name, f.Finalizers, f.Deleted))
	})
	slices.Sort(got)
	want := []string{
		"ConfigMap app/plain [] <nil>",
		"ConfigMap shop/held [" + api.InUseFinalizer + "] 2026-11-28 10:00:00 +0000 UTC",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("facts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The protection metrics count at every scrape: counting makes no view of any object. At 150,000 Pods
// a view of each of ~87,000 objects, for three gauges, made each scrape allocate ~100 MB.
func TestCountingConfigsAllocatesNothingPerObject(t *testing.T) {
	objs := make([]*metav1.PartialObjectMetadata, 2000)
	for i := range objs {
		objs[i] = cm(fmt.Sprintf("cm-%d", i), optedIn)
		objs[i].Finalizers = []string{api.InUseFinalizer}
	}
	cs := recordCaches(objs...)
	var n int
	allocs := testing.AllocsPerRun(5, func() { n = cs.CountConfigs(protected) })
	if n != len(objs) {
		t.Fatalf("counted %d, want %d", n, len(objs))
	}
	if allocs > 10 {
		t.Fatalf("counting %d objects allocated %.0f times: a view per object", len(objs), allocs)
	}
}

// With the widened config informers the pinning snapshots are a view of them: the indexes the snapshot
// readers use (the webhook's ByPin, the PinRemoved check's ByCopied) find a snapshot's record.
func TestWidenedConfigInformersIndexSnapshots(t *testing.T) {
	s := snap("app-config-0123456789", 0, "rs-1", "rs-2")
	s.Kind, s.Labels = "ConfigMap", map[string]string{api.SnapshotLabel: api.SnapshotValue, api.RevisionedLabel: api.RevisionedValue}
	cs := NewForTest(nil, []*metav1.PartialObjectMetadata{s})
	all := cs.AllConfigs[refs.ConfigMap]
	app := refs.Ref{Kind: refs.ConfigMap, Name: "app-config"}
	for _, key := range []string{PinKey("rs-1", app), PinKey("rs-2", app)} {
		if got, err := all.ByIndex(ByPin, key); err != nil || len(got) != 1 || got[0].Name != s.Name {
			t.Errorf("ByPin %s: %v, %v", key, got, err)
		}
	}
	if got, err := all.ByIndex(ByCopied, CopiedKey("app", app)); err != nil || len(got) != 1 {
		t.Errorf("ByCopied: %v, %v", got, err)
	}
}

// What a revision owns, found among its namespace's opted-in objects (the view's filter holds).
func TestOwnedConfigs(t *testing.T) {
	owned := func(name string, labels map[string]string, uids ...types.UID) *metav1.PartialObjectMetadata {
		m := cm(name, labels)
		for _, u := range uids {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + string(u), UID: u})
		}
		return m
	}
	cs := NewForTest(nil, []*metav1.PartialObjectMetadata{
		owned("a", optedIn, "rs-1"), owned("b", optedIn, "rs-2", "rs-1"), owned("c", optedIn, "rs-2"),
		owned("not-opted-in", nil, "rs-1"),
	})
	got, err := cs.OwnedConfigs(refs.ConfigMap, "app", "rs-1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("owned by rs-1: %v, want a and b", names)
	}
	if got, _ := cs.OwnedConfigs(refs.Secret, "app", "rs-1"); len(got) != 0 {
		t.Errorf("Secrets owned by rs-1: %v", got)
	}
}

// The users of an object and of a controller, found from what the caches store as from the Users.
func TestUsersUsingAndControlledBy(t *testing.T) {
	r := newReducer(nil, false, false)
	inf := newTestInformer(UserIndexers())
	pods := newTestInformer(nil)
	for j := range 3 {
		rec, _ := r.user(benchReplicaSet(j))
		_ = inf.store.Add(rec)
	}
	for i := range 4 {
		rec, _ := r.user(benchPod(i))
		_ = pods.store.Add(rec)
	}
	pinned := benchPod(5)
	pinned.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name = "web-0-config-v1"
	rec, _ := r.user(pinned)
	_ = pods.store.Add(rec)
	c := &Caches{Users: map[Kind]*Informer[*User]{ReplicaSet: newViewInformer(userView, inf), Pod: newViewInformer(userView, pods)}}
	names := func(us []*User, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, u := range us {
			out = append(out, u.Name)
		}
		slices.Sort(out)
		return out
	}
	ns := "tenant-0000"
	if got := names(c.UsersUsing(ReplicaSet, ns, refs.Ref{Kind: refs.ConfigMap, Name: "web-0-config-v1"})); !slices.Equal(got, []string{benchReplicaSet(1).Name}) {
		t.Errorf("ReplicaSets using web-0-config-v1: %v", got)
	}
	if got := names(c.UsersUsing(ReplicaSet, ns, refs.Ref{Kind: refs.Secret, Name: "web-0-secret"})); len(got) != 3 {
		t.Errorf("ReplicaSets using the Secret: %v", got)
	}
	if got := names(c.UsersUsing(ReplicaSet, ns, refs.Ref{Kind: refs.ConfigMap, Name: "web-0-secret"})); len(got) != 0 {
		t.Errorf("a ConfigMap of the Secret's name is used by %v", got)
	}
	if got := names(c.UsersUsing(Pod, ns, refs.Ref{Kind: refs.ConfigMap, Name: "web-0-config-v1"})); !slices.Equal(got, []string{pinned.Name}) {
		t.Errorf("pods using web-0-config-v1: %v", got)
	}
	if got := names(c.UsersUsing(Pod, ns, refs.Ref{Kind: refs.ConfigMap, Name: "web-0-config-v0"})); len(got) != 4 {
		t.Errorf("pods using web-0-config-v0: %v", got)
	}
	if got := names(c.UsersControlledBy(ReplicaSet, ns, benchDeployment(0).UID)); len(got) != 3 {
		t.Errorf("ReplicaSets of the Deployment: %v", got)
	}
	if got := names(c.UsersControlledBy(Pod, ns, benchReplicaSet(1).UID)); !slices.Equal(got, []string{pinned.Name}) {
		t.Errorf("pods of ReplicaSet 1: %v", got)
	}
}

// A handler added after the first list gets none of its adds, and no view is made of those objects for
// it; it gets every later event, as a handler added plainly does.
func TestAHandlerAfterTheFirstListGetsNoneOfItsAddsAndNoViews(t *testing.T) {
	src := newTestInformer(nil)
	running(t, src)
	var views atomic.Int32
	inf := newViewInformer(func(obj any) (*metav1.PartialObjectMetadata, bool) {
		views.Add(1)
		return configView(refs.ConfigMap)(obj)
	}, src)
	var every, after recorder
	if err := inf.AddEventHandler(every.handler()); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddEventHandlerAfterFirstList(after.handler()); err != nil {
		t.Fatal(err)
	}
	deliver := func(typ cache.DeltaType, obj *metav1.PartialObjectMetadata, initial bool) {
		t.Helper()
		if err := src.process(cache.Deltas{{Type: typ, Object: obj}}, initial); err != nil {
			t.Fatal(err)
		}
	}
	deliver(cache.Replaced, cm("listed", optedIn), true)
	waitFor(t, "the plain handler gets the first list's add", func() bool { return len(every.events()) == 1 })
	if n := views.Load(); n != 1 {
		t.Errorf("%d views made of the first list's object, want 1 (for the plain handler only)", n)
	}
	deliver(cache.Added, cm("made-later", optedIn), false)
	deliver(cache.Updated, cm("listed", optedIn), false)
	deliver(cache.Deleted, cm("made-later", optedIn), false)
	want := []string{"add listed", "add made-later", "update listed", "delete made-later"}
	waitFor(t, "the plain handler gets "+strings.Join(want, ", "), func() bool { return slices.Equal(every.events(), want) })
	want = []string{"add made-later", "update listed", "delete made-later"}
	waitFor(t, "the handler after the first list gets "+strings.Join(want, ", "), func() bool { return slices.Equal(after.events(), want) })
}
