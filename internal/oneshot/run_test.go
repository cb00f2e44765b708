package oneshot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// listSelectors records the label selector of every ReplicaSet LIST.
func listSelectors(kc *fake.Clientset) *[]string {
	var got []string
	kc.PrependReactor("list", "replicasets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got = append(got, a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	return &got
}

func TestNarrowSourceListsOnlyCandidatesAndFindsTheSameReplicaSet(t *testing.T) {
	spec := testutil.PodSpec([]string{"demo-cm-2"})
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	other := testutil.Rollout("other", "other-uid", "bbb") // same hash, another owner
	d := testutil.Deployment("web", "d-uid", spec)
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	rss := []runtime.Object{
		testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"demo-cm-1"})),
		testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec),
		testutil.ReplicaSet(other, workload.Rollout, "bbb", 1, spec),
		testutil.ReplicaSet(d, workload.Deployment, "ddd", 1, spec),
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ro)
	if err != nil {
		t.Fatal(err)
	}
	rollout := &unstructured.Unstructured{Object: u}
	rollout.SetAPIVersion("argoproj.io/v1alpha1")
	rollout.SetKind("Rollout")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{workload.RolloutGVR: "RolloutList"}, rollout)

	tests := []struct {
		ref          workload.Ref
		wantSelector string
		wantCurrent  string
	}{
		{workload.Ref{Kind: workload.Rollout, Namespace: testutil.Namespace, Name: "demo"}, "rollouts-pod-template-hash=bbb", "demo-bbb"},
		{workload.Ref{Kind: workload.Deployment, Namespace: testutil.Namespace, Name: "web"}, "app=web", "web-ddd"},
	}
	for _, tt := range tests {
		t.Run(string(tt.ref.Kind), func(t *testing.T) {
			kc := fake.NewClientset(append([]runtime.Object{d}, rss...)...)
			selectors := listSelectors(kc)
			src := &narrowSource{ClientSource: workload.ClientSource{Kube: kc, Dynamic: dyn}, ref: tt.ref}
			res, err := workload.Resolve(context.Background(), src, tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := res.Current()
			if err != nil {
				t.Fatal(err)
			}
			if rs.Name != tt.wantCurrent {
				t.Errorf("current = %s, want %s", rs.Name, tt.wantCurrent)
			}
			if len(*selectors) != 1 || (*selectors)[0] != tt.wantSelector {
				t.Errorf("ReplicaSet lists with selectors %q, want one with %q", *selectors, tt.wantSelector)
			}
		})
	}
}

func TestReachNamespace(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testutil.Namespace}}
	refused := fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	tests := []struct {
		name       string
		objects    []runtime.Object
		errors     []error // answers to the namespace GETs, in order; then the fake's own
		wantErr    string
		wantProbes int // server version requests (kube.WaitReachable)
	}{
		{name: "exists: no probe", objects: []runtime.Object{ns}},
		{name: "missing", wantErr: `namespace "devops-apps-01" not found: check -namespace`},
		{name: "forbidden: skipped, as the original RBAC has no namespaces",
			errors: []error{apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, testutil.Namespace, nil)}},
		{name: "no connection: probe with retries, then read again", objects: []runtime.Object{ns}, errors: []error{refused}, wantProbes: 1},
		{name: "unauthorized: the probe's error", errors: []error{apierrors.NewUnauthorized("no")}, wantErr: "no", wantProbes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := fake.NewClientset(tt.objects...)
			answers := tt.errors
			kc.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
				if len(answers) == 0 {
					return false, nil, nil
				}
				err := answers[0]
				answers = answers[1:]
				return true, nil, err
			})
			probes := 0
			kc.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
				probes++
				if len(tt.errors) > 0 && apierrors.IsUnauthorized(tt.errors[0]) {
					return true, nil, tt.errors[0]
				}
				return false, nil, nil
			})
			clients := &kube.Clients{Config: &rest.Config{Host: "https://127.0.0.1:6443"}, Kube: kc}
			err := reachNamespace(context.Background(), clients, testutil.Namespace)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if probes != tt.wantProbes {
				t.Errorf("%d server version probes, want %d", probes, tt.wantProbes)
			}
		})
	}
}

func TestNarrowSourceReadsTheRolloutAsJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/argoproj.io/v1alpha1/namespaces/devops-apps-01/rollouts/demo":
			fmt.Fprint(w, `{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"demo","uid":"ro-uid","generation":2},
				"spec":{"workloadRef":{"kind":"Deployment","name":"demo-template"},"newFieldOfALaterCRD":{"x":[1]}},
				"status":{"currentPodHash":"bbb","observedGeneration":"2"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,
				"details":{"name":"gone","group":"argoproj.io","kind":"rollouts"},"message":"rollouts.argoproj.io \"gone\" not found"}`)
		}
	}))
	defer srv.Close()
	kc, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	src := &narrowSource{raw: kc.CoreV1().RESTClient(), ref: workload.Ref{Kind: workload.Rollout, Namespace: testutil.Namespace, Name: "demo"}}
	ro, err := src.Rollout(context.Background(), testutil.Namespace, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if ro.UID != "ro-uid" || ro.Generation != 2 || ro.Status.CurrentPodHash != "bbb" || ro.Status.ObservedGeneration != "2" ||
		ro.Spec.WorkloadRef == nil || ro.Spec.WorkloadRef.Name != "demo-template" {
		t.Errorf("decoded %+v", ro)
	}
	if src.selector != "rollouts-pod-template-hash=bbb" {
		t.Errorf("selector %q", src.selector)
	}
	if _, err := src.Rollout(context.Background(), testutil.Namespace, "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("err = %v, want NotFound", err)
	}
}

func TestCheckFailed(t *testing.T) {
	ref := workload.Ref{Kind: workload.Rollout, Namespace: "ns", Name: "demo"}
	readCut := errors.New("reading ConfigMap ns/app-config: context deadline exceeded")
	pending := []string{"ConfigMap ns/app-config does not exist"}
	for _, tc := range []struct {
		name               string
		parentErr, waitErr error
		pending            []string
		want               string
		timeout            bool
	}{
		{name: "the caller stopped us", parentErr: context.Canceled, waitErr: context.Canceled, pending: pending,
			want: readCut.Error()},
		{name: "a read failed before the deadline", pending: pending, want: readCut.Error()},
		{name: "the first check cut by the deadline", waitErr: context.DeadlineExceeded,
			want: "timed out after 4s: " + readCut.Error(), timeout: true},
		{name: "a later check cut by the deadline names what it waited for", waitErr: context.DeadlineExceeded, pending: pending,
			want: "timed out after 4s waiting for Rollout ns/demo: ConfigMap ns/app-config does not exist", timeout: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFailed(tc.parentErr, tc.waitErr, 4*time.Second, ref, tc.pending, readCut)
			if err.Error() != tc.want || errors.Is(err, ErrTimeout) != tc.timeout {
				t.Errorf("got %q (timeout %v), want %q (timeout %v)", err, errors.Is(err, ErrTimeout), tc.want, tc.timeout)
			}
		})
	}
}
