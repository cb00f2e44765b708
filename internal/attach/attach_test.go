package attach_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func rs(hash string) *appsv1.ReplicaSet {
	return testutil.ReplicaSet(testutil.Rollout("demo", "ro-uid", hash), workload.Rollout, hash, 1, testutil.PodSpec(nil))
}

func foreignOwner() metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "App", Name: "mine", UID: "foreign-uid", Controller: &yes}
}

func TestOwnerReferenceFollowsTheSafetyRules(t *testing.T) {
	got := attach.OwnerReference(rs("aaa"))
	no := false
	want := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "demo-aaa", UID: "rs-aaa", Controller: &no}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OwnerReference = %+v, want %+v", got, want)
	}
	if got.BlockOwnerDeletion != nil {
		t.Fatal("blockOwnerDeletion must not be set")
	}
}

func TestPlan(t *testing.T) {
	current := rs("bbb")
	obj := func(name string, owners ...metav1.OwnerReference) attach.Object {
		return attach.Object{Kind: refs.ConfigMap, Meta: testutil.ConfigMeta(refs.ConfigMap, name, true, owners...)}
	}
	otherNS := obj("elsewhere")
	otherNS.Meta.Namespace = "other"
	deleting := rs("ccc")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	noUID := rs("ddd")
	noUID.UID = ""

	tests := []struct {
		name    string
		rs      *appsv1.ReplicaSet
		objects []attach.Object
		want    []string
		wantErr bool
	}{
		{name: "fresh object", rs: current, objects: []attach.Object{obj("a")}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "already owned: no change", rs: current, objects: []attach.Object{obj("a", attach.OwnerReference(current))}},
		{name: "owned by an older ReplicaSet: add, keep the old one", rs: current,
			objects: []attach.Object{obj("a", attach.OwnerReference(rs("aaa")))}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "same name, other uid (recreated ReplicaSet) is not ours", rs: current,
			objects: []attach.Object{obj("a", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "demo-bbb", UID: "old-uid"})},
			want:    []string{"ConfigMap devops-apps-01/a"}},
		{name: "foreign owner kept, we still add", rs: current, objects: []attach.Object{obj("a", foreignOwner())}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "other namespace refused", rs: current, objects: []attach.Object{otherNS}, wantErr: true},
		{name: "ReplicaSet being deleted refused", rs: deleting, objects: []attach.Object{obj("a")}, wantErr: true},
		{name: "ReplicaSet without uid refused", rs: noUID, objects: []attach.Object{obj("a")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, err := attach.Plan(tt.rs, tt.objects)
			if tt.wantErr {
				if !errors.Is(err, attach.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.Object.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
		})
	}
}

type recordedEvents []string

func (r *recordedEvents) Attached(_ context.Context, obj *metav1.PartialObjectMetadata, _ refs.Kind, msg string) {
	*r = append(*r, obj.Name+": "+msg)
}

func newFakeMetadata(objs ...runtime.Object) *metafake.FakeMetadataClient {
	scheme := metafake.NewTestScheme()
	_ = metav1.AddMetaToScheme(scheme)
	return metafake.NewSimpleMetadataClient(scheme, objs...)
}

func TestWriterMergesByUIDAndKeepsForeignOwners(t *testing.T) {
	ctx := context.Background()
	oldRS, newRS := rs("aaa"), rs("bbb")
	meta := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, foreignOwner(), attach.OwnerReference(oldRS))
	client := newFakeMetadata(meta)
	var events recordedEvents
	w := &attach.Writer{Client: client, Events: &events}

	changes, err := attach.Plan(newRS, []attach.Object{{Kind: refs.ConfigMap, Meta: meta}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Validate(ctx, changes); err != nil {
		t.Fatal(err)
	}
	written, err := w.Apply(ctx, changes)
	if err != nil || len(written) != 1 {
		t.Fatalf("Apply = %v, %v", written, err)
	}
	got, err := client.Resource(attach.GVR(refs.ConfigMap)).Namespace(testutil.Namespace).Get(ctx, "demo-cm-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Order carries no meaning for the garbage collector; content does.
	want := []metav1.OwnerReference{foreignOwner(), attach.OwnerReference(oldRS), attach.OwnerReference(newRS)}
	sortByUID(got.OwnerReferences)
	sortByUID(want)
	if !reflect.DeepEqual(got.OwnerReferences, want) {
		t.Errorf("ownerReferences =\n%+v\nwant\n%+v", got.OwnerReferences, want)
	}
	if len(events) != 1 || events[0] != "demo-cm-1: Attached to ReplicaSet demo-bbb (revision 1)" {
		t.Errorf("events = %q", events)
	}
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && p.GetPatchType() != "application/strategic-merge-patch+json" {
			t.Errorf("patch type %s: only strategic merge patches may touch ownerReferences", p.GetPatchType())
		}
	}
}

func sortByUID(refs []metav1.OwnerReference) {
	sort.Slice(refs, func(i, j int) bool { return refs[i].UID < refs[j].UID })
}

func TestWriterRereadsOnConflict(t *testing.T) {
	ctx := context.Background()
	newRS := rs("bbb")
	stale := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true) // what we planned from
	// Meanwhile a concurrent attacher added the same reference.
	current := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, attach.OwnerReference(newRS))
	current.ResourceVersion = "2"
	client := newFakeMetadata(current)
	conflicts := 0
	client.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		conflicts++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "demo-cm-1", nil)
	})
	changes, _ := attach.Plan(newRS, []attach.Object{{Kind: refs.ConfigMap, Meta: stale}})
	written, err := (&attach.Writer{Client: client}).Apply(ctx, changes)
	if err != nil || len(written) != 0 || conflicts != 1 {
		t.Fatalf("Apply = %v, %v after %d conflicts; want no writes, no error, one conflict", written, err, conflicts)
	}
}
