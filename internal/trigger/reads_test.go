package trigger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// putObject creates or replaces a ConfigMap's data or a Secret's, as kubectl does, and delivers its
// watch event.
func (f *fixture) putObject(kind refs.Kind, name string, data map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	f.rv++
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: strconv.Itoa(f.rv)}
	if m, ok, _ := f.cs.AllConfigs[kind].Get(ns, name); ok {
		meta.Labels = m.Labels // kept, as an edit of the data keeps them
	}
	var err error
	switch kind {
	case refs.ConfigMap:
		cm := &corev1.ConfigMap{ObjectMeta: meta, Data: data}
		if _, err = f.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			_, err = f.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		}
	case refs.Secret:
		s := &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		if _, err = f.kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			_, err = f.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)}, ObjectMeta: meta}
	store := f.cs.AllConfigs[kind].Indexers()[0]
	old, existed, _ := store.Get(m)

	_ = store.Update(m)
	if existed {
		f.c.configHandler(kind).OnUpdate(old, m)
	} else {
		f.c.configHandler(kind).OnAdd(m, false)
	}
}

// setSpec replaces the Deployment's pod spec (a deploy) and lets its controller make the revision.
func (f *fixture) setSpec(spec corev1.PodSpec) {
	f.deployment.Spec.Template.Spec = spec
	f.deployment.Generation++
	f.observe()
}

// editThenSettle edits an object, lets the settle window pass and syncs; it returns the writes made.
func (f *fixture) editThenSettle(kind refs.Kind, name string, data map[string]string) int {
	f.t.Helper()
	before := len(f.applied)
	f.putObject(kind, name, data)
	f.sync()
	f.tick(6 * time.Second)
	f.sync()
	if len(f.applied) > before {
		f.tick(time.Second)
		f.observe()
		f.sync()
	}
	return len(f.applied) - before
}

// Only the keys a template reads count (Reloader #1115): a configMapKeyRef's key, a volume's items. A
// change of another key starts nothing; a change of a key read starts one revision.
func TestOnlyTheKeysReadCount(t *testing.T) {
	f := newFixture(t, auto)
	f.putObject(refs.ConfigMap, "app-config", map[string]string{"port": "80", "debug": "false"})
	f.putObject(refs.ConfigMap, "files", map[string]string{"a.conf": "x", "b.conf": "y"})
	f.setSpec(corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "files"}, Items: []corev1.KeyToPath{{Key: "a.conf", Path: "a.conf"}}}}}},
		Containers: []corev1.Container{{Name: "app", Image: "nginx", VolumeMounts: []corev1.VolumeMount{{Name: "files", MountPath: "/etc/files"}},
			Env: []corev1.EnvVar{{Name: "PORT", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "port"}}}}}},
	})
	f.sync()
	if n := f.editThenSettle(refs.ConfigMap, "app-config", map[string]string{"port": "80", "debug": "true"}); n != 0 {
		t.Errorf("a key no container reads (debug) changed: %d writes, want 0", n)
	}
	if n := f.editThenSettle(refs.ConfigMap, "files", map[string]string{"a.conf": "x", "b.conf": "z"}); n != 0 {
		t.Errorf("a key the volume's items leave out (b.conf) changed: %d writes, want 0", n)
	}
	if n := f.editThenSettle(refs.ConfigMap, "app-config", map[string]string{"port": "8080", "debug": "true"}); n != 1 {
		t.Fatalf("the key read (port) changed: %d writes, want 1", n)
	}
	// By hand: printf '%s' '{"data":{"port":"8080"}}' | sha256sum → 4f829bea87; '{"data":{"a.conf":"x"}}'
	// → 8817d4764b; '{"ConfigMap/app-config[port]":"4f829bea87","ConfigMap/files[a.conf]":"8817d4764b"}' → 3e5aaf4eeb,
	// whose check is 94b249 (value.go).
	if v, _ := f.templateHash(); v != "3e5aaf4eeb.94b249" {
		t.Errorf("config-hash %q, want 3e5aaf4eeb.94b249 (port and a.conf only)", v)
	}
	msg := f.expectEvent("Normal " + ReasonStarted)
	if !strings.Contains(msg, "ConfigMap/app-config[port] changed") {
		t.Errorf("the event does not name what changed as read: %s", msg)
	}
}

// An image pull Secret is the kubelet's registry credential: a credential refresher rotating it
// starts nothing (Reloader does not follow it either), unless a reload list names it.
func TestAPullSecretIsFollowedOnlyWhenAReloadListNamesIt(t *testing.T) {
	spec := corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		Containers: []corev1.Container{{Name: "app", Image: "registry.example/app"}}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        int
	}{
		{"auto", auto, 0},
		{"secret auto", map[string]string{api.ReloaderSecretAuto: "true"}, 0},
		{"a reload list naming it", map[string]string{api.ReloaderSecretReload: "registry"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.annotations)
			f.putObject(refs.Secret, "registry", map[string]string{".dockerconfigjson": "{}"})
			f.setSpec(spec)
			f.sync()
			if n := f.editThenSettle(refs.Secret, "registry", map[string]string{".dockerconfigjson": `{"auths":{}}`}); n != tc.want {
				t.Fatalf("the pull Secret rotated: %d writes, want %d", n, tc.want)
			}
			if tc.want == 0 {
				return
			}
			// By hand, keyed with the fixture's key (testKey): printf '%s'
			// '{"type":"kubernetes.io/dockerconfigjson","data":{".dockerconfigjson":"eyJhdXRocyI6e319"}}' |
			// openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef → b0cf914aeb;
			// '{"Secret/registry":"b0cf914aeb"}' | sha256sum → a5fe5df273, check a87ce6.
			if v, _ := f.templateHash(); v != "a5fe5df273.a87ce6" {
				t.Errorf("config-hash %q, want a5fe5df273.a87ce6", v)
			}
		})
	}
}

// The API writes one change costs: the template, the record once (not again when its revision
// appears: our write made it), one Event (ConfigNotPinned is told once per workload, at its first
// look, not per change).
func TestAChangeCostsThreeWrites(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.recorded()
	writes := func() int {
		n := 0
		for _, a := range f.kube.Actions() {
			if a.GetResource().Resource == "configmaps" && (a.GetVerb() == "create" || a.GetVerb() == "patch") {
				n++
			}
		}
		return n
	}
	for i, v := range []string{"v2", "v3", "v4"} {
		records := writes()
		f.edit("app-config", v)
		f.sync()
		f.tick(6 * time.Second)
		f.sync()
		f.tick(time.Second)
		f.observe()
		f.sync() // the first look at the revision our write made
		f.tick(time.Minute)
		f.sync()
		if got := writes() - records; got != 1 {
			t.Errorf("change %d: %d writes of the record, want 1", i+1, got)
		}
		if evs := f.recorded(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+ReasonStarted) {
			t.Errorf("change %d: events %q, want one %s", i+1, evs, ReasonStarted)
		}
	}
	f.expectApplies(3)
}

// A pinned object read by one key: a revision's content is that key of its snapshot (a snapshot is the
// whole object, read once from the API server); a change of another key starts nothing, and the
// revision's snapshot is not taken for a change.
func TestAPinnedObjectReadByOneKeyCountsThatKeyOfItsSnapshot(t *testing.T) {
	f := newFixture(t, auto)
	f.cs.Pinning = caches.NewPinningForTest(nil, nil, ns)
	f.c.content.pins = f.cs.Pinning
	f.putObject(refs.ConfigMap, "app-config", map[string]string{"port": "80", "debug": "false"})
	m, _, _ := f.cs.AllConfigs[refs.ConfigMap].Get(ns, "app-config")
	pinnedMeta := m.DeepCopy()
	pinnedMeta.Labels = map[string]string{api.PinLabel: api.PinValue}
	_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(pinnedMeta)
	f.setSpec(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx", Env: []corev1.EnvVar{{Name: "PORT", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "port"}}}}}}})
	rs := f.revisions[len(f.revisions)-1]
	if wait := f.sync(); wait != waitAgain {
		t.Fatalf("before the revision's snapshot: wait %s, want %s", wait, waitAgain)
	}
	// The snapshot, as the pinning controller takes it: the whole object, named by its content hash
	// (printf '%s' '{"data":{"debug":"false","port":"80"}}' | sha256sum → 8c1d69a445).
	snap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config-8c1d69a445", Namespace: ns,
		Labels:          map[string]string{api.SnapshotLabel: api.SnapshotValue},
		Annotations:     map[string]string{api.OriginalNameAnnotation: "app-config"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}},
		Data: map[string]string{"port": "80", "debug": "false"}}
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), snap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.cs.Pinning.Snapshots[refs.ConfigMap].Indexers()[0].Add(&metav1.PartialObjectMetadata{ObjectMeta: snap.ObjectMeta})
	f.sync()
	if n := f.editThenSettle(refs.ConfigMap, "app-config", map[string]string{"port": "80", "debug": "true"}); n != 0 {
		t.Errorf("a key no container reads changed: %d writes, want 0", n)
	}
	if n := f.editThenSettle(refs.ConfigMap, "app-config", map[string]string{"port": "8080", "debug": "true"}); n != 1 {
		t.Errorf("the key read changed: %d writes, want 1", n)
	}
}
