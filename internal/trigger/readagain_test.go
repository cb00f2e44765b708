package trigger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// The trigger, read again (issue 37): forced orders and states the earlier stories did not reach, one
// test per finding. Each failed on main at 959509b.

// relabel changes a config object's labels only (kubectl label), and delivers the watch event.
func (f *fixture) relabel(kind refs.Kind, name string, labels map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	var obj interface {
		runtime.Object
		metav1.Object
	}
	var err error
	switch kind {
	case refs.ConfigMap:
		obj, err = f.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	case refs.Secret:
		obj, err = f.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	store := f.cs.AllConfigs[kind].Indexers()[0]
	old, _, _ := store.GetByKey(ns + "/" + name)
	l := maps.Clone(obj.GetLabels())
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, labels)
	obj.SetLabels(l)
	f.rv++
	obj.SetResourceVersion(strconv.Itoa(f.rv))
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		_, err = f.kube.CoreV1().ConfigMaps(ns).Update(ctx, o, metav1.UpdateOptions{})
	case *corev1.Secret:
		_, err = f.kube.CoreV1().Secrets(ns).Update(ctx, o, metav1.UpdateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	cur := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
			Labels: obj.GetLabels(), Annotations: obj.GetAnnotations(), OwnerReferences: obj.GetOwnerReferences()}}
	_ = store.Update(cur)
	f.c.configHandler(kind).OnUpdate(old, cur)
}

// putOpaque creates or replaces an Opaque Secret's data, and delivers the watch event.
func (f *fixture) putOpaque(name string, data map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	f.rv++
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: strconv.Itoa(f.rv)}
	s := &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	if _, err := f.kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		if _, err = f.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta}
	store := f.cs.AllConfigs[refs.Secret].Indexers()[0]
	old, existed, _ := store.Get(m)
	_ = store.Update(m)
	if existed {
		f.c.configHandler(refs.Secret).OnUpdate(old, m)
	} else {
		f.c.configHandler(refs.Secret).OnAdd(m, false)
	}
}

// putConfigMap creates or replaces a ConfigMap's data and binaryData (labels kept), and delivers the
// watch event.
func (f *fixture) putConfigMap(name string, data map[string]string, binary map[string][]byte) {
	f.t.Helper()
	ctx := context.Background()
	f.rv++
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: strconv.Itoa(f.rv)}
	store := f.cs.AllConfigs[refs.ConfigMap].Indexers()[0]
	if m, ok, _ := f.cs.AllConfigs[refs.ConfigMap].Get(ns, name); ok {
		meta.Labels = m.Labels
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: data, BinaryData: binary}
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err = f.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
	m := metaOf(cm)
	old, existed, _ := store.Get(m)
	_ = store.Update(m)
	if existed {
		f.c.configHandler(refs.ConfigMap).OnUpdate(old, m)
	} else {
		f.c.configHandler(refs.ConfigMap).OnAdd(m, false)
	}
}

// deleteObject deletes a config object, and delivers the watch event.
func (f *fixture) deleteObject(kind refs.Kind, name string) {
	f.t.Helper()
	ctx := context.Background()
	var err error
	switch kind {
	case refs.ConfigMap:
		err = f.kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case refs.Secret:
		err = f.kube.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	store := f.cs.AllConfigs[kind].Indexers()[0]
	old, ok, _ := store.GetByKey(ns + "/" + name)
	if !ok {
		f.t.Fatalf("%s %s is not cached", kind, name)
	}
	_ = store.Delete(old)
	f.c.configHandler(kind).OnDelete(old)
}

// snapshotOf is the pinning controller's snapshot of ConfigMap name, whose content hash is hash, for rs.
func (f *fixture) snapshotOf(rs *appsv1.ReplicaSet, name, hash string) {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: content.Name(name, hash), Namespace: ns,
			Labels:          map[string]string{api.SnapshotLabel: api.SnapshotValue, api.RevisionedLabel: api.RevisionedValue},
			Annotations:     map[string]string{api.OriginalNameAnnotation: name},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}}}
	_ = f.cs.Pinning.Snapshots[refs.ConfigMap].Indexers()[0].Add(m)
}

// deploy changes the pod template (a new image, Helm's checksum annotation) without letting its
// controller catch up.
func (f *fixture) deploy(tag string) {
	if f.deployment.Spec.Template.Annotations == nil {
		f.deployment.Spec.Template.Annotations = map[string]string{}
	}
	f.deployment.Spec.Template.Annotations["deploy"] = tag
	f.deployment.Generation++
	f.putDeployment()
}

// recordText is the record's annotation as the API server holds it ("" when there is none).
func (f *fixture) recordText() string {
	f.t.Helper()
	cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), RecordName("Deployment", "web"), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return cm.Annotations[api.RecordAnnotation]
}

// settleThenSync lets the settle window pass and syncs; it returns the writes made since before.
func (f *fixture) settleThenSync(before int) int {
	f.t.Helper()
	f.tick(6 * time.Second)
	if _, err := f.try(); err != nil {
		f.t.Logf("sync: %v", err)
	}
	return len(f.applied) - before
}

// Case 1: one deploy is one revision whatever else moves. A deploy changes the template and the
// content together; its revision appears; then, before the controller's first full look at that
// revision, something else moves in the namespace: that is no change of what the revision reads.
func TestOneDeployIsOneRevisionWhateverElseMoves(t *testing.T) {
	t.Run("Helm's release Secret, to a workload with a Secret reload list", func(t *testing.T) {
		f := newFixture(t, map[string]string{api.ReloaderAuto: "true", api.ReloaderSecretReload: "db-creds"}, configMap("app-config", "v1", nil))
		f.putOpaque("db-creds", map[string]string{"password": "hunter2"})
		f.observe()
		f.sync()
		f.edit("app-config", "v2") // helm upgrade: the ConfigMap first, then the Deployment
		f.deploy("2")
		f.observe() // the new ReplicaSet appears
		f.putOpaque("sh.helm.release.v1.web.v2", map[string]string{"release": "H4sI"})
		f.sync() // the first look at the new revision
		if n := f.settleThenSync(0); n != 0 {
			t.Fatalf("%d writes: the deploy's own revision reads the new content, and Helm's release Secret is not read (%v)", n, f.applied)
		}
	})
	t.Run("the ReplicaSet's add reaching us before the ConfigMap's update", func(t *testing.T) {
		f := newFixture(t, auto, configMap("app-config", "v1", nil))
		f.observe()
		f.sync()
		deliver := f.editOnServer("app-config", "v2") // helm upgrade: the ConfigMap is written first ...
		f.deploy("2")                                 // ... then the Deployment; its ReplicaSet's add reaches us first (two watches)
		f.observe()
		deliver()
		f.sync()
		if n := f.settleThenSync(0); n != 0 {
			t.Fatalf("%d writes: the ConfigMap's version was written before the ReplicaSet was made (%v)", n, f.applied)
		}
	})
	t.Run("a label on the ConfigMap, after a look that waited for a snapshot", func(t *testing.T) {
		flags := configMap("flags", "v1", nil)
		flags.Labels = map[string]string{api.PinLabel: api.PinValue}
		f := newFixture(t, auto, configMap("app-config", "v1", nil), flags)
		f.cs.Pinning = caches.NewPinningForTest([]runtime.Object{flags}, nil, ns)
		f.c.content.pins = f.cs.Pinning
		f.deployment.Spec.Template.Spec = testutil.PodSpec([]string{"app-config", "flags"})
		f.deployment.Generation++
		rs1 := f.observe()
		f.snapshotOf(rs1, "flags", hashOf("v1"))
		f.sync()
		f.edit("app-config", "v2") // a deploy of app-config and the template together
		f.deploy("2")
		rs2 := f.observe()
		if wait := f.sync(); wait != waitAgain { // flags' snapshot of rs2 is not taken yet
			t.Fatalf("the look before rs2's snapshot: wait %s, want %s", wait, waitAgain)
		}
		f.relabel(refs.ConfigMap, "app-config", map[string]string{"team": "payments"}) // metadata only
		f.snapshotOf(rs2, "flags", hashOf("v1"))
		f.sync()
		if n := f.settleThenSync(0); n != 0 {
			t.Fatalf("%d writes after a label change: no content changed since rs2 appeared (%v)", n, f.applied)
		}
	})
}

// Case 2: an edit is not swallowed when the record cannot be kept: a Warning and a metric say so, and
// the edit still starts a revision.
func TestAnEditIsNotSwallowedWhenTheRecordCannotBeKept(t *testing.T) {
	t.Run("a count/configmaps quota refuses the record", func(t *testing.T) {
		f := newFixture(t, auto, configMap("app-config", "v1", nil))
		f.kube.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
			if cm.Labels[api.RecordLabel] != api.RecordValue {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, cm.Name,
				errors.New("exceeded quota: cms, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3"))
		})
		f.observe()
		_, _ = f.try()
		msg := f.expectEvent("Warning ConfigRecordNotKept")
		if !strings.Contains(msg, "exceeded quota") {
			t.Errorf("the Warning does not say why: %s", msg)
		}
		if n := testCounter(t, f.metrics, "configmap_attacher_config_record_not_kept_total"); n < 1 {
			t.Errorf("configmap_attacher_config_record_not_kept_total %v, want ≥ 1", n)
		}
		f.edit("app-config", "v2")
		_, _ = f.try()
		if n := f.settleThenSync(0); n != 1 {
			t.Fatalf("%d writes after the edit, want 1: the edit was swallowed (taken as the baseline of a first look)", n)
		}
		if v, _ := f.templateHash(); v != configHash("v2") {
			t.Errorf("config-hash %q, want %q", v, configHash("v2"))
		}
	})
	t.Run("the record deleted by a user", func(t *testing.T) {
		f := newFixture(t, auto, configMap("app-config", "v1", nil))
		f.observe()
		f.sync()
		f.change("v2")
		f.expectApplies(1)
		f.deleteObject(refs.ConfigMap, RecordName("Deployment", "web"))
		f.edit("app-config", "v3")
		_, _ = f.try()
		if n := f.settleThenSync(1); n != 1 {
			t.Fatalf("%d writes after the edit, want 1: the edit was swallowed with the record", n)
		}
		if v, _ := f.templateHash(); v != configHash("v3") {
			t.Errorf("config-hash %q, want %q", v, configHash("v3"))
		}
	})
	t.Run("the workload deleted and recreated under its name (a force-replace)", func(t *testing.T) {
		f := newFixture(t, auto, configMap("app-config", "v1", nil))
		f.observe()
		f.sync()
		f.recorded()
		old, _ := caches.Reduce(f.deployment)
		f.c.workloadHandler().OnDelete(old)
		for _, rs := range f.revisions { // the garbage collector takes its ReplicaSets first; the record is still there
			u, _ := caches.Reduce(rs)
			_ = f.store(caches.ReplicaSet).Indexers()[0].Delete(u)
			_ = f.kube.AppsV1().ReplicaSets(ns).Delete(context.Background(), rs.Name, metav1.DeleteOptions{})
		}
		_ = f.kube.AppsV1().Deployments(ns).Delete(context.Background(), "web", metav1.DeleteOptions{})
		f.deployment = testutil.Deployment("web", "uid-web-2", testutil.PodSpec([]string{"app-config"}))
		f.deployment.Annotations = auto
		f.putDeployment()
		rs := testutil.ReplicaSet(f.deployment, workload.Deployment, "r1", 1, f.deployment.Spec.Template.Spec)
		rs.UID = "rs-r1"
		f.revisions = []*appsv1.ReplicaSet{rs}
		f.putRevision(rs, true)
		u, _ := caches.Reduce(rs)
		f.c.revisionHandler().OnAdd(u, false)
		_, _ = f.try()
		for _, e := range f.recorded() {
			if strings.HasPrefix(e, "Warning "+ReasonInvalid) {
				t.Errorf("%s: the record of the workload's previous incarnation is no foreign object", e)
			}
		}
		f.edit("app-config", "v2")
		_, _ = f.try()
		if n := f.settleThenSync(0); n != 1 {
			t.Fatalf("%d writes after the edit, want 1", n)
		}
		for f.c.loop.Queue.Len() > 0 { // what the sync and the edit queued
			k, _ := f.c.loop.Queue.Get()
			f.c.loop.Queue.Done(k)
		}
		oldRecord := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: RecordName("Deployment", "web"), Namespace: ns,
				Labels:          map[string]string{api.RecordLabel: api.RecordValue},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web"}}}}
		f.c.configHandler(refs.ConfigMap).OnDelete(oldRecord) // the garbage collector takes the old record
		if f.c.loop.Queue.Len() != 1 {
			t.Fatalf("the old record's deletion queued %d keys, want the workload's", f.c.loop.Queue.Len())
		}
	})
}

// Case 3: a pin label (or the namespace's pinning label) added in the same write as a data change:
// the pinning controller snapshots the existing revisions with the new content, which they were not
// made with; the edit starts a revision.
func TestAPinAddedWithAnEditStartsARevision(t *testing.T) {
	for _, tc := range []struct {
		name string
		pin  func(f *fixture) // the write that pins app-config and edits it
	}{
		{"the object's pin label in the same write", func(f *fixture) {
			cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "app-config", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			old := metaOf(cm)
			cm.Labels = map[string]string{api.PinLabel: api.PinValue}
			cm.Data = map[string]string{"config": "v2"}
			f.rv++
			cm.ResourceVersion = strconv.Itoa(f.rv)
			if _, err := f.kube.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(metaOf(cm))
			f.c.configHandler(refs.ConfigMap).OnUpdate(old, metaOf(cm))
		}},
		{"the namespace labelled for pinning with the edit", func(f *fixture) {
			f.relabel(refs.ConfigMap, "app-config", map[string]string{api.PinLabel: api.PinValue}) // long ago, pinning off
			f.sync()
			f.setPinning(true)
			f.edit("app-config", "v2")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, auto, configMap("app-config", "v1", nil))
			f.cs.Pinning = caches.NewPinningForTest(nil, nil)
			f.c.content.pins = f.cs.Pinning
			if tc.name == "the object's pin label in the same write" {
				f.setPinning(true)
			}
			rs1 := f.observe()
			f.sync()
			tc.pin(f)
			f.snapshot(rs1, "v2") // the pinning controller pins the running revision with what the object holds now
			f.sync()
			if n := f.settleThenSync(0); n != 1 {
				t.Fatalf("%d writes, want 1: the edit was taken for what %s was made with (its snapshot, taken after the edit)", n, rs1.Name)
			}
			if v, _ := f.templateHash(); v != configHash("v2") {
				t.Errorf("config-hash %q, want %q", v, configHash("v2"))
			}
		})
	}
}

// Case 4: the record is bounded: one content map per revision, the keys read kept once. Measured at
// revisionHistoryLimit 100 with 100 objects, each revision made by a change of one of them.
func TestTheRecordIsBounded(t *testing.T) {
	t.Run("100 objects, 101 revisions", func(t *testing.T) {
		var cms []*corev1.ConfigMap
		var names []string
		for i := range 100 {
			n := fmt.Sprintf("config-%03d", i)
			names = append(names, n)
			cms = append(cms, configMap(n, "v1", nil))
		}
		f := newFixture(t, auto, cms...)
		f.deployment.Spec.Template.Spec = testutil.PodSpec(names)
		f.deployment.Generation++
		f.observe()
		f.sync()
		for i, n := range names {
			f.edit(n, "v2")
			f.tick(6 * time.Second)
			f.sync()
			f.tick(time.Second)
			f.observe()
			f.sync()
			f.recorded() // the fake recorder holds 100
			if len(f.applied) != i+1 {
				t.Fatalf("change %d: %d writes", i+1, len(f.applied))
			}
			if size := len(f.recordText()); size > 64<<10 {
				t.Fatalf("after %d revisions the record holds %d bytes (%.0f KiB): more than 64 KiB for 100 objects", i+2, size, float64(size)/1024)
			}
		}
		t.Logf("the record of a workload reading 100 objects, with 101 revisions: %d bytes", len(f.recordText()))
	})
	t.Run("300 keys read of one object", func(t *testing.T) {
		f := newFixture(t, auto)
		data := map[string]string{}
		var env []corev1.EnvVar
		for i := range 300 {
			k := fmt.Sprintf("key-%03d", i)
			data[k] = "1"
			env = append(env, corev1.EnvVar{Name: strings.ToUpper(strings.ReplaceAll(k, "-", "_")), ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-settings"}, Key: k}}})
		}
		f.putObject(refs.ConfigMap, "app-settings", data)
		f.setSpec(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx", Env: env}}})
		f.sync()
		for i := range 10 {
			data["key-000"] = strconv.Itoa(i + 2)
			f.recorded()
			if n := f.editThenSettle(refs.ConfigMap, "app-settings", data); n != 1 {
				t.Fatalf("change %d: %d writes", i+1, n)
			}
		}
		if n := strings.Count(f.recordText(), "key-299"); n != 1 {
			t.Fatalf("the list of keys read is in the record %d times, want once", n)
		}
	})
}

// Case 5: no Secret-derived value is readable by anyone who cannot read the Secret. What the trigger
// keeps of a Secret, in the record and in config-hash, is keyed with a key only the controller reads
// (here 0123456789abcdef0123456789abcdef). By hand, for Secret db-creds {password: hunter2 | hunter3}:
//
//	j='{"type":"Opaque","data":{"password":"aHVudGVyMg=="}}'   # hunter2; aHVudGVyMw== for hunter3
//	printf '%s' "$j" | sha256sum | cut -c1-10                   # c064741aae, 6e22a1f237: plain
//	printf '%s' "$j" | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef   # f75661c6d8, 1fce08ea7c
//	printf '%s' '{"ConfigMap/app-config":"8774ad9c59","Secret/db-creds":"1fce08ea7c"}' | sha256sum   # 9c04199fad
//	printf '%s' 'configmap-attacher.io/config-hash:9c04199fad' | sha256sum | cut -c1-6               # c44fbf
//	(with the plain 6e22a1f237 instead: 548c1a4d41)
func TestNoSecretDerivedValueIsReadableWithoutTheSecret(t *testing.T) {
	f := readsSecret(t) // with testKey in Secret kube-system/configmap-attacher-config-hash-key
	f.putOpaque("db-creds", map[string]string{"password": "hunter3"})
	f.sync()
	if n := f.settleThenSync(0); n != 1 {
		t.Fatalf("%d writes after the Secret changed, want 1", n)
	}
	f.tick(time.Second)
	f.observe()
	f.sync()
	if v, _ := f.templateHash(); v != "9c04199fad.c44fbf" {
		t.Errorf("config-hash %q, want 9c04199fad.c44fbf (keyed; the plain chain gives 548c1a4d41, which anyone reading the Deployment could check a guess against)", v)
	}
	rec := f.recordText()
	for _, plain := range []string{"c064741aae", "6e22a1f237"} {
		if strings.Contains(rec, plain) {
			t.Errorf("the record, a ConfigMap, holds %s, the plain content hash of Secret db-creds: %s", plain, rec)
		}
	}
	if !strings.Contains(rec, "1fce08ea7c") {
		t.Errorf("the record does not hold the keyed content hash 1fce08ea7c of db-creds: %s", rec)
	}
}

// Case 6, a: `kubectl rollout undo` to a revision made before the workload opted in copies that
// revision's annotations onto the Deployment: the opt-in goes. A Warning names it.
func TestARollbackPastTheOptInIsTold(t *testing.T) {
	f := newFixture(t, nil, configMap("app-config", "v1", nil))
	rs1 := f.observe()
	before, _ := caches.Reduce(f.deployment)
	f.deployment.Annotations = auto // opted in after rs1
	f.putDeployment()
	now, _ := caches.Reduce(f.deployment)
	f.c.workloadHandler().OnUpdate(before, now)
	f.sync()
	f.change("v2")
	f.recorded()

	before, _ = caches.Reduce(f.deployment)
	f.manager = "kubectl-rollout"
	f.deployment.Annotations = maps.Clone(rs1.Annotations) // rollback.go: the revision's annotations
	delete(f.deployment.Annotations, "deployment.kubernetes.io/revision")
	f.deployment.Spec.Template.Annotations = maps.Clone(rs1.Spec.Template.Annotations)
	f.deployment.Generation++
	f.putDeployment()
	after, _ := caches.Reduce(f.deployment)
	f.c.workloadHandler().OnUpdate(before, after)
	f.observe()
	f.sync()
	var told string
	for _, e := range f.recorded() {
		if strings.HasPrefix(e, "Warning ") && strings.Contains(e, api.ReloaderAuto) {
			told = e
		}
	}
	if told == "" {
		t.Fatalf("no Warning naming %s: the rollback took the opt-in and the trigger forgot the workload without a word", api.ReloaderAuto)
	}
	if !strings.Contains(told, "kubectl annotate") {
		t.Errorf("the Warning does not say how to opt in again: %s", told)
	}
}

// Case 6, b: a value of ours the record lost (the record deleted, then a rollback copies our value
// under kubectl-rollout): the next edit takes it back and starts its revision, rather than being
// overruled at every edit with a promise of a retry that never comes.
func TestAValueOfOursTheRecordLostIsStillTakenBack(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	rs2 := f.change("v2")
	f.change("v3")
	f.deleteObject(refs.ConfigMap, RecordName("Deployment", "web"))
	_, _ = f.try()
	f.manager = "kubectl-rollout" // undo to rs2: our value, now owned by kubectl-rollout
	f.deployment.Spec.Template.Annotations = maps.Clone(rs2.Spec.Template.Annotations)
	f.deployment.Generation++
	f.observe()
	_, _ = f.try()
	f.recorded()
	for i, v := range []string{"v4", "v5"} {
		f.edit("app-config", v)
		_, _ = f.try()
		f.settleThenSync(0)
		if len(f.applied) > 2 {
			break
		}
		for _, e := range f.recorded() {
			if strings.Contains(e, "tries again") {
				t.Errorf("edit %d: %s: a promise the next edit breaks", i+1, e)
			}
		}
	}
	if len(f.applied) != 3 {
		t.Fatalf("%d writes, want 3: our value, lost from the record, was never taken back (%v)", len(f.applied), f.applied)
	}
	if !f.forced[2] {
		t.Errorf("the take-back was not forced")
	}
}

// Case 6, c: a paused Deployment makes no revision for our write: it stays pending, not a false
// ConfigTriggerOverruled after a minute; resumed, its revision is ours.
func TestAPausedDeploymentKeepsOurWritePending(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.recorded()
	f.deployment.Spec.Paused = true
	f.putDeployment()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	f.deployment.Status.ObservedGeneration = f.deployment.Generation // observed; paused: no ReplicaSet
	f.putDeployment()
	for range 5 {
		f.tick(time.Minute)
		f.sync()
	}
	for _, e := range f.recorded() {
		if strings.HasPrefix(e, "Warning "+ReasonOverruled) {
			t.Fatalf("%s: nobody changed the template back, the Deployment is paused", e)
		}
	}
	f.deployment.Spec.Paused = false
	f.deployment.Generation++
	rs := f.observe()
	f.sync()
	if v := rs.Spec.Template.Annotations[api.ConfigHashAnnotation]; v != configHash("v2") {
		t.Fatalf("the revision made on resume carries %q, want our %q", v, configHash("v2"))
	}
	for _, e := range f.recorded() {
		if strings.HasPrefix(e, "Warning "+ReasonOverruled) {
			t.Fatalf("%s after the resume", e)
		}
	}
	f.expectApplies(1)
}

// Case 6, d: what no container reads starts nothing: a CSI driver's nodePublishSecretRef (the
// driver's credential, as a pull Secret is the kubelet's) and a volume declared but mounted by no
// container.
func TestVolumeCredentialsAndUnmountedVolumesAreNotRead(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.putOpaque("csi-creds", map[string]string{"token": "t1"})
	f.putConfigMap("unused", map[string]string{"a": "1"}, nil)
	f.setSpec(corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "store", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io",
				NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"}}}},
			{Name: "unused", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "unused"}}}},
		},
		Containers: []corev1.Container{{Name: "app", Image: "nginx",
			VolumeMounts: []corev1.VolumeMount{{Name: "store", MountPath: "/mnt/secrets"}},
			EnvFrom:      []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}},
	})
	f.sync()
	f.putOpaque("csi-creds", map[string]string{"token": "t2"})
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 0 {
		t.Errorf("the CSI driver's credential rotated: %d writes, want 0", n)
	}
	f.putConfigMap("unused", map[string]string{"a": "2"}, nil)
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 0 {
		t.Errorf("a volume no container mounts changed: %d writes, want 0", n)
	}
	f.edit("app-config", "v2")
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 1 {
		t.Errorf("app-config, read through envFrom, changed: %d writes, want 1", n)
	}
}

// Case 6, e: env and envFrom read a ConfigMap's data only (the kubelet never puts binaryData in the
// environment): a binaryData change of an object read that way starts nothing.
func TestBinaryDataIsNotReadThroughTheEnvironment(t *testing.T) {
	f := newFixture(t, auto)
	f.putConfigMap("env-config", map[string]string{"A": "1"}, map[string][]byte{"blob": {1}})
	f.setSpec(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env-config"}}}}}}})
	f.sync()
	f.putConfigMap("env-config", map[string]string{"A": "1"}, map[string][]byte{"blob": {2}})
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 0 {
		t.Errorf("binaryData of an object read through envFrom changed: %d writes, want 0", n)
	}
	f.putConfigMap("env-config", map[string]string{"A": "2"}, map[string][]byte{"blob": {2}})
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 1 {
		t.Fatalf("its data changed: %d writes, want 1", n)
	}
	// By hand: printf '%s' '{"data":{"A":"2"}}' | sha256sum → 125ff19520;
	// printf '%s' '{"ConfigMap/env-config":"125ff19520"}' | sha256sum → bddd58167b, check 68dc9c.
	if v, _ := f.templateHash(); v != "bddd58167b.68dc9c" {
		t.Errorf("config-hash %q, want bddd58167b.68dc9c (the data alone)", v)
	}
}

// Case 6, f: an object the template reads as optional is part of what the pods read whether it
// exists or not: its appearance starts a revision, and so does its deletion.
func TestAnOptionalObjectAppearingOrGoingStartsARevision(t *testing.T) {
	yes := true
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.setSpec(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx", EnvFrom: []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "overrides"}, Optional: &yes}}}}}})
	f.sync()
	f.putConfigMap("overrides", map[string]string{"LOG_LEVEL": "debug"}, nil)
	_, _ = f.try()
	if n := f.settleThenSync(0); n != 1 {
		t.Fatalf("the optional ConfigMap overrides appeared: %d writes, want 1", n)
	}
	f.tick(time.Second)
	f.observe()
	f.sync()
	f.deleteObject(refs.ConfigMap, "overrides")
	_, _ = f.try()
	if n := f.settleThenSync(1); n != 1 {
		t.Fatalf("overrides went: %d writes, want 1", n)
	}
}

// Case 6, g: the settle window runs from the last change of what the workload reads: a busy namespace
// (an unrelated object relabelled every second, and a label on the object itself) does not starve it.
func TestABusyNamespaceDoesNotStarveTheSettleWindow(t *testing.T) {
	f := newFixture(t, map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapReload: "app-config"},
		configMap("app-config", "v1", nil), configMap("noisy", "v1", nil))
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	for i := range 30 {
		f.tick(time.Second)
		f.relabel(refs.ConfigMap, "noisy", map[string]string{"beat": strconv.Itoa(i)})
		f.relabel(refs.ConfigMap, "app-config", map[string]string{"beat": strconv.Itoa(i)})
		f.sync()
	}
	if len(f.applied) != 1 {
		t.Fatalf("%d writes in 30 s of relabelling, want 1: the edit waits for a quiet namespace", len(f.applied))
	}
}
