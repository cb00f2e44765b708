package historytest

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// The contents of the static app-config in the zero-touch pinning fixtures: revision 2's, the faulty
// one of the canary (revision 3), and the one it was changed to in place afterwards.
var (
	AppConfigV1     = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\"\n  }\n}\n"}
	AppConfigFaulty = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service\",\n    \"faulty\": true\n  }\n}\n"}
	AppConfigFixed  = map[string]string{"configuration.json": "{\n  \"general\": {\n    \"projectName\": \"demo service v3\"\n  }\n}\n"}
	appEnv          = map[string]string{"API_TOKEN": "t0k3n-pinned", "LOG_LEVEL": "info"}
)

func appConfig(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: testutil.Namespace,
		Labels: map[string]string{api.PinLabel: api.PinValue}}, Data: data}
}

func appSecret() *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-env", Namespace: testutil.Namespace,
		Labels: map[string]string{api.PinLabel: api.PinValue}}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range appEnv {
		s.Data[k] = []byte(v)
	}
	return s
}

// SnapshotName is the name the controller gives a snapshot of obj's content.
func SnapshotName(obj metav1.Object) string {
	name, err := pinning.SnapshotName(obj)
	if err != nil {
		panic(err)
	}
	return name
}

// snapshotMeta is a snapshot as the controller takes it: our labels, the original's name, the in-use
// finalizer, an ownerReference to each revision pinned to it.
func snapshotMeta(original metav1.Object, owners ...*appsv1.ReplicaSet) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: SnapshotName(original), Namespace: testutil.Namespace,
		Labels:          map[string]string{api.RevisionedLabel: api.RevisionedValue, api.SnapshotLabel: api.SnapshotValue},
		Annotations:     map[string]string{api.OriginalNameAnnotation: original.GetName()},
		Finalizers:      []string{api.InUseFinalizer},
		OwnerReferences: ownedBy(owners...),
	}
}

// Pinned is the write-up with zero-touch pinning: one static ConfigMap app-config and one Secret
// app-env, both labelled for pinning, referenced by name by every revision, changed in place with a
// checksum annotation. Revision 1 predates pinning (no snapshot); revision 2 is stable and reads its
// snapshot of app-config; revision 3, the paused canary, reads the faulty content's snapshot; both
// share one snapshot of app-env (unchanged). Since the canary started, app-config was changed in place
// again (fixed) without a template change: drift. db-creds is a plain shared Secret.
func Pinned() Fixture {
	ro := testutil.Rollout("demo", "ro-uid", "6d5f8b7c9")
	ro.Status.StableRS, ro.Status.Phase = "5c8d9f7b6", "Paused"
	spec := testutil.PodSpec([]string{"app-config"}, "app-env", "db-creds")
	rs1 := replicaSet(ro, workload.Rollout, "7b9c6d8f5", 1, 0, 0, 3*time.Hour, spec)
	rs2 := replicaSet(ro, workload.Rollout, "5c8d9f7b6", 2, 2, 2, 40*time.Minute, spec)
	rs3 := replicaSet(ro, workload.Rollout, "6d5f8b7c9", 3, 1, 1, 5*time.Minute, spec)
	live := appConfig(AppConfigFixed)
	env := appSecret()
	objs := objects(
		history.FromConfigMap(live),
		history.FromSecret(env),
		ConfigMap(snapshotMeta(appConfig(AppConfigV1), rs2), AppConfigV1),
		ConfigMap(snapshotMeta(appConfig(AppConfigFaulty), rs3), AppConfigFaulty),
		history.FromSecret(&corev1.Secret{ObjectMeta: snapshotMeta(env, rs2, rs3), Type: env.Type, Data: env.Data}),
		secret(Meta("db-creds", "", false), map[string]string{"password": "hunter2"}),
	)
	// What load.History computes for the pinned objects revision 3 reads through a snapshot.
	objs[refs.Ref{Kind: refs.ConfigMap, Name: "app-config"}].LiveSnapshot = SnapshotName(live)
	objs[refs.Ref{Kind: refs.Secret, Name: "app-env"}].LiveSnapshot = SnapshotName(env)
	return Fixture{Res: Resolved(workload.Rollout, ro, rs3, rs2, rs1), Objs: objs}
}

// PinnedReverted is Pinned with app-config set back in place to revision 2's content: the canary's
// pods still read the faulty snapshot, and the drift names revision 2.
func PinnedReverted() Fixture {
	f := Pinned()
	live := appConfig(AppConfigV1)
	o := history.FromConfigMap(live)
	o.LiveSnapshot = SnapshotName(live)
	f.Objs.Add(o)
	return f
}

// PinnedInSync is Pinned without the drift: app-config still holds the canary's content.
func PinnedInSync() Fixture {
	f := Pinned()
	live := appConfig(AppConfigFaulty)
	o := history.FromConfigMap(live)
	o.LiveSnapshot = SnapshotName(live)
	f.Objs.Add(o)
	return f
}
