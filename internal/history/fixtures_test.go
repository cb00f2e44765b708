package history

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/history -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
	if bytes.Contains(got, []byte("\x1b[")) {
		t.Errorf("%s contains color codes", path)
	}
}

// now is the clock of every fixture, so ages in goldens never change.
var now = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// The walkthrough's three config revisions.
var (
	configV1 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\"\n  }\n}\n", "key-1": "value-1"}
	configV2 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\",\n    \"faulty\": true\n  }\n}\n", "key-1": "value-1", "key-2": "value-2"}
	configV3 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service v3\"\n  }\n}\n", "key-1": "value-1", "key-2": "value-2", "key-3": "value-3"}
)

type fixture struct {
	res  *workload.Resolved
	objs Objects
}

func (f fixture) history() *History { return Build(f.res, f.objs) }

// replicaSet builds a ReplicaSet of owner with its pods and age.
func replicaSet(owner metav1.Object, kind workload.Kind, hash string, revision int, desired, ready int32, age time.Duration, spec corev1.PodSpec) *appsv1.ReplicaSet {
	rs := testutil.ReplicaSet(owner, kind, hash, revision, spec)
	rs.Spec.Replicas = &desired
	rs.Status.ReadyReplicas = ready
	rs.CreationTimestamp = metav1.NewTime(now.Add(-age))
	return rs
}

func ownedBy(rss ...*appsv1.ReplicaSet) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	no := false
	for _, rs := range rss {
		out = append(out, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &no})
	}
	return out
}

// meta builds a config object's metadata: original "" means a name not made by the renderer (no
// annotation); revisioned sets the opt-in label.
func meta(name, original string, revisioned bool, owners ...*appsv1.ReplicaSet) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, OwnerReferences: ownedBy(owners...)}
	if original != "" {
		m.Annotations = map[string]string{api.OriginalNameAnnotation: original}
	}
	if revisioned {
		m.Labels = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	}
	return m
}

func configMap(m metav1.ObjectMeta, data map[string]string) *Object {
	return FromConfigMap(&corev1.ConfigMap{ObjectMeta: m, Data: data})
}

func secret(m metav1.ObjectMeta, data map[string]string) *Object {
	s := &corev1.Secret{ObjectMeta: m, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return FromSecret(s)
}

func objects(list ...*Object) Objects {
	out := Objects{}
	for _, o := range list {
		out.Add(o)
	}
	return out
}

func resolved(kind workload.Kind, owner metav1.Object, rss ...*appsv1.ReplicaSet) *workload.Resolved {
	res := &workload.Resolved{Ref: workload.Ref{Kind: kind, Namespace: testutil.Namespace, Name: owner.GetName()}, Owner: owner, Owned: rss}
	switch o := owner.(type) {
	case *workload.RolloutObject:
		res.Rollout = o
	case *appsv1.Deployment:
		res.Deployment = o
	}
	return res
}

// canary is the walkthrough paused at its third config: revision 3 runs one canary pod, revision 2 is
// stable, revision 1 is kept for rollback. ConfigMaps carry the original chart's adler32 names (no
// annotation); the Secret has the renderer's names and annotation; db-creds is a plain shared Secret.
func canary() fixture {
	ro := testutil.Rollout("demo", "ro-uid", "7f9d8c6b5")
	ro.Status.StableRS, ro.Status.Phase = "85d7c4f9b", "Paused"
	rs1 := replicaSet(ro, workload.Rollout, "6b4f9c8d7", 1, 0, 0, 2*time.Hour, testutil.PodSpec([]string{"demo-cm-2648648036"}, "demo-env-4f1c2a9b0e", "db-creds"))
	rs2 := replicaSet(ro, workload.Rollout, "85d7c4f9b", 2, 2, 2, 40*time.Minute, testutil.PodSpec([]string{"demo-cm-1203412345"}, "demo-env-8a7b6c5d4e", "db-creds"))
	rs3 := replicaSet(ro, workload.Rollout, "7f9d8c6b5", 3, 1, 1, 5*time.Minute, testutil.PodSpec([]string{"demo-cm-3849201934"}, "demo-env-0d1e2f3a4b", "db-creds"))
	return fixture{
		res: resolved(workload.Rollout, ro, rs3, rs2, rs1),
		objs: objects(
			configMap(meta("demo-cm-2648648036", "", true, rs1), configV1),
			configMap(meta("demo-cm-1203412345", "", true, rs2), configV2),
			configMap(meta("demo-cm-3849201934", "", true, rs3), configV3),
			secret(meta("demo-env-4f1c2a9b0e", "demo-env", true, rs1), map[string]string{"API_TOKEN": "t0k3n-1", "LOG_LEVEL": "info"}),
			secret(meta("demo-env-8a7b6c5d4e", "demo-env", true, rs2), map[string]string{"API_TOKEN": "t0k3n-2", "LOG_LEVEL": "info"}),
			secret(meta("demo-env-0d1e2f3a4b", "demo-env", true, rs3), map[string]string{"API_TOKEN": "t0k3n-2", "DEBUG": "true"}),
			secret(meta("db-creds", "", false), map[string]string{"password": "hunter2"}),
		),
	}
}

// promoted is canary after the promotion: revision 3 is stable and current.
func promoted() fixture {
	f := canary()
	f.res.Rollout.Status.StableRS, f.res.Rollout.Status.Phase = "7f9d8c6b5", "Healthy"
	return f
}

// aborted is canary after `kubectl argo rollouts abort`.
func aborted() fixture {
	f := canary()
	f.res.Rollout.Status.Abort, f.res.Rollout.Status.Phase = true, "Degraded"
	f.res.Owned[0].Spec.Replicas = ptr(int32(0))
	f.res.Owned[0].Status.ReadyReplicas = 0
	return f
}

// missing is canary with config gone: revision 1's ConfigMap (nothing runs it: a rollback would fail),
// revision 2's ConfigMap while its pods run (an outage waiting for the next restart), and an optional
// feature-flags ConfigMap revision 3 asks for; revision 3's Secret is not attached yet.
func missing() fixture {
	f := canary()
	delete(f.objs, refs.Ref{Kind: refs.ConfigMap, Name: "demo-cm-2648648036"})
	delete(f.objs, refs.Ref{Kind: refs.ConfigMap, Name: "demo-cm-1203412345"})
	rs3 := f.res.Owned[0]
	vol := &rs3.Spec.Template.Spec.Volumes[0]
	vol.Projected.Sources = append(vol.Projected.Sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: "demo-flags-1a2b3c4d5e"}, Optional: ptr(true)}})
	f.objs[refs.Ref{Kind: refs.Secret, Name: "demo-env-0d1e2f3a4b"}].Meta.OwnerReferences = nil
	return f
}

// deployment is a Deployment web at revision 2 with revision 1 kept; its ConfigMaps carry the
// renderer's names and annotation.
func deployment() fixture {
	spec1 := testutil.PodSpec([]string{"web-config-0a1b2c3d4e"})
	spec2 := testutil.PodSpec([]string{"web-config-9f8e7d6c5b"})
	d := testutil.Deployment("web", "d-uid", spec2)
	rs1 := replicaSet(d, workload.Deployment, "5d8f7c9b6", 1, 0, 0, 26*time.Hour, spec1)
	rs2 := replicaSet(d, workload.Deployment, "64c9d7f8b", 2, 3, 2, 90*time.Second, spec2)
	return fixture{
		res: resolved(workload.Deployment, d, rs2, rs1),
		objs: objects(
			configMap(meta("web-config-0a1b2c3d4e", "web-config", true, rs1), map[string]string{"nginx.conf": "worker_processes 1;\nevents {}\nhttp {\n  server {\n    listen 80;\n    location / { return 200; }\n  }\n}\n"}),
			configMap(meta("web-config-9f8e7d6c5b", "web-config", true, rs2), map[string]string{"nginx.conf": "worker_processes 4;\nevents {}\nhttp {\n  server {\n    listen 80;\n    location / { return 200; }\n  }\n}\n"}),
		),
	}
}

// reshaped is a Rollout whose second revision drops one ConfigMap, adds another, renames a third
// without changing it, changes binary data and a Secret's type, and adds a revision of a Secret whose
// object is gone.
func reshaped() fixture {
	ro := testutil.Rollout("shop", "shop-uid", "bbbbbbbbb")
	spec1 := testutil.PodSpec([]string{"shop-legacy-1111111111", "shop-assets-2222222222", "shop-same-3333333333"}, "shop-tls-5555555555")
	spec2 := testutil.PodSpec([]string{"shop-assets-aaaaaaaaa1", "shop-new-bbbbbbbbb2", "shop-same-ccccccccc3"}, "shop-tls-ddddddddd4", "shop-api-eeeeeeeee5")
	rs1 := replicaSet(ro, workload.Rollout, "aaaaaaaaa", 1, 0, 0, time.Hour, spec1)
	rs2 := replicaSet(ro, workload.Rollout, "bbbbbbbbb", 2, 2, 2, time.Minute, spec2)
	assets := func(m metav1.ObjectMeta, logo []byte, css string) *Object {
		return FromConfigMap(&corev1.ConfigMap{ObjectMeta: m, Data: map[string]string{"site.css": css}, BinaryData: map[string][]byte{"logo.png": logo}})
	}
	tls := func(m metav1.ObjectMeta, typ corev1.SecretType, crt string, raw byte) *Object {
		return FromSecret(&corev1.Secret{ObjectMeta: m, Type: typ, Data: map[string][]byte{"tls.crt": []byte(crt), "raw": {0xff, 0x00, raw}}})
	}
	return fixture{
		res: resolved(workload.Rollout, ro, rs2, rs1),
		objs: objects(
			configMap(meta("shop-legacy-1111111111", "shop-legacy", true, rs1), map[string]string{"legacy.ini": "[old]\nenabled = true\n", "empty": ""}),
			assets(meta("shop-assets-2222222222", "shop-assets", true, rs1), []byte{0x89, 'P', 'N', 'G', 1}, "body { color: black }"),
			assets(meta("shop-assets-aaaaaaaaa1", "shop-assets", true, rs2), []byte{0x89, 'P', 'N', 'G', 2}, "body { color: black }"),
			configMap(meta("shop-new-bbbbbbbbb2", "shop-new", true, rs2), map[string]string{"feature.yaml": "enabled: true\n"}),
			configMap(meta("shop-same-3333333333", "shop-same", true, rs1), map[string]string{"k": "v"}),
			configMap(meta("shop-same-ccccccccc3", "shop-same", true, rs2), map[string]string{"k": "v"}),
			tls(meta("shop-tls-5555555555", "shop-tls", true, rs1), corev1.SecretTypeOpaque, "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n", 1),
			tls(meta("shop-tls-ddddddddd4", "shop-tls", true, rs2), corev1.SecretTypeTLS, "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n", 2),
		),
	}
}

func ptr[T any](v T) *T { return &v }
