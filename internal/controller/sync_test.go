package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

type fixture struct {
	t    *testing.T
	meta *metafake.FakeMetadataClient
	c    *Controller
}

// user reduces a ReplicaSet the way the production cache does.
func user(rs *appsv1.ReplicaSet) *caches.User {
	u, err := caches.Reduce(rs)
	if err != nil {
		panic(err)
	}
	return u
}

// newFixture fills the controller's caches directly; the metadata client holds what the API server has.
func newFixture(t *testing.T, users []*caches.User, configs []*metav1.PartialObjectMetadata, extra ...runtime.Object) *fixture {
	t.Helper()
	var objs []runtime.Object
	for _, m := range configs {
		objs = append(objs, m)
	}
	f := &fixture{t: t, meta: testutil.FakeMetadata(append(objs, extra...)...)}
	cs := caches.NewForTest(users, configs)
	c, err := New(cs, &attach.Writer{Client: f.meta}, nil, Options{AttachAllNamespaces: []string{testutil.Namespace}})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) sync(key string) reconcile.Result {
	f.t.Helper()
	res, err := f.c.sync(context.Background(), key)
	if err != nil {
		f.t.Fatalf("sync %s: %v", key, err)
	}
	return res
}

// patched returns "resource/name" for every PATCH sent.
func (f *fixture) patched() []string {
	var out []string
	for _, a := range f.meta.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			out = append(out, p.GetResource().Resource+"/"+p.GetName())
		}
	}
	sort.Strings(out)
	return out
}

func configMaps(optedIn bool, names ...string) []*metav1.PartialObjectMetadata {
	var out []*metav1.PartialObjectMetadata
	for _, n := range names {
		out = append(out, testutil.ConfigMeta(refs.ConfigMap, n, optedIn))
	}
	return out
}

// drainQueue takes every key out of the controller's queue, sorted.
func (f *fixture) drainQueue() []string {
	var got []string
	for f.c.loop.Queue.Len() > 0 {
		k, _ := f.c.loop.Queue.Get()
		got = append(got, k)
		f.c.loop.Queue.Done(k)
	}
	sort.Strings(got)
	return got
}

// sharedPod is the cached pod ns/name, with owners, reading the ConfigMap "shared".
func sharedPod(t *testing.T, name string, owners ...metav1.OwnerReference) *caches.User {
	t.Helper()
	return reduced(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, UID: types.UID("uid-" + name),
		OwnerReferences: owners}, Spec: testutil.PodSpec([]string{"shared"})})
}

func key(rs *appsv1.ReplicaSet) string { return caches.Key(caches.ReplicaSet, rs.Namespace, rs.Name) }

func TestSyncAttachesOnlyOptedInObjects(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	spec := testutil.PodSpec([]string{"demo-cm-2", "hand-made"}, "demo-secret-2")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec)
	objs := append(configMaps(true, "demo-cm-2"), configMaps(false, "hand-made")...)
	objs = append(objs, testutil.ConfigMeta(refs.Secret, "demo-secret-2", true))
	f := newFixture(t, []*caches.User{user(rs)}, objs)

	if r := f.sync(key(rs)); r.RequeueAfter != 0 {
		t.Errorf("requeue after %s, want none", r.RequeueAfter)
	}
	want := []string{"configmaps/demo-cm-2", "secrets/demo-secret-2"}
	if got := f.patched(); !slices.Equal(got, want) {
		t.Fatalf("patched %v, want %v (hand-made must never be touched)", got, want)
	}
	// A second sync before the informer catches up must not write again, and must come back later in
	// case the watch event never arrives (there is no resync).
	f.meta.ClearActions()
	r := f.sync(key(rs))
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("second sync patched %v, want nothing", got)
	}
	if r.RequeueAfter != expectationsTTL {
		t.Fatalf("second sync: requeue after %s, want %s (the expectation's TTL)", r.RequeueAfter, expectationsTTL)
	}
}

func TestSyncSkipsWhatItMustNotAttach(t *testing.T) {
	spec := testutil.PodSpec([]string{"cm"})
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	alreadyOwned := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, spec)
	deleting := testutil.ReplicaSet(ro, workload.Rollout, "ccc", 3, spec)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	cm := testutil.ConfigMeta(refs.ConfigMap, "cm", true, revision.FromReplicaSet(alreadyOwned).OwnerReference())
	f := newFixture(t, []*caches.User{user(alreadyOwned), user(deleting)}, []*metav1.PartialObjectMetadata{cm})

	for _, name := range []string{"demo-aaa", "demo-ccc", "does-not-exist"} {
		f.sync(caches.Key(caches.ReplicaSet, testutil.Namespace, name))
	}
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("patched %v, want nothing", got)
	}
}

func TestSyncFollowsRolloutReplicaSetsWithoutTheRolloutsCache(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"cm"}))
	f := newFixture(t, []*caches.User{user(rs)}, configMaps(true, "cm"))
	delete(f.c.caches.Users, caches.Rollout) // the Argo Rollouts CRD is not installed
	f.sync(key(rs))
	if got := f.patched(); !slices.Equal(got, []string{"configmaps/cm"}) {
		t.Fatalf("patched %v: a Rollout's ReplicaSet is attached whether or not Rollouts are watched", got)
	}
}

func TestSyncAttachAllAnnotation(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"plain-cm"}))
	d.Annotations = map[string]string{api.AttachAllAnnotation: "true"}
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	dep, err := caches.Reduce(d)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, []*caches.User{user(rs), dep}, configMaps(false, "plain-cm"))
	f.sync(key(rs))
	if got := f.patched(); !slices.Equal(got, []string{"configmaps/plain-cm"}) {
		t.Fatalf("patched %v, want the unlabelled ConfigMap of an attach-all Deployment", got)
	}
}

// The order "ReplicaSet before its attach-all Deployment": synced first, the ReplicaSet attaches only
// what is labelled (its workload is not cached yet, or not annotated yet, so nothing opts the rest in);
// the Deployment's arrival, or its annotation set later, brings its revisions back to attach the rest.
func TestAnAttachAllWorkloadSeenAfterItsRevisionBringsItBack(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"plain-cm"}))
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	plain := reduced(t, d)
	d.Annotations = map[string]string{api.AttachAllAnnotation: "true"}
	all := reduced(t, d)
	for _, tt := range []struct {
		name   string
		before []*caches.User // cached when the ReplicaSet is first synced
		event  func(cache.ResourceEventHandler)
	}{
		{name: "the Deployment arrives annotated", event: func(h cache.ResourceEventHandler) { h.OnAdd(all, false) }},
		{name: "the annotation is set later", before: []*caches.User{plain}, event: func(h cache.ResourceEventHandler) { h.OnUpdate(plain, all) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, append([]*caches.User{user(rs)}, tt.before...), configMaps(false, "plain-cm"))
			f.sync(key(rs))
			if got := f.patched(); len(got) != 0 {
				t.Fatalf("patched %v before the Deployment is seen annotated", got)
			}
			if err := f.c.caches.Users[caches.Deployment].Indexers()[0].Update(all); err != nil {
				t.Fatal(err)
			}
			tt.event(f.c.workloadHandler())
			var queued []string
			for f.c.loop.Queue.Len() > 0 {
				k, _ := f.c.loop.Queue.Get()
				f.c.loop.Queue.Done(k)
				queued = append(queued, k)
			}
			if !slices.Equal(queued, []string{key(rs)}) {
				t.Fatalf("queued %v, want the Deployment's ReplicaSet %s", queued, key(rs))
			}
			f.sync(key(rs))
			if got := f.patched(); !slices.Equal(got, []string{"configmaps/plain-cm"}) {
				t.Errorf("patched %v, want the unlabelled ConfigMap of the attach-all Deployment", got)
			}
		})
	}
}

func TestSyncAttachAllOnlyWhereAnAdministratorAllowedIt(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"plain-cm"}))
	d.Annotations = map[string]string{api.AttachAllAnnotation: "true"}
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	dep, err := caches.Reduce(d)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, []*caches.User{user(rs), dep}, configMaps(false, "plain-cm"))
	f.c.opts.AttachAllNamespaces = []string{"another-namespace"}
	f.sync(key(rs))
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("patched %v: the annotation alone must not opt anything in outside the allowed namespaces", got)
	}
}

func TestSyncHonoursTheReplicaSetSelector(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"cm"}))
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	f := newFixture(t, []*caches.User{user(rs)}, configMaps(true, "cm"))
	f.c.opts.ReplicaSetSelector = labels.SelectorFromSet(labels.Set{"team": "payments"})
	f.sync(key(rs))
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("patched %v for a ReplicaSet outside -replicaset-selector", got)
	}
}

func TestConfigEventEnqueuesItsReplicaSets(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	rs1 := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"shared"}))
	rs2 := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, testutil.PodSpec([]string{"shared", "other"}))
	rs3 := testutil.ReplicaSet(ro, workload.Rollout, "ccc", 3, testutil.PodSpec([]string{"other"}))
	f := newFixture(t, []*caches.User{user(rs1), user(rs2), user(rs3)}, nil)
	f.c.configHandler(refs.ConfigMap).OnAdd(testutil.ConfigMeta(refs.ConfigMap, "shared", true), false)
	got := f.drainQueue()
	if want := []string{key(rs1), key(rs2)}; !slices.Equal(got, want) {
		t.Fatalf("enqueued %v, want %v", got, want)
	}
}

// The caches' first list queues nothing by its adds (at 150,000 Pods, ~150,000 revision keys whose
// room the queue keeps after they drain, and a look through its namespace for each of ~90,000 config
// objects); the start then queues the revisions a sync would write for, and only those.
func TestTheStartQueuesOnlyTheRevisionsASyncWouldWriteFor(t *testing.T) {
	no := false
	ownedBy := func(uids ...types.UID) []metav1.OwnerReference {
		var out []metav1.OwnerReference
		for _, uid := range uids {
			out = append(out, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + string(uid), UID: uid, Controller: &no})
		}
		return out
	}
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"shared"}))
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	deleting := rs.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	dep := reduced(t, d)
	d.Annotations = map[string]string{api.AttachAllAnnotation: "true"}
	attachAll := reduced(t, d)
	yes := true
	snapshot := testutil.ConfigMeta(refs.ConfigMap, "shared-1f2e3d4c5b", true, ownedBy("older", rs.UID)...)
	snapshot.Labels[api.SnapshotLabel] = api.SnapshotValue
	shared := func(owners ...types.UID) *metav1.PartialObjectMetadata {
		return testutil.ConfigMeta(refs.ConfigMap, "shared", true, ownedBy(owners...)...)
	}
	goingShared := shared()
	goingShared.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tt := range []struct {
		name    string
		users   []*caches.User
		configs []*metav1.PartialObjectMetadata
		want    []string
	}{
		{name: "a ReplicaSet its config is not attached to", users: []*caches.User{user(rs)}, configs: []*metav1.PartialObjectMetadata{shared()},
			want: []string{key(rs)}},
		{name: "a ReplicaSet already attached", users: []*caches.User{user(rs)}, configs: []*metav1.PartialObjectMetadata{shared("older", rs.UID)}},
		{name: "a ReplicaSet whose config is not opted in", users: []*caches.User{user(rs)}},
		{name: "a ReplicaSet whose config is being deleted", users: []*caches.User{user(rs)}, configs: []*metav1.PartialObjectMetadata{goingShared}},
		{name: "a ReplicaSet being deleted", users: []*caches.User{user(deleting)}, configs: []*metav1.PartialObjectMetadata{shared()}},
		{name: "a ReplicaSet owning an object it no longer uses", users: []*caches.User{user(rs)},
			configs: []*metav1.PartialObjectMetadata{shared(rs.UID), testutil.ConfigMeta(refs.ConfigMap, "old", true, ownedBy("older", rs.UID)...)},
			want:    []string{key(rs)}},
		{name: "a ReplicaSet pinned to a snapshot its template does not name", users: []*caches.User{user(rs)},
			configs: []*metav1.PartialObjectMetadata{shared(rs.UID), snapshot}},
		{name: "a ReplicaSet of an attach-all Deployment (objects outside the caches)", users: []*caches.User{user(rs), attachAll},
			configs: []*metav1.PartialObjectMetadata{shared(rs.UID)}, want: []string{key(rs)}},
		{name: "a Deployment is no revision", users: []*caches.User{dep}, configs: []*metav1.PartialObjectMetadata{shared()}},
		{name: "a bare pod and a controller's pod", configs: []*metav1.PartialObjectMetadata{shared()},
			users: []*caches.User{sharedPod(t, "bare"), sharedPod(t, "web-aaa-x1", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes})},
			want:  []string{caches.Key(caches.Pod, testutil.Namespace, "bare")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.users, tt.configs)
			for _, u := range tt.users {
				f.c.revisionHandler().OnAdd(u, true)
				f.c.workloadHandler().OnAdd(u, true)
			}
			for _, m := range tt.configs {
				f.c.configHandler(refs.ConfigMap).OnAdd(m, true)
			}
			if got := f.drainQueue(); len(got) != 0 {
				t.Fatalf("the first list's adds queued %v", got)
			}
			f.c.loop.Start(context.Background())
			if got := f.drainQueue(); !slices.Equal(got, tt.want) {
				t.Errorf("the start queued %v, want %v", got, tt.want)
			}
		})
	}
}

// After the first list, a revision's add queues it, and so does a workload's that may attach all.
func TestAddsAfterTheFirstListQueueTheirRevisions(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"shared"}))
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	f := newFixture(t, []*caches.User{user(rs)}, nil)
	f.c.revisionHandler().OnAdd(user(rs), false)
	if got := f.drainQueue(); !slices.Equal(got, []string{key(rs)}) {
		t.Fatalf("a new ReplicaSet queued %v, want itself", got)
	}
	du, _ := caches.Reduce(d)
	f.c.workloadHandler().OnAdd(du, false) // a workload made later (its ReplicaSets may have come first)
	if got := f.drainQueue(); !slices.Equal(got, []string{key(rs)}) {
		t.Fatalf("a later workload queued %v, want its ReplicaSet", got)
	}
}

// The watch event showing our write can arrive before the write returns. The expectation must then not
// be left behind: when Argo CD's Replace=true strips the reference a moment later, the next sync must
// write it again at once, not a TTL later.
func TestSyncRewritesAStrippedReferenceAtOnceWhenTheEventBeatTheWrite(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, testutil.PodSpec([]string{"demo-cm-2"}))
	f := newFixture(t, []*caches.User{user(rs)}, configMaps(true, "demo-cm-2"))
	store := f.c.caches.Configs[refs.ConfigMap].Indexers()[0]
	// The informer delivers the patched object (store, then handlers) before Patch returns.
	f.meta.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.StrategicMergePatchType {
			return false, nil, nil // the test's own strip below
		}
		shown := testutil.ConfigMeta(refs.ConfigMap, p.GetName(), true, revision.FromReplicaSet(rs).OwnerReference())
		if err := store.Update(shown); err != nil {
			t.Fatal(err)
		}
		f.c.pending.observe(shown)
		return false, nil, nil // the fake applies the patch as usual
	})
	f.sync(key(rs))
	if got := f.patched(); !slices.Equal(got, []string{"configmaps/demo-cm-2"}) {
		t.Fatalf("patched %v", got)
	}

	// Replace=true strips the reference: the object comes back without it.
	stripped := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-2", true)
	stripped.ResourceVersion = "3"
	if err := store.Update(stripped); err != nil {
		t.Fatal(err)
	}
	f.c.pending.observe(stripped)
	if _, err := f.meta.Resource(refs.ConfigMap.GVR()).Namespace(testutil.Namespace).Patch(context.Background(), "demo-cm-2",
		types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.meta.ClearActions()
	if r := f.sync(key(rs)); r.RequeueAfter != 0 {
		t.Errorf("requeue after %s: the sync skipped the object as still in flight", r.RequeueAfter)
	}
	if got := f.patched(); !slices.Equal(got, []string{"configmaps/demo-cm-2"}) {
		t.Fatalf("after the strip, patched %v; want the reference written again at once", got)
	}
}

// The reference a revision no longer uses is taken back, unless it is the object's last; a pinning
// snapshot's references are the pins, never taken back: its revisions' templates name the original.
func TestSyncTakesBackUnusedReferencesButNotPins(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, testutil.PodSpec([]string{"demo-cm-2", "app-config"}))
	no := false
	owner := func(uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + string(uid), UID: uid, Controller: &no}
	}
	ours := func(m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
		var uids []string
		for _, o := range m.OwnerReferences {
			uids = append(uids, fmt.Sprintf(`"k:{\"uid\":\"%s\"}":{}`, o.UID))
		}
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: api.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:ownerReferences":{` + strings.Join(uids, ",") + `}}}`)}}}
		return m
	}
	snapshot := func(name string, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
		m := testutil.ConfigMeta(refs.ConfigMap, name, true, owners...)
		m.Labels[api.SnapshotLabel] = api.SnapshotValue
		return ours(m)
	}
	tests := []struct {
		name   string
		config *metav1.PartialObjectMetadata
		want   []string
	}{
		{name: "no longer used, another owner left: taken back", config: ours(testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, owner(rs.UID), owner("older"))),
			want: []string{"configmaps/demo-cm-1"}},
		{name: "no longer used, its last owner: kept", config: ours(testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, owner(rs.UID)))},
		{name: "the revision's pin, shared with the revision before (an image-only deploy): kept",
			config: snapshot("app-config-1f2e3d4c5b", owner("older"), owner(rs.UID))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*caches.User{user(rs)}, append(configMaps(true, "demo-cm-2"), tt.config))
			f.sync(key(rs))
			var got []string
			for _, p := range f.patched() {
				if p != "configmaps/demo-cm-2" { // attached: what the template uses
					got = append(got, p)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("patched %v, want %v", got, tt.want)
			}
		})
	}
}

// Only revisions are queued: a pod with a controller is none (its ReplicaSet is), a bare pod is one.
// A cluster's pods queued at every start cost the first attach tens of seconds at 50,000 Pods.
func TestRevisionEventsQueueBarePodsButNotAControllersPods(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"shared"}))
	yes := true
	bare := sharedPod(t, "bare")
	controlled := sharedPod(t, "demo-aaa-x1", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes})
	for _, tt := range []struct {
		name  string
		event func(f *fixture)
		want  []string
	}{
		{"a controller's pod appears", func(f *fixture) { f.c.revisionHandler().OnAdd(controlled, false) }, nil},
		{"a bare pod appears", func(f *fixture) { f.c.revisionHandler().OnAdd(bare, false) }, []string{bare.Key()}},
		{"a config object both use appears", func(f *fixture) {
			f.c.configHandler(refs.ConfigMap).OnAdd(testutil.ConfigMeta(refs.ConfigMap, "shared", true), false)
		}, []string{bare.Key(), key(rs)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*caches.User{user(rs), bare, controlled}, nil)
			tt.event(f)
			got := f.drainQueue()
			if !slices.Equal(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
}
