package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	toolsrecord "k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

const ns = testutil.Namespace

// fixture is a Deployment "web" reading ConfigMap app-config, its revisions, and what the API server
// holds of them (the fake clients) and the caches show. Every write the trigger makes to a workload is
// a server-side apply the fake dynamic client records and plays onto the Deployment.
type fixture struct {
	t       *testing.T
	kube    *kubefake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	cs      *caches.Caches
	c       *Controller
	events  *toolsrecord.FakeRecorder
	metrics *metrics.Metrics
	now     time.Time
	rv      int

	deployment *appsv1.Deployment
	revisions  []*appsv1.ReplicaSet
	applied    []string // the bodies of the writes on workloads
	forced     []bool   // whether each was forced (or a conditional merge patch)
	pending    []string // events recorded, not yet expected
	// manager is the field manager of the next change of the Deployment (the fake API server keeps
	// managedFields): a user's tool by default, ours while an apply of ours is played.
	manager string
}

func newFixture(t *testing.T, annotations map[string]string, objs ...*corev1.ConfigMap) *fixture {
	t.Helper()
	f := &fixture{t: t, kube: kubefake.NewClientset(), events: toolsrecord.NewFakeRecorder(100), metrics: metrics.New(),
		now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC), manager: "kubectl-client-side-apply"}
	scheme := runtime.NewScheme()
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{workload.RolloutGVR: "RolloutList"})
	f.dyn.PrependReactor("patch", "*", f.apply)
	var metas []*metav1.PartialObjectMetadata
	for _, o := range objs {
		f.rv++
		o.ResourceVersion = strconv.Itoa(f.rv)
		if _, err := f.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		metas = append(metas, metaOf(o))
	}
	f.deployment = testutil.Deployment("web", "uid-web", testutil.PodSpec([]string{"app-config"}))
	f.deployment.Annotations = annotations
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultKeySecret.Name, Namespace: DefaultKeySecret.Namespace},
		Data: map[string][]byte{keyData: []byte(testKey)}}
	if _, err := f.kube.CoreV1().Secrets(key.Namespace).Create(context.Background(), key, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cs = caches.NewForTest(nil, metas)
	f.cs.Pinning = caches.NewPinningForTest(nil, nil)
	f.putDeployment()
	f.newRevision()
	c, err := New(f.cs, f.kube, f.dyn, f.events, f.metrics, Options{Settle: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return f.now }
	c.key.now = c.now
	f.c = c
	f.listKey()
	return f
}

// listKey delivers what the key watch lists: the key Secret as the API server holds it, if it does;
// then what waited for the key is queued.
func (f *fixture) listKey() {
	f.t.Helper()
	s, err := f.kube.CoreV1().Secrets(DefaultKeySecret.Namespace).Get(context.Background(), DefaultKeySecret.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		f.c.key.observe(context.Background(), nil)
	case err != nil:
		f.t.Fatal(err)
	default:
		f.c.key.observe(context.Background(), s)
	}
	f.c.key.mu.Lock()
	f.c.key.listed = true
	f.c.key.mu.Unlock()
	f.c.key.changed() // as the watch does once it has listed
}

// testKey is the key of the hash of Secret contents in every fixture: the hashes tests compute by
// hand use it (openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef).
const testKey = "0123456789abcdef0123456789abcdef"

func configMap(name string, data string, annotations map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Annotations: annotations},
		Data:       map[string]string{"config": data}}
}

func metaOf(cm *corev1.ConfigMap) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: *cm.ObjectMeta.DeepCopy()}
}

// The content hash of app-config holding data, and the config-hash of a workload following it alone:
// computed by hand, not by the code under test, e.g.
//
//	printf '%s' '{"data":{"config":"v2"}}' | sha256sum | cut -c1-10                 # 7797398703
//	printf '%s' '{"ConfigMap/app-config":"7797398703"}' | sha256sum | cut -c1-10     # 58c69207a7
//
// and the value written carries its check:
//
//	printf '%s' 'configmap-attacher.io/config-hash:58c69207a7' | sha256sum | cut -c1-6          # 225dd3
var knownHashes = map[string]struct{ content, config string }{
	"v1":  {"8774ad9c59", "25f47d58c1.10c1fd"},
	"v2":  {"7797398703", "58c69207a7.225dd3"},
	"v2b": {"1b93037b95", "1adeed063b.b10a12"},
	"v3":  {"a572974d76", "2ef6a29b63.d5b7a0"},
	"v4":  {"80c6f6cb01", "b8b7df9573.9aa33b"},
	"v5":  {"3d82ede31a", "fb6a3731d6.2e9a59"},
}

func hashOf(data string) string {
	h, ok := knownHashes[data]
	if !ok {
		panic("no hand-computed hash for " + data)
	}
	return h.content
}

// configHash is the annotation value for app-config holding data.
func configHash(data string) string {
	h, ok := knownHashes[data]
	if !ok {
		panic("no hand-computed hash for " + data)
	}
	return h.config
}

func (f *fixture) store(kind caches.Kind) *caches.Informer[*caches.User] { return f.cs.Users[kind] }

// putDeployment writes the Deployment as f.manager (the API server then owns the fields it changed
// to that manager) with the next resourceVersion, and shows it in the cache.
func (f *fixture) putDeployment() {
	f.t.Helper()
	f.rv++
	f.deployment.ResourceVersion = strconv.Itoa(f.rv)
	u, err := caches.Reduce(f.deployment)
	if err != nil {
		f.t.Fatal(err)
	}
	_ = f.store(caches.Deployment).Indexers()[0].Update(u)
	d := f.deployment.DeepCopy()
	d.ResourceVersion = ""
	deployments := f.kube.AppsV1().Deployments(ns)
	if _, err := deployments.Update(context.Background(), d, metav1.UpdateOptions{FieldManager: f.manager}); apierrors.IsNotFound(err) {
		_, err = deployments.Create(context.Background(), d, metav1.CreateOptions{FieldManager: f.manager})
		if err != nil {
			f.t.Fatal(err)
		}
	}
	// The fake API server keeps no resourceVersion of its own: ours is what a GET answers.
	got, err := deployments.Get(context.Background(), d.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	got.ResourceVersion = f.deployment.ResourceVersion
	if err := f.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), got, ns); err != nil {
		f.t.Fatal(err)
	}
}

// owner is the field manager owning config-hash on the Deployment's template, as the API server keeps it.
func (f *fixture) owner() []string {
	f.t.Helper()
	d, err := f.kube.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cur, err := currentOf(d, d.Spec.Template.Annotations)
	if err != nil {
		f.t.Fatal(err)
	}
	out := cur.owners
	for _, mf := range d.ManagedFields {
		if mf.Manager == api.FieldManager && strings.Contains(string(mf.FieldsV1.Raw), api.ConfigHashAnnotation) {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// newRevision is what the Deployment controller does for the current template: a new ReplicaSet with
// the next number, or the existing one renumbered.
func (f *fixture) newRevision() *appsv1.ReplicaSet {
	f.t.Helper()
	n := int64(0)
	for _, rs := range f.revisions {
		n = max(n, revision.Number(rs.Annotations))
	}
	n++
	for _, rs := range f.revisions {
		t := rs.Spec.Template.DeepCopy()
		delete(t.Labels, workload.DeploymentHashLabel)
		if maps.Equal(t.Annotations, f.deployment.Spec.Template.Annotations) && apiequality.Semantic.DeepEqual(t.Spec, f.deployment.Spec.Template.Spec) {
			if revision.Number(rs.Annotations) != n-1 {
				old, _ := caches.Reduce(rs)
				rs.Annotations[revision.DeploymentAnnotation] = strconv.FormatInt(n, 10)
				f.putRevision(rs, false)
				if f.c != nil { // its watch event: renumbered
					cur, _ := caches.Reduce(rs)
					f.c.revisionHandler().OnUpdate(old, cur)
				}
			}
			return rs
		}
	}
	rs := testutil.ReplicaSet(f.deployment, workload.Deployment, fmt.Sprintf("h%d", len(f.revisions)+1), int(n), f.deployment.Spec.Template.Spec)
	rs.Spec.Template.Annotations = maps.Clone(f.deployment.Spec.Template.Annotations)
	rs.CreationTimestamp = metav1.NewTime(f.now)
	f.rv++
	rs.ResourceVersion = strconv.Itoa(f.rv) // one etcd: ordered with the config objects' versions
	f.revisions = append(f.revisions, rs)
	f.putRevision(rs, true)
	if f.c != nil { // its watch event
		u, _ := caches.Reduce(rs)
		f.c.revisionHandler().OnAdd(u, false)
	}
	return rs
}

func (f *fixture) putRevision(rs *appsv1.ReplicaSet, create bool) {
	f.t.Helper()
	u, _ := caches.Reduce(rs)
	_ = f.store(caches.ReplicaSet).Indexers()[0].Update(u)
	var err error
	if create {
		_, err = f.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), rs.DeepCopy(), metav1.CreateOptions{})
	} else {
		_, err = f.kube.AppsV1().ReplicaSets(ns).Update(context.Background(), rs.DeepCopy(), metav1.UpdateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// apply plays a write of the trigger onto the Deployment's template as the API server would: a
// server-side apply of the one annotation it names (refused with a conflict when another manager owns
// that annotation with another value and the apply is not forced, or when the resourceVersion it
// carries is not the Deployment's), or the merge patch that removes it.
func (f *fixture) apply(action k8stesting.Action) (bool, runtime.Object, error) {
	p := action.(k8stesting.PatchAction)
	var obj map[string]any
	_ = json.Unmarshal(p.GetPatch(), &obj)
	rv, _, _ := unstructured.NestedString(obj, "metadata", "resourceVersion")
	force := false
	switch p.GetPatchType() {
	case types.ApplyPatchType:
		force = p.(k8stesting.PatchActionImpl).PatchOptions.Force != nil && *p.(k8stesting.PatchActionImpl).PatchOptions.Force
	case types.MergePatchType:
		if rv == "" {
			f.t.Errorf("an unconditional merge patch on a workload: %s", p.GetPatch())
		}
		force = true
	default:
		f.t.Errorf("a %s patch on a workload: only server-side apply, or a conditional merge patch removing our annotation", p.GetPatchType())
	}
	f.applied = append(f.applied, string(p.GetPatch()))
	f.forced = append(f.forced, force)
	if rv != "" && rv != f.deployment.ResourceVersion {
		return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), "web", errors.New("the object has been modified"))
	}
	v, set, _ := unstructured.NestedString(obj, "spec", "template", "metadata", "annotations", api.ConfigHashAnnotation)
	cur, has := f.deployment.Spec.Template.Annotations[api.ConfigHashAnnotation]
	if others := f.owner(); !force && len(others) > 0 && others[0] != api.FieldManager {
		switch {
		case set && v != cur:
			return true, nil, apierrors.NewApplyConflict(nil, fmt.Sprintf("conflict with %q", others[0]))
		case !set && has: // an apply naming nothing removes only what no one else owns
			out, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(f.deployment)
			return true, &unstructured.Unstructured{Object: out}, nil
		}
	}
	if f.deployment.Spec.Template.Annotations == nil {
		f.deployment.Spec.Template.Annotations = map[string]string{}
	}
	if set {
		f.deployment.Spec.Template.Annotations[api.ConfigHashAnnotation] = v
	} else {
		delete(f.deployment.Spec.Template.Annotations, api.ConfigHashAnnotation)
	}
	if len(f.deployment.Spec.Template.Annotations) == 0 {
		f.deployment.Spec.Template.Annotations = nil
	}
	f.deployment.Generation++
	user := f.manager
	f.manager = api.FieldManager
	f.putDeployment()
	f.manager = user
	out, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(f.deployment)
	return true, &unstructured.Unstructured{Object: out}, nil
}

// observe is the Deployment controller catching up: a revision for the template, status observed.
func (f *fixture) observe() *appsv1.ReplicaSet {
	rs := f.newRevision()
	f.deployment.Status.ObservedGeneration = f.deployment.Generation
	f.putDeployment()
	return rs
}

// edit changes a ConfigMap's data, as kubectl edit does, and delivers the watch event.
func (f *fixture) edit(name, data string) {
	f.t.Helper()
	f.editOnServer(name, data)()
}

// editOnServer changes a ConfigMap's data on the API server alone, the cache behind it, and returns
// what delivers the watch event.
func (f *fixture) editOnServer(name, data string) (deliver func()) {
	f.t.Helper()
	cms := f.kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	old := metaOf(cm)
	cm.Data = map[string]string{"config": data}
	f.rv++
	cm.ResourceVersion = strconv.Itoa(f.rv)
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	return func() {
		cur := metaOf(cm)
		_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(cur)
		f.c.configHandler(refs.ConfigMap).OnUpdate(old, cur)
	}
}

// sync syncs the Deployment, then lets the caches see the record it wrote.
func (f *fixture) sync() time.Duration {
	f.t.Helper()
	wait, err := f.try()
	if err != nil {
		f.t.Fatalf("sync: %v", err)
	}
	return wait
}

// try is sync, returning the sync's error.
func (f *fixture) try() (time.Duration, error) {
	f.t.Helper()
	res, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web"))
	list, lerr := f.kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if lerr != nil {
		f.t.Fatal(lerr)
	}
	for i := range list.Items {
		if list.Items[i].Labels[api.RecordLabel] == api.RecordValue {
			f.rv++
			list.Items[i].ResourceVersion = strconv.Itoa(f.rv)
			_, _ = f.kube.CoreV1().ConfigMaps(ns).Update(context.Background(), &list.Items[i], metav1.UpdateOptions{})
			_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(metaOf(&list.Items[i]))
		}
	}
	return res.RequeueAfter, err
}

func (f *fixture) tick(d time.Duration) { f.now = f.now.Add(d) }

// change edits app-config, lets the settle window pass and the trigger write, then lets the Deployment
// controller make the revision and the trigger look at it; it returns that revision.
func (f *fixture) change(data string) *appsv1.ReplicaSet {
	f.t.Helper()
	f.edit("app-config", data)
	f.tick(6 * time.Second)
	f.sync()
	f.tick(time.Second)
	rs := f.observe()
	f.sync()
	return rs
}

func (f *fixture) templateHash() (string, bool) {
	v, ok := f.deployment.Spec.Template.Annotations[api.ConfigHashAnnotation]
	return v, ok
}

func (f *fixture) expectApplies(n int) {
	f.t.Helper()
	if len(f.applied) != n {
		f.t.Fatalf("%d writes on the workload, want %d: %v", len(f.applied), n, f.applied)
	}
}

// recorded returns the events recorded and not yet expected, and forgets them.
func (f *fixture) recorded() []string {
	f.drain()
	out := f.pending
	f.pending = nil
	return out
}

func (f *fixture) drain() {
	for {
		select {
		case e := <-f.events.Events:
			f.pending = append(f.pending, e)
		default:
			return
		}
	}
}

// expectEvent finds (and takes) a recorded event starting with prefix ("Warning Reason").
func (f *fixture) expectEvent(prefix string) string {
	f.t.Helper()
	f.drain()
	for i, e := range f.pending {
		if strings.HasPrefix(e, prefix) {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			return e
		}
	}
	f.t.Fatalf("no event %q among %q", prefix, f.pending)
	return ""
}

var auto = map[string]string{api.ReloaderAuto: "true"}

// The write-up's story on a Deployment: opting in starts nothing; an edit starts one revision once
// settled; a burst is one revision; the revert goes back to the first revision, removing our
// annotation; an edit to a content seen before goes back to its revision.
func TestAConfigEditStartsOneRevisionAndARevertGoesBack(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.expectApplies(0)
	t.Log("opting in starts no revision")

	f.edit("app-config", "v2")
	if wait := f.sync(); wait != 5*time.Second {
		t.Fatalf("sync right after the edit asked to wait %s, want the settle window 5s", wait)
	}
	f.tick(2 * time.Second)
	f.edit("app-config", "v2b") // a burst: still settling
	if wait := f.sync(); wait != 5*time.Second {
		t.Fatalf("after a second edit: wait %s, want the window again", wait)
	}
	f.expectApplies(0)
	f.tick(5 * time.Second)
	f.sync()
	f.expectApplies(1)
	if v, _ := f.templateHash(); v != configHash("v2b") {
		t.Fatalf("config-hash %q, want the hash of the settled content %q", v, configHash("v2b"))
	}
	if !strings.Contains(f.applied[0], `"annotations":{"configmap-attacher.io/config-hash":"`+configHash("v2b")+`"}`) ||
		strings.Contains(f.applied[0], "containers") {
		t.Fatalf("the apply names more than our one annotation: %s", f.applied[0])
	}
	f.expectEvent("Normal " + ReasonStarted)
	f.expectEvent("Warning " + ReasonUnpinned) // app-config is not pinned: the fix is named
	rs2 := f.observe()
	f.sync()
	f.tick(time.Minute)
	f.sync()
	f.expectApplies(1)
	t.Log("one revision for the burst; none again once it runs")

	f.edit("app-config", "v1")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(2)
	if _, has := f.templateHash(); has {
		t.Fatal("a revert to the content of the first revision must remove our annotation (its template has none)")
	}
	back := f.observe()
	if back.Name != f.revisions[0].Name || len(f.revisions) != 2 {
		t.Fatalf("the revert made %s (%d ReplicaSets); want the first revision %s reused", back.Name, len(f.revisions), f.revisions[0].Name)
	}
	f.expectEvent("Normal " + ReasonBack)
	f.sync()

	f.edit("app-config", "v2b")
	f.tick(6 * time.Second)
	f.sync()
	if again := f.observe(); again.Name != rs2.Name || len(f.revisions) != 2 {
		t.Fatalf("back to v2b made %s; want %s reused; applied %v", again.Name, rs2.Name, f.applied)
	}
	f.sync()
	f.expectApplies(3)
}

// deployedTogether is the fixture's Deployment, seen at app-config v1, then deployed with v2 and a
// template changed with it (Helm's checksum annotation); its controller has not caught up yet.
func deployedTogether(t *testing.T) *fixture {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	f.deployment.Spec.Template.Annotations = map[string]string{"checksum/config": "v2"}
	f.deployment.Generation++
	f.putDeployment()
	return f
}

// A deploy that changes config and template together (Helm's checksum annotation) gets no revision
// from us.
func TestADeployOfConfigAndTemplateTogetherGetsNoSecondRevision(t *testing.T) {
	f := deployedTogether(t)
	f.sync() // not observed yet
	f.observe()
	f.sync()
	f.tick(time.Minute)
	f.sync()
	f.expectApplies(0)
	if len(f.revisions) != 2 {
		t.Fatalf("%d revisions, want 2", len(f.revisions))
	}
}

// The same deploy when the Deployment's status (observed) reaches us before its new ReplicaSet does:
// two watches, no order between them. The cache's newest revision is then the old one, which was not
// created with the new content, and the change has settled: the newest is checked against the
// template on the API server before anything is written.
func TestADeployTogetherSeenBeforeItsReplicaSetGetsNoSecondRevision(t *testing.T) {
	f := deployedTogether(t)
	rs2 := f.observe()
	u2, _ := caches.Reduce(rs2)
	if err := f.store(caches.ReplicaSet).Indexers()[0].Delete(u2); err != nil { // not seen yet
		t.Fatal(err)
	}
	f.tick(time.Minute)
	if _, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web")); !errors.Is(err, errNotCurrent) {
		t.Errorf("sync before the new ReplicaSet is seen: %v, want %v (retried)", err, errNotCurrent)
	}
	f.expectApplies(0)
	f.putRevision(rs2, false) // its add event
	f.sync()
	f.expectApplies(0)
	if len(f.revisions) != 2 {
		t.Fatalf("%d revisions, want 2", len(f.revisions))
	}
}

// Someone reverts our annotation (Argo CD self-heal, kubectl apply of an older manifest): one
// Warning, one count, no write-back; the next content change writes again.
func TestNeverFightsOverTheTemplate(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.observe()
	f.sync()
	f.expectApplies(1)
	f.recorded()

	delete(f.deployment.Spec.Template.Annotations, api.ConfigHashAnnotation) // a tool reverts us
	f.deployment.Spec.Template.Annotations = nil
	f.deployment.Generation++
	f.observe()
	for range 5 {
		f.tick(time.Minute)
		f.sync()
	}
	f.expectApplies(1)
	msg := f.expectEvent("Warning " + ReasonOverruled)
	if !strings.Contains(msg, "ConfigMap/app-config") {
		t.Errorf("the warning does not name the object: %s", msg)
	}
	if n := testCounter(t, f.metrics, "configmap_attacher_config_overruled_total"); n != 1 {
		t.Errorf("overruled counted %v times, want 1", n)
	}
	f.edit("app-config", "v3")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(2)
}

// The annotation owned by another field manager with a value we never wrote (someone pins it on
// purpose): left alone; one Warning naming the manager, no write until the content changes again.
func TestAValueWeNeverWroteIsLeftAlone(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.manager = "kubectl-edit"
	f.deployment.Spec.Template.Annotations = map[string]string{api.ConfigHashAnnotation: "pinned-by-hand"}
	f.deployment.Generation++
	f.observe()
	f.sync()
	f.recorded()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	msg := f.expectEvent("Warning " + ReasonOverruled)
	if !strings.Contains(msg, "kubectl-edit") || !strings.Contains(msg, "pinned-by-hand") {
		t.Errorf("the warning does not name the manager and its value: %s", msg)
	}
	for range 3 {
		f.tick(time.Minute)
		f.sync()
	}
	f.expectApplies(0)
	if v, _ := f.templateHash(); v != "pinned-by-hand" {
		t.Errorf("config-hash %q: a value we never wrote was overwritten", v)
	}
}

// A rollback (`kubectl rollout undo`) copies an older revision's template, our value included, under
// its own field manager. The next config change takes the annotation back: a forced apply,
// conditional on the resourceVersion the decision read, with a Normal event naming the manager; the
// change starts its revision, and later changes need no force.
func TestAValueWeWroteIsTakenBackAfterARollback(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	rs1 := f.observe()
	f.sync()
	rs2 := f.change("v2")
	f.change("v3")
	f.expectApplies(2)
	f.recorded()

	f.tick(time.Minute)
	f.manager = "kubectl-rollout" // undo to rs2: its template, our value 58c69207a7 (v2) with it
	f.deployment.Spec.Template.Annotations = maps.Clone(rs2.Spec.Template.Annotations)
	f.deployment.Generation++
	if back := f.observe(); back.UID != rs2.UID {
		t.Fatalf("the undo made %s, want %s", back.Name, rs2.Name)
	}
	f.sync()
	f.expectEvent("Warning " + ReasonOverruled) // the template changed back: told, not written
	if owners := f.owner(); len(owners) == 0 || owners[0] != "kubectl-rollout" {
		t.Fatalf("config-hash owned by %v, want kubectl-rollout", owners)
	}
	rv := f.deployment.ResourceVersion

	f.edit("app-config", "v4") // the fix-forward edit
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(3)
	if !f.forced[2] || !strings.Contains(f.applied[2], `"resourceVersion":"`+rv+`"`) {
		t.Errorf("the take-back apply: forced %v, %s; want forced and conditional on resourceVersion %s", f.forced[2], f.applied[2], rv)
	}
	// printf '%s' '{"ConfigMap/app-config":"80c6f6cb01"}' | sha256sum (v4's content hash), and its check
	if v, _ := f.templateHash(); v != "b8b7df9573.9aa33b" {
		t.Errorf("config-hash %q, want b8b7df9573.9aa33b (v4)", v)
	}
	msg := f.expectEvent("Normal " + ReasonTakenBack)
	if !strings.Contains(msg, "kubectl-rollout") {
		t.Errorf("the event does not name the manager it was taken from: %s", msg)
	}
	f.expectEvent("Normal " + ReasonStarted)
	if owners := f.owner(); len(owners) != 1 || owners[0] != api.FieldManager {
		t.Errorf("config-hash owned by %v after the take-back, want %s alone", owners, api.FieldManager)
	}
	if n := f.observe(); n.UID == rs1.UID || n.UID == rs2.UID {
		t.Fatalf("the edit after the undo went to %s: want a new revision", n.Name)
	}
	f.sync()
	f.edit("app-config", "v5")
	f.tick(6 * time.Second)
	f.sync()
	if len(f.forced) != 4 || f.forced[3] {
		t.Errorf("writes %d, the last forced %v: once ours again, no force is needed", len(f.forced), f.forced)
	}
}

// The take-back is conditional: should the workload change between the decision's read and the
// write, the forced apply fails and the sync is retried, never overwriting what the decision did not
// see.
func TestATakeBackIsConditionalOnTheResourceVersionRead(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	rs2 := f.change("v2")
	f.change("v3")
	f.manager = "kubectl-rollout" // undo to rs2: a value we wrote, now owned elsewhere
	f.deployment.Spec.Template.Annotations = maps.Clone(rs2.Spec.Template.Annotations)
	f.deployment.Generation++
	f.observe()
	f.sync()
	f.edit("app-config", "v4")
	f.tick(6 * time.Second)
	read := f.deployment.ResourceVersion
	f.dyn.PrependReactor("patch", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.deployment.Labels = map[string]string{"changed": "meanwhile"} // between the read and the write
		f.putDeployment()
		return false, nil, nil
	})
	_, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web"))
	if !apierrors.IsConflict(err) {
		t.Fatalf("sync: %v, want a conflict (retried): the write carried resourceVersion %s, the workload changed meanwhile", err, read)
	}
	if v := f.deployment.Spec.Template.Annotations[api.ConfigHashAnnotation]; v != rs2.Spec.Template.Annotations[api.ConfigHashAnnotation] {
		t.Errorf("config-hash %q was overwritten", v)
	}
}

// A change of a config object's metadata only (a label) changes no content: no revision, as with
// Reloader ("should NOT reload when only ConfigMap labels change").
func TestAMetadataOnlyChangeStartsNothing(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	cms := f.kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(context.Background(), "app-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := metaOf(cm)
	cm.Labels = map[string]string{"team": "payments"}
	f.rv++
	cm.ResourceVersion = strconv.Itoa(f.rv)
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(metaOf(cm))
	f.c.configHandler(refs.ConfigMap).OnUpdate(old, metaOf(cm))
	f.sync()
	f.tick(time.Minute)
	f.sync()
	f.expectApplies(0)
}

// Opting out (the annotation removed) stops all triggering.
func TestOptingOutStopsTriggering(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.deployment.Annotations = nil
	f.putDeployment()
	f.edit("app-config", "v2")
	f.tick(time.Minute)
	f.sync()
	f.expectApplies(0)
}

// Bad input: a malformed list and a named object that does not exist get a Warning naming the fix,
// and nothing is written.
func TestBadInputIsToldNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"malformed list", map[string]string{api.ReloaderConfigMapReload: "app-config,[broken"}, `entry "[broken" is not a valid regular expression`},
		{"missing object", map[string]string{api.ReloaderConfigMapReload: "app-config,nope"}, "names ConfigMap nope, which does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.annotations, configMap("app-config", "v1", nil))
			f.observe()
			f.sync()
			msg := f.expectEvent("Warning " + ReasonInvalid)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("warning %q does not say %q", msg, tc.want)
			}
			f.recorded() // app-config, followed, is not pinned: told once too
			f.sync()
			if evs := f.recorded(); len(evs) != 0 {
				t.Errorf("told again at the next sync: %q", evs)
			}
			f.expectApplies(0)
		})
	}
}

// A Job carrying Reloader's annotations: we do not revise Jobs; told once, nothing written.
func TestAJobIsNotRevised(t *testing.T) {
	f := newFixture(t, nil, configMap("app-config", "v1", nil))
	job, err := caches.Reduce(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns, Annotations: auto},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: testutil.PodSpec([]string{"app-config"})}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.store(caches.Job).Indexers()[0].Add(job)
	f.edit("app-config", "v2")
	f.tick(time.Minute)
	for range 2 {
		if _, err := f.c.sync(context.Background(), job.Key()); err != nil {
			t.Fatal(err)
		}
	}
	msg := f.expectEvent("Warning " + ReasonInvalid)
	if !strings.Contains(msg, "not honoured on a Job") {
		t.Errorf("warning %q does not say Jobs are not revised", msg)
	}
	if evs := f.recorded(); len(evs) != 0 {
		t.Errorf("told twice: %q", evs)
	}
	f.expectApplies(0)
}

func testCounter(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, s := range mf.GetMetric() {
				total += s.GetCounter().GetValue()
			}
		}
	}
	return total
}

// snapshot is the pinning controller's snapshot of app-config holding data for rs.
func (f *fixture) snapshot(rs *appsv1.ReplicaSet, data string) {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: content.Name("app-config", hashOf(data)), Namespace: ns,
			Labels:          map[string]string{api.SnapshotLabel: api.SnapshotValue, api.RevisionedLabel: api.RevisionedValue},
			Annotations:     map[string]string{api.OriginalNameAnnotation: "app-config"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}}}
	_ = f.cs.Pinning.Snapshots[refs.ConfigMap].Indexers()[0].Add(m)
}

// With pinning, a revision's content is its snapshot: the trigger waits for it rather than guess,
// records nothing of its own for the pinned object, and a revert finds the old revision by it.
func TestPinnedRevisionsAreKnownByTheirSnapshots(t *testing.T) {
	cm := configMap("app-config", "v1", nil)
	cm.Labels = map[string]string{api.PinLabel: api.PinValue}
	f := newFixture(t, auto, cm)
	f.cs.Pinning = caches.NewPinningForTest([]runtime.Object{cm}, nil, ns)
	f.c.content.pins = f.cs.Pinning
	rs1 := f.observe()
	if wait := f.sync(); wait != waitAgain {
		t.Fatalf("before rs1's snapshot: wait %s, want %s (the pinning controller takes it)", wait, waitAgain)
	}
	f.snapshot(rs1, "v1")
	f.sync()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	f.expectEvent("Normal " + ReasonStarted)
	if evs := f.recorded(); len(evs) != 0 {
		t.Errorf("events %q: a pinned object needs no ConfigNotPinned warning", evs)
	}
	rs2 := f.observe()
	f.snapshot(rs2, "v2")
	f.sync()
	rec, err := decode(f.recordText())
	if err != nil {
		t.Fatal(err)
	}
	for uid, c := range rec.Revisions {
		if len(c) > 0 {
			t.Errorf("the record holds %v for %s: a pinned object's content is in the snapshots", c, uid)
		}
	}
	f.edit("app-config", "v1")
	f.tick(6 * time.Second)
	f.sync()
	if _, has := f.templateHash(); has {
		t.Fatal("the revert to rs1's snapshot content must remove our annotation")
	}
	if back := f.observe(); back.UID != rs1.UID {
		t.Fatalf("went to %s, want %s back", back.Name, rs1.Name)
	}
}

func mustUser(t *testing.T, inf *caches.Informer[*caches.User], name string) *caches.User {
	t.Helper()
	u, exists, err := inf.Get(ns, name)
	if err != nil || !exists {
		t.Fatalf("%s not cached: %v", name, err)
	}
	return u
}

// A Rollout with workloadRef: its template, and so our annotation, is in the Deployment it names.
func TestTheHolderOfARolloutWithWorkloadRefIsItsDeployment(t *testing.T) {
	ro := &caches.User{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
		Name: "demo", Namespace: ns, Status: &caches.WorkloadStatus{TemplateRef: "demo-template"}}
	if h := holderOf(ro); h.String() != "Deployment "+ns+"/demo-template" || h.gvr.Resource != "deployments" {
		t.Errorf("holder %s (%s), want the Deployment demo-template", h, h.gvr)
	}
	ro.Status.TemplateRef = ""
	if h := holderOf(ro); h.gvr != workload.RolloutGVR || h.name != "demo" {
		t.Errorf("holder %s (%s), want the Rollout itself", h, h.gvr)
	}
}

// The first look at a workload: an edit seen while it already followed the object counts, though the
// controller had not acknowledged its revision yet (its snapshot was not there); content that changed
// before the workload opted in does not: opting in never starts a revision.
func TestTheFirstLookCountsAnEditSeenButNotAnOlderDrift(t *testing.T) {
	pinnedApp := func() *corev1.ConfigMap {
		cm := configMap("app-config", "v1", nil)
		cm.Labels = map[string]string{api.PinLabel: api.PinValue}
		return cm
	}
	for _, tc := range []struct {
		name       string
		optedIn    bool // when the edit happens
		wantWrites int
	}{
		{"edited after opting in", true, 1},
		{"drift from before opting in", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := pinnedApp()
			var annotations map[string]string
			if tc.optedIn {
				annotations = auto
			}
			f := newFixture(t, annotations, cm)
			f.cs.Pinning = caches.NewPinningForTest([]runtime.Object{cm}, nil, ns)
			f.c.content.pins = f.cs.Pinning
			rs1 := f.observe()
			f.snapshot(rs1, "v1")
			f.edit("app-config", "v2") // before the controller's first look at the workload
			if !tc.optedIn {
				f.deployment.Annotations = auto
				f.putDeployment()
			}
			f.sync()
			f.tick(6 * time.Second)
			f.sync()
			f.expectApplies(tc.wantWrites)
		})
	}
}

// setPinning labels the namespace for pinning, or removes the label, in the pinning cache.
func (f *fixture) setPinning(on bool) {
	f.t.Helper()
	store := f.cs.Pinning.Namespaces.Indexers()[0]
	n := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if on {
		n.Labels = map[string]string{api.PinningNamespaceLabel: api.PinningEnabled}
	}
	if err := store.Update(n); err != nil {
		f.t.Fatal(err)
	}
}

// pinnedFixture is the fixture's Deployment reading app-config pinned, in a namespace with pinning,
// its first revision rs1 pinned at v1 and seen.
func pinnedFixture(t *testing.T) (*fixture, *appsv1.ReplicaSet) {
	cm := configMap("app-config", "v1", nil)
	cm.Labels = map[string]string{api.PinLabel: api.PinValue}
	f := newFixture(t, auto, cm)
	f.cs.Pinning = caches.NewPinningForTest([]runtime.Object{cm}, nil, ns)
	f.c.content.pins = f.cs.Pinning
	rs1 := f.observe()
	f.snapshot(rs1, "v1")
	f.sync()
	return f, rs1
}

// pinnedAndEdited is pinnedFixture, then an edit to v2 written (its revision not made yet).
func pinnedAndEdited(t *testing.T) (*fixture, *appsv1.ReplicaSet) {
	f, rs1 := pinnedFixture(t)
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	return f, rs1
}

// Pinning turned off in the namespace after a revision was pinned (found by the soak): the revision is
// still known by the snapshot it owns, so the next edit starts a revision rather than being taken for
// the content that revision was created with, and a revert to its content goes back to it.
func TestPinningTurnedOffStillKnowsThePinnedRevisions(t *testing.T) {
	f, rs1 := pinnedFixture(t)

	f.setPinning(false)
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	if v, _ := f.templateHash(); v != configHash("v2") {
		t.Fatalf("config-hash %q, want %q: the edit made with pinning off starts a revision", v, configHash("v2"))
	}
	f.observe()
	f.sync()

	f.edit("app-config", "v1")
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(2)
	if back := f.observe(); back.UID != rs1.UID || len(f.revisions) != 2 {
		t.Fatalf("the revert went to %s (%d revisions), want %s back: its snapshot holds v1", back.Name, len(f.revisions), rs1.Name)
	}
}

// An edit that lands after a revision was created but before the controller's first look at it (a
// loaded controller, an edit a second after a deploy, our own write or a rollback): the revision was
// created with what its snapshot holds, so the edit is a change since it appeared and starts a
// revision, not a template changed back. After a rollback too: the fix-forward edit must roll.
func TestAnEditBeforeTheFirstLookAtANewRevisionStartsOne(t *testing.T) {
	for _, tc := range []struct {
		name         string
		newest       func(f *fixture) *appsv1.ReplicaSet // makes the newest revision, unseen by the controller
		snapshotOf   string                              // the newest revision's content, if it is new
		wantWrites   int
		wantOverrule bool
	}{
		{"a deploy of the template alone", func(f *fixture) *appsv1.ReplicaSet {
			f.deployment.Spec.Template.Annotations["deploy"] = "2"
			f.deployment.Generation++
			return f.observe()
		}, "v2", 1, false},
		{"our own write", func(f *fixture) *appsv1.ReplicaSet {
			f.edit("app-config", "v3")
			f.tick(6 * time.Second)
			f.sync()
			f.expectApplies(1)
			f.tick(time.Second)
			return f.observe()
		}, "v3", 2, false},
		{"a rollback to the first revision, created with other content", func(f *fixture) *appsv1.ReplicaSet {
			f.deployment.Spec.Template.Annotations = nil
			f.deployment.Generation++
			return f.observe()
		}, "", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := pinnedAndEdited(t)
			f.tick(time.Minute)
			f.snapshot(f.observe(), "v2")
			f.sync()
			f.applied = nil
			f.recorded()

			f.tick(time.Minute)
			newest := tc.newest(f)
			if tc.snapshotOf != "" {
				f.snapshot(newest, tc.snapshotOf)
			}
			f.edit("app-config", "v4") // before the controller's first look at newest
			f.sync()
			f.tick(6 * time.Second)
			f.sync()
			f.expectApplies(tc.wantWrites)
			if tc.wantWrites > 0 {
				if v, _ := f.templateHash(); v != configHash("v4") {
					t.Errorf("config-hash %q, want %q: the edit after %s starts a revision", v, configHash("v4"), newest.Name)
				}
			}
			overruled := false
			for _, e := range f.recorded() {
				overruled = overruled || strings.HasPrefix(e, "Warning "+ReasonOverruled)
			}
			if overruled != tc.wantOverrule {
				t.Errorf("Warning %s recorded: %v, want %v", ReasonOverruled, overruled, tc.wantOverrule)
			}
		})
	}
}

// Every write is conditional on the resourceVersion its decision read: a deploy landing between that
// read and the write (Helm applies a release's config, then its workload, a moment later) makes it
// fail and be retried, instead of adding a revision of ours to the deploy's own.
func TestAWriteIsConditionalOnTheResourceVersionRead(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	f.tick(6 * time.Second)
	read := f.deployment.ResourceVersion
	f.dyn.PrependReactor("patch", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.deployment.Spec.Template.Spec.Containers[0].Image = "app:2" // the deploy, between the read and the write
		f.deployment.Generation++
		f.putDeployment()
		return false, nil, nil
	})
	_, err := f.c.sync(context.Background(), caches.Key(caches.Deployment, ns, "web"))
	if !apierrors.IsConflict(err) {
		t.Fatalf("sync: %v, want a conflict (retried): the write carried resourceVersion %s, a deploy changed the workload meanwhile", err, read)
	}
	if v, has := f.deployment.Spec.Template.Annotations[api.ConfigHashAnnotation]; has {
		t.Errorf("config-hash %q written on the deploy's template: a second revision", v)
	}
}

// An object the workload begins to follow (a reload list now names it) and that is edited at once,
// before a look could read the version it was at when the follow began (the edit reached the API
// server between the cache and the read: the cache was behind), is not taken as holding the edited
// content all along: the edit came after the follow began, so it starts a revision, as Reloader
// reloads for an update of an object the workload names.
func TestAnEditRightAfterTheFollowBeganIsNotSwallowed(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil), configMap("extra", "v1", nil))
	f.observe()
	f.sync()
	f.expectApplies(0)

	f.deployment.Annotations = map[string]string{api.ReloaderAuto: "true", api.ReloaderConfigMapReload: "extra"}
	f.putDeployment() // the follow begins: extra is at resourceVersion 2 in the cache
	deliver := f.editOnServer("extra", "v2")
	if wait := f.sync(); wait == 0 {
		t.Fatal("the look with the cache behind the API server decided: want it to look again")
	}
	deliver() // the watch catches up
	f.tick(6 * time.Second)
	f.sync()
	f.expectApplies(1)
	if msg := f.expectEvent("Normal " + ReasonStarted); !strings.Contains(msg, "ConfigMap/extra changed") {
		t.Errorf("Started names %q, want ConfigMap/extra changed", msg)
	}
}
