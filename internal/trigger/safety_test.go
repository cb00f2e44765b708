package trigger_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/controller"
	"github.com/configmap-attacher/configmap-attacher/internal/protection"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

type noLiveUsers struct{}

func (noLiveUsers) Users(context.Context, string, refs.Ref, ...metav1.OwnerReference) ([]*caches.User, error) {
	return nil, nil
}

// With the config informers widened to every ConfigMap and Secret (the config trigger on), in-use
// protection and the attach controller still touch only opted-in objects: a ConfigMap a Reloader
// annotation selects, a plain one, and our own record get no finalizer and no ownerReference, though
// a revision reads them; an opted-in one gets both (the control). An object opted out keeps nothing of
// ours, and nothing else.
func TestNoObjectThatIsNotOptedInGetsAFinalizerOrAnOwnerReference(t *testing.T) {
	ns := testutil.Namespace
	selected := testutil.ConfigMeta(refs.ConfigMap, "selected", false)
	selected.Annotations = map[string]string{api.ReloaderMatch: "true"}
	plain := testutil.ConfigMeta(refs.ConfigMap, "plain", false)
	secret := testutil.ConfigMeta(refs.Secret, "credentials", false)
	rec := testutil.ConfigMeta(refs.ConfigMap, "configmap-attacher.deployment.web", false)
	rec.Labels = map[string]string{api.RecordLabel: api.RecordValue}
	optedOut := testutil.ConfigMeta(refs.ConfigMap, "opted-out", false)
	optedOut.Finalizers = []string{"example.com/keep", api.InUseFinalizer}
	ours := testutil.ConfigMeta(refs.ConfigMap, "ours", true)
	configs := []*metav1.PartialObjectMetadata{selected, plain, secret, rec, optedOut, ours}

	d := testutil.Deployment("web", "uid-web", testutil.PodSpec([]string{"selected", "plain", "opted-out", "ours"}, "credentials"))
	d.Annotations = map[string]string{api.ReloaderSearch: "true", api.ReloaderAuto: "true"}
	rs := testutil.ReplicaSet(d, workload.Deployment, "h1", 1, d.Spec.Template.Spec)
	var users []*caches.User
	for _, o := range []runtime.Object{d, rs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns, UID: "uid-bare"},
		Spec: testutil.PodSpec([]string{"selected", "plain"})}} {
		u, err := caches.Reduce(o)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	var objs []runtime.Object
	for _, m := range configs {
		objs = append(objs, m)
	}
	meta := testutil.FakeMetadata(objs...)
	cs := caches.NewForTest(users, configs)
	if cs.AllConfigs == nil {
		t.Fatal("the test caches must be the widened ones")
	}
	writer := &attach.Writer{Client: meta}
	kube := kubefake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	prot, err := protection.New(cs, writer, noLiveUsers{}, kube, record.NewFakeRecorder(100), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	att, err := controller.New(cs, writer, nil, controller.Options{AttachAllNamespaces: nil})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range configs {
		prot.Loop().Queue.Add(m.Kind + "/" + ns + "/" + m.Name)
	}
	for _, u := range users {
		att.Loop().Queue.Add(u.Key())
	}
	ctx := context.Background()
	for prot.Loop().Queue.Len() > 0 {
		prot.Loop().ProcessNext(ctx)
	}
	for att.Loop().Queue.Len() > 0 {
		att.Loop().ProcessNext(ctx)
	}

	patched := map[string][]string{}
	for _, a := range meta.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patched[p.GetName()] = append(patched[p.GetName()], string(p.GetPatch()))
		}
	}
	for _, m := range []*metav1.PartialObjectMetadata{selected, plain, secret, rec} {
		if got := patched[m.Name]; len(got) > 0 {
			t.Errorf("%s %s is not opted in, yet was patched: %v", m.Kind, m.Name, got)
		}
		if live := get(t, meta, m); len(live.OwnerReferences) > 0 || len(live.Finalizers) > 0 {
			t.Errorf("%s %s got owners %v and finalizers %v", m.Kind, m.Name, live.OwnerReferences, live.Finalizers)
		}
	}
	if live := get(t, meta, optedOut); !slices.Equal(live.Finalizers, []string{"example.com/keep"}) || len(live.OwnerReferences) > 0 {
		t.Errorf("opted-out object: finalizers %v, owners %v; want only the foreign finalizer left", live.Finalizers, live.OwnerReferences)
	}
	live := get(t, meta, ours)
	if !api.HasFinalizer(live.Finalizers, api.InUseFinalizer) || len(live.OwnerReferences) != 1 || live.OwnerReferences[0].UID != rs.UID {
		t.Errorf("the opted-in control got finalizers %v and owners %v; want ours and the ReplicaSet", live.Finalizers, live.OwnerReferences)
	}
	for name, ps := range patched {
		for _, p := range ps {
			if strings.Contains(p, "blockOwnerDeletion") {
				t.Errorf("patch of %s sets blockOwnerDeletion: %s", name, p)
			}
		}
	}
}

func get(t *testing.T, meta *metafake.FakeMetadataClient, m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	t.Helper()
	live, err := meta.Resource(refs.Kind(m.Kind).GVR()).Namespace(m.Namespace).Get(context.Background(), m.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return live
}
