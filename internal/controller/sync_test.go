package controller

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

type fixture struct {
	t    *testing.T
	kube *kubefake.Clientset
	meta *metafake.FakeMetadataClient
	c    *Controller
}

func newFixture(t *testing.T, rss []*appsv1.ReplicaSet, metas ...runtime.Object) *fixture {
	t.Helper()
	var kobjs []runtime.Object
	for _, rs := range rss {
		kobjs = append(kobjs, rs)
	}
	scheme := metafake.NewTestScheme()
	_ = metav1.AddMetaToScheme(scheme)
	f := &fixture{t: t, kube: kubefake.NewSimpleClientset(kobjs...), meta: metafake.NewSimpleMetadataClient(scheme, metas...)}
	o := NewOptions(func(string) (string, bool) { return "", false })
	c, err := New(&kube.Clients{Kube: f.kube, Metadata: f.meta}, o, nil, NewMetrics(), true)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, s := range c.scopes {
		for _, start := range s.start {
			start(ctx.Done())
		}
		for _, inf := range s.informers() {
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				t.Fatal("caches did not sync")
			}
		}
	}
	return f
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

func configMaps(optedIn bool, names ...string) []runtime.Object {
	var out []runtime.Object
	for _, n := range names {
		out = append(out, testutil.ConfigMeta(refs.ConfigMap, n, optedIn))
	}
	return out
}

func TestSyncAttachesOnlyOptedInObjects(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	spec := testutil.PodSpec([]string{"demo-cm-2", "hand-made"}, "demo-secret-2")
	rs := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec)
	objs := append(configMaps(true, "demo-cm-2"), configMaps(false, "hand-made")...)
	objs = append(objs, testutil.ConfigMeta(refs.Secret, "demo-secret-2", true))
	f := newFixture(t, []*appsv1.ReplicaSet{rs}, objs...)

	if err := f.c.sync(context.Background(), testutil.Namespace+"/demo-bbb"); err != nil {
		t.Fatal(err)
	}
	want := []string{"configmaps/demo-cm-2", "secrets/demo-secret-2"}
	if got := f.patched(); !slices.Equal(got, want) {
		t.Fatalf("patched %v, want %v (hand-made must never be touched)", got, want)
	}
	// A second sync before the informer catches up must not write again.
	f.meta.ClearActions()
	if err := f.c.sync(context.Background(), testutil.Namespace+"/demo-bbb"); err != nil {
		t.Fatal(err)
	}
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("second sync patched %v, want nothing", got)
	}
}

func TestSyncSkipsWhatItMustNotAttach(t *testing.T) {
	spec := testutil.PodSpec([]string{"cm"})
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	alreadyOwned := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, spec)
	orphan := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec)
	orphan.OwnerReferences = nil // a bare ReplicaSet: not a workload revision
	deleting := testutil.ReplicaSet(ro, workload.Rollout, "ccc", 3, spec)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	cm := testutil.ConfigMeta(refs.ConfigMap, "cm", true, attach.OwnerReference(alreadyOwned))
	f := newFixture(t, []*appsv1.ReplicaSet{alreadyOwned, orphan, deleting}, cm)

	for _, key := range []string{"demo-aaa", "demo-bbb", "demo-ccc", "does-not-exist"} {
		if err := f.c.sync(context.Background(), testutil.Namespace+"/"+key); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	if got := f.patched(); len(got) != 0 {
		t.Fatalf("patched %v, want nothing", got)
	}
}

func TestSyncAttachAllAnnotation(t *testing.T) {
	d := testutil.Deployment("web", "d-uid", testutil.PodSpec([]string{"plain-cm"}))
	rs := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, d.Spec.Template.Spec)
	dmeta := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testutil.Namespace, UID: "d-uid", Annotations: map[string]string{refs.AttachAllAnnotation: "true"}},
	}
	f := newFixture(t, []*appsv1.ReplicaSet{rs}, append(configMaps(false, "plain-cm"), dmeta)...)
	if err := f.c.sync(context.Background(), testutil.Namespace+"/web-aaa"); err != nil {
		t.Fatal(err)
	}
	if got := f.patched(); !slices.Equal(got, []string{"configmaps/plain-cm"}) {
		t.Fatalf("patched %v, want the unlabelled ConfigMap of an attach-all Deployment", got)
	}
}

func TestConfigEventEnqueuesItsReplicaSets(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "aaa")
	rs1 := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"shared"}))
	rs2 := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, testutil.PodSpec([]string{"shared", "other"}))
	rs3 := testutil.ReplicaSet(ro, workload.Rollout, "ccc", 3, testutil.PodSpec([]string{"other"}))
	f := newFixture(t, []*appsv1.ReplicaSet{rs1, rs2, rs3})
	for f.c.queue.Len() > 0 { // drop the initial adds
		k, _ := f.c.queue.Get()
		f.c.queue.Done(k)
		f.c.queue.Forget(k)
	}
	s := f.c.scopes[""]
	f.c.configHandler(s, refs.ConfigMap).OnAdd(testutil.ConfigMeta(refs.ConfigMap, "shared", true), false)
	var got []string
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		got = append(got, k)
		f.c.queue.Done(k)
	}
	sort.Strings(got)
	if want := []string{testutil.Namespace + "/demo-aaa", testutil.Namespace + "/demo-bbb"}; !slices.Equal(got, want) {
		t.Fatalf("enqueued %v, want %v", got, want)
	}
}
