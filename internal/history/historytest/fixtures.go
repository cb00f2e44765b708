// Package historytest holds the fixtures the history model and printer tests share: the walkthrough
// at its paused canary and variations of it.
package historytest

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Now is the clock of every fixture, so ages in goldens never change.
var Now = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// The walkthrough's three config revisions.
var (
	configV1 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\"\n  }\n}\n", "key-1": "value-1"}
	configV2 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\",\n    \"faulty\": true\n  }\n}\n", "key-1": "value-1", "key-2": "value-2"}
	configV3 = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service v3\"\n  }\n}\n", "key-1": "value-1", "key-2": "value-2", "key-3": "value-3"}
)

// Fixture is a workload as read from the API: its revisions and the config objects they use.
type Fixture struct {
	Res  *workload.Resolved
	Objs history.Objects
}

// History builds the fixture's history.
func (f Fixture) History() *history.History { return history.Build(f.Res, f.Objs) }

// replicaSet builds a ReplicaSet of owner with its pods and age.
func replicaSet(owner metav1.Object, kind workload.Kind, hash string, revision int, desired, ready int32, age time.Duration, spec corev1.PodSpec) *appsv1.ReplicaSet {
	rs := testutil.ReplicaSet(owner, kind, hash, revision, spec)
	rs.Spec.Replicas = &desired
	rs.Status.ReadyReplicas = ready
	rs.CreationTimestamp = metav1.NewTime(Now.Add(-age))
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

// Meta builds a config object's metadata: original "" means a name not made by the renderer (no
// annotation); revisioned sets the opt-in label.
func Meta(name, original string, revisioned bool, owners ...*appsv1.ReplicaSet) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace, OwnerReferences: ownedBy(owners...)}
	if original != "" {
		m.Annotations = map[string]string{api.OriginalNameAnnotation: original}
	}
	if revisioned {
		m.Labels = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	}
	return m
}

func ConfigMap(m metav1.ObjectMeta, data map[string]string) *history.Object {
	return history.FromConfigMap(&corev1.ConfigMap{ObjectMeta: m, Data: data})
}

func secret(m metav1.ObjectMeta, data map[string]string) *history.Object {
	s := &corev1.Secret{ObjectMeta: m, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return history.FromSecret(s)
}

func objects(list ...*history.Object) history.Objects {
	out := history.Objects{}
	for _, o := range list {
		out.Add(o)
	}
	return out
}

func Resolved(kind workload.Kind, owner metav1.Object, rss ...*appsv1.ReplicaSet) *workload.Resolved {
	res := &workload.Resolved{Ref: workload.Ref{Kind: kind, Namespace: testutil.Namespace, Name: owner.GetName()}, Owner: owner, Owned: rss}
	switch o := owner.(type) {
	case *workload.RolloutObject:
		res.Rollout = o
	case *appsv1.Deployment:
		res.Deployment = o
	}
	return res
}

// Canary is the walkthrough paused at its third config: revision 3 runs one canary pod, revision 2 is
// stable, revision 1 is kept for rollback. ConfigMaps carry the original chart's adler32 names (no
// annotation); the Secret has the renderer's names and annotation; db-creds is a plain shared Secret.
func Canary() Fixture {
	ro := testutil.Rollout("demo", "ro-uid", "7f9d8c6b5")
	ro.Status.StableRS, ro.Status.Phase = "85d7c4f9b", "Paused"
	rs1 := replicaSet(ro, workload.Rollout, "6b4f9c8d7", 1, 0, 0, 2*time.Hour, testutil.PodSpec([]string{"demo-cm-2648648036"}, "demo-env-4f1c2a9b0e", "db-creds"))
	rs2 := replicaSet(ro, workload.Rollout, "85d7c4f9b", 2, 2, 2, 40*time.Minute, testutil.PodSpec([]string{"demo-cm-1203412345"}, "demo-env-8a7b6c5d4e", "db-creds"))
	rs3 := replicaSet(ro, workload.Rollout, "7f9d8c6b5", 3, 1, 1, 5*time.Minute, testutil.PodSpec([]string{"demo-cm-3849201934"}, "demo-env-0d1e2f3a4b", "db-creds"))
	return Fixture{
		Res: Resolved(workload.Rollout, ro, rs3, rs2, rs1),
		Objs: objects(
			ConfigMap(Meta("demo-cm-2648648036", "", true, rs1), configV1),
			ConfigMap(Meta("demo-cm-1203412345", "", true, rs2), configV2),
			ConfigMap(Meta("demo-cm-3849201934", "", true, rs3), configV3),
			secret(Meta("demo-env-4f1c2a9b0e", "demo-env", true, rs1), map[string]string{"API_TOKEN": "t0k3n-1", "LOG_LEVEL": "info"}),
			secret(Meta("demo-env-8a7b6c5d4e", "demo-env", true, rs2), map[string]string{"API_TOKEN": "t0k3n-2", "LOG_LEVEL": "info"}),
			secret(Meta("demo-env-0d1e2f3a4b", "demo-env", true, rs3), map[string]string{"API_TOKEN": "t0k3n-2", "DEBUG": "true"}),
			secret(Meta("db-creds", "", false), map[string]string{"password": "hunter2"}),
		),
	}
}

// Promoted is Canary after the promotion: revision 3 is stable and current.
func Promoted() Fixture {
	f := Canary()
	f.Res.Rollout.Status.StableRS, f.Res.Rollout.Status.Phase = "7f9d8c6b5", "Healthy"
	return f
}

// Aborted is Canary after `kubectl argo rollouts abort`.
func Aborted() Fixture {
	f := Canary()
	f.Res.Rollout.Status.Abort, f.Res.Rollout.Status.Phase = true, "Degraded"
	f.Res.Owned[0].Spec.Replicas = ptr(int32(0))
	f.Res.Owned[0].Status.ReadyReplicas = 0
	return f
}

// Missing is Canary with config gone: revision 1's ConfigMap (nothing runs it: a rollback would fail),
// revision 2's ConfigMap while its pods run (an outage waiting for the next restart), and an optional
// feature-flags ConfigMap revision 3 asks for; revision 3's Secret is not attached yet.
func Missing() Fixture {
	f := Canary()
	delete(f.Objs, refs.Ref{Kind: refs.ConfigMap, Name: "demo-cm-2648648036"})
	delete(f.Objs, refs.Ref{Kind: refs.ConfigMap, Name: "demo-cm-1203412345"})
	rs3 := f.Res.Owned[0]
	vol := &rs3.Spec.Template.Spec.Volumes[0]
	vol.Projected.Sources = append(vol.Projected.Sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: "demo-flags-1a2b3c4d5e"}, Optional: ptr(true)}})
	f.Objs[refs.Ref{Kind: refs.Secret, Name: "demo-env-0d1e2f3a4b"}].Meta.OwnerReferences = nil
	return f
}

// Deployment is a Deployment web at revision 2 with revision 1 kept; its ConfigMaps carry the
// renderer's names and annotation.
func Deployment() Fixture {
	spec1 := testutil.PodSpec([]string{"web-config-0a1b2c3d4e"})
	spec2 := testutil.PodSpec([]string{"web-config-9f8e7d6c5b"})
	d := testutil.Deployment("web", "d-uid", spec2)
	rs1 := replicaSet(d, workload.Deployment, "5d8f7c9b6", 1, 0, 0, 26*time.Hour, spec1)
	rs2 := replicaSet(d, workload.Deployment, "64c9d7f8b", 2, 3, 2, 90*time.Second, spec2)
	return Fixture{
		Res: Resolved(workload.Deployment, d, rs2, rs1),
		Objs: objects(
			ConfigMap(Meta("web-config-0a1b2c3d4e", "web-config", true, rs1), map[string]string{"nginx.conf": "worker_processes 1;\nevents {}\nhttp {\n  server {\n    listen 80;\n    location / { return 200; }\n  }\n}\n"}),
			ConfigMap(Meta("web-config-9f8e7d6c5b", "web-config", true, rs2), map[string]string{"nginx.conf": "worker_processes 4;\nevents {}\nhttp {\n  server {\n    listen 80;\n    location / { return 200; }\n  }\n}\n"}),
		),
	}
}

// Reshaped is a Rollout whose second revision drops one ConfigMap, adds another, renames a third
// without changing it, changes binary data and a Secret's type, and adds a revision of a Secret whose
// object is gone.
func Reshaped() Fixture {
	ro := testutil.Rollout("shop", "shop-uid", "bbbbbbbbb")
	spec1 := testutil.PodSpec([]string{"shop-legacy-1111111111", "shop-assets-2222222222", "shop-same-3333333333"}, "shop-tls-5555555555")
	spec2 := testutil.PodSpec([]string{"shop-assets-aaaaaaaaa1", "shop-new-bbbbbbbbb2", "shop-same-ccccccccc3"}, "shop-tls-ddddddddd4", "shop-api-eeeeeeeee5")
	rs1 := replicaSet(ro, workload.Rollout, "aaaaaaaaa", 1, 0, 0, time.Hour, spec1)
	rs2 := replicaSet(ro, workload.Rollout, "bbbbbbbbb", 2, 2, 2, time.Minute, spec2)
	assets := func(m metav1.ObjectMeta, logo []byte, css string) *history.Object {
		return history.FromConfigMap(&corev1.ConfigMap{ObjectMeta: m, Data: map[string]string{"site.css": css}, BinaryData: map[string][]byte{"logo.png": logo}})
	}
	tls := func(m metav1.ObjectMeta, typ corev1.SecretType, crt string, raw byte) *history.Object {
		return history.FromSecret(&corev1.Secret{ObjectMeta: m, Type: typ, Data: map[string][]byte{"tls.crt": []byte(crt), "raw": {0xff, 0x00, raw}}})
	}
	return Fixture{
		Res: Resolved(workload.Rollout, ro, rs2, rs1),
		Objs: objects(
			ConfigMap(Meta("shop-legacy-1111111111", "shop-legacy", true, rs1), map[string]string{"legacy.ini": "[old]\nenabled = true\n", "empty": ""}),
			assets(Meta("shop-assets-2222222222", "shop-assets", true, rs1), []byte{0x89, 'P', 'N', 'G', 1}, "body { color: black }"),
			assets(Meta("shop-assets-aaaaaaaaa1", "shop-assets", true, rs2), []byte{0x89, 'P', 'N', 'G', 2}, "body { color: black }"),
			ConfigMap(Meta("shop-new-bbbbbbbbb2", "shop-new", true, rs2), map[string]string{"feature.yaml": "enabled: true\n"}),
			ConfigMap(Meta("shop-same-3333333333", "shop-same", true, rs1), map[string]string{"k": "v"}),
			ConfigMap(Meta("shop-same-ccccccccc3", "shop-same", true, rs2), map[string]string{"k": "v"}),
			tls(Meta("shop-tls-5555555555", "shop-tls", true, rs1), corev1.SecretTypeOpaque, "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n", 1),
			tls(Meta("shop-tls-ddddddddd4", "shop-tls", true, rs2), corev1.SecretTypeTLS, "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n", 2),
		),
	}
}

func ptr[T any](v T) *T { return &v }

// Single is a Rollout with one revision.
func Single() Fixture {
	f := Promoted()
	f.Res.Owned = f.Res.Owned[:1]
	return f
}

// NoCurrent is a Rollout whose controller has not reported a stable or current hash yet.
func NoCurrent() Fixture {
	f := Canary()
	f.Res.Rollout.Status = workload.RolloutStatus{}
	return f
}

// Held is Canary after someone deleted revision 2's ConfigMap while its pods run: in-use protection
// holds it; revision 1's Secret was deleted with nothing holding it.
func Held() Fixture {
	f := Canary()
	gone := metav1.NewTime(Now.Add(-time.Minute))
	cm := f.Objs[refs.Ref{Kind: refs.ConfigMap, Name: "demo-cm-1203412345"}]
	cm.Meta.DeletionTimestamp, cm.Meta.Finalizers = &gone, []string{api.InUseFinalizer}
	f.Objs[refs.Ref{Kind: refs.Secret, Name: "demo-env-4f1c2a9b0e"}].Meta.DeletionTimestamp = &gone
	return f
}
