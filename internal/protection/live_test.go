package protection

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func cmRef(name string) refs.Ref { return refs.Ref{Kind: refs.ConfigMap, Name: name} }

func livePod(name string, phase corev1.PodPhase, cms ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testutil.Namespace}, Spec: testutil.PodSpec(cms), Status: corev1.PodStatus{Phase: phase}}
}

// answered names what answered each query, "-" for none.
func answered(ans Answer) []string {
	out := make([]string, len(ans.Users))
	for i, u := range ans.Users {
		out[i] = "-"
		if u != nil {
			out[i] = describe([]*caches.User{u})
		}
	}
	return out
}

// The live check finds a live user of each object on the API server, of every kind, as the caches
// would reduce it: pods (not those the kubelet is done with), revisions, workloads, Rollouts, and the
// revisions a snapshot names as owners.
func TestAPIUsersFindsAUserOfEveryKind(t *testing.T) {
	ns := testutil.Namespace
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f", Namespace: ns, UID: "rs-uid"},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: testutil.PodSpec([]string{"rs-config"})}}}
	kube := kubefake.NewClientset(livePod("debug", corev1.PodPending, "pod-config"), livePod("done", corev1.PodSucceeded, "done-config"), rs)
	ro := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "canary", "namespace": ns, "uid": "ro-uid"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"volumes": []any{
			map[string]any{"name": "c", "configMap": map[string]any{"name": "rollout-config"}}}}}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{workload.RolloutGVR: "RolloutList"}, ro)
	queries := []Query{
		{Ref: cmRef("pod-config")},
		{Ref: cmRef("rs-config")},
		{Ref: cmRef("rollout-config")},
		{Ref: cmRef("done-config")}, // only a pod the kubelet is done with reads it
		{Ref: cmRef("web-snapshot-1f2e"), Owners: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d8f", UID: "rs-uid"}}},
		{Ref: cmRef("unused")},
	}
	ans, err := APIUsers{Kube: kube, Dynamic: dyn, Rollouts: true}.Look(context.Background(), ns, queries)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pod/debug", "replicaset/web-5d8f", "rollout/canary", "-", "replicaset/web-5d8f", "-"}
	if got := answered(ans); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers %q, want %q", got, want)
	}
	if u := ans.Users[2]; u == nil || u.UID != "ro-uid" {
		t.Error("the Rollout is not reduced with its uid")
	}
	// Asked about one object (UserLister), it answers with the user found.
	one := APIUsers{Kube: kube, Dynamic: dyn, Rollouts: true}
	if users, err := one.Users(context.Background(), ns, cmRef("rs-config")); err != nil || describe(users) != "replicaset/web-5d8f" {
		t.Errorf("Users: %q, %v; want replicaset/web-5d8f", describe(users), err)
	}
	if users, err := one.Users(context.Background(), ns, cmRef("unused")); err != nil || len(users) != 0 {
		t.Errorf("Users of an unused object: %q, %v; want none", describe(users), err)
	}
}

// An object the caches cannot read (a ControllerRevision another controller wrote) is skipped and
// counted: the look answers for every other object of the namespace instead of failing them all.
func TestTheLiveCheckSkipsAnUnreadableObject(t *testing.T) {
	odd := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: testutil.Namespace},
		Data: runtime.RawExtension{Raw: []byte(`{"spec":"a shape of its own"}`)}}
	kube := kubefake.NewClientset(odd, livePod("web-1", corev1.PodRunning, "app-config"))
	ans, err := APIUsers{Kube: kube}.Look(context.Background(), testutil.Namespace, []Query{{Ref: cmRef("app-config")}, {Ref: cmRef("unused")}})
	if err != nil {
		t.Fatalf("the look failed: %v", err)
	}
	if got := answered(ans); fmt.Sprint(got) != "[pod/web-1 -]" {
		t.Errorf("answers %q, want [pod/web-1 -]", got)
	}
	if n := ans.Unreadable[caches.ControllerRevision]; n != 1 {
		t.Errorf("%d ControllerRevisions counted as skipped, want 1", n)
	}
}

// pagedPods serves a namespace's Pods a page at a time, as kube-apiserver does for a limit and a
// continue token, and notes each request's options.
type pagedPods struct {
	mu    sync.Mutex
	pods  []corev1.Pod
	asked []metav1.ListOptions
}

func (p *pagedPods) react(a clienttesting.Action) (bool, runtime.Object, error) {
	o := a.(clienttesting.ListActionImpl).GetListOptions()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, o)
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	to := len(p.pods)
	if o.Limit > 0 {
		to = min(from+int(o.Limit), to)
	}
	list := &corev1.PodList{Items: p.pods[from:to], ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
	if to < len(p.pods) {
		list.Continue = strconv.Itoa(to)
	}
	return true, list, nil
}

func (p *pagedPods) requests() []metav1.ListOptions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]metav1.ListOptions(nil), p.asked...)
}

// The live check reads a namespace's Pods in pages of PageSize, the first with no resourceVersion (a
// consistent read) and the next through continue tokens (the same snapshot), and stops once every
// object asked about has a user: the namespace's Pods are never all in memory at once.
func TestTheLiveCheckReadsPagesAndStopsAtTheFirstUser(t *testing.T) {
	paged := &pagedPods{}
	for i := range 1000 {
		cms := []string{"other"}
		if i == 150 {
			cms = []string{"app-config"}
		}
		paged.pods = append(paged.pods, *livePod(fmt.Sprintf("web-%04d", i), corev1.PodRunning, cms...))
	}
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "pods", paged.react)
	ans, err := APIUsers{Kube: kube, PageSize: 100}.Look(context.Background(), testutil.Namespace, []Query{{Ref: cmRef("app-config")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := answered(ans); fmt.Sprint(got) != "[pod/web-0150]" {
		t.Errorf("answers %q, want [pod/web-0150]", got)
	}
	asked := paged.requests()
	// The user is on the second page; the third may have been asked for while it was read.
	if len(asked) < 2 || len(asked) > 3 {
		t.Fatalf("%d pages of Pods asked for, want 2 or 3 of 10", len(asked))
	}
	for i, o := range asked {
		if o.Limit != 100 || o.ResourceVersion != "" || (i == 0) != (o.Continue == "") {
			t.Errorf("request %d: limit %d, resourceVersion %q, continue %q", i, o.Limit, o.ResourceVersion, o.Continue)
		}
	}
}

// A look that has not answered every object reads every page.
func TestTheLiveCheckReadsEveryPageOfANamespaceThatDoesNotUseIt(t *testing.T) {
	paged := &pagedPods{}
	for i := range 1000 {
		paged.pods = append(paged.pods, *livePod(fmt.Sprintf("web-%04d", i), corev1.PodRunning, "other"))
	}
	paged.pods = append(paged.pods, *livePod("last", corev1.PodRunning, "app-config"))
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "pods", paged.react)
	ans, err := APIUsers{Kube: kube, PageSize: 100}.Look(context.Background(), testutil.Namespace, []Query{{Ref: cmRef("app-config")}, {Ref: cmRef("unused")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := answered(ans); fmt.Sprint(got) != "[pod/last -]" {
		t.Errorf("answers %q, want [pod/last -]", got)
	}
	if n := len(paged.requests()); n != 11 {
		t.Errorf("%d pages asked for, want 11", n)
	}
}
