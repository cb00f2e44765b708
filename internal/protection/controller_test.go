package protection

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// liveUsers stands in for the API server's answer when the cache says "unused".
type liveUsers []*caches.User

func (l liveUsers) Users(_ context.Context, ns string, r refs.Ref, owners ...metav1.OwnerReference) ([]*caches.User, error) {
	var out []*caches.User
	for _, u := range l {
		if u.Namespace == ns && (u.Uses(r) || slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == u.UID })) && u.Live() {
			out = append(out, u)
		}
	}
	return out, nil
}

type fixture struct {
	t      *testing.T
	meta   *metafake.FakeMetadataClient
	c      *Controller
	events *record.FakeRecorder
}

// newFixture: cached are in the caches, onAPIServer only in what a live list returns, configs exist on
// the API server and (when opted in) in the cache.
func newFixture(t *testing.T, cached, onAPIServer []*caches.User, configs []*metav1.PartialObjectMetadata, namespaces ...runtime.Object) *fixture {
	t.Helper()
	var objs []runtime.Object
	for _, m := range configs {
		objs = append(objs, m)
	}
	if len(namespaces) == 0 {
		namespaces = []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testutil.Namespace}}}
	}
	f := &fixture{t: t, meta: testutil.FakeMetadata(objs...), events: record.NewFakeRecorder(10)}
	cs := caches.NewForTest(cached, configs)
	c, err := New(cs, &attach.Writer{Client: f.meta}, liveUsers(append(cached, onAPIServer...)), kubefake.NewClientset(namespaces...), f.events, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) sync(name string) {
	f.t.Helper()
	if _, err := f.c.sync(context.Background(), configKey(refs.ConfigMap, testutil.Namespace, name)); err != nil {
		f.t.Fatalf("sync %s: %v", name, err)
	}
}

func (f *fixture) get(name string) *metav1.PartialObjectMetadata {
	f.t.Helper()
	m, err := f.meta.Resource(refs.ConfigMap.GVR()).Namespace(testutil.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) patches() int {
	n := 0
	for _, a := range f.meta.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func (f *fixture) lastEvent() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

func config(name string, optedIn, deleting, finalizer bool) *metav1.PartialObjectMetadata {
	m := testutil.ConfigMeta(refs.ConfigMap, name, optedIn)
	if deleting {
		m.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	if finalizer {
		m.Finalizers = []string{"example.com/keep", api.InUseFinalizer}
	}
	return m
}

func pod(name string, cms []string, phase corev1.PodPhase) *caches.User {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, UID: types.UID("uid-" + name)},
		Spec: testutil.PodSpec(cms), Status: corev1.PodStatus{Phase: phase}}
	u, err := caches.Reduce(p)
	if err != nil {
		panic(err)
	}
	return u
}

func replicaSet(name string, cms []string) *caches.User {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, UID: types.UID("uid-" + name)},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: testutil.PodSpec(cms)}}}
	u, err := caches.Reduce(rs)
	if err != nil {
		panic(err)
	}
	return u
}

// snapshot is a pinning snapshot's metadata (opted in, our finalizer) owned by the ReplicaSets named,
// whose uids replicaSet gives them.
func snapshot(name string, deleting bool, owners ...string) *metav1.PartialObjectMetadata {
	m := config(name, true, deleting, true)
	m.Labels[api.SnapshotLabel] = api.SnapshotValue
	no := false
	for _, o := range owners {
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: o, UID: types.UID("uid-" + o), Controller: &no})
	}
	return m
}

// deleting marks a cached user as being deleted (a ReplicaSet a propagation policy keeps a moment).
func deleting(u *caches.User) *caches.User {
	u = u.DeepCopyObject().(*caches.User)
	u.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	return u
}

func TestProtection(t *testing.T) {
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testutil.Namespace, DeletionTimestamp: &metav1.Time{Time: time.Now()}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	tests := []struct {
		name        string
		cached      []*caches.User
		apiServer   []*caches.User
		cm          *metav1.PartialObjectMetadata
		namespace   runtime.Object
		wantHeld    bool // our finalizer still on
		wantPatches int
		wantEvent   string
	}{
		{name: "an opted-in object gets the finalizer", cm: config("cm", true, false, false), wantHeld: true, wantPatches: 1},
		{name: "the finalizer is there: nothing to do", cm: config("cm", true, false, true), wantHeld: true},
		{name: "deleting, a pod uses it: held", cm: config("cm", true, true, true), cached: []*caches.User{pod("web-1", []string{"cm"}, corev1.PodRunning)},
			wantHeld: true, wantEvent: "DeletionHeld in use by pod/web-1"},
		{name: "deleting, a ReplicaSet template uses it (no pod yet): held", cm: config("cm", true, true, true), cached: []*caches.User{replicaSet("web-5d8f", []string{"cm"})},
			wantHeld: true, wantEvent: "DeletionHeld in use by replicaset/web-5d8f"},
		{name: "deleting, the cache has not seen the new pod yet: the live list holds it", cm: config("cm", true, true, true),
			apiServer: []*caches.User{pod("web-2", []string{"cm"}, corev1.PodPending)}, wantHeld: true, wantEvent: "DeletionHeld in use by pod/web-2"},
		{name: "deleting, nothing uses it: released", cm: config("cm", true, true, true), cached: []*caches.User{pod("other", []string{"other-cm"}, corev1.PodRunning)},
			wantPatches: 1, wantEvent: "DeletionReleased"},
		{name: "deleting, only a finished pod referenced it: released", cm: config("cm", true, true, true), cached: []*caches.User{pod("job-1", []string{"cm"}, corev1.PodSucceeded)},
			wantPatches: 1, wantEvent: "DeletionReleased"},
		{name: "deleting in a namespace being deleted: released although used", cm: config("cm", true, true, true),
			cached: []*caches.User{pod("web-1", []string{"cm"}, corev1.PodRunning)}, namespace: terminating, wantPatches: 1},
		{name: "deleting without our finalizer: not ours to hold", cm: config("cm", true, true, false), cached: []*caches.User{pod("web-1", []string{"cm"}, corev1.PodRunning)}},
		{name: "a deleting snapshot whose revision lives (its template names the original): held", cm: snapshot("cm", true, "web-5d8f"),
			cached: []*caches.User{replicaSet("web-5d8f", []string{"app-config"})}, wantHeld: true, wantEvent: "DeletionHeld in use by replicaset/web-5d8f"},
		{name: "a deleting snapshot whose revision the cache has not seen yet: the live list holds it", cm: snapshot("cm", true, "web-5d8f"),
			apiServer: []*caches.User{replicaSet("web-5d8f", []string{"app-config"})}, wantHeld: true, wantEvent: "DeletionHeld in use by replicaset/web-5d8f"},
		{name: "a deleting snapshot whose revisions are gone: released", cm: snapshot("cm", true, "web-5d8f", "web-7c9a"),
			cached: []*caches.User{replicaSet("web-6b1e", []string{"app-config"})}, wantPatches: 1, wantEvent: "DeletionReleased"},
		{name: "a deleting snapshot whose revision is being deleted: released", cm: snapshot("cm", true, "web-5d8f"),
			cached: []*caches.User{deleting(replicaSet("web-5d8f", []string{"app-config"}))}, wantPatches: 1, wantEvent: "DeletionReleased"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ns []runtime.Object
			if tt.namespace != nil {
				ns = append(ns, tt.namespace)
			}
			f := newFixture(t, tt.cached, tt.apiServer, []*metav1.PartialObjectMetadata{tt.cm}, ns...)
			f.sync("cm")
			got := f.get("cm")
			if held := api.HasFinalizer(got.Finalizers, api.InUseFinalizer); held != tt.wantHeld {
				t.Errorf("finalizers %v: held = %v, want %v", got.Finalizers, held, tt.wantHeld)
			}
			if tt.cm.Finalizers != nil && !slices.Contains(got.Finalizers, "example.com/keep") {
				t.Errorf("finalizers %v: someone else's finalizer was removed", got.Finalizers)
			}
			if n := f.patches(); n != tt.wantPatches {
				t.Errorf("%d patches, want %d", n, tt.wantPatches)
			}
			if e := f.lastEvent(); !strings.Contains(e, tt.wantEvent) {
				t.Errorf("event %q, want it to contain %q", e, tt.wantEvent)
			}
		})
	}
}

// Opting out (the label removed) undoes what we wrote, and only that.
func TestOptOutRemovesOnlyWhatWeWrote(t *testing.T) {
	no := false
	ours := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-1", Controller: &no}
	theirs := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "App", Name: "app", UID: "app-1"}
	cm := config("cm", false, false, true) // the label is gone; the cache no longer has it
	cm.OwnerReferences = []metav1.OwnerReference{ours, theirs}
	cm.ManagedFields = []metav1.ManagedFieldsEntry{managed(api.FieldManager, "rs-1"), managed("their-operator", "app-1")}
	f := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{cm})
	f.sync("cm")
	got := f.get("cm")
	if api.HasFinalizer(got.Finalizers, api.InUseFinalizer) || !slices.Contains(got.Finalizers, "example.com/keep") {
		t.Errorf("finalizers = %v, want ours gone and theirs kept", got.Finalizers)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "app-1" {
		t.Errorf("ownerReferences = %v, want only the one we did not write", got.OwnerReferences)
	}
}

// The order "label removed, then put back, before our release runs": the cache showed the object
// leave (the key was queued) and does not show it back yet. The release reads the object from the API
// server and, finding it opted in, takes nothing off: the cache's add event follows.
func TestOptOutLeavesAnObjectLabelledAgainAlone(t *testing.T) {
	cm := config("cm", true, false, true)
	f := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{cm})
	for _, idx := range f.c.caches.Configs[refs.ConfigMap].Indexers() {
		if err := idx.Delete(cm); err != nil {
			t.Fatal(err)
		}
	}
	f.sync("cm")
	if n := f.patches(); n != 0 {
		t.Errorf("%d patches to an object opted in again", n)
	}
	if got := f.get("cm"); !api.HasFinalizer(got.Finalizers, api.InUseFinalizer) {
		t.Errorf("finalizers %v: our finalizer was taken off an opted-in object", got.Finalizers)
	}
}

func TestSweepLeavesJobModeAttachmentsAlone(t *testing.T) {
	no := false
	ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-1", Controller: &no}
	optedOutWhileDown := config("opted-out", false, false, true)
	optedOutWhileDown.OwnerReferences = []metav1.OwnerReference{ref}
	optedOutWhileDown.ManagedFields = []metav1.ManagedFieldsEntry{managed(api.FieldManager, "rs-1")}
	jobMode := config("named-by-a-job", false, false, false) // never labelled: the Job attached it by name
	jobMode.OwnerReferences = []metav1.OwnerReference{ref}
	jobMode.ManagedFields = []metav1.ManagedFieldsEntry{managed(api.FieldManager, "rs-1")}
	f := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{optedOutWhileDown, jobMode, config("protected", true, false, true)})

	if err := Sweep(context.Background(), f.c.writer, []string{testutil.Namespace}, []refs.Kind{refs.ConfigMap}); err != nil {
		t.Fatal(err)
	}
	if got := f.get("opted-out"); api.HasFinalizer(got.Finalizers, api.InUseFinalizer) || len(got.OwnerReferences) != 0 {
		t.Errorf("opted-out: finalizers %v, owners %v; want ours removed", got.Finalizers, got.OwnerReferences)
	}
	if got := f.get("named-by-a-job"); len(got.OwnerReferences) != 1 {
		t.Errorf("the Job mode's reference on an unlabelled object was removed: %v", got.OwnerReferences)
	}
	if got := f.get("protected"); !api.HasFinalizer(got.Finalizers, api.InUseFinalizer) {
		t.Errorf("an opted-in object lost its finalizer: %v", got.Finalizers)
	}
}

// The sweep asks the API server for the objects not opted in only: the opted-in ones, most of a
// cluster's config objects, are the caches' already.
func TestSweepListsOnlyObjectsNotOptedIn(t *testing.T) {
	f := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{config("protected", true, false, true)})
	if err := Sweep(context.Background(), f.c.writer, []string{testutil.Namespace}, []refs.Kind{refs.ConfigMap, refs.Secret}); err != nil {
		t.Fatal(err)
	}
	lists := 0
	for _, a := range f.meta.Actions() {
		l, ok := a.(clienttesting.ListAction)
		if !ok {
			continue
		}
		lists++
		selector := l.GetListRestrictions().Labels
		for _, c := range []struct {
			labels   labels.Set
			selected bool
		}{
			{labels.Set{"configmap-attacher.io/revisioned": "true"}, false},
			{labels.Set{"configmap-attacher.io/revisioned": "true", "app": "web"}, false},
			{labels.Set{}, true},
			{labels.Set{"configmap-attacher.io/revisioned": "false"}, true},
			{labels.Set{"app": "web"}, true},
		} {
			if got := selector.Matches(c.labels); got != c.selected {
				t.Errorf("listing %s with selector %q: objects labelled %v selected %v, want %v", l.GetResource().Resource, selector, c.labels, got, c.selected)
			}
		}
	}
	if lists != 2 {
		t.Errorf("%d lists, want one of ConfigMaps and one of Secrets", lists)
	}
	if n := f.patches(); n != 0 {
		t.Errorf("%d patches: the sweep wrote to an opted-in object", n)
	}
}

func TestReleaseTakesOurFinalizerOffEverywhere(t *testing.T) {
	f := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{config("a", true, false, true), config("b", true, true, true), config("c", true, false, false)})
	var out bytes.Buffer
	n, err := Release(context.Background(), f.c.writer, nil, []refs.Kind{refs.ConfigMap}, true, &out)
	if err != nil || n != 2 || f.patches() != 0 {
		t.Fatalf("dry run: %d released, %d patches, err %v; want 2 reported and none written\n%s", n, f.patches(), err, out.String())
	}
	n, err = Release(context.Background(), f.c.writer, nil, []refs.Kind{refs.ConfigMap}, false, &out)
	if err != nil || n != 2 {
		t.Fatalf("released %d, err %v; want 2", n, err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if got := f.get(name); api.HasFinalizer(got.Finalizers, api.InUseFinalizer) {
			t.Errorf("%s still has our finalizer: %v", name, got.Finalizers)
		}
	}
	if !strings.Contains(out.String(), "released ConfigMap "+testutil.Namespace+"/b (being deleted: it goes now)") {
		t.Errorf("output:\n%s", out.String())
	}
}

func managed(manager, uid string) metav1.ManagedFieldsEntry {
	fields := fmt.Sprintf(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}}}`, uid)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// Only what sync would write for is queued (pvcprotection's rule), so that a start does not queue every
// finalized object of the cluster; an object that went is always queued.
func TestConfigEventsQueueOnlyWhatSyncWritesFor(t *testing.T) {
	tests := []struct {
		name                string
		event               string // add, update, delete
		deleting, finalizer bool
		wantQueued          bool
	}{
		{name: "listed with our finalizer (a start)", event: "add", finalizer: true},
		{name: "new, without our finalizer", event: "add", wantQueued: true},
		{name: "our finalizer removed by someone", event: "update", wantQueued: true},
		{name: "deleted while it carries our finalizer", event: "update", deleting: true, finalizer: true, wantQueued: true},
		{name: "being deleted without our finalizer", event: "update", deleting: true},
		{name: "labels changed, finalizer on", event: "update", finalizer: true},
		{name: "gone, finalized", event: "delete", finalizer: true, wantQueued: true},
		{name: "gone, never finalized", event: "delete", wantQueued: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil, nil)
			h := f.c.configHandler(refs.ConfigMap)
			m := config("cm", true, tt.deleting, tt.finalizer)
			switch tt.event {
			case "add":
				h.OnAdd(m, true)
			case "update":
				h.OnUpdate(config("cm", true, false, true), m)
			case "delete":
				h.OnDelete(cache.DeletedFinalStateUnknown{Key: testutil.Namespace + "/cm", Obj: m})
			}
			if queued := f.c.loop.Queue.Len() == 1; queued != tt.wantQueued {
				t.Errorf("queued = %v, want %v", queued, tt.wantQueued)
			}
		})
	}
}
