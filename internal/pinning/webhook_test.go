package pinning

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

const ns = testutil.Namespace

func appConfig(data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns, UID: "cm-uid",
		Labels:      map[string]string{api.PinLabel: api.PinValue, "app.kubernetes.io/instance": "shop"},
		Annotations: map[string]string{"meta.helm.sh/release-name": "shop"}},
		Data: map[string]string{"config.json": data}}
}

func appSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-env", Namespace: ns, UID: "s-uid",
		Labels: map[string]string{api.PinLabel: api.PinValue}}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"TOKEN": []byte("t0k3n")}}
}

// snapshot is the metadata of a snapshot of r owned by the revision with uid owner.
func snapshot(kind refs.Kind, name, original string, owners ...types.UID) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			Labels:      map[string]string{api.SnapshotLabel: api.SnapshotValue, api.RevisionedLabel: api.RevisionedValue},
			Annotations: map[string]string{api.OriginalNameAnnotation: original}}}
	for _, o := range owners {
		no := false
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: o, Controller: &no})
	}
	return m
}

// pod is a pod of the ReplicaSet with this uid reading app-config through a projected volume, an
// init container's envFrom and a configMapKeyRef, and app-env through a secret volume.
func pod(owner metav1.OwnerReference, labels map[string]string) *corev1.Pod {
	envRef := corev1.EnvVar{Name: "FLAG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "config.json"}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "not-pinned"}}}}}}},
				{Name: "env", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-env"}}},
			},
			InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}},
			Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{envRef}}},
		},
	}
}

func controlledBy(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}
}

// replicaSetUser is the cached ReplicaSet ns/name with uid, reading app-config and app-env.
func replicaSetUser(name string, uid types.UID) *caches.User {
	u, err := caches.Reduce(&appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid}, Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: pod(metav1.OwnerReference{}, nil).Spec}}})
	if err != nil {
		panic(err)
	}
	return u
}

// withReplicaSets adds to users the ReplicaSets the webhook tests' pods name, as the controller's
// cache holds them (the webhook acts only for revisions that exist), unless users has ReplicaSets of
// its own (the controller's tests).
func withReplicaSets(users []*caches.User) []*caches.User {
	if slices.ContainsFunc(users, func(u *caches.User) bool { return u.Kind() == caches.ReplicaSet }) {
		return users
	}
	out := slices.Clone(users)
	for name, uid := range map[string]types.UID{"web-rs-old": "rs-old", "web-rs-new": "rs-new", "web-new": "rs-new", "web": "rs",
		"web-5d8f": "rs-uid"} {
		out = append(out, replicaSetUser(name, uid))
	}
	return out
}

type fixture struct {
	hook *Webhook
	kube *kubefake.Clientset
	meta *metafake.FakeMetadataClient
}

func newFixture(t *testing.T, users []*caches.User, snapshots []*metav1.PartialObjectMetadata, live ...runtime.Object) *fixture {
	t.Helper()
	return newLaggingFixture(t, users, snapshots, snapshots, live...)
}

// newLaggingFixture is a fixture whose snapshot cache holds cached while the API server holds inAPI:
// an informer that has not seen the newest writes yet.
func newLaggingFixture(t *testing.T, users []*caches.User, cached, inAPI []*metav1.PartialObjectMetadata, live ...runtime.Object) *fixture {
	t.Helper()
	var metas []runtime.Object
	for _, s := range inAPI {
		metas = append(metas, s)
	}
	f := &fixture{kube: kubefake.NewClientset(live...), meta: testutil.FakeMetadata(metas...)}
	cs := caches.NewForTest(withReplicaSets(users), nil)
	cs.Pinning = caches.NewPinningForTest([]runtime.Object{appConfig("v1"), appSecret()}, cached, ns)
	f.hook = &Webhook{Caches: cs, Taker: &Taker{Kube: f.kube, Writer: &attach.Writer{Client: f.meta}}, Metrics: metrics.New()}
	return f
}

func (f *fixture) admit(t *testing.T, p *corev1.Pod, dryRun bool) (*admissionv1.AdmissionResponse, map[string]string) {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "req", Namespace: p.Namespace, Operation: admissionv1.Create,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun}
	resp, err := f.hook.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	got := map[string]string{}
	if resp.Patch != nil {
		var ops []patchOp
		if err := json.Unmarshal(resp.Patch, &ops); err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			if o.Op != "replace" {
				t.Errorf("op %s: only replace", o.Op)
			}
			got[o.Path] = o.Value
		}
	}
	return resp, got
}

func wantPinnedTo(cm, secret string) map[string]string {
	return map[string]string{
		"/spec/volumes/0/projected/sources/0/configMap/name":      cm,
		"/spec/volumes/1/secret/secretName":                       secret,
		"/spec/initContainers/0/envFrom/0/configMapRef/name":      cm,
		"/spec/containers/0/env/0/valueFrom/configMapKeyRef/name": cm,
	}
}

func TestWebhookPinsAReplicaSetsPodsToItsSnapshots(t *testing.T) {
	f := newFixture(t, nil, []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-aaaaaaaaaa", "app-config", "rs-old"),
		snapshot(refs.ConfigMap, "app-config-bbbbbbbbbb", "app-config", "rs-new"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-old", "rs-new"),
	})
	for _, tt := range []struct {
		rs   types.UID
		want map[string]string
	}{
		{"rs-old", wantPinnedTo("app-config-aaaaaaaaaa", "app-env-cccccccccc")},
		{"rs-new", wantPinnedTo("app-config-bbbbbbbbbb", "app-env-cccccccccc")},
	} {
		resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-"+string(tt.rs), tt.rs), nil), false)
		if !resp.Allowed || !maps.Equal(got, tt.want) {
			t.Errorf("pod of %s: allowed %v, patch %v; want %v", tt.rs, resp.Allowed, got, tt.want)
		}
	}
	if n := len(f.kube.Actions()) + len(f.meta.Actions()); n != 0 {
		t.Errorf("%d API requests on the pod path; want none (caches only)", n)
	}
	if n := counted(t, f.hook.Metrics, "configmap_attacher_webhook_api_calls_total"); n != 0 {
		t.Errorf("the API call counter says %v; want 0", n)
	}
}

// counted sums a counter's samples over every label value.
func counted(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, s := range f.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// The webhook is reinvoked when a later webhook changes the pod: a pinned pod has nothing left to pin.
func TestWebhookIsIdempotent(t *testing.T) {
	f := newFixture(t, nil, []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-bbbbbbbbbb", "app-config", "rs-new"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-new"),
	})
	p := pod(controlledBy("ReplicaSet", "web-new", "rs-new"), nil)
	_, patch := f.admit(t, p, false)
	p.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name = patch["/spec/volumes/0/projected/sources/0/configMap/name"]
	p.Spec.Volumes[1].Secret.SecretName = patch["/spec/volumes/1/secret/secretName"]
	p.Spec.InitContainers[0].EnvFrom[0].ConfigMapRef.Name = patch["/spec/initContainers/0/envFrom/0/configMapRef/name"]
	p.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name = patch["/spec/containers/0/env/0/valueFrom/configMapKeyRef/name"]
	resp, again := f.admit(t, p, false)
	if !resp.Allowed || len(again) != 0 {
		t.Fatalf("second pass: allowed %v, patch %v; want nothing", resp.Allowed, again)
	}
}

func TestWebhookLeavesOtherPodsAlone(t *testing.T) {
	f := newFixture(t, nil, nil)
	other := pod(controlledBy("ReplicaSet", "web", "rs"), nil)
	other.Namespace = "not-enabled"
	bare := pod(metav1.OwnerReference{}, nil)
	bare.OwnerReferences = nil
	for name, p := range map[string]*corev1.Pod{"a namespace without pinning": other, "a pod no revision controls": bare} {
		if resp, patch := f.admit(t, p, false); !resp.Allowed || len(patch) != 0 {
			t.Errorf("%s: allowed %v, patch %v; want untouched", name, resp.Allowed, patch)
		}
	}
}

// The first pod can arrive before the controller pinned its revision: the webhook takes the snapshot
// (from the live object), owned by the revision, protected from the start; on a dry run it only
// computes the name.
func TestWebhookTakesTheSnapshotWhenThePodComesFirst(t *testing.T) {
	f := newFixture(t, nil, nil, appConfig("v2"), appSecret())
	p := pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil)

	cm, err := SnapshotName(appConfig("v2"))
	if err != nil {
		t.Fatal(err)
	}
	cmCached, _ := SnapshotName(appConfig("v1")) // the cache lags behind the live object
	sec, _ := SnapshotName(appSecret())

	resp, got := f.admit(t, p, true)
	if !resp.Allowed || !maps.Equal(got, wantPinnedTo(cmCached, sec)) {
		t.Fatalf("dry run: %v, %v", resp.Allowed, got)
	}
	if writes := creates(f); len(writes) != 0 {
		t.Fatalf("a dry run created %v", writes)
	}

	resp, got = f.admit(t, p, false)
	if !resp.Allowed || !maps.Equal(got, wantPinnedTo(cm, sec)) {
		t.Fatalf("allowed %v, patch %v; want the live content's snapshot %s", resp.Allowed, got, cm)
	}
	if n := counted(t, f.hook.Metrics, "configmap_attacher_webhook_api_calls_total"); n != 2 {
		t.Errorf("the API call counter says %v; want 2 (the ConfigMap's and the Secret's snapshots)", n)
	}
	snap, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cm, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	wantOwner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", UID: "rs-uid", Controller: &no}
	switch {
	case snap.Immutable == nil || !*snap.Immutable:
		t.Error("snapshot not immutable")
	case snap.Data["config.json"] != "v2":
		t.Errorf("snapshot data %v", snap.Data)
	case len(snap.OwnerReferences) != 1 || !reflect.DeepEqual(snap.OwnerReferences[0], wantOwner):
		t.Errorf("owners %v, want %v", snap.OwnerReferences, wantOwner)
	case !slices.Contains(snap.Finalizers, api.InUseFinalizer):
		t.Error("snapshot not protected")
	case snap.Labels["app.kubernetes.io/instance"] != "" || snap.Annotations["meta.helm.sh/release-name"] != "":
		t.Errorf("the snapshot copies Helm/Argo CD tracking metadata: %v %v", snap.Labels, snap.Annotations)
	case snap.Annotations[api.OriginalNameAnnotation] != "app-config" || !api.OptedIn(snap.Labels):
		t.Errorf("labels %v annotations %v", snap.Labels, snap.Annotations)
	}
}

func creates(f *fixture) []string {
	var out []string
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" {
			out = append(out, a.GetResource().Resource)
		}
	}
	return out
}

func TestWebhookFindsTheRevisionOfStatefulSetAndDaemonSetPods(t *testing.T) {
	cr := func(name string, uid types.UID, owner metav1.OwnerReference) *caches.User {
		u, err := caches.Reduce(&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid,
			OwnerReferences: []metav1.OwnerReference{owner}}})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	sts, ds := controlledBy("StatefulSet", "db", "sts-uid"), controlledBy("DaemonSet", "agent", "ds-uid")
	f := newFixture(t, []*caches.User{cr("db-7c9d8f", "cr-db", sts), cr("agent-5f6b7c", "cr-agent", ds)}, []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-dddddddddd", "app-config", "cr-db"),
		snapshot(refs.ConfigMap, "app-config-eeeeeeeeee", "app-config", "cr-agent"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "cr-db", "cr-agent"),
	})
	// A StatefulSet labels its pods with its revision's name, a DaemonSet with the hash alone.
	_, got := f.admit(t, pod(sts, map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-7c9d8f"}), false)
	if want := wantPinnedTo("app-config-dddddddddd", "app-env-cccccccccc"); !maps.Equal(got, want) {
		t.Errorf("StatefulSet pod: %v, want %v", got, want)
	}
	_, got = f.admit(t, pod(ds, map[string]string{appsv1.ControllerRevisionHashLabelKey: "5f6b7c"}), false)
	if want := wantPinnedTo("app-config-eeeeeeeeee", "app-env-cccccccccc"); !maps.Equal(got, want) {
		t.Errorf("DaemonSet pod: %v, want %v", got, want)
	}
}

// The order "pod before its ControllerRevision reaches the cache" (a StatefulSet's update creates
// both within milliseconds): the revision's uid is read from the API server, checked against the
// pod's controller, and the pod pinned to that revision's snapshot.
func TestWebhookFindsAControllerRevisionTheCacheHasNotShownYet(t *testing.T) {
	sts := controlledBy("StatefulSet", "db", "sts-uid")
	onAPIServer := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "db-7c9d8f", Namespace: ns, UID: "cr-db",
		OwnerReferences: []metav1.OwnerReference{sts}}}
	f := newFixture(t, nil, []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-dddddddddd", "app-config", "cr-db"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "cr-db"),
	}, onAPIServer)
	_, got := f.admit(t, pod(sts, map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-7c9d8f"}), false)
	if want := wantPinnedTo("app-config-dddddddddd", "app-env-cccccccccc"); !maps.Equal(got, want) {
		t.Errorf("patch %v, want %v", got, want)
	}
	other := controlledBy("StatefulSet", "db", "another-sts-uid") // a StatefulSet of that name recreated
	if _, got := f.admit(t, pod(other, map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-7c9d8f"}), false); len(got) != 0 {
		t.Errorf("patch %v for a pod of another StatefulSet: the revision is not its", got)
	}
}

func TestPointer(t *testing.T) {
	if got := pointer(refs.Path{"volumes", 2, "projected", "sources", 0, "configMap", "name"}); got != "/volumes/2/projected/sources/0/configMap/name" {
		t.Errorf("pointer = %q", got)
	}
	if got := pointer(refs.Path{"a/b", "c~d"}); !strings.EqualFold(got, "/a~1b/c~0d") {
		t.Errorf("escaping: %q", got)
	}
}

// A post-renderer or a patch dropped app-config's pin label after rs-old was pinned: rs-old's pods (a
// spot replacement) keep reading its snapshot; rs-new, which never had one, reads app-config itself.
func TestWebhookKeepsARevisionsSnapshotWhenThePinLabelIsGone(t *testing.T) {
	snaps := []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-aaaaaaaaaa", "app-config", "rs-old"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-old", "rs-new"),
	}
	f := newFixture(t, nil, snaps)
	f.hook.Caches.Pinning = caches.NewPinningForTest([]runtime.Object{appSecret()}, snaps, ns) // app-config unlabelled
	for _, tt := range []struct {
		rs   types.UID
		want map[string]string
	}{
		{"rs-old", wantPinnedTo("app-config-aaaaaaaaaa", "app-env-cccccccccc")},
		{"rs-new", map[string]string{"/spec/volumes/1/secret/secretName": "app-env-cccccccccc"}},
	} {
		resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-"+string(tt.rs), tt.rs), nil), false)
		if !resp.Allowed || !maps.Equal(got, tt.want) {
			t.Errorf("pod of %s: allowed %v, patch %v; want %v", tt.rs, resp.Allowed, got, tt.want)
		}
	}
	if got := creates(f); len(got) != 0 {
		t.Errorf("created %v: an object without the pin label is never snapshotted", got)
	}
}

// The race "pod CREATE before our cache saw the namespace labelled": the API server calls the webhook
// only for namespaces it shows labelled, so a cache saying otherwise is behind; the namespace is read
// and the pod pinned. A namespace really without the label (the API server's view lagged the other
// way) gets nothing.
func TestWebhookPinsPodsOfANamespaceLabelledAMomentAgo(t *testing.T) {
	snaps := []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-bbbbbbbbbb", "app-config", "rs-new"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-new"),
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{name: "labelled on the API server, not yet in the cache", labels: map[string]string{api.PinningNamespaceLabel: api.PinningEnabled},
			want: wantPinnedTo("app-config-bbbbbbbbbb", "app-env-cccccccccc")},
		{name: "the label just removed", labels: nil, want: map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newLaggingFixture(t, nil, snaps, snaps, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: tt.labels}})
			f.hook.Caches.Pinning = caches.NewPinningForTest([]runtime.Object{appConfig("v1"), appSecret()}, snaps) // no namespace enabled
			resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-new", "rs-new"), nil), false)
			if !resp.Allowed || !maps.Equal(got, tt.want) {
				t.Errorf("allowed %v, patch %v; want %v", resp.Allowed, got, tt.want)
			}
		})
	}
}

// The race "pin label removed (or the object deleted) before our cache saw it": the pod comes first
// for its revision, the webhook goes to take the snapshot and finds the object no longer pinned or
// gone. That reference is left as it is (the Secret is still pinned); the pod is not refused.
func TestWebhookLeavesAReferenceNoLongerPinned(t *testing.T) {
	unlabelled := appConfig("v2")
	unlabelled.Labels = nil
	sec, _ := SnapshotName(appSecret())
	onlySecret := map[string]string{"/spec/volumes/1/secret/secretName": sec}
	for name, live := range map[string][]runtime.Object{
		"the pin label removed": {unlabelled, appSecret()},
		"the object deleted":    {appSecret()},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil, live...)
			resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil), false)
			if !resp.Allowed || !maps.Equal(got, onlySecret) {
				t.Errorf("allowed %v, patch %v; want only the Secret pinned %v", resp.Allowed, got, onlySecret)
			}
		})
	}
}

// When the webhook cannot decide (here the API server refuses the snapshot), it does not deny: it
// answers an error, so that the configuration's failurePolicy decides. Ignore then admits the pod
// (unpinned, and audited), as for a webhook that is down; a denial would refuse it even so.
func TestWebhookErrorsLeaveTheDecisionToTheFailurePolicy(t *testing.T) {
	f := newFixture(t, nil, nil, appConfig("v2"), appSecret())
	f.kube.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is away")
	})
	raw, err := json.Marshal(pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil))
	if err != nil {
		t.Fatal(err)
	}
	review, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req", Namespace: ns, Operation: admissionv1.Create,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}}})
	rec := httptest.NewRecorder()
	f.hook.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(review)))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, body %s; want 500 so that the failurePolicy applies", rec.Code, rec.Body)
	}
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || !strings.Contains(status.Message, "etcd is away") {
		t.Errorf("body %s (%v): want a Status naming the cause", rec.Body, err)
	}
	if strings.Contains(rec.Body.String(), `"allowed"`) {
		t.Errorf("body %s: an AdmissionReview answer is a decision; want none", rec.Body)
	}
}

// A review anyone could forge: a pod of a pinning namespace whose controller is a ReplicaSet uid nobody
// has (not in our cache, not on the API server). The webhook acts only for revisions that exist: it
// admits the pod as it is and writes nothing (no snapshot made, none owned by the invented uid). A
// ReplicaSet of that name with another uid (deleted and made again) is not it either.
func TestWebhookWritesNothingForARevisionNobodyHas(t *testing.T) {
	for name, owner := range map[string]metav1.OwnerReference{
		"an invented ReplicaSet":         controlledBy("ReplicaSet", "invented", "no-such-uid"),
		"a ReplicaSet name, another uid": controlledBy("ReplicaSet", "web-5d8f", "no-such-uid"),
	} {
		t.Run(name, func(t *testing.T) {
			live := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f", Namespace: ns, UID: "rs-uid"}}
			f := newFixture(t, nil, nil, appConfig("v2"), appSecret(), live)
			resp, got := f.admit(t, pod(owner, nil), false)
			if !resp.Allowed || len(got) != 0 {
				t.Fatalf("allowed %v, patch %v; want the pod admitted unchanged", resp.Allowed, got)
			}
			if writes := creates(f); len(writes) != 0 {
				t.Fatalf("created %v for a revision that does not exist", writes)
			}
			for _, a := range f.meta.Actions() {
				if a.GetVerb() != "get" && a.GetVerb() != "list" {
					t.Fatalf("%s %s for a revision that does not exist", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// A pod that came before our cache saw its ReplicaSet is pinned after one read of it.
func TestWebhookReadsAReplicaSetItsCacheHasNotSeenYet(t *testing.T) {
	live := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-9f7", Namespace: ns, UID: "rs-9f7"}}
	f := newFixture(t, nil, nil, appConfig("v2"), appSecret(), live)
	_, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-9f7", "rs-9f7"), nil), false)
	cm, _ := SnapshotName(appConfig("v2"))
	sec, _ := SnapshotName(appSecret())
	if want := wantPinnedTo(cm, sec); !maps.Equal(got, want) {
		t.Fatalf("patch %v; want %v", got, want)
	}
}

// A body larger than any pod's review is refused before it is decoded.
func TestWebhookRefusesABodyLargerThanAReview(t *testing.T) {
	f := newFixture(t, nil, nil)
	rec := httptest.NewRecorder()
	f.hook.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(make([]byte, maxReviewBytes+1))))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d; want 413", rec.Code)
	}
}

// A namespaced install may list and watch namespaces, never get one: a namespace labelled a moment
// ago (not yet in the cache) is read with a list, and its pods are pinned.
func TestWebhookReadsANamespaceWithAListNotAGet(t *testing.T) {
	snaps := []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-bbbbbbbbbb", "app-config", "rs-new"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-new"),
	}
	f := newLaggingFixture(t, nil, snaps, snaps, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{api.PinningNamespaceLabel: api.PinningEnabled}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	f.kube.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), ns, errors.New("RBAC: get namespaces is not granted"))
	})
	f.hook.Caches.Pinning = caches.NewPinningForTest([]runtime.Object{appConfig("v1"), appSecret()}, snaps) // no namespace enabled
	resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-new", "rs-new"), nil), false)
	if want := wantPinnedTo("app-config-bbbbbbbbbb", "app-env-cccccccccc"); !resp.Allowed || !maps.Equal(got, want) {
		t.Fatalf("allowed %v, patch %v; want %v", resp.Allowed, got, want)
	}
}

// A service-account-token Secret labelled for pinning is never copied: the token controller would
// fill the copy with a token of its own. The pod keeps reading the Secret; nothing is created.
func TestAServiceAccountTokenSecretIsNeverSnapshotted(t *testing.T) {
	token := appSecret()
	token.Type = corev1.SecretTypeServiceAccountToken
	token.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	f := newFixture(t, nil, nil, appConfig("v2"), token)
	resp, got := f.admit(t, pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil), false)
	cm, _ := SnapshotName(appConfig("v2"))
	if !resp.Allowed || got["/spec/volumes/1/secret/secretName"] != "" || got["/spec/volumes/0/projected/sources/0/configMap/name"] != cm {
		t.Fatalf("allowed %v, patch %v; want app-config pinned, the token Secret left as it is", resp.Allowed, got)
	}
	if writes := creates(f); !slices.Equal(writes, []string{"configmaps"}) {
		t.Fatalf("created %v; want app-config's snapshot only", writes)
	}
}
