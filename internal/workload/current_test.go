package workload_test

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func TestCurrentRollout(t *testing.T) {
	spec1 := testutil.PodSpec([]string{"demo-cm-1"})
	spec2 := testutil.PodSpec([]string{"demo-cm-2"})
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	oldRS := testutil.ReplicaSet(ro, workload.Rollout, "aaa", 1, spec1)
	newRS := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec2)
	other := testutil.Rollout("other", "other-uid", "bbb")
	foreignRS := testutil.ReplicaSet(other, workload.Rollout, "bbb", 5, spec2) // same hash, other owner

	notObserved := testutil.Rollout("demo", "ro-uid", "aaa")
	notObserved.Generation = 2 // spec changed; controller still on generation 1

	rollback := testutil.Rollout("demo", "ro-uid", "aaa") // undo: an OLD ReplicaSet is current again
	tests := []struct {
		name    string
		ro      *workload.RolloutObject
		rss     []*appsv1.ReplicaSet
		want    string
		wantErr error
	}{
		{name: "by hash, not by age", ro: ro, rss: []*appsv1.ReplicaSet{newRS, oldRS, foreignRS}, want: "demo-bbb"},
		{name: "rollback reuses the old ReplicaSet", ro: rollback, rss: []*appsv1.ReplicaSet{newRS, oldRS}, want: "demo-aaa"},
		{name: "latest spec not observed yet", ro: notObserved, rss: []*appsv1.ReplicaSet{oldRS}, wantErr: workload.ErrNotObserved},
		{name: "ReplicaSet not created yet", ro: ro, rss: []*appsv1.ReplicaSet{oldRS, foreignRS}, wantErr: workload.ErrNotObserved},
		{name: "no rollout", ro: nil, wantErr: workload.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := testutil.Source{Rollouts: map[string]*workload.RolloutObject{}, RSs: tt.rss}
			if tt.ro != nil {
				src.Rollouts["demo"] = tt.ro
			}
			res, err := workload.Resolve(context.Background(), src, workload.Ref{Kind: workload.Rollout, Namespace: testutil.Namespace, Name: "demo"})
			var rs *appsv1.ReplicaSet
			if err == nil {
				rs, err = res.Current()
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rs.Name != tt.want {
				t.Errorf("current = %s, want %s", rs.Name, tt.want)
			}
		})
	}
}

func TestCurrentRolloutWithWorkloadRef(t *testing.T) {
	spec := testutil.PodSpec([]string{"cm-2"})
	d := testutil.Deployment("demo-template", "d-uid", spec)
	d.Generation = 3
	ro := testutil.Rollout("demo", "ro-uid", "bbb")
	ro.Spec.WorkloadRef = &workload.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "demo-template"}
	rs := testutil.ReplicaSet(ro, workload.Rollout, "bbb", 2, spec)
	src := testutil.Source{
		Rollouts:    map[string]*workload.RolloutObject{"demo": ro},
		Deployments: map[string]*appsv1.Deployment{"demo-template": d},
		RSs:         []*appsv1.ReplicaSet{rs},
	}
	ref := workload.Ref{Kind: workload.Rollout, Namespace: testutil.Namespace, Name: "demo"}

	ro.Status.WorkloadObservedGeneration = "2" // the Deployment changed; the Rollout has not seen it
	res, err := workload.Resolve(context.Background(), src, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Current(); !errors.Is(err, workload.ErrNotObserved) {
		t.Fatalf("err = %v, want ErrNotObserved", err)
	}
	ro.Status.WorkloadObservedGeneration = "3"
	got, err := res.Current()
	if err != nil || got.Name != "demo-bbb" {
		t.Fatalf("current = %v, %v; want demo-bbb", got, err)
	}
}

func TestCurrentDeployment(t *testing.T) {
	spec1 := testutil.PodSpec([]string{"web-cm-1"})
	spec2 := testutil.PodSpec([]string{"web-cm-2"})
	d := testutil.Deployment("web", "d-uid", spec2)
	oldRS := testutil.ReplicaSet(d, workload.Deployment, "aaa", 1, spec1)
	newRS := testutil.ReplicaSet(d, workload.Deployment, "bbb", 2, spec2)
	newRS.Spec.Template.Labels = map[string]string{"app": "web", workload.DeploymentHashLabel: "bbb"}
	oldRS.Spec.Template.Labels = map[string]string{"app": "web", workload.DeploymentHashLabel: "aaa"}
	ref := workload.Ref{Kind: workload.Deployment, Namespace: testutil.Namespace, Name: "web"}

	tests := []struct {
		name    string
		mutate  func(*appsv1.Deployment)
		rss     []*appsv1.ReplicaSet
		want    string
		wantErr error
	}{
		{name: "template match", rss: []*appsv1.ReplicaSet{oldRS, newRS}, want: "web-bbb"},
		{name: "rollback to an old template", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec = spec1 },
			rss: []*appsv1.ReplicaSet{oldRS, newRS}, want: "web-aaa"},
		{name: "not observed", mutate: func(d *appsv1.Deployment) { d.Generation = 2 },
			rss: []*appsv1.ReplicaSet{oldRS, newRS}, wantErr: workload.ErrNotObserved},
		{name: "new ReplicaSet missing", rss: []*appsv1.ReplicaSet{oldRS}, wantErr: workload.ErrNotObserved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dd := d.DeepCopy()
			if tt.mutate != nil {
				tt.mutate(dd)
			}
			src := testutil.Source{Deployments: map[string]*appsv1.Deployment{"web": dd}, RSs: tt.rss}
			res, err := workload.Resolve(context.Background(), src, ref)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := res.Current()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || rs.Name != tt.want {
				t.Fatalf("current = %v, %v; want %s", rs, err, tt.want)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	for in, want := range map[string]workload.Kind{"rollout/demo": workload.Rollout, "ro/demo": workload.Rollout, "deploy/demo": workload.Deployment, "deployments.apps/demo": workload.Deployment} {
		got, err := workload.ParseRef("ns", in)
		if err != nil || got.Kind != want || got.Name != "demo" {
			t.Errorf("ParseRef(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"demo", "statefulset/x", "rollout/"} {
		if _, err := workload.ParseRef("ns", bad); err == nil {
			t.Errorf("ParseRef(%q) succeeded", bad)
		}
	}
}
