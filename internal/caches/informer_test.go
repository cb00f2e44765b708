package caches

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func cm(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: labels}}
}

var optedIn = map[string]string{api.RevisionedLabel: api.RevisionedValue}

// recorder notes the events a handler gets, as "add x", "update x", "delete x".
type recorder struct{ got []string }

func (r *recorder) handler() cache.ResourceEventHandler {
	name := func(obj any) string {
		m, _ := MetaOf(obj)
		return m.Name
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.got = append(r.got, "add "+name(obj)) },
		UpdateFunc: func(_, cur any) { r.got = append(r.got, "update "+name(cur)) },
		DeleteFunc: func(obj any) { r.got = append(r.got, "delete "+name(obj)) },
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

// trimAll keeps what readers of the widened informer need, and nothing a tool wrote.
func TestTrimAll(t *testing.T) {
	m := cm("x", map[string]string{api.PinLabel: api.PinValue, "app.kubernetes.io/managed-by": "Helm"})
	m.Annotations = map[string]string{api.ReloaderMatch: "true", "meta.helm.sh/release-name": "r",
		"kubectl.kubernetes.io/last-applied-configuration": "{...}", api.OriginalNameAnnotation: "y"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "helm"}}
	out, _ := trimAll(newSharing(nil))(m)
	got := out.(*metav1.PartialObjectMetadata)
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
	out, _ = trimAll(newSharing(nil))(s)
	if out.(*metav1.PartialObjectMetadata).Annotations[api.OriginalNameAnnotation] != "x" {
		t.Error("a snapshot lost its original name: the pinning view indexes by it")
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
	protected := func(o *metav1.PartialObjectMetadata) bool { return api.HasFinalizer(o.Finalizers, api.InUseFinalizer) }
	if n := cs.CountConfigs(protected); n != 2 {
		t.Fatalf("protected objects: %d; want 2 (a ConfigMap and a Secret)", n)
	}
}

// With the widened config informers the pinning snapshots are a view of them: every index the
// snapshot readers use (the webhook's ByPin, the PinRemoved check's ByCopied) must be there too.
func TestWidenedConfigInformersCarryTheSnapshotIndexes(t *testing.T) {
	for _, kind := range refs.Kinds() {
		all := allConfigIndexers(kind)
		for _, name := range []string{ByPin, ByCopied} {
			if _, ok := all[name]; !ok {
				t.Errorf("%s: the widened informer lacks index %s", kind, name)
			}
		}
	}
}
