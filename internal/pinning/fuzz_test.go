package pinning

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// fuzzRS is the ReplicaSet whose pods the seeds are: it has a snapshot of every pinned object.
const fuzzRS types.UID = "5c8a0f1e-2f53-4a46-9c1b-6f7c1a4e7e10"

// FuzzAdmissionReview sends the webhook any request body, seeded with AdmissionReviews as the API
// server sends them for the pods of every pod template of the rendered public charts (every object
// they reference pinned in the namespace, snapshots taken for the pods' ReplicaSet) and of the e2e
// suite's workloads. Properties: no panic; an undecodable body gets 400 and anything else an
// AdmissionReview answering the request's uid; a refusal says why; a patch only replaces names under
// the pod's volumes and its containers' env/envFrom, each an object the pod named that is pinned, by a
// valid name; it applies to the pod, and a pod kubectl's strict decoding took is still taken after it.
func FuzzAdmissionReview(f *testing.F) {
	specs := testutil.ChartPodSpecs(f)
	pinned := map[refs.Ref]bool{{Kind: refs.ConfigMap, Name: "app-config"}: true, {Kind: refs.Secret, Name: "app-env"}: true}
	for _, s := range specs {
		var spec corev1.PodSpec
		if err := json.Unmarshal(s.JSON, &spec); err != nil {
			f.Fatalf("%s: %v", s.From, err)
		}
		for r := range refs.FromPodSpec(&spec) {
			pinned[r] = true
		}
	}
	for i, s := range specs {
		var spec corev1.PodSpec
		_ = json.Unmarshal(s.JSON, &spec)
		f.Add(admissionReview(f, "uid-"+strconv.Itoa(i), podOf(spec, controlledBy("ReplicaSet", "web-5d8f", fuzzRS)), false))
	}
	e2ePod := pod(controlledBy("ReplicaSet", "web-7c9", fuzzRS), map[string]string{"pod-template-hash": "7c9"})
	f.Add(admissionReview(f, "e2e-dry-run", e2ePod, true))
	f.Add(admissionReview(f, "e2e-unknown-rs", pod(controlledBy("ReplicaSet", "web-new", "rs-not-cached"), nil), true))
	f.Add(admissionReview(f, "e2e-statefulset", pod(controlledBy("StatefulSet", "db", "sts-uid"), map[string]string{"controller-revision-hash": "db-6d4b"}), true))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"DELETE","resource":{"version":"v1","resource":"pods"}}}`))
	f.Add([]byte(`{"request":null}`))

	f.Fuzz(func(t *testing.T, body []byte) {
		hook := fuzzWebhook(pinned)
		rec := httptest.NewRecorder()
		hook.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))

		var sent admissionv1.AdmissionReview
		if json.Unmarshal(body, &sent) != nil || sent.Request == nil {
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("a body that is no AdmissionReview got %d; want 400", rec.Code)
			}
			return
		}
		var got admissionv1.AdmissionReview
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Response == nil || got.Request != nil {
			t.Fatalf("a review got %d %q; want 200 and an AdmissionReview with a response alone", rec.Code, rec.Body.String())
		}
		resp := got.Response
		if resp.UID != sent.Request.UID {
			t.Fatalf("response uid %q; want the request's %q", resp.UID, sent.Request.UID)
		}
		if !resp.Allowed {
			if resp.Result == nil || !strings.HasPrefix(resp.Result.Message, "configmap-attacher pinning: ") {
				t.Fatalf("a refusal without its reason: %+v", resp.Result)
			}
			return
		}
		if resp.Patch == nil {
			return
		}
		checkPatch(t, sent.Request, resp, pinned)
	})
}

// checkPatch checks a patch the webhook answered with against the pod it was asked about.
func checkPatch(t *testing.T, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse, pinned map[refs.Ref]bool) {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v; want JSONPatch", resp.PatchType)
	}
	var ops []patchOp
	if err := json.Unmarshal(resp.Patch, &ops); err != nil || len(ops) == 0 {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	var before map[string]any
	if err := json.Unmarshal(req.Object.Raw, &before); err != nil {
		t.Fatalf("the webhook patched an object that does not decode: %v", err)
	}
	for _, op := range ops {
		path, ok := specPath(op.Path)
		if op.Op != "replace" || !ok || !path.InVolumesOrEnv() {
			t.Fatalf("op %s %s: only replace, under the pod's volumes or its containers' env/envFrom", op.Op, op.Path)
		}
		old, _ := append(refs.Path{"spec"}, path...).In(before).(string)
		kind := refs.ConfigMap
		if strings.Contains(op.Path, "ecret") {
			kind = refs.Secret
		}
		if !pinned[refs.Ref{Kind: kind, Name: old}] {
			t.Fatalf("op %s replaces %q, which is no pinned %s", op.Path, old, kind)
		}
		if msgs := validation.IsDNS1123Subdomain(op.Value); len(msgs) > 0 || op.Value == old {
			t.Fatalf("op %s: %q -> %q is no new valid name: %v", op.Path, old, op.Value, msgs)
		}
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	after, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("the patch does not apply to the pod: %v\n%s", err, resp.Patch)
	}
	withKind := func(raw []byte) []byte {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		m["apiVersion"], m["kind"] = "v1", "Pod"
		b, _ := json.Marshal(m)
		return b
	}
	if _, err := testutil.StrictDecode(withKind(req.Object.Raw)); err == nil {
		if _, err := testutil.StrictDecode(withKind(after)); err != nil {
			t.Fatalf("the pod decodes strictly, the patched pod does not: %v", err)
		}
	}
}

// specPath turns a JSON Pointer under /spec into a refs.Path.
func specPath(pointer string) (refs.Path, bool) {
	rest, ok := strings.CutPrefix(pointer, "/spec/")
	if !ok {
		return nil, false
	}
	var p refs.Path
	for _, e := range strings.Split(rest, "/") {
		if i, err := strconv.Atoi(e); err == nil {
			p = append(p, i)
		} else {
			p = append(p, strings.NewReplacer("~1", "/", "~0", "~").Replace(e))
		}
	}
	return p, true
}

// fuzzWebhook is a webhook whose caches pin every object in pinned, in namespace ns (pinning on),
// with a snapshot of each owned by fuzzRS. Built anew for each input: snapshots the webhook takes for
// other revisions must not leak into the next.
func fuzzWebhook(pinned map[refs.Ref]bool) *Webhook {
	var pins []runtime.Object
	var snaps []*metav1.PartialObjectMetadata
	for r := range pinned {
		meta := metav1.ObjectMeta{Name: r.Name, Namespace: ns, UID: types.UID("uid-" + r.Name), Labels: map[string]string{api.PinLabel: api.PinValue}}
		if r.Kind == refs.ConfigMap {
			pins = append(pins, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": r.Name}})
		} else {
			pins = append(pins, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"k": []byte(r.Name)}})
		}
		snaps = append(snaps, snapshot(r.Kind, r.Name[:min(len(r.Name), 200)]+"-0123456789", r.Name, fuzzRS))
	}
	cs := caches.NewForTest([]*caches.User{replicaSetUser("web-5d8f", fuzzRS), replicaSetUser("web-7c9", fuzzRS)}, nil)
	cs.Pinning = caches.NewPinningForTest(pins, snaps, ns)
	kube := kubefake.NewClientset(pins...)
	return &Webhook{Caches: cs, Taker: &Taker{Kube: kube, Writer: &attach.Writer{Client: testutil.FakeMetadata()}}}
}

// podOf is a pod of a ReplicaSet with this spec, as the ReplicaSet controller creates it.
func podOf(spec corev1.PodSpec, owner metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: owner.Name + "-", Namespace: ns, Labels: map[string]string{"pod-template-hash": "5d8f"}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       spec,
	}
}

// admissionReview is the body the API server posts for a pod's creation (admission.k8s.io/v1, the
// ReplicaSet controller as the user).
func admissionReview(tb testing.TB, uid string, p *corev1.Pod, dryRun bool) []byte {
	tb.Helper()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	raw, err := json.Marshal(p)
	if err != nil {
		tb.Fatal(err)
	}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(uid), Kind: podKind, Resource: podResource, RequestKind: &podKind, RequestResource: &podResource,
			Namespace: p.Namespace, Operation: admissionv1.Create, DryRun: &dryRun,
			UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
			Object:  runtime.RawExtension{Raw: raw},
			Options: runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`)},
		},
	}
	b, err := json.Marshal(review)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The seeds reach the patch: every pod of the public charts, all it names pinned, gets each of its
// volume and env references rewritten to its ReplicaSet's snapshot, and its imagePullSecrets left alone.
func TestWebhookPinsEveryChartPodsVolumesAndEnvOnly(t *testing.T) {
	specs := testutil.ChartPodSpecs(t)
	pinned := map[refs.Ref]bool{}
	for _, s := range specs {
		var spec corev1.PodSpec
		_ = json.Unmarshal(s.JSON, &spec)
		for r := range refs.FromPodSpec(&spec) {
			pinned[r] = true
		}
	}
	pulls, patched := 0, 0
	for _, s := range specs {
		var spec corev1.PodSpec
		_ = json.Unmarshal(s.JSON, &spec)
		want := map[string]string{}
		for _, u := range refs.Uses(&spec) {
			if u.Path.InVolumesOrEnv() {
				want["/spec"+pointer(u.Path)] = u.Name + "-0123456789"
			} else {
				pulls++
			}
		}
		p := podOf(spec, controlledBy("ReplicaSet", "web-5d8f", fuzzRS))
		f := &fixture{hook: fuzzWebhook(pinned)}
		resp, got := f.admit(t, p, false)
		if !resp.Allowed || !maps.Equal(got, want) {
			t.Errorf("%s: allowed %v, patch %v; want %v", s.From, resp.Allowed, got, want)
		}
		patched += len(got)
	}
	t.Logf("%d chart pods: %d references rewritten, %d imagePullSecrets left alone", len(specs), patched, pulls)
	if patched == 0 || pulls == 0 {
		t.Fatal("no chart pod has imagePullSecrets: the seeds no longer show they are left alone")
	}
}
