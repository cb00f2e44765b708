package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

func controlledBy(apiVersion, kind, name, uid string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}}
}

func objectMeta(name, uid string, owners []metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, UID: types.UID(uid), OwnerReferences: owners}
}

// controllerRevision is what the StatefulSet and DaemonSet controllers store: a patch replacing
// spec.template.
func controllerRevision(name, uid string, owners []metav1.OwnerReference, spec corev1.PodSpec, number int64) *appsv1.ControllerRevision {
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"$patch": "replace", "spec": spec}}})
	if err != nil {
		panic(err)
	}
	return &appsv1.ControllerRevision{ObjectMeta: objectMeta(name, uid, owners), Data: runtime.RawExtension{Raw: raw}, Revision: number}
}

func reduced(t *testing.T, obj any) *caches.User {
	t.Helper()
	u, err := caches.Reduce(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSyncAttachesTheRevisionOfEveryKind(t *testing.T) {
	spec := testutil.PodSpec([]string{"cm"})
	tests := []struct {
		name   string
		obj    any
		attach bool
		owner  string // apiVersion Kind written
	}{
		{"a StatefulSet's ControllerRevision", controllerRevision("db-7c9d", "cr-1", controlledBy("apps/v1", "StatefulSet", "db", "sts-uid"), spec, 2), true, "apps/v1 ControllerRevision"},
		{"a DaemonSet's ControllerRevision", controllerRevision("agent-5f6", "cr-2", controlledBy("apps/v1", "DaemonSet", "agent", "ds-uid"), spec, 1), true, "apps/v1 ControllerRevision"},
		{"a ControllerRevision of something else", controllerRevision("vm-1", "cr-3", controlledBy("kubevirt.io/v1", "VirtualMachine", "vm", "vm-uid"), spec, 1), false, ""},
		{"a Job of a CronJob", &batchv1.Job{ObjectMeta: objectMeta("backup-28999", "job-1", controlledBy("batch/v1", "CronJob", "backup", "cj-uid")),
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, true, "batch/v1 Job"},
		{"a CronJob", &batchv1.CronJob{ObjectMeta: objectMeta("backup", "cj-uid", nil),
			Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}}}, true, "batch/v1 CronJob"},
		{"a bare Pod", &corev1.Pod{ObjectMeta: objectMeta("debug", "pod-1", nil), Spec: spec}, true, "v1 Pod"},
		{"a Pod a controller manages (its revision is attached instead)", &corev1.Pod{ObjectMeta: objectMeta("web-1", "pod-2", controlledBy("apps/v1", "ReplicaSet", "web", "rs-uid")), Spec: spec}, false, ""},
		{"a bare ReplicaSet", &appsv1.ReplicaSet{ObjectMeta: objectMeta("solo", "rs-solo", nil),
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, true, "apps/v1 ReplicaSet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := reduced(t, tt.obj)
			f := newFixture(t, []*caches.User{u}, configMaps(true, "cm"))
			f.sync(u.Key())
			got := f.patched()
			if !tt.attach {
				if len(got) != 0 {
					t.Fatalf("patched %v, want nothing", got)
				}
				return
			}
			if !slices.Equal(got, []string{"configmaps/cm"}) {
				t.Fatalf("patched %v, want configmaps/cm", got)
			}
			owners := f.ownersOf(t, "cm")
			want := fmt.Sprintf("%s %s %s", tt.owner, u.Name, u.UID)
			if len(owners) != 1 || fmt.Sprintf("%s %s %s %s", owners[0].APIVersion, owners[0].Kind, owners[0].Name, owners[0].UID) != want ||
				owners[0].Controller == nil || *owners[0].Controller || owners[0].BlockOwnerDeletion != nil {
				t.Fatalf("owners = %+v, want one controller:false reference to %s", owners, want)
			}
		})
	}
}

// A CronJob's template changes in place: the objects it stopped using lose the reference we wrote (its
// Jobs keep theirs), unless it is their last (no owner, the garbage collector would never delete them);
// a reference someone else wrote to it stays.
func TestSyncTakesBackWhatARevisionNoLongerUses(t *testing.T) {
	cj := &batchv1.CronJob{ObjectMeta: objectMeta("backup", "cj-uid", nil),
		Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: testutil.PodSpec([]string{"backup-cm-2"})}}}}}
	u := reduced(t, cj)
	no := false
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "CronJob", Name: "backup", UID: "cj-uid", Controller: &no}
	jobRef := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "backup-1", UID: "job-uid", Controller: &no}
	ranOnce := testutil.ConfigMeta(refs.ConfigMap, "backup-cm-1", true, ref, jobRef)
	ranOnce.ManagedFields = []metav1.ManagedFieldsEntry{managedOwnerRef(api.FieldManager, "cj-uid"), managedOwnerRef(api.FieldManager, "job-uid")}
	neverRan := testutil.ConfigMeta(refs.ConfigMap, "backup-cm-0", true, ref)
	neverRan.ManagedFields = []metav1.ManagedFieldsEntry{managedOwnerRef(api.FieldManager, "cj-uid")}
	theirs := testutil.ConfigMeta(refs.ConfigMap, "shared", true, ref)
	theirs.ManagedFields = []metav1.ManagedFieldsEntry{managedOwnerRef("kubectl-client-side-apply", "cj-uid")}
	f := newFixture(t, []*caches.User{u}, []*metav1.PartialObjectMetadata{ranOnce, neverRan, theirs, testutil.ConfigMeta(refs.ConfigMap, "backup-cm-2", true)})

	f.sync(u.Key())
	if got := f.ownersOf(t, "backup-cm-1"); len(got) != 1 || got[0].UID != "job-uid" {
		t.Errorf("backup-cm-1 owners = %v after the CronJob moved to backup-cm-2; want its Job's alone", got)
	}
	if got := f.ownersOf(t, "backup-cm-0"); len(got) != 1 || got[0].UID != "cj-uid" {
		t.Errorf("backup-cm-0 owners = %v; want the CronJob's kept, its last (no owner: never collected)", got)
	}
	if got := f.ownersOf(t, "shared"); len(got) != 1 {
		t.Errorf("shared lost a reference someone else wrote: %v", got)
	}
	if got := f.ownersOf(t, "backup-cm-2"); len(got) != 1 || got[0].UID != "cj-uid" {
		t.Errorf("backup-cm-2 owners = %v, want the CronJob", got)
	}
}

// managedOwnerRef is the managedFields entry the API server records for a manager that set the
// ownerReference with this uid.
func managedOwnerRef(manager, uid string) metav1.ManagedFieldsEntry {
	fields := fmt.Sprintf(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}}}`, uid)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

func (f *fixture) ownersOf(t *testing.T, name string) []metav1.OwnerReference {
	t.Helper()
	m, err := f.meta.Resource(refs.ConfigMap.GVR()).Namespace(testutil.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m.OwnerReferences
}
