package caches

import (
	"slices"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func TestAPodSharesItsControllersIdentityAndReferences(t *testing.T) {
	r := newReducer(nil, false, true)
	stored := map[string]any{}
	r.ids = newIdentities(func(kind Kind, key string) *identity {
		if e, ok := stored[key].(*entry); ok && kind == ReplicaSet {
			return e.id
		}
		return nil
	})
	r.ids.settle() // after the first lists: found in the cache
	r.stored = func(_ Kind, key string) (any, bool) { o, ok := stored[key]; return o, ok }
	add := func(obj any) any {
		t.Helper()
		rec, err := r.user(obj)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	rsEntry := add(benchReplicaSet(0)).(*entry)
	stored[rsEntry.id.key] = rsEntry
	wantRefs := []refs.Ref{{Kind: refs.ConfigMap, Name: "settings"}, {Kind: refs.ConfigMap, Name: "web-0-config-v0"}, {Kind: refs.Secret, Name: "web-0-secret"}}
	if ru := rsEntry.user(); !slices.Equal(ru.Refs, wantRefs) {
		t.Fatalf("the ReplicaSet's refs %v", ru.Refs)
	}
	var owner *identity // the last reduced pod's controller's identity
	var own *refList    // and its own references, nil when it shares its controller's
	reduced := func(p *corev1.Pod) *User {
		t.Helper()
		rec := add(p)
		owner, own = rec.(*podStub).owner, rec.(*podStub).own
		u, _ := userView(rec)
		return u
	}
	a, b := reduced(benchPod(0)), reduced(benchPod(1)) // two pods of ReplicaSet 0: separate copies of every string
	for _, u := range []*User{a, b} {
		if u.Namespace != "tenant-0000" || u.Owner == nil || u.Owner.Name != "web-0-00000000" || u.Owner.Kind != "ReplicaSet" ||
			u.Owner.APIVersion != "apps/v1" || u.Owner.UID != benchUID("ReplicaSet", 0) || u.Owner.Controller == nil || !*u.Owner.Controller || u.Labels != nil {
			t.Fatalf("reduced pod %s: namespace %q, owner %+v, labels %v", u.Name, u.Namespace, u.Owner, u.Labels)
		}
		if !slices.Equal(u.Refs, wantRefs) {
			t.Fatalf("refs %v, want %v", u.Refs, wantRefs)
		}
		if u.ResourceVersion != "" || u.Generation != 0 || !u.CreationTimestamp.IsZero() {
			t.Errorf("a pod keeps resourceVersion %q, generation %d, creation %v: nothing reads them", u.ResourceVersion, u.Generation, u.CreationTimestamp)
		}
	}
	for _, p := range []*corev1.Pod{benchPod(0), benchPod(1)} {
		if u := reduced(p); owner != rsEntry.id || own != nil || unsafe.StringData(string(rsEntry.refs)) != unsafe.StringData(string(owner.refs)) {
			t.Errorf("pod %s keeps copies of its own of what its ReplicaSet holds", u.Name)
		}
	}
	if a.Name == b.Name || a.UID == b.UID || a.UID != benchUID("Pod", 0) {
		t.Errorf("two pods reduced to one identity, or a uid changed: %s %s, %s %s", a.Name, a.UID, b.Name, b.UID)
	}

	pinned := benchPod(2) // the webhook renamed its ConfigMap: it reads the snapshot
	pinned.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name = "web-0-config-v0-5d8f9c"
	if u := reduced(pinned); owner != rsEntry.id || own == nil ||
		!slices.Contains(u.Refs, refs.Ref{Kind: refs.ConfigMap, Name: "web-0-config-v0-5d8f9c"}) {
		t.Errorf("pinned pod: owner %p (ReplicaSet's %p), refs %v: want the shared owner and references of its own", owner, rsEntry.id, u.Refs)
	}

	orphan := benchPod(4) // ReplicaSet 1, not cached (yet)
	u := reduced(orphan)
	if u.Owner == nil || u.Owner.Name != orphan.OwnerReferences[0].Name || u.Owner.UID != orphan.OwnerReferences[0].UID || owner == rsEntry.id {
		t.Errorf("pod of a ReplicaSet not cached: owner %+v, want its own copy of %+v", u.Owner, orphan.OwnerReferences[0])
	}

	replaced := benchPod(3) // a ReplicaSet of the same name, deleted and made again: another uid
	replaced.OwnerReferences[0].UID = "another-uid"
	if u := reduced(replaced); owner == rsEntry.id || u.Owner.UID != "another-uid" {
		t.Errorf("pod of another ReplicaSet of the same name: owner %+v, want its own", u.Owner)
	}
}

// A pod's stub says what protection reads of it: whether the kubelet still runs it.
func TestPodStubFlags(t *testing.T) {
	zero := int64(0)
	thirty := int64(30)
	now := metav1.Now()
	for _, tc := range []struct {
		name                       string
		phase                      corev1.PodPhase
		grace                      *int64
		deleting                   bool
		wantFinished, wantShutDown bool
	}{
		{name: "running", phase: corev1.PodRunning},
		{name: "succeeded", phase: corev1.PodSucceeded, wantFinished: true},
		{name: "failed", phase: corev1.PodFailed, wantFinished: true},
		{name: "being deleted, in its grace period", phase: corev1.PodRunning, deleting: true, grace: &thirty},
		{name: "deleted with no grace left", phase: corev1.PodRunning, deleting: true, grace: &zero, wantShutDown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := benchPod(0)
			p.Status.Phase, p.DeletionGracePeriodSeconds = tc.phase, tc.grace
			if tc.deleting {
				p.DeletionTimestamp = &now
			}
			u, err := Reduce(p)
			if err != nil {
				t.Fatal(err)
			}
			if u.Finished != tc.wantFinished || u.ShutDown != tc.wantShutDown || (u.DeletionTimestamp != nil) != tc.deleting {
				t.Errorf("finished %v, shut down %v, deleting %v", u.Finished, u.ShutDown, u.DeletionTimestamp != nil)
			}
			if u.Live() != (!tc.wantFinished && !tc.wantShutDown) {
				t.Errorf("Live() = %v", u.Live())
			}
		})
	}
}

func TestReduceKeepsOnlyTheLabelsRead(t *testing.T) {
	labels := map[string]string{"team": "payments"}
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: types.UID("u"), Labels: labels}
	for _, tc := range []struct {
		name       string
		obj        any
		keepLabels bool
		want       bool
	}{
		{"ReplicaSet, a selector set", &appsv1.ReplicaSet{ObjectMeta: meta}, true, true},
		{"ReplicaSet, no selector", &appsv1.ReplicaSet{ObjectMeta: meta}, false, false},
		{"Deployment", &appsv1.Deployment{ObjectMeta: meta}, true, false},
		{"Pod", &corev1.Pod{ObjectMeta: meta}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := (&reducer{keepLabels: tc.keepLabels}).user(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := userView(rec)
			if got := u.Labels["team"] == "payments"; got != tc.want {
				t.Errorf("labels kept: %v, want %v", got, tc.want)
			}
		})
	}
}

// The config trigger reads, of a workload, what its containers read (not its image pull Secret) and
// our config-hash on its template; of a revision, the config-hash its template carries. Nothing else of
// a template's annotations is kept.
func TestReduceKeepsWhatTheTriggerReads(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"configmap-attacher.io/config-hash": "6aa5937ede", "checksum/config": "x"}},
		Spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
			Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "port"}}}}}}},
	}
	d, err := Reduce(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Template: tmpl}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []refs.Read{{Ref: refs.Ref{Kind: refs.ConfigMap, Name: "app"}, Keys: []string{"port"}}}; !slices.EqualFunc(d.Reads, want, func(a, b refs.Read) bool {
		return a.Ref == b.Ref && slices.Equal(a.Keys, b.Keys)
	}) {
		t.Errorf("Reads %v, want %v", d.Reads, want)
	}
	if !slices.Contains(d.Refs, refs.Ref{Kind: refs.Secret, Name: "registry"}) {
		t.Errorf("Refs %v: the pull Secret is still referenced (attach, protection)", d.Refs)
	}
	rs, err := Reduce(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns"}, Spec: appsv1.ReplicaSetSpec{Template: tmpl}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []*User{d, rs} {
		if len(u.TemplateAnnotations) != 1 || u.TemplateAnnotations["configmap-attacher.io/config-hash"] != "6aa5937ede" {
			t.Errorf("%s: template annotations %v, want our config-hash only", u.Kind(), u.TemplateAnnotations)
		}
	}
}

func TestRefListRoundTrip(t *testing.T) {
	for _, rs := range [][]refs.Ref{
		nil,
		{{Kind: refs.Secret, Name: "s"}},
		{{Kind: refs.ConfigMap, Name: "settings"}, {Kind: refs.ConfigMap, Name: "web-0-config-v1.2"}, {Kind: refs.Secret, Name: "web-0-secret"}},
	} {
		if got := makeRefList(rs).refs(); !slices.Equal(got, rs) {
			t.Errorf("%v came back as %v", rs, got)
		}
	}
}

// A config object's owners share the identities of the cached objects they name; an owner reference
// that names no cached object exactly (another kind, another uid, an object not cached) keeps an
// identity of its own, and reads back as written.
func TestConfigOwnersShareTheCachedOwnersIdentity(t *testing.T) {
	r := newReducer(nil, false, false)
	stored := map[string]*entry{}
	r.ids = newIdentities(func(kind Kind, key string) *identity {
		if e, ok := stored[key]; ok && kind == ReplicaSet {
			return e.id
		}
		return nil
	})
	r.ids.settle()
	rs, _ := r.user(benchReplicaSet(0))
	stored[rs.(*entry).id.key] = rs.(*entry)
	cm := benchConfigMap(0)
	no := false
	cm.OwnerReferences = append(cm.OwnerReferences,
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: cm.OwnerReferences[0].Name, UID: "another-uid", Controller: &no},
		metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "report-1", UID: "job-uid"})
	want := cm.DeepCopy().OwnerReferences
	rec := r.config(cm, keepNone)
	if rec.owners[0].id != rs.(*entry).id {
		t.Error("the ReplicaSet's reference keeps an identity of its own")
	}
	if rec.owners[1].id == rs.(*entry).id || rec.owners[2].id == rs.(*entry).id {
		t.Error("a reference to another object shares the ReplicaSet's identity")
	}
	if got := rec.meta(refs.ConfigMap).OwnerReferences; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("owners %+v, want %+v", got, want)
	}
}

// While the caches make their first lists, an object finds the identity its dependents made before it
// arrived, and the other way round.
func TestIdentitiesWhileStarting(t *testing.T) {
	r := newReducer(newIdentities(func(Kind, string) *identity { return nil }), false, false)
	pod, _ := r.user(benchPod(0)) // before its ReplicaSet
	rs, _ := r.user(benchReplicaSet(0))
	cm := r.config(benchConfigMap(0), keepNone)
	if id := rs.(*entry).id; pod.(*podStub).owner != id || cm.owners[0].id != id {
		t.Error("the pod, its ReplicaSet and the ReplicaSet's ConfigMap hold different identities")
	}
	r.ids.settle()
	if other, _ := r.user(benchPod(4)); other.(*podStub).owner == rs.(*entry).id {
		t.Error("a pod of another ReplicaSet shares the identity")
	}
}
