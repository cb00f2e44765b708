package testutil

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Source is a workload.Source over fixed objects.
type Source struct {
	Rollouts    map[string]*workload.RolloutObject
	Deployments map[string]*appsv1.Deployment
	RSs         []*appsv1.ReplicaSet
}

func (f Source) Rollout(_ context.Context, _, name string) (*workload.RolloutObject, error) {
	if r, ok := f.Rollouts[name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "argoproj.io", Resource: "rollouts"}, name)
}

func (f Source) Deployment(_ context.Context, _, name string) (*appsv1.Deployment, error) {
	if d, ok := f.Deployments[name]; ok {
		return d, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, name)
}

func (f Source) ReplicaSets(context.Context, string) ([]*appsv1.ReplicaSet, error) { return f.RSs, nil }
