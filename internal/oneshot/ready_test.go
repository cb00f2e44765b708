package oneshot

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func existing(names ...string) objectGetter {
	return func(_ context.Context, r refs.Ref) (*metav1.PartialObjectMetadata, error) {
		for _, n := range names {
			if n == r.Name {
				return testutil.ConfigMeta(r.Kind, n, false), nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: r.Kind.Resource()}, r.Name)
	}
}

func forbidden(_ context.Context, r refs.Ref) (*metav1.PartialObjectMetadata, error) {
	return nil, apierrors.NewForbidden(schema.GroupResource{Resource: r.Kind.Resource()}, r.Name, nil)
}

func TestCheckReady(t *testing.T) {
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	oldRS := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, testutil.PodSpec([]string{"demo-cm-1"}))
	newRS := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, testutil.PodSpec([]string{"demo-cm-2"}, "demo-secret-2"))
	stale := testutil.Rollout("demo", "ro-uid", "aaa") // the Job ran before the Rollouts controller moved on
	ref := workload.Ref{Kind: workload.Rollout, Namespace: testutil.Namespace, Name: "demo"}
	cm2 := []refs.Ref{{Kind: refs.ConfigMap, Name: "demo-cm-2"}}

	tests := []struct {
		name        string
		ro          *workload.RolloutObject
		rss         []*appsv1.ReplicaSet
		get         objectGetter
		targets     []refs.Ref
		wantRS      string
		wantPending string
		wantErr     string
	}{
		{name: "ready", ro: ro, rss: []*appsv1.ReplicaSet{oldRS, newRS}, get: existing("demo-cm-2", "demo-secret-2"),
			targets: []refs.Ref{{Kind: refs.ConfigMap, Name: "demo-cm-2"}, {Kind: refs.Secret, Name: "demo-secret-2"}}, wantRS: "demo-bbb"},
		{name: "current ReplicaSet is still the old one: wait, never attach to it", ro: stale, rss: []*appsv1.ReplicaSet{oldRS},
			get: existing("demo-cm-2"), targets: cm2, wantPending: "current ReplicaSet demo-aaa (revision 1) does not reference [ConfigMap/demo-cm-2]"},
		{name: "new ReplicaSet not created yet", ro: ro, rss: []*appsv1.ReplicaSet{oldRS}, get: existing("demo-cm-2"), targets: cm2,
			wantPending: "no ReplicaSet with rollouts-pod-template-hash=bbb"},
		{name: "config object missing", ro: ro, rss: []*appsv1.ReplicaSet{newRS}, get: existing(), targets: cm2,
			wantPending: "ConfigMap devops-apps-01/demo-cm-2 does not exist"},
		{name: "workload missing", rss: nil, get: existing("demo-cm-2"), targets: cm2,
			wantPending: "Rollout devops-apps-01/demo: not found (check -namespace and the workload name)"},
		{name: "RBAC denied is an error, not a wait", ro: ro, rss: []*appsv1.ReplicaSet{newRS}, get: forbidden, targets: cm2,
			wantErr: "missing RBAC permission"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := testutil.Source{Rollouts: map[string]*workload.RolloutObject{}, RSs: tt.rss}
			if tt.ro != nil {
				src.Rollouts["demo"] = tt.ro
			}
			r, err := checkReady(context.Background(), src, tt.get, ref, tt.targets)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantRS != "" {
				if !r.Ready() || r.ReplicaSet.Name != tt.wantRS || len(r.Objects) != len(tt.targets) {
					t.Fatalf("readiness = %+v, want ready on %s", r, tt.wantRS)
				}
				return
			}
			if r.Ready() || !strings.Contains(strings.Join(r.Pending, "; "), tt.wantPending) {
				t.Fatalf("pending = %q, want it to contain %q", r.Pending, tt.wantPending)
			}
		})
	}
}
