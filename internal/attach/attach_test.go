package attach_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func rev(hash string) *revision.Revision {
	return revision.FromReplicaSet(testutil.ReplicaSet(testutil.Rollout("demo", "ro-uid", hash), workload.Rollout, hash, 1, testutil.PodSpec(nil)))
}

func foreignOwner() metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "App", Name: "mine", UID: "foreign-uid", Controller: &yes}
}

// ownerRef is what the safety rules allow, spelled out here rather than taken from the code under test.
func ownerRef(hash string) metav1.OwnerReference {
	no := false
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "demo-" + hash, UID: types.UID("rs-" + hash), Controller: &no}
}

func TestOwnerReferenceFollowsTheSafetyRules(t *testing.T) {
	got := rev("aaa").OwnerReference()
	if want := ownerRef("aaa"); !reflect.DeepEqual(got, want) {
		t.Fatalf("OwnerReference = %+v, want %+v", got, want)
	}
	if got.BlockOwnerDeletion != nil {
		t.Fatal("blockOwnerDeletion must not be set")
	}
}

func object(name string, owners ...metav1.OwnerReference) attach.Object {
	return attach.Object{Kind: refs.ConfigMap, Meta: testutil.ConfigMeta(refs.ConfigMap, name, true, owners...)}
}

func TestPlan(t *testing.T) {
	current := rev("bbb")
	otherNS := object("elsewhere")
	otherNS.Meta.Namespace = "other"
	deleting := rev("ccc")
	deleting.Deleting = true
	noUID := rev("ddd")
	noUID.UID = ""

	tests := []struct {
		name      string
		rev       *revision.Revision
		objects   []attach.Object
		want      []string
		wantOwned []string
		wantErr   bool
	}{
		{name: "fresh object", rev: current, objects: []attach.Object{object("a")}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "already owned: no change", rev: current, objects: []attach.Object{object("a", ownerRef("bbb"))}, wantOwned: []string{"ConfigMap devops-apps-01/a"}},
		{name: "owned by an older ReplicaSet: add, keep the old one", rev: current,
			objects: []attach.Object{object("a", ownerRef("aaa"))}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "same name, other uid (recreated ReplicaSet) is not ours", rev: current,
			objects: []attach.Object{object("a", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "demo-bbb", UID: "old-uid"})},
			want:    []string{"ConfigMap devops-apps-01/a"}},
		{name: "foreign owner kept, we still add", rev: current, objects: []attach.Object{object("a", foreignOwner())}, want: []string{"ConfigMap devops-apps-01/a"}},
		{name: "other namespace refused", rev: current, objects: []attach.Object{otherNS}, wantErr: true},
		{name: "revision being deleted refused", rev: deleting, objects: []attach.Object{object("a")}, wantErr: true},
		{name: "revision without uid refused", rev: noUID, objects: []attach.Object{object("a")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, owned, err := attach.Plan(tt.rev, tt.objects)
			if tt.wantErr {
				if !errors.Is(err, attach.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got, gotOwned []string
			for _, c := range changes {
				got = append(got, c.Object.String())
			}
			for _, o := range owned {
				gotOwned = append(gotOwned, o.String())
			}
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(gotOwned, tt.wantOwned) {
				t.Errorf("changes = %v, owned = %v; want %v, %v", got, gotOwned, tt.want, tt.wantOwned)
			}
		})
	}
}

type recordedEvents []string

func (r *recordedEvents) Attached(_ context.Context, obj attach.Object, msg string) {
	*r = append(*r, obj.Meta.Name+": "+msg)
}

// dryRunRecorder passes every call to the fake, which ignores PatchOptions (it would apply a dry run
// for real), and records which patches were dry runs.
type dryRunRecorder struct {
	metadata.Interface
	real, dry *[]string
}

func (r dryRunRecorder) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return recordingGetter{r.Interface.Resource(gvr), r}
}

type recordingGetter struct {
	metadata.Getter
	r dryRunRecorder
}

func (g recordingGetter) Namespace(ns string) metadata.ResourceInterface {
	return recordingResource{g.Getter.Namespace(ns), g.r}
}

type recordingResource struct {
	metadata.ResourceInterface
	r dryRunRecorder
}

func (c recordingResource) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if len(opts.DryRun) > 0 {
		*c.r.dry = append(*c.r.dry, name)
		return c.Get(ctx, name, metav1.GetOptions{})
	}
	*c.r.real = append(*c.r.real, name)
	return c.ResourceInterface.Patch(ctx, name, pt, data, opts, sub...)
}

func recording(client metadata.Interface) (w *attach.Writer, real, dry *[]string) {
	real, dry = &[]string{}, &[]string{}
	return &attach.Writer{Client: dryRunRecorder{client, real, dry}}, real, dry
}

func TestAttachMergesByUIDAndKeepsForeignOwners(t *testing.T) {
	ctx := context.Background()
	meta := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, foreignOwner(), ownerRef("aaa"))
	client := testutil.FakeMetadata(meta)
	var events recordedEvents
	w, real, dry := recording(client)
	w.Events = &events

	res, err := w.Attach(ctx, rev("bbb"), []attach.Object{{Kind: refs.ConfigMap, Meta: meta}}, attach.Options{Validate: true})
	if err != nil || len(res.Written) != 1 {
		t.Fatalf("Attach = %+v, %v", res, err)
	}
	got, err := client.Resource(refs.ConfigMap.GVR()).Namespace(testutil.Namespace).Get(ctx, "demo-cm-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Order carries no meaning for the garbage collector; content does.
	want := []metav1.OwnerReference{foreignOwner(), ownerRef("aaa"), ownerRef("bbb")}
	sortByUID(got.OwnerReferences)
	sortByUID(want)
	if !reflect.DeepEqual(got.OwnerReferences, want) {
		t.Errorf("ownerReferences =\n%+v\nwant\n%+v", got.OwnerReferences, want)
	}
	if len(events) != 1 || events[0] != "demo-cm-1: Attached to ReplicaSet demo-bbb (revision 1)" {
		t.Errorf("events = %q", events)
	}
	if len(*dry) != 1 || len(*real) != 1 {
		t.Errorf("dry-run patches %v, patches %v; want one of each (validate, then write)", *dry, *real)
	}
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && p.GetPatchType() != "application/strategic-merge-patch+json" {
			t.Errorf("patch type %s: only strategic merge patches may touch ownerReferences", p.GetPatchType())
		}
	}
}

func TestAttachDryRunAndInFlightWriteNothing(t *testing.T) {
	ctx := context.Background()
	a, b := testutil.ConfigMeta(refs.ConfigMap, "a", true), testutil.ConfigMeta(refs.ConfigMap, "b", true, ownerRef("bbb"))
	objects := []attach.Object{{Kind: refs.ConfigMap, Meta: a}, {Kind: refs.ConfigMap, Meta: b}}

	w, real, dry := recording(testutil.FakeMetadata(a, b))
	res, err := w.Attach(ctx, rev("bbb"), objects, attach.Options{DryRun: true})
	if err != nil || len(res.Planned) != 1 || len(res.Owned) != 1 || len(res.Written) != 0 {
		t.Fatalf("dry run: %+v, %v; want 1 planned, 1 owned, none written", res, err)
	}
	if len(*real) != 0 || len(*dry) != 1 {
		t.Fatalf("dry run sent patches %v (dry %v); want only the dry run", *real, *dry)
	}

	client := testutil.FakeMetadata(a, b)
	inFlight := func(attach.Change) bool { return true }
	res, err = (&attach.Writer{Client: client}).Attach(ctx, rev("bbb"), objects, attach.Options{InFlight: inFlight})
	if err != nil || len(res.Skipped) != 1 || len(client.Actions()) != 0 {
		t.Fatalf("in flight: %+v, %v, actions %v; want the change skipped and no request", res, err, client.Actions())
	}
}

func TestAttachRereadsOnConflict(t *testing.T) {
	ctx := context.Background()
	stale := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true) // what we planned from
	// Meanwhile a concurrent attacher added the same reference.
	current := testutil.ConfigMeta(refs.ConfigMap, "demo-cm-1", true, ownerRef("bbb"))
	current.ResourceVersion = "2"
	client := testutil.FakeMetadata(current)
	conflicts := 0
	client.PrependReactor("patch", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		conflicts++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "demo-cm-1", nil)
	})
	res, err := (&attach.Writer{Client: client}).Attach(ctx, rev("bbb"), []attach.Object{{Kind: refs.ConfigMap, Meta: stale}}, attach.Options{})
	if err != nil || len(res.Written) != 0 || conflicts != 1 {
		t.Fatalf("Attach = %+v, %v after %d conflicts; want no writes, no error, one conflict", res, err, conflicts)
	}
}

// A deleted object is nothing left to attach, but it must not hide another object's failure: the
// controller retries on the error, and with resync off nothing else would.
func TestAttachReportsEveryFailureNotJustTheFirst(t *testing.T) {
	ctx := context.Background()
	gone, flaky, fine := testutil.ConfigMeta(refs.ConfigMap, "gone", true), testutil.ConfigMeta(refs.ConfigMap, "flaky", true), testutil.ConfigMeta(refs.ConfigMap, "fine", true)
	client := testutil.FakeMetadata(flaky, fine) // "gone" was deleted after it was planned
	client.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetName() == "flaky" {
			time.Sleep(20 * time.Millisecond) // fail last, after the NotFound
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	objects := []attach.Object{{Kind: refs.ConfigMap, Meta: gone}, {Kind: refs.ConfigMap, Meta: flaky}, {Kind: refs.ConfigMap, Meta: fine}}
	res, err := (&attach.Writer{Client: client}).Attach(ctx, rev("bbb"), objects, attach.Options{})
	if err == nil || !strings.Contains(err.Error(), "etcd leader changed") || apierrors.IsNotFound(err) {
		t.Fatalf("err = %v; want the transient failure of flaky, not the disappearance of gone", err)
	}
	if len(res.Gone) != 1 || res.Gone[0].Object.Meta.Name != "gone" || len(res.Written) != 1 || res.Written[0].Object.Meta.Name != "fine" {
		t.Fatalf("result = %+v; want gone reported as gone and fine written", res)
	}
}

func sortByUID(refs []metav1.OwnerReference) {
	sort.Slice(refs, func(i, j int) bool { return refs[i].UID < refs[j].UID })
}
